"""Kernels built by `jax.experimental.pallas.fuser`: what was fused in, from which user arrays."""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import pytest
from catalog import CATALOG, rand
from helpers import KERNELS_TPU, line_ref
from jax.experimental import pallas as pl
from jax.experimental.pallas import fuser
from kernels import vector_add
from kernels_tpu import fused_scale_add

from pallaslab.analysis.inspection import inspect_kernel, kernel_json, operand_labels
from pallaslab.cli.inspect import fusion_lines
from pallaslab.model import capture
from pallaslab.model._jax.fusion import fuser_sources
from pallaslab.views.context import KernelContext
from pallaslab.views.overview import OverviewView


def _line_of(text: str) -> str:
    """'kernels_tpu.py:LINE' of the line in fused_scale_add's source holding `text`."""
    return line_ref(text, KERNELS_TPU, after="def fused_scale_add")


@pytest.fixture(scope="module")
def fused():
    fn, args = fused_scale_add()
    cap = capture(fn, *args)
    (kernel,) = fuser_sources(fn, args, {}, cap.kernels)
    return cap, kernel


def _short(sources) -> list[str]:
    return [s.rsplit("/", 1)[-1] for s in sources]


def test_capture_finds_the_fused_prologue_and_epilogue_in_the_kernel_body():
    fn, args = fused_scale_add()
    (kernel,) = capture(fn, *args)
    assert kernel.fusion is not None
    prologue, epilogue = kernel.fusion.functions
    assert (prologue.role, prologue.operand) == ("prologue", "args[0]")
    assert prologue.jaxpr == ("{ lambda ; a:f32[64,128] b:f32[64,128]. let\n"
                              "    c:f32[64,128] = exp a\n"
                              "    d:f32[64,128] = add c b\n"
                              "  in (d,) }")
    assert (epilogue.role, epilogue.operand) == ("epilogue", "outputs")
    assert epilogue.jaxpr == ("{ lambda ; a:f32[64,128]. let b:f32[64,128] = max a 0.0:f32[] "
                              "in (b,) }")
    # capture() links the fused code to the user's lines, not where the kernel applies it.
    applied = line_ref("out_fn(pids, (), out_values, x_fn(pids, (), x_values)", KERNELS_TPU)
    assert applied not in _short(prologue.sources) + _short(epilogue.sources)
    # The kernel's own multiply by 2 is not fused code.
    assert all("mul" not in f.jaxpr for f in kernel.fusion.functions)


def test_fused_functions_point_at_the_users_lines_and_arrays(fused):
    _, kernel = fused
    prologue, epilogue = kernel.fusion.functions
    assert _short(prologue.sources) == [_line_of("y = jnp.exp(x) + b")]
    assert _short(epilogue.sources) == [_line_of("return jnp.maximum")]
    assert dict(kernel.fusion.operand_arrays) == {"args[0][0]": "x", "args[0][1]": "b"}
    labels = operand_labels(kernel)
    assert labels["args[0][0]"] == "x_value_refs[0] (args[0][0] = x)"
    assert labels["args[0][1]"] == "x_value_refs[1] (args[0][1] = b)"
    assert labels["outputs"] == "o_ref (outputs)"


def test_inspect_json_and_cli_lines(fused):
    _, kernel = fused
    data = kernel_json(inspect_kernel(kernel))
    assert data["fusion"]["operand_arrays"] == {"args[0][0]": "x", "args[0][1]": "b"}
    assert [(f["role"], f["operand"], f["sources"]) for f in data["fusion"]["functions"]] == [
        ("prologue", "args[0]", [_line_of("y = jnp.exp(x) + b")]),
        ("epilogue", "outputs", [_line_of("return jnp.maximum")]),
    ]
    assert "exp a" in data["fusion"]["functions"][0]["jaxpr"]
    assert fusion_lines(data["fusion"]) == [
        f"fused prologue -> args[0] from x, b: exp, add  ({_line_of('y = jnp.exp(x) + b')})",
        f"fused epilogue applied to outputs: max  ({_line_of('return jnp.maximum')})",
    ]


def test_overview_shows_what_was_fused(fused):
    cap, kernel = fused
    view = OverviewView(KernelContext(kernel=kernel, capture=cap))
    text = view.to_text()
    assert "Fused into this kernel:" in text
    assert f"prologue -> args[0]  ({_line_of('y = jnp.exp(x) + b')})" in text
    assert f"epilogue applied to outputs  ({_line_of('return jnp.maximum')})" in text
    assert "c:f32[64,128] = exp a" in text
    assert "x_value_refs[0] (args[0][0] = x)" in text
    html = view.to_html()
    assert "Fused into this kernel" in html and 'data-role="epilogue"' in html
    assert view.payload()["kernel"]["fusion"]["operand_arrays"]["args[0][1]"] == "b"


def test_a_kernel_the_fuser_did_not_build_has_no_fusion():
    fn, args = vector_add()[:2]
    cap = capture(fn, *args)
    assert all(k.fusion is None for k in cap)
    assert kernel_json(inspect_kernel(cap[0]))["fusion"] is None
    assert fuser_sources(fn, args, {}, cap.kernels) == cap.kernels
    assert "Fused into this kernel" not in OverviewView(KernelContext(kernel=cap[0])).to_text()


def test_interpret_matches_the_reference():
    from pallaslab.execute import compare

    fn, args = fused_scale_add()
    result = compare(fn, *args, executors="interpret,reference",
                     reference=CATALOG["fused_scale_add"].reference)
    (out,) = result.outputs
    (pair,) = out.pairs
    assert pair.allclose and pair.mismatched_elements == 0, pair


def _add_kernel(x_refs, y_refs, o_ref, *, x_fn, y_fn):
    pids = (pl.program_id(0),)
    x = x_fn(pids, (), jax.tree.map(lambda r: r[...], x_refs))
    y = y_fn(pids, (), jax.tree.map(lambda r: r[...], y_refs))
    o_ref[...] = x + y


@fuser.fusible
def _fusible_add(x: fuser.Fusion, y: fuser.Fusion, out: fuser.Fusion | None):
    """Adds two fused inputs; the consumer stays outside (applied to the kernel's result)."""
    spec = pl.BlockSpec((64, 128), lambda i: (i, 0))
    fns, specs, values = [], [], []
    for arg in (x, y):
        fn, vals, _ = fuser.get_fusion_values(arg)
        fn, (vspec,), _ = fuser.pull_block_spec(fn, spec, grid_len=1)(vals)
        fns.append(fn), specs.append(vspec), values.append(vals)
    result = pl.pallas_call(
        functools.partial(_add_kernel, x_fn=fns[0], y_fn=fns[1]),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 64,),
        in_specs=specs, out_specs=spec,
    )(*values)
    return result if out is None else out(result)


def test_two_prologues_each_named_after_its_arrays_and_an_epilogue_left_outside():
    @fuser.fuse
    def fn(a, w, c):
        left = jnp.tanh(a) * w
        right = jnp.sin(c)
        return _fusible_add(left, right) + 1.0

    args = (rand((128, 128)), rand((128, 128), seed=1), rand((128, 128), seed=2))
    cap = capture(jax.jit(fn), *args)
    (kernel,) = fuser_sources(jax.jit(fn), args, {}, cap.kernels)
    assert [(f.role, f.operand) for f in kernel.fusion.functions] == [
        ("prologue", "args[0]"), ("prologue", "args[1][0]")]  # `+ 1.0` runs after the kernel
    lines, first = inspect.getsourcelines(fn)
    at = {text: f"test_fuser.py:{first + next(i for i, s in enumerate(lines) if text in s)}"
          for text in ("jnp.tanh(a) * w", "jnp.sin(c)")}
    assert [_short(f.sources) for f in kernel.fusion.functions] == [
        [at["jnp.tanh(a) * w"]], [at["jnp.sin(c)"]]]
    assert "tanh" in kernel.fusion.functions[0].jaxpr and "mul" in kernel.fusion.functions[0].jaxpr
    assert "sin" in kernel.fusion.functions[1].jaxpr
    assert dict(kernel.fusion.operand_arrays) == {
        "args[0][0]": "a", "args[0][1]": "w", "args[1][0]": "c"}
