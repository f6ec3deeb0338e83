"""DMAs whose sizes are only known while the kernel runs (issue 38, item 7): a copy of
`x_hbm.at[pl.ds(0, n)]` with `n` from scalar prefetch, in the body, in `run_scoped` and in an
`emit_pipeline` body, was `structure-unread` (`int()` of a ShapedArray). It is read, its
dynamic dimension shown as unknown (None), and the views and `inspect --json` render it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.analysis.inspection import inspect_capture, kernel_json
from pallaslab.views.parts import to_html
from pallaslab.views.pipeline_manual import manual_ops, manual_parts, op_text

pytestmark = pytest.mark.filterwarnings("error::UserWarning:pallaslab")

ANY = pl.BlockSpec(memory_space=pl.ANY)
F32 = jnp.float32


def _dynamic_rows(n_ref, x_hbm, o_hbm, buf, sem):
    n = n_ref[0]
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(0, n)], buf.at[pl.ds(0, n)], sem)
    copy.start()
    copy.wait()
    pltpu.sync_copy(buf.at[pl.ds(0, n)], o_hbm.at[pl.ds(0, n)])

    def scoped(vbuf):
        pltpu.sync_copy(x_hbm.at[pl.ds(0, n)], vbuf.at[pl.ds(0, n)])
        pltpu.sync_copy(vbuf.at[pl.ds(0, n)], o_hbm.at[pl.ds(0, n)])

    pl.run_scoped(scoped, pltpu.VMEM((32, 128), F32))


def _in_pipeline(n_ref, x_hbm, o_hbm, buf):
    n = n_ref[0]

    def inner(x_ref, o_ref):
        pltpu.sync_copy(x_hbm.at[pl.ds(0, n)], buf.at[pl.ds(0, n)])
        o_ref[...] = x_ref[...] + 1.0

    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    pltpu.emit_pipeline(inner, grid=(4,), in_specs=spec, out_specs=spec)(x_hbm, o_hbm)


def _capture(body, scratch):
    def fn(n, x):
        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[ANY], out_specs=ANY, scratch_shapes=scratch),
        )(n, x)
    (kernel,) = pallaslab.capture(fn, jnp.array([5], jnp.int32), jnp.zeros((32, 128), F32))
    return kernel


def test_dynamic_size_dmas_in_the_body_and_run_scoped_are_read():
    kernel = _capture(_dynamic_rows, [pltpu.VMEM((32, 128), F32), pltpu.SemaphoreType.DMA(())])
    assert kernel.structure_notes == ()
    assert [(d.kind, d.src, d.dst, d.shape) for d in kernel.dmas] == [
        ("async", "args[1]", "scratch[0]", (None, 128)),
        ("sync", "scratch[0]", "outputs", (None, 128)),
        ("sync", "args[1]", "scoped[0]", (None, 128)),
        ("sync", "scoped[0]", "outputs", (None, 128)),
    ]
    assert all(d.nbytes is None for d in kernel.dmas)
    assert [op.kind for op in kernel.semaphore_ops] == ["dma_wait"]
    (insp,) = inspect_capture([kernel])
    assert not [f for f in insp.findings if f.code == "structure-unread"]
    dmas = kernel_json(insp)["dmas"]
    assert dmas[0]["shape"] == [None, 128] and dmas[0]["bytes"] is None
    assert [op["bytes"] for op in manual_ops(kernel) if op["src"]] == [None] * 4


def test_a_dynamic_size_dma_in_an_emit_pipeline_body_is_read():
    kernel = _capture(_in_pipeline, [pltpu.VMEM((32, 128), F32)])
    assert kernel.structure_notes == ()
    (pipeline,) = kernel.pipelines
    assert pipeline.grid == (4,)
    assert [(d.kind, d.src, d.dst, d.shape, d.repeated) for d in kernel.dmas] == [
        ("sync", "args[1]", "scratch[0]", (None, 128), True)]


def test_the_views_render_a_dynamic_dma():
    kernel = _capture(_dynamic_rows, [pltpu.VMEM((32, 128), F32), pltpu.SemaphoreType.DMA(())])
    first = manual_ops(kernel)[0]
    assert first["bytes"] is None
    assert "x_hbm (args[1], any) -> buf (scratch[0], vmem), size known only at run time" \
        in op_text(first)
    html = "".join(to_html(part) for part in manual_parts(kernel, "v5e"))
    assert "size known only at run time" in html


def test_inspect_text_says_the_size_is_known_only_at_run_time():
    from pallaslab.cli.inspect import nested_lines

    kernel = _capture(_dynamic_rows, [pltpu.VMEM((32, 128), F32), pltpu.SemaphoreType.DMA(())])
    (insp,) = inspect_capture([kernel])
    lines = [x for x in nested_lines(kernel_json(insp)) if "DMA" in x]
    assert lines[0].startswith(
        "async DMA args[1] (any) -> scratch[0] (vmem): (None, 128) float32, size known only at "
        "run time on scratch[1]"), lines
