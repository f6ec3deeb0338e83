"""lowering/: cross-lowering, real compilation (libtpu, triton), IR as data, cache, CLI."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from helpers import line_of
from kernels import CATALOG, abstract, catalog_names, elementwise_2d, matmul

import pallaslab
from pallaslab import lowering
from pallaslab.cli import main
from pallaslab.errors import MissingDependencyError
from pallaslab.lowering import irtext, tpu_compile
from pallaslab.model._jax import versions

GOLDEN = Path(__file__).parents[1] / "golden"
KERNELS_PY = str(Path(__file__).parents[1] / "kernels.py")
needs_libtpu = pytest.mark.tpu_compiler
needs_triton = pytest.mark.skipif(
    __import__("importlib").util.find_spec("triton") is None, reason="needs triton (CI has it)")


pytestmark = pytest.mark.usefixtures("private_lowering_cache")


def _capture(name):
    fn, args, *rest = CATALOG[name].case()
    return pallaslab.capture(fn, *args, **(rest[0] if rest else {}))


# --- targets ----------------------------------------------------------------------------------


def test_targets_and_aliases():
    assert {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "gpu-a100", "gpu-h100",
            "gpu-b200"} <= set(lowering.TARGETS)
    assert lowering.get_target("v5e").name == "tpu-v5e"
    assert lowering.get_target("h100").name == "gpu-h100"
    with pytest.raises(ValueError, match="unknown target 'tpu-v9'; known targets: tpu-v4"):
        lowering.get_target("tpu-v9")


# --- cross-lowering ---------------------------------------------------------------------------

# Kernels beyond BlockSpecs (some rightly rejected, some needing a chip with SparseCores) have
# their own matrix in test_lowering_tpu_advanced.py.
TPU_CASES = [n for n in catalog_names(tag="tpu") if "tpu-advanced" not in CATALOG[n].tags]


@pytest.mark.parametrize("target", ["tpu-v5e", "tpu-v6e"])
@pytest.mark.parametrize("name", TPU_CASES)
def test_every_tpu_catalog_kernel_lowers_to_mosaic(name, target):
    result = lowering.lower(_capture(name), target=target)
    assert result.target == target and len(result) >= 1
    for k in result:
        assert k.backend == "mosaic-tpu"
        if name == "tpu_misaligned":  # deliberately broken: Mosaic rejects its blocks
            assert not k.ok
            continue
        assert k.ok, k.diagnostics
        assert k.stage_names[:2] == ("jaxpr", "mosaic")
        mosaic = k.stage("mosaic").text
        assert "func.func @" in mosaic and "loc(" not in mosaic and '"@pl' not in mosaic


def test_misaligned_block_names_the_operand():
    (k,) = lowering.lower(_capture("tpu_misaligned"), target="tpu-v5e").kernels
    (d,) = k.errors
    assert d.code == "tpu-block-shape" and d.operand == "args[0]"
    assert d.message.startswith(
        "args[0]: block shape (10, 100) of an array of shape (40, 200) is not allowed by "
        "Mosaic TPU. Rule: the last two block dimensions must be divisible by 8 and 128")


def test_every_tpu_generation_lowers():
    cap = _capture("matmul_bf16")
    for target in lowering.TPU_TARGETS:
        (k,) = lowering.lower(cap, target=target.name).kernels
        assert k.ok, (target.name, k.diagnostics)


def test_lowering_prints_nothing(capfd):
    cap = _capture("elementwise_1d")
    for target in ("gpu-h100", "tpu-v5e"):
        assert lowering.lower(cap, target=target, use_cache=False).ok
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_tpu_params_are_swapped_for_triton():
    (k,) = lowering.lower(_capture("row_softmax"), target="gpu-h100").kernels
    assert k.ok and k.backend == "triton"
    (note,) = [d for d in k.diagnostics if d.code == "params-adapted"]
    assert note.severity == "info"
    assert "dimension_semantics=('parallel',)" in note.message
    assert "lowered with Triton's default params" in note.message
    assert "tt.func public @softmax_kernel" in k.stage("ttir").text


def test_tpu_only_features_explain_why_triton_cannot_lower():
    (k,) = lowering.lower(_capture("matmul_f32"), target="gpu-h100").kernels
    assert not k.ok
    err = k.errors[0]
    assert err.code == "unsupported-op"
    assert "Triton could not lower kernel 'matmul_kernel'" in err.message
    assert "scratch memory not implemented in the Triton backend" in err.message


def test_mosaic_gpu_kernel():
    cap = _capture("gpu_mesh_kernel")
    (k,) = lowering.lower(cap, target="gpu-h100").kernels
    assert k.ok and k.backend == "mosaic-gpu"
    text = k.stage("mosaic-gpu").text
    assert "gpu.launch" in text and "mosaic_gpu.arch_major = 9" in text
    (tpu,) = lowering.lower(cap, target="tpu-v5e").kernels
    assert not tpu.ok and tpu.errors[0].code == "wrong-backend"
    message = tpu.errors[0].message
    assert "Mosaic GPU kernel (plgpu.kernel): it lowers only for GPU targets" in message
    (a100,) = lowering.lower(cap, target="gpu-a100").kernels
    assert [d.code for d in a100.diagnostics] == ["unsupported-target"]


# --- IR as data -------------------------------------------------------------------------------


def test_mosaic_lines_map_to_kernel_source():
    (k,) = lowering.lower(_capture("matmul_f32"), target="tpu-v5e").kernels
    stage = k.stage("mosaic")
    lines = stage.text.splitlines()
    dot_line = line_of("acc_ref[...] += jnp.dot(")
    matmul_ir = [n for n, line in enumerate(lines, 1) if "tpu.matmul" in line]
    assert matmul_ir and all((n, f"{KERNELS_PY}:{dot_line}") in stage.source_lines
                             for n in matmul_ir)
    assert set(stage.ir_lines_for(f"kernels.py:{dot_line}")) >= set(matmul_ir)
    assert stage.source_for(matmul_ir[0]) == f"{KERNELS_PY}:{dot_line}"
    store_line = line_of("o_ref[...] = acc_ref[...].astype(o_ref.dtype)")
    assert stage.ir_lines_for(f"kernels.py:{store_line}")


def test_jaxpr_lines_map_to_kernel_source():
    (k,) = lowering.lower(_capture("matmul_f32"), target="tpu-v5e").kernels
    stage = k.stage("jaxpr")
    assert "#" not in stage.text and "dot_general" in stage.text
    dot_line = line_of("acc_ref[...] += jnp.dot(")
    lines = stage.text.splitlines()
    assert any("dot_general" in lines[n - 1] for n in stage.ir_lines_for(f"kernels.py:{dot_line}"))


def test_ttir_lines_map_to_kernel_source():
    (k,) = lowering.lower(_capture("layer_norm"), target="gpu-h100").kernels
    stage = k.stage("ttir")
    rsqrt = line_of("jax.lax.rsqrt(var + 1e-5)")
    lines = stage.text.splitlines()
    assert any("math.rsqrt" in lines[n - 1] or "rsqrt" in lines[n - 1]
               for n in stage.ir_lines_for(f"kernels.py:{rsqrt}"))


def test_normalise_strips_locations_paths_and_counters():
    text = ('#loc1 = loc("/a/b/k.py":3:4)\n'
            'module @m attributes {stable_mosaic.version = 15 : i64} {\n'
            '  %0 = arith.constant 0 : i32 "get:"(#loc7)  \n'
            '  func.func @f(%arg0: i32 [unknown], %arg1: i32 loc(#loc2)) {\n'
            '    %1 = foo "/x/y/kernels.py":12:3 to :9\n}\n')
    assert lowering.normalise(text) == (
        "module @m attributes {stable_mosaic.version = N : i64} {\n"
        "  %0 = arith.constant 0 : i32\n"
        "  func.func @f(%arg0: i32, %arg1: i32) {\n"
        "    %1 = foo\n}\n")


GOLDENS = [("matmul_f32", "tpu-v5e", "mosaic"), ("row_softmax", "tpu-v6e", "mosaic"),
           ("layer_norm", "gpu-h100", "ttir")]


@pytest.mark.parametrize(("name", "target", "stage"), GOLDENS)
def test_golden_normalised_ir(name, target, stage):
    (k,) = lowering.lower(_capture(name), target=target).kernels
    got = lowering.normalise(k.stage(stage).text)
    # Mosaic prints its ops' properties as `<...>` from jaxlib 0.12.1 on (`{...}` before): the
    # earlier tested releases have goldens of their own.
    golden = GOLDEN if versions.JAX_VERSION >= (0, 12, 1) else GOLDEN / "before-0.12.1"
    path = golden / f"{name}.{target}.{stage}.mlir"
    if os.environ.get("PALLASLAB_UPDATE_GOLDENS") == "1":
        path.write_text(got)
    assert got == path.read_text(), f"regenerate with PALLASLAB_UPDATE_GOLDENS=1 ({path.name})"


def test_mlir_string_unescape():
    assert irtext.unescape_mlir_string(r'{\22a\22: \5C}') == '{"a": \\}'


# --- cache ------------------------------------------------------------------------------------


def test_cache_hit_is_identical_and_keyed_by_kernel_content(monkeypatch, tmp_path):
    monkeypatch.setenv("PALLASLAB_CACHE_DIR", str(tmp_path))
    cap = _capture("elementwise_2d_add")
    first = lowering.lower(cap, target="tpu-v6e")[0]
    again = lowering.lower(cap, target="tpu-v6e")[0]
    assert not first.cached and again.cached
    assert {**again.to_json(), "cached": False} == first.to_json()
    assert lowering.cache_dir() == tmp_path / "lowering"
    assert len(list(lowering.cache_dir().glob("*.json"))) == 1
    x = jax.ShapeDtypeStruct((256, 512), jnp.float32)
    other = pallaslab.capture(functools.partial(elementwise_2d, block=(128, 128)), x, x)
    assert not lowering.lower(other, target="tpu-v6e")[0].cached
    assert not lowering.lower(cap, target="tpu-v5e")[0].cached


# --- missing dependencies ---------------------------------------------------------------------


def test_missing_libtpu_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "libtpu", None)
    with pytest.raises(MissingDependencyError, match=r"needs the Python package 'libtpu'"
                       r".*pip install \"pallaslab\[tpu\]\""):
        lowering.lower(_capture("vector_add"), target="tpu-v5e", compile=True, use_cache=False)


def test_missing_triton_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    with pytest.raises(MissingDependencyError,
                       match=r"'triton'.*pip install \"pallaslab\[gpu\]\""):
        lowering.lower(_capture("vector_add"), target="gpu-h100", compile=True, use_cache=False)


def test_missing_absl_says_what_to_install(monkeypatch):
    cap = _capture("gpu_mesh_kernel")
    monkeypatch.setitem(sys.modules, "absl", None)
    with pytest.raises(MissingDependencyError,
                       match=r"'absl-py'.*pip install \"pallaslab\[gpu\]\""):
        lowering.lower(cap, target="gpu-h100", use_cache=False)


# --- real compilers ---------------------------------------------------------------------------

GPU_CASES = [n for n in catalog_names(tag="gpu") if "mesh" not in CATALOG[n].tags]


@needs_triton
@pytest.mark.parametrize("name", GPU_CASES)
def test_gpu_catalog_kernels_compile_to_ptx(name):
    (k,) = lowering.lower(_capture(name), target="gpu-h100", compile=True).kernels
    assert k.ok and k.compiled, k.diagnostics
    assert k.stage_names == ("jaxpr", "ttir", "ttgir", "llir", "ptx", "sass")
    assert ".target sm_90a" in k.stage("ptx").text and ".entry" in k.stage("ptx").text
    assert k.resources.registers and k.resources.registers > 0
    assert k.resources.spills == 0 and k.resources.smem_bytes is not None


@needs_libtpu
def test_flash_attention_compiles_for_v5e():
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    q = jax.ShapeDtypeStruct((1, 2, 512, 128), jnp.bfloat16)
    result = lowering.lower(lambda q, k, v: fa.flash_attention(q, k, v, causal=True), q, q, q,
                            target="tpu-v5e", compile=True)
    (k,) = result.kernels
    assert k.ok and k.compiled and k.diagnostics == ()
    passes = [s for s in k.stage_names if s.startswith("mosaic:")]
    assert "mosaic:post-apply-vector-layout" in passes and passes[-1] == "mosaic:post-finalize-llo"


@needs_libtpu
def test_compiler_pass_dumps_map_to_kernel_source():
    pid = tpu_compile.worker().pid
    (k,) = lowering.lower(_capture("matmul_f32"), target="tpu-v5e", compile=True).kernels
    assert k.ok and tpu_compile.worker().pid == pid  # one libtpu worker serves every compile
    dot = f"kernels.py:{line_of('acc_ref[...] += jnp.dot(')}"
    for name in ("mosaic:original", "mosaic:post-apply-vector-layout", "mosaic:post-finalize-llo"):
        stage = k.stage(name)
        assert "loc(" not in stage.text and "#loc" not in stage.text
        assert stage.ir_lines_for(dot), name


@needs_libtpu
def test_oversized_blocks_give_vmem_oom_with_compiler_numbers(capfd):
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32)
    fn = functools.partial(elementwise_2d, block=(1024, 1024))
    (k,) = lowering.lower(fn, x, x, target="tpu-v5e", compile=True).kernels
    assert not k.ok and k.compiled
    (oom,) = k.errors
    assert oom.code == "vmem-oom"
    # 3 operands x 2 buffers x 4 MiB blocks, against v5e's default 16 MiB scoped limit.
    assert oom.get("needed_bytes") == 24 << 20 and oom.get("limit_bytes") == 16 << 20
    assert "needs at least 24 MiB of scoped VMEM on tpu-v5e, but the limit is 16 MiB" in oom.message
    assert "Scoped allocation with size 24.00M and limit 16.00M" in oom.message
    assert k.resources.vmem_bytes == 24 << 20
    out, err = capfd.readouterr()
    assert "TPU_ACCELERATOR_TYPE" not in out + err  # libtpu's init noise stays in the worker


@needs_libtpu
def test_vmem_exact_f32_matmul_128_blocks_is_448_kib():
    x = jax.ShapeDtypeStruct((512, 256), jnp.float32)
    y = jax.ShapeDtypeStruct((256, 384), jnp.float32)
    (k,) = lowering.lower(matmul, x, y, target="tpu-v5e", vmem_exact=True).kernels
    assert k.ok
    assert k.resources.vmem_bytes == 448 * 1024  # 2 x (3 blocks of 64 KiB) + 64 KiB scratch
    (note,) = [d for d in k.diagnostics if d.code == "vmem-exact"]
    assert "needs 448 KiB of scoped VMEM on tpu-v5e" in note.message


# --- CLI --------------------------------------------------------------------------------------


def test_cli_lower_json_contract(capsys):
    assert main(["lower", f"{KERNELS_PY}:matmul_f32", "--target", "tpu-v5e", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == "tpu-v5e"
    (k,) = data["kernels"]
    assert {"name", "backend", "ok", "stages", "diagnostics", "resources"} <= set(k)
    assert k["name"] == "matmul_kernel" and k["backend"] == "mosaic-tpu" and k["ok"] is True
    assert [s["name"] for s in k["stages"]] == ["jaxpr", "mosaic"]
    assert all(set(s) >= {"name", "text"} for s in k["stages"])
    assert set(k["resources"]) == {"vmem_bytes", "smem_bytes", "registers", "spills"}


def test_cli_lower_failure_and_human_output(capsys):
    assert main(["lower", f"{KERNELS_PY}:tpu_misaligned", "--target", "tpu-v6e"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("Lowering of kernel 0 add_kernel for tpu-v6e (mosaic-tpu): FAILED, "
                          "not compiled")
    assert "error tpu-block-shape [args[0]]: args[0]: block shape (10, 100)" in out


def test_cli_lower_unknown_target(capsys):
    assert main(["lower", f"{KERNELS_PY}:vector_add", "--target", "tpu-v9"]) == 2
    assert "unknown target 'tpu-v9'" in capsys.readouterr().err


def test_abstract_catalog_args_lower_too():
    fn, args = CATALOG["layer_norm"].case()
    assert lowering.lower(fn, *abstract(args), target="tpu-v5e").ok


def test_a_pass_module_past_the_limit_keeps_its_ends_its_locations_and_says_what_it_left_out():
    from pallaslab.lowering._tpu_worker import shortened

    ops = [f'    %{i} = arith.addf %a, %b : vector<8x128xf32> loc(#loc{i % 3})\n'
           for i in range(1000)]
    locs = [f'#loc{i} = loc("kernel.py":{10 + i}:4)\n' for i in range(3)]
    module = "module {\n" + "".join(ops) + "}\n" + "".join(locs)
    assert shortened(module, limit=len(module)) == module
    short = shortened(module, limit=8000)
    assert len(short) < 8000 + 200
    assert short.startswith("module {\n    %0 = ") and "}\n#loc0 = " in short
    assert short.endswith("".join(locs))
    note = next(line for line in short.splitlines() if line.startswith("// pallaslab:"))
    kept = [line + "\n" for line in short.splitlines() if "arith.addf" in line]
    left_out = sum(map(len, ops)) - sum(map(len, kept))
    assert note == (f"// pallaslab: {1000 - len(kept):,} lines ({left_out:,} characters) of "
                    "this pass's module left out here; it keeps 8,000 characters per pass")
