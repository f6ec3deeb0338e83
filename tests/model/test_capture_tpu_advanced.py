"""Capture of TPU kernels beyond BlockSpecs (tests/kernels_tpu.py): kernels whose tracing asks
the TPU, traced on this CPU host under an abstract TPU; nested emit_pipelines, run_scoped
buffers, manual DMAs and semaphores; mesh kernels' scratch and meshes; recapture per chip."""

from __future__ import annotations

import functools
import json

import jax
import kernels_tpu as K
import numpy as np
import pytest
from catalog import CATALOG
from helpers import KERNELS_TPU, line_ref
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.analysis.inspection import inspect_capture, kernel_json
from pallaslab.analysis.tiling import block_index_tables
from pallaslab.cli import main
from pallaslab.model import Capture, DmaCopy, SemaphoreOp, recapture
from pallaslab.model.capture import RecaptureError

line_of = functools.partial(line_ref, path=KERNELS_TPU)  # 'kernels_tpu.py:N' of a line


def short(source: str | None) -> str | None:
    return None if source is None else source.rsplit("/", 1)[-1]


def captured(name: str, **kw):
    fn, args = getattr(K, name)()[:2]
    cap = pallaslab.capture(fn, *args, **kw)
    cap.check_invariants()
    return cap


# --- capture that asks the TPU ----------------------------------------------------------------


def test_kernels_that_ask_the_tpu_are_traced_under_v5e_by_default():
    # Without an abstract TPU, tracing these fails on a CPU host (the catalog says why).
    for name in ("emit_pipeline_matmul", "mesh_kernel_default_cores"):
        fn, args = getattr(K, name)()[:2]
        with pytest.raises((ValueError, AttributeError)):
            jax.make_jaxpr(fn)(*args)
        (kernel,) = captured(name)
        assert kernel.traced_for_chip == "v5e", name
    (mesh,) = captured("mesh_kernel_default_cores")
    assert mesh.mesh.axes == (("core", 1),)  # v5e: one TensorCore


def test_kernels_that_trace_as_they_are_keep_no_chip():
    for name in ("bounded_slice_pipeline", "manual_dma_double_buffer", "mesh_kernel",
                 "vmem_limit_above_chip"):
        assert all(k.traced_for_chip is None for k in captured(name)), name


def test_chip_chooses_the_abstract_tpu():
    (kernel,) = captured("emit_pipeline_matmul", chip="tpu-v6e")
    assert kernel.traced_for_chip == "v6e"
    (mesh,) = captured("mesh_kernel_default_cores", chip="v5p")
    assert mesh.traced_for_chip == "v5p" and mesh.mesh.axes == (("core", 2),)  # megacore


def test_sparsecore_kernel_is_traced_for_a_chip_with_sparsecores():
    (kernel,) = captured("sparsecore_vector_add")  # v5e has none: 7x is used instead
    assert kernel.traced_for_chip == "7x"
    assert kernel.mesh.kind == "VectorSubcoreMesh"
    assert kernel.mesh.axes == (("core", 1), ("subcore", 16))
    assert kernel.grid == (1, 16) and kernel.grid_names == ("core", "subcore")
    (on_v6e,) = captured("sparsecore_vector_add", chip="v6e")  # v6e has SparseCores
    assert on_v6e.traced_for_chip == "v6e"


def test_unknown_chip_is_named():
    fn, args = K.emit_pipeline_matmul()
    with pytest.raises(ValueError, match=r"unknown TPU chip 'v9z' to trace under: known "
                                         r"chips are v4, v5e, v5p, v6e, 7x"):
        pallaslab.capture(fn, *args, chip="v9z")


class Mine(Exception):
    pass


def test_users_own_error_under_the_abstract_tpu_surfaces_unwrapped():
    def body(x_ref, o_ref):
        raise Mine("my kernel body is wrong")

    def kernel(x_hbm, o_hbm):
        pltpu.emit_pipeline(body, grid=(2,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x_hbm, o_hbm)

    def fn(x):
        any_spec = pl.BlockSpec(memory_space=pl.ANY)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[any_spec], out_specs=any_spec)(x)

    with pytest.raises(Mine, match="my kernel body is wrong"):
        pallaslab.capture(fn, jax.ShapeDtypeStruct((16, 128), np.float32))


def test_users_own_attribute_error_is_not_retraced_away():
    def fn(x):
        return x.no_such_attribute

    with pytest.raises(AttributeError, match="no_such_attribute"):
        pallaslab.capture(fn, jax.ShapeDtypeStruct((8,), np.float32))


# --- recapture ------------------------------------------------------------------------------


def test_recapture_traces_again_for_each_chip():
    cap = captured("mesh_kernel_default_cores")
    on_v5p = recapture(cap, "tpu-v5p")
    assert isinstance(on_v5p, Capture) and on_v5p.function_name == cap.function_name
    assert on_v5p[0].traced_for_chip == "v5p" and on_v5p[0].mesh.axes == (("core", 2),)
    # Even a kernel that traces without a TPU is traced for the chip asked.
    again = recapture(captured("run_scoped_sync_copy"), "v6e")
    assert again[0].traced_for_chip == "v6e" and again[0].scoped[0].shape == (128, 128)
    assert cap.handle.fn is not None and len(cap.handle.args) == 1 and cap.handle.kwargs == {}


def test_recapture_needs_the_traced_function():
    cap = captured("run_scoped_sync_copy")
    bare = Capture(kernels=cap.kernels, function_name="f", concrete=True, handle=None)
    with pytest.raises(RecaptureError, match=r"capture of f\(\.\.\.\) holds no traced "
                                             r"function, so it cannot be traced again for "
                                             r"chip 'v6e'"):
        recapture(bare, "v6e")


# --- nested pipelines -----------------------------------------------------------------------


def test_emit_pipeline_matmul_has_its_inner_pipeline():
    (kernel,) = captured("emit_pipeline_matmul")
    assert kernel.grid == () and [op.origin for op in kernel.operands] == \
        ["args[0]", "args[1]", "outputs"]
    (p,) = kernel.pipelines
    p.check_invariants()
    assert p.kind == "pipeline" and p.name == "_matmul_step" and p.grid == (2, 2, 2)
    assert p.dimension_semantics == ("arbitrary",) * 3
    assert short(p.source) == line_of("def _matmul_step")
    assert short(p.call_site) == line_of("pltpu.emit_pipeline(", after="def _pipelined_matmul")
    assert p.traced_for_chip == "v5e" and p.context == (kernel.name,)
    assert [(op.origin, op.role, op.param, op.outer) for op in p.operands] == [
        ("args[0]", "input", "x_ref", "args[0]"), ("args[1]", "input", "y_ref", "args[1]"),
        ("outputs", "output", "z_ref", "outputs")]
    for op in p.operands:
        assert op.shape == (256, 256) and op.block_shape == (128, 128)
        assert op.memory_space == "vmem" and op.buffer_count == 2
    assert [short(op.index_map_source) for op in p.operands] == [
        line_of("lambda i, j, k: (i, k)"), line_of("lambda i, j, k: (k, j)"),
        line_of("lambda i, j, k: (i, j)")]
    # The inner pipeline's handle evaluates its index maps over its whole grid.
    tables = block_index_tables(p.handle.index_map_evaluator, p.grid, (), {0: 2, 1: 2, 2: 2})
    ids = np.array(list(np.ndindex(2, 2, 2)))
    np.testing.assert_array_equal(tables[0], ids[:, [0, 2]])
    np.testing.assert_array_equal(tables[1], ids[:, [2, 1]])
    np.testing.assert_array_equal(tables[2], ids[:, [0, 1]])
    # The pipeline's own DMAs are not the user's manual ones.
    assert kernel.dmas == () and kernel.scoped == ()


def test_the_executed_kernel_is_traced_without_the_pipeline_primitive():
    """JAX's TPU interpreter cannot run the emit_pipeline primitive off a TPU: the kernel kept
    for executors is the plain trace, and it computes x @ y under both interpreters."""
    fn, args = K.emit_pipeline_matmul()
    cap = pallaslab.capture(fn, *args)
    eqn = cap[0].handle.eqn
    assert "emit_pipeline" not in cap[0].kernel_jaxpr
    assert "emit_pipeline[" in str(cap.handle.structure_jaxpr)
    want = CATALOG["emit_pipeline_matmul"].reference(*args)
    for interpret in (True, pltpu.InterpretParams()):
        params = eqn.primitive.get_bind_params(dict(eqn.params, interpret=interpret))
        (out,) = eqn.primitive.bind(*args, **params)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


def test_bounded_slice_pipeline_windows_vmem_scratch():
    (kernel,) = captured("bounded_slice_pipeline")
    (p,) = kernel.pipelines
    assert p.grid == (3, 2) and p.name == "_add_ten"
    assert short(p.call_site) == line_of("pltpu.emit_pipeline(_add_ten")
    assert [(op.origin, op.outer) for op in p.operands] == [("args[0]", "scratch[0]"),
                                                           ("outputs", "scratch[1]")]
    for op in p.operands:
        assert [(d.kind, d.size) for d in op.block_dims] == [("bounded", 6), ("blocked", 8),
                                                            ("blocked", 256)]
        assert op.shape == (16, 8, 512) and op.memory_space == "vmem"
    assert kernel.dmas == (
        DmaCopy("sync", "args[0]", "scratch[0]", "any", "vmem", (16, 8, 512),
                np.dtype(np.int32), None, kernel.dmas[0].source),
        DmaCopy("sync", "scratch[1]", "outputs", "vmem", "any", (16, 8, 512),
                np.dtype(np.int32), None, kernel.dmas[1].source))
    assert [short(d.source) for d in kernel.dmas] == [
        line_of("pltpu.sync_copy(x_hbm, x_vmem)"), line_of("pltpu.sync_copy(o_vmem, o_hbm)")]


# --- DMAs, scoped buffers, semaphores -----------------------------------------------------


def test_manual_double_buffering_dmas():
    (kernel,) = captured("manual_dma_double_buffer")
    assert [(d.kind, d.src, d.dst, d.src_memory_space, d.dst_memory_space, d.shape,
             d.semaphore, d.repeated, short(d.source)) for d in kernel.dmas] == [
        ("async", "args[0]", "scratch[0]", "any", "vmem", (64, 128), "scratch[2]", False,
         line_of("copy_in(0, 0).start()")),
        ("async", "args[0]", "scratch[0]", "any", "vmem", (64, 128), "scratch[2]", True,
         line_of("copy_in(i + 1, 1 - slot).start()")),
        ("sync", "scratch[1]", "outputs", "vmem", "any", (64, 128), None, True,
         line_of("pltpu.sync_copy(out_buf")),
    ]
    assert all(d.nbytes == 64 * 128 * 4 for d in kernel.dmas)
    assert kernel.semaphore_ops == (
        SemaphoreOp("dma_wait", "scratch[2]", kernel.semaphore_ops[0].source),)
    assert short(kernel.semaphore_ops[0].source) == line_of("copy_in(i, slot).wait()")
    assert kernel.scoped == ()  # sync_copy's own semaphore is no buffer of the user's


def test_run_scoped_buffer():
    (kernel,) = captured("run_scoped_sync_copy")
    (buf,) = kernel.scoped
    assert (buf.origin, buf.role, buf.shape, buf.dtype, buf.memory_space, buf.param) == \
        ("scoped[0]", "scratch", (128, 128), np.dtype(np.float32), "vmem", "vbuf")
    assert [(d.kind, d.src, d.dst, d.shape) for d in kernel.dmas] == [
        ("sync", "args[0]", "scoped[0]", (128, 128)), ("sync", "scoped[0]", "outputs", (128, 128))]


def test_semaphore_signal_read_wait():
    (kernel,) = captured("semaphore_read_kernel")
    assert [(s.kind, s.semaphore, s.device, short(s.source)) for s in kernel.semaphore_ops] == [
        ("signal", "scratch[0]", False, line_of("pl.semaphore_signal(sem, 2)")),
        ("read", "scratch[0]", False, line_of("pl.semaphore_read(sem)")),
        ("wait", "scratch[0]", False, line_of("pl.semaphore_wait(sem, 2)")),
    ]
    assert kernel.operand("scratch[0]").memory_space == "semaphore_mem"


# --- mesh kernels -----------------------------------------------------------------------------


def test_mesh_kernel_scratch_and_dmas():
    (kernel,) = captured("mesh_kernel")
    assert kernel.mesh.kind == "TensorCoreMesh" and kernel.mesh.axes == (("core", 2),)
    assert [(op.origin, op.role, op.shape, op.memory_space, op.param)
            for op in kernel.operands] == [
        ("args[0]", "input", (16, 128), "any", "x_hbm"),
        ("outputs", "output", (16, 128), "any", "o_hbm"),
        ("scratch[0]", "scratch", (8, 128), "vmem", "vbuf"),
        ("scratch[1]", "scratch", (), "semaphore_mem", "sem"),
    ]
    assert [(d.src, d.dst, d.shape, d.semaphore) for d in kernel.dmas] == [
        ("args[0]", "scratch[0]", (8, 128), "scratch[1]"),
        ("scratch[0]", "outputs", (8, 128), "scratch[1]")]


def test_core_map_scoped_buffers():
    (kernel,) = captured("core_map_kernel")
    assert kernel.kind == "mesh" and kernel.mesh.axes == (("core", 2),)
    assert [(op.origin, op.shape, op.memory_space, op.param) for op in kernel.scoped] == [
        ("scoped[0]", (8, 128), "vmem", "vbuf"), ("scoped[1]", (), "semaphore_mem", "sem")]
    assert [(d.src, d.dst, d.shape, d.semaphore) for d in kernel.dmas] == [
        ("args[0]", "scoped[0]", (8, 128), "scoped[1]"),
        ("scoped[0]", "args[1]", (8, 128), "scoped[1]")]


def test_every_advanced_kernel_captures_with_invariants():
    for name, entry in CATALOG.items():
        if "tpu-advanced" in entry.tags:
            for kernel in captured(name):
                for p in kernel.pipelines:
                    p.check_invariants()


# --- inspect --json ---------------------------------------------------------------------------


def test_inspect_json_has_pipelines_scoped_and_dmas():
    (k,) = [kernel_json(i) for i in inspect_capture(captured("emit_pipeline_matmul"))]
    assert k["traced_for_chip"] == "v5e"
    (p,) = k["pipelines"]
    assert p["grid"] == [2, 2, 2] and p["programs"] == 8 and p["name"] == "_matmul_step"
    assert p["call_site"] == line_of("pltpu.emit_pipeline(", after="def _pipelined_matmul")
    assert [(op["origin"], op["outer"], op["block_shape"], op["memory_space"])
            for op in p["operands"]] == [
        ("args[0]", "args[0]", [128, 128], "vmem"), ("args[1]", "args[1]", [128, 128], "vmem"),
        ("outputs", "outputs", [128, 128], "vmem")]
    assert {"fetches", "hbm_bytes", "buffer_count", "dtype"} <= set(p["operands"][0])
    (k,) = [kernel_json(i) for i in inspect_capture(captured("run_scoped_sync_copy"))]
    assert k["traced_for_chip"] is None and k["pipelines"] == []
    assert [(s["origin"], s["shape"], s["memory_space"]) for s in k["scoped"]] == [
        ("scoped[0]", [128, 128], "vmem")]
    assert k["dmas"][0] == {
        "kind": "sync", "src": "args[0]", "dst": "scoped[0]", "src_memory_space": "any",
        "dst_memory_space": "vmem", "shape": [128, 128], "dtype": "float32",
        "bytes": 128 * 128 * 4, "semaphore": None,
        "source": line_of("pltpu.sync_copy(x_hbm, vbuf)"), "repeated": False,
        "device_id": None, "device_id_type": None}
    json.dumps(k)


def test_cli_inspect_chip_picks_the_abstract_tpu(capsys):
    assert main(["inspect", "tests/kernels.py:mesh_kernel_default_cores", "--chip", "v5p",
                 "--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert k["traced_for_chip"] == "v5p" and k["grid"] == [2]
    assert list(k["vmem"]) == ["tpu-v5p"]


def test_cli_inspect_table_lists_nested_structure(capsys):
    assert main(["inspect", "tests/kernels.py:manual_dma_double_buffer"]) == 0
    out = capsys.readouterr().out
    assert "async DMA args[0] (any) -> scratch[0] (vmem): (64, 128) float32, 32,768 B on " \
        "scratch[2]" in out
    assert "(in a loop)" in out
    assert main(["inspect", "tests/kernels.py:emit_pipeline_matmul"]) == 0
    out = capsys.readouterr().out
    assert "pipeline _matmul_step" in out and "grid 2 x 2 x 2" in out
    assert "x_ref (args[0]): block (128, 128) of args[0] (256, 256), vmem, 2 buffers" in out
    assert "traced under an abstract TPU v5e" in out



def _right_permute(x_ref, o_ref, send_sem, recv_sem):
    right = jax.lax.rem(jax.lax.axis_index("x") + 1, jax.lax.axis_size("x"))
    # A mesh device id: the default (JAX 0.12.1 deprecates pl.DeviceIdType and the argument).
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,))
    copy.start()
    copy.wait()


def test_remote_copy_under_shard_map():
    from jax.sharding import PartitionSpec as P

    def fn(x):
        mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
        any_spec = pl.BlockSpec(memory_space=pl.ANY)
        permute = pl.pallas_call(
            _right_permute, out_shape=jax.ShapeDtypeStruct((8, 128), np.float32),
            in_specs=[any_spec], out_specs=any_spec,
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])
        return jax.shard_map(permute, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                             check_vma=False)(x)

    (kernel,) = pallaslab.capture(fn, jax.ShapeDtypeStruct((8, 128), np.float32))
    assert kernel.context == ("shard_map",)
    ((kind, src, dst, shape, sem),) = [(d.kind, d.src, d.dst, d.shape, d.semaphore)
                                       for d in kernel.dmas]
    assert (kind, src, dst, shape, sem) == ("remote", "args[0]", "outputs", (8, 128),
                                            "scratch[1]")
    # wait() waits for the send (its semaphore) and then the receive.
    assert [(s.kind, s.semaphore) for s in kernel.semaphore_ops] == [
        ("dma_wait", "scratch[0]"), ("dma_wait", "scratch[1]")]


def test_sparsecore_kernel_in_json_and_table(capsys):
    assert main(["inspect", "tests/kernels.py:sparsecore_vector_add", "--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert k["traced_for_chip"] == "7x"
    assert k["mesh"] == {"kind": "VectorSubcoreMesh", "axes": [["core", 1], ["subcore", 16]],
                         "warpgroups": None}
    assert main(["inspect", "tests/kernels.py:sparsecore_vector_add"]) == 0
    assert "traced under an abstract TPU 7x (a SparseCore kernel, traced for a chip with " \
        "SparseCores; no TPU attached)" in capsys.readouterr().out


def _unscoped_pipeline(x_hbm, o_hbm):
    spec = pl.BlockSpec((8, 128), lambda j: (j, 0))
    pltpu.emit_pipeline(K._double, grid=(4,), in_specs=[spec], out_specs=[spec],
                        trace_scopes=False)(x_hbm, o_hbm)


def test_a_pipeline_traced_without_scopes_is_still_captured():
    """`trace_scopes=False` leaves no `ep_*` scopes to find the pipeline by: its DMAs lead to
    the structure trace, where the primitive is intact."""
    def fn(x):
        return pl.pallas_call(_unscoped_pipeline,
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[K.ANY], out_specs=K.ANY)(x)

    (kernel,) = pallaslab.capture(fn, np.ones((32, 128), np.float32))
    [pipe] = kernel.pipelines
    assert pipe.grid == (4,) and [op.block_shape for op in pipe.operands] == [(8, 128)] * 2
    assert kernel.dmas == ()  # the pipeline's copies are its own, not the body's


def _copies_in_its_body(x_hbm, o_hbm, acc):
    def body(x_ref, o_ref):
        pltpu.sync_copy(x_ref, acc)  # a DMA inside the pipeline body, once per inner step
        o_ref[...] = acc[...] * 2.0

    spec = pl.BlockSpec((8, 128), lambda j: (j, 0))
    pltpu.emit_pipeline(body, grid=(4,), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)


def test_dmas_inside_a_pipeline_body_belong_to_the_kernel():
    def fn(x):
        return pl.pallas_call(_copies_in_its_body,
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[K.ANY], out_specs=K.ANY,
                              scratch_shapes=[pltpu.VMEM((8, 128), np.float32)])(x)

    (kernel,) = pallaslab.capture(fn, np.ones((32, 128), np.float32))
    [dma] = kernel.dmas
    assert (dma.kind, dma.src, dma.dst, dma.shape, dma.repeated) == (
        "sync", "window of args[0]", "scratch[0]", (8, 128), True)
