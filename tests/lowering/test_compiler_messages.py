"""Compiler errors are classified by what the compiler said, and shown whole (issue 38, item 6).

libtpu quotes the MLIR operation involved after its statement; that operation names the memory
space of every VMEM ref (`#xir.memory_space<vmem, tc>`), so words found anywhere in the message
must not make a layout error a `vmem-oom`, and the operation must not be cut off.
"""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.lowering import diagnostics

# libtpu 0.0.52 (JAX 0.12.1), compiling `lanes_strided_by_two` below for tpu-v5e.
LAST_DIM_NOT_128 = (
    "JaxRuntimeError: INTERNAL: Mosaic failed to compile TPU kernel with MLIR module name `k` "
    "HLO name `name.1`: Not Implemented: The last dim size is not 128 in original base memref\n"
    "\n"
    'at location: loc("get:"("get/get"(callsite("strided_lanes.<locals>.k"("/tmp/vt/k2.py":35:21'
    ' to :54) at "strided_lanes.<locals>.k"("/tmp/vt/k2.py":35:21 to :54)))))\n'
    "\n"
    "The MLIR operation involved:\n"
    '  %2 = "xir.strided_load"(%arg0, %0, %0) <{strides = array<i32: 1, 2>}> {in_layout = '
    '[#xir_tc.vpad<"none">, #xir_tc.vpad<"none">, #xir_tc.vpad<"none">], out_layout = '
    '[#xir_tc.vpad<"32,{0,0},(8,128)">]} : (memref<8x256xf32, #xir.tiled<(8,128),[2,1]>, '
    "#xir.memory_space<vmem, tc>>, index, index) -> vector<8x128xf32>\n"
    "\n"
    "Please report a bug at: https://github.com/jax-ml/jax/issues/new/choose\n")
# The same for a bf16 operand.
STRIDE_ON_LAST_DIM = (
    "JaxRuntimeError: INTERNAL: Mosaic failed to compile TPU kernel with MLIR module name `k` "
    "HLO name `name.1`: Not implemented: Stride on last dim is not 1\n"
    "\n"
    'at location: loc("get:"("get/get"(callsite("bf16_strided_lanes.<locals>.k"('
    '"/tmp/vt/k3.py":19:21 to :54) at "bf16_strided_lanes.<locals>.k"("/tmp/vt/k3.py":19:21 '
    "to :54)))))\n"
    "\n"
    "The MLIR operation involved:\n"
    '  %3 = "xir.strided_load"(%1, %0, %0) <{strides = array<i32: 1, 2>}> : (memref<16x256xbf16,'
    " #xir.memory_space<vmem, tc>>, index, index) -> vector<16x128xbf16>\n"
    "\n"
    "Please report a bug at: https://github.com/jax-ml/jax/issues/new/choose\n")
# The report: libtpu's statement, in the frame libtpu puts every Mosaic error in.
INVALID_VECTOR_TYPE = (
    "JaxRuntimeError: INTERNAL: Mosaic failed to compile TPU kernel with MLIR module name `k` "
    "HLO name `name.1`: Invalid vector type for load\n"
    "\n"
    'at location: loc("get:"("get/get"(callsite("k"("/x/kernels.py":41:12 to :39)))))\n'
    "\n"
    "The MLIR operation involved:\n"
    '  %5 = "xir.vector_load"(%arg3, %c0, %c0) : (memref<8x128xi8, #xir.memory_space<vmem, '
    "tc>>, index, index) -> vector<8x128xi8>\n")
# libtpu 0.0.52: a 512x512 f32 block with vmem_limit_bytes=1 MiB (`over_its_vmem_limit`).
SCOPED_VMEM_OOM = (
    "JaxRuntimeError: RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:\n"
    "Ran out of memory in memory space vmem while allocating on stack for %name.1 = "
    "f32[2048,512]{1,0:T(8,128)} custom-call(%x_ref.1), custom_call_target=\"tpu_custom_call\", "
    "operand_layout_constraints={f32[2048,512]{1,0}}, frontend_attributes={kernel_metadata={}}, "
    'metadata={source_file="-" source_line=3 source_end_line=3 source_column=10 '
    "source_end_column=10}. Scoped allocation with size 4.00M and limit 1.00M exceeded scoped "
    "vmem limit by 3.00M. It should not be possible to run out of scoped vmem - \n"
    "See https://openxla.org/xla/errors/error_1001 for more details.\n")
# triton 3.9's OutOfResources (raised when a kernel is loaded) and PTXASError texts.
TRITON_SHARED = ("OutOfResources: out of resource: shared memory, Required: 262144, Hardware "
                 "limit: 232448. Reducing block sizes or `num_stages` may help.")
TRITON_PTXAS = ("PTXASError: `ptxas` failed with error code 4\n`ptxas` stderr:\nptxas fatal   : "
                "Unresolved extern function 'foo'\n\nRepro command: ptxas -v kernel.ptx\n")


@pytest.mark.parametrize("message, statement", [
    (LAST_DIM_NOT_128, "The last dim size is not 128 in original base memref"),
    (STRIDE_ON_LAST_DIM, "Stride on last dim is not 1"),
    (INVALID_VECTOR_TYPE, "Invalid vector type for load"),
])
def test_a_layout_error_is_mosaic_layout_not_vmem_oom(message, statement):
    diag = diagnostics.from_compile_error(message, "k", "tpu-v5e")
    assert diag.code == "mosaic-layout"
    assert "VMEM" not in diag.message.split("The compiler said:")[0]
    assert statement in diag.message


def test_the_mlir_operation_involved_is_shown():
    diag = diagnostics.from_compile_error(LAST_DIM_NOT_128, "k", "tpu-v5e")
    assert diag.message.startswith("the tpu-v5e compiler rejected kernel 'k' at k2.py:35 "
                                   "(mosaic-layout: Mosaic cannot lay out a vector")
    assert "The MLIR operation involved:\n" in diag.message
    assert '%2 = "xir.strided_load"(%arg0, %0, %0)' in diag.message
    assert diag.message.rstrip().endswith(
        "Please report a bug at: https://github.com/jax-ml/jax/issues/new/choose")
    vector = diagnostics.from_compile_error(INVALID_VECTOR_TYPE, "k", "tpu-v5e")
    assert "-> vector<8x128xi8>" in vector.message and "kernels.py:41" in vector.message


def test_a_long_message_is_bounded_and_says_what_it_left_out():
    long = LAST_DIM_NOT_128 + "".join(f"  %{i} = op{i}\n" for i in range(100))
    diag = diagnostics.from_compile_error(long, "k", "tpu-v5e")
    lines = diag.message.split("The compiler said:\n", 1)[1].splitlines()
    assert len(lines) == diagnostics.MAX_COMPILER_LINES + 1
    assert "The MLIR operation involved:" in diag.message
    assert lines[-1] == "  ... (65 more lines of the compiler's message not shown)"


def test_vmem_oom_only_when_the_compiler_ran_out_of_vmem():
    oom = diagnostics.from_compile_error(SCOPED_VMEM_OOM, "k", "tpu-v5e")
    assert oom.code == "vmem-oom"
    assert (oom.get("needed_bytes"), oom.get("limit_bytes")) == (4 << 20, 1 << 20)
    uncoded = diagnostics.from_compile_error(
        "INTERNAL: Ran out of memory in memory space vmem while allocating", "k", "tpu-v5e")
    assert uncoded.code == "vmem-oom"
    # Memory-space words in the statement are not an OOM either.
    other = diagnostics.from_compile_error(
        "INTERNAL: Mosaic failed to compile TPU kernel: Something odd about memory space vmem",
        "k", "tpu-v5e")
    assert other.code == "compile-error"
    assert "Something odd about memory space vmem" in other.message


def test_numbered_errors_still_carry_the_operation():
    e2003 = ("INTERNAL: Mosaic failed to compile TPU kernel with MLIR module name `k` HLO name "
             "`k.1`: E2003: CompileTimeMosaicUnprovenMemoryAccessAlignment: cannot statically "
             "prove that index in dimension 1 is a multiple of 128\n\n"
             'at location: loc("get:"("get/get"(callsite("k"("/x/kernels.py":28:12 to :39)))))'
             '\n\nThe MLIR operation involved:\n  %12 = "xir.vector_load"(%arg2)\n')
    diag = diagnostics.from_compile_error(e2003, "k", "tpu-v5e")
    assert diag.code == "mosaic-alignment"
    assert '%12 = "xir.vector_load"(%arg2)' in diag.message


def test_triton_errors_are_classified_by_their_words():
    shared = diagnostics.from_compile_error(TRITON_SHARED, "k", "gpu-h100", compiler="triton")
    assert shared.code == "shared-memory-oom"
    assert (shared.get("needed_bytes"), shared.get("limit_bytes")) == (262144, 232448)
    ptxas = diagnostics.from_compile_error(TRITON_PTXAS, "k", "gpu-h100", compiler="triton")
    assert ptxas.code == "compile-error"
    assert "Unresolved extern function 'foo'" in ptxas.message


# --- end to end, with libtpu ------------------------------------------------------------------


def lanes_strided_by_two():
    """Every other lane of an (8, 256) f32 block: Mosaic TPU cannot load lanes with a stride."""
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[:, pl.ds(0, 128, stride=2)]

    x = jax.ShapeDtypeStruct((8, 256), jnp.float32)
    return pl.pallas_call(kernel, grid=(2,), in_specs=[pl.BlockSpec((8, 256), lambda i: (0, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                          out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32)), x


def over_its_vmem_limit():
    """4 MiB of double-buffered blocks under vmem_limit_bytes=1 MiB."""
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    x = jax.ShapeDtypeStruct((2048, 512), jnp.float32)
    return pl.pallas_call(kernel, grid=(4,), in_specs=[pl.BlockSpec((512, 512), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((512, 512), lambda i: (i, 0)),
                          out_shape=x,
                          compiler_params=pltpu.CompilerParams(vmem_limit_bytes=1 << 20)), x


@pytest.mark.tpu_compiler
@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason='needs libtpu: pip install "pallaslab[tpu]"')
def test_libtpu_layout_error_and_vmem_oom_end_to_end():
    fn, x = lanes_strided_by_two()
    (k,) = pallaslab.lower(fn, x, target="tpu-v5e", compile=True, use_cache=False).kernels
    assert not k.ok and k.compiled
    (err,) = k.errors
    assert err.code == "mosaic-layout", err.message
    assert "The last dim size is not 128" in err.message
    assert "The MLIR operation involved:" in err.message and "xir.strided_load" in err.message
    assert "test_compiler_messages.py:" in err.message.split("(mosaic-layout")[0]

    fn, x = over_its_vmem_limit()
    (k,) = pallaslab.lower(fn, x, target="tpu-v5e", compile=True, use_cache=False).kernels
    (oom,) = k.errors
    assert oom.code == "vmem-oom"
    assert (oom.get("needed_bytes"), oom.get("limit_bytes")) == (4 << 20, 1 << 20)
