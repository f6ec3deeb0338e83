"""Names people know: the kernel's own parameter names (`x_ref`) beside Pallas's origins
(`args[0]`) in the capture, `inspect --json`, the CLI table and every view; the caller's
argument expressions (`x`, `w.T`) where the magic knows them (issue 10, deliver item 4)."""

from __future__ import annotations

import json
import re

import jax
import pytest
from kernels import CATALOG, matmul, rand

import pallaslab
from pallaslab.analysis.inspection import caller_names, operand_labels
from pallaslab.cli import main
from pallaslab.workbench import Workbench

MATMUL_PARAMS = {"args[0]": "x_ref", "args[1]": "y_ref", "outputs": "o_ref",
                 "scratch[0]": "acc_ref"}


def params(kernel):
    return {op.origin: op.param for op in kernel.operands}


def test_capture_names_every_operand_by_the_kernels_own_parameter():
    fn, args = CATALOG["matmul_f32"].case()
    (k,) = pallaslab.capture(fn, *args)
    assert params(k) == MATMUL_PARAMS  # inputs, output and scratch


def test_scalar_prefetch_operands_are_named_too():
    fn, args = CATALOG["scalar_prefetch_gather"].case()
    (k,) = pallaslab.capture(fn, *args)
    assert params(k) == {"args[0]": "idx_ref", "args[1]": "x_ref", "outputs": "o_ref"}
    assert k.operands[0].scalar_prefetch


def _first_plus_rest(x_ref, *refs):  # JAX's flash attention takes its refs this way
    y_ref, o_ref = refs
    o_ref[...] = x_ref[...] + y_ref[...]


def test_elements_of_star_args_are_not_taken_for_pallas_origins():
    from jax.experimental import pallas as pl

    x = rand((8, 128))
    (k,) = pallaslab.capture(pl.pallas_call(_first_plus_rest, out_shape=x), x, x)
    assert params(k) == {"args[0]": "x_ref", "args[1]": "*refs[0]", "outputs": "*refs[1]"}
    assert operand_labels(k)["args[1]"] == "refs[0] (args[1])"


def test_every_catalog_kernel_names_its_operands():
    for name, entry in CATALOG.items():
        fn, args = entry.case()[:2]
        for k in pallaslab.capture(fn, *args):
            if k.kind == "pallas_call":
                assert all(op.param for op in k.operands), (name, params(k))


def test_operand_param_defaults_to_none():
    from pallaslab.model import Operand

    op = Operand(origin="args[0]", role="input", shape=(8,), dtype=rand((1,)).dtype,
                 memory_space="vmem")
    assert op.param is None
    assert operand_labels(_Kernel((op,))) == {"args[0]": "args[0]"}


class _Kernel:
    def __init__(self, operands):
        self.operands = operands
        self.fusion = None


def test_inspect_json_has_param_per_operand(capsys):
    assert main(["inspect", "tests/kernels.py:matmul_f32", "--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert {op["origin"]: op["param"] for op in k["operands"]} == MATMUL_PARAMS


def test_inspect_table_shows_param_beside_origin(capsys):
    assert main(["inspect", "tests/kernels.py:matmul_f32"]) == 0
    out = capsys.readouterr().out
    assert "x_ref (args[0])" in out and "acc_ref (scratch[0])" in out


def test_views_label_operands_param_then_origin():
    fn, args = CATALOG["matmul_f32"].case()
    wb = pallaslab.inspect(fn, *args)
    grid = wb.grid().payload()
    assert [(o["origin"], o["param"], o["label"]) for o in grid["operands"]] == [
        ("args[0]", "x_ref", "x_ref (args[0])"), ("args[1]", "y_ref", "y_ref (args[1])"),
        ("outputs", "o_ref", "o_ref (outputs)")]
    assert "x_ref (args[0])" in wb.grid().to_text() and "x_ref (args[0])" in wb.grid().to_html()
    ov = wb.overview()
    labels = [o["label"] for o in ov.payload()["kernel"]["operands"]]
    assert labels == ["x_ref (args[0])", "y_ref (args[1])", "o_ref (outputs)",
                      "acc_ref (scratch[0])"]
    assert "acc_ref (scratch[0])" in ov.to_text() and "acc_ref (scratch[0])" in ov.to_html()


def test_step_view_labels_blocks():
    from pallaslab.views.step import step_payload

    fn, args = CATALOG["shifted_block_wrong"].case()
    wb = Workbench(pallaslab.capture(fn, *args), options={"arg_names": ["x"]})
    ctx = wb.context(0)
    st = pallaslab.step(fn, *args)
    st.step()
    p = step_payload(ctx.kernel, ctx.tiling, position=st.position, blocks=st.blocks(),
                     callers=caller_names(ctx.capture, ctx.kernel, ["x"]))
    by = {b["origin"]: b for b in p["blocks"]}
    assert by["args[0]"]["param"] == "x_ref"
    assert by["args[0]"]["label"] == "x_ref (args[0] = x)"
    assert by["outputs"]["label"] == "o_ref (outputs)"


def test_caller_expressions_label_inputs_that_are_call_arguments():
    x, w = rand((512, 256)), rand((256, 384), seed=1)
    wb = Workbench(pallaslab.capture(matmul, x, w), options={"arg_names": ["x", "w.T"]})
    labels = {o["origin"]: o["label"] for o in wb.grid().payload()["operands"]}
    assert labels == {"args[0]": "x_ref (args[0] = x)", "args[1]": "y_ref (args[1] = w.T)",
                      "outputs": "o_ref (outputs)"}
    ops = wb.overview().payload()["kernel"]["operands"]
    assert [o["argument"] for o in ops] == ["x", "w.T", None, None]
    assert "y_ref (args[1] = w.T)" in wb.overview().to_text()


def test_caller_expressions_skip_literals_held_as_static_arguments():
    x, w = rand((512, 256)), rand((256, 384), seed=1)

    def f(a, bm, b):
        return matmul(a, b, bm=bm)

    cap = pallaslab.capture(f, x, 128, w)
    assert caller_names(cap, cap[0], ["x", "128", "w"]) == {"args[0]": "x", "args[1]": "w"}


@pytest.mark.parametrize("names", [None, [], ["only_one"], ["a", "b", "c"]])
def test_caller_expressions_are_skipped_when_unknown_or_ambiguous(names):
    x, w = rand((512, 256)), rand((256, 384), seed=1)
    cap = pallaslab.capture(matmul, x, w)
    assert caller_names(cap, cap[0], names) == {}


def test_a_computed_input_gets_no_caller_expression_through_jit():
    x, w = rand((512, 256)), rand((256, 384), seed=1)
    cap = pallaslab.capture(jax.jit(lambda a, b: matmul(a * 2, b)), x, w)
    assert caller_names(cap, cap[0], ["x", "w"]) == {"args[1]": "w"}


def test_pytree_arguments_name_nothing_they_cannot_pin_down():
    x, w = rand((512, 256)), rand((256, 384), seed=1)
    cap = pallaslab.capture(lambda p, b: matmul(p["x"], b), {"x": x, "y": x}, w)
    assert caller_names(cap, cap[0], ["params", "w"]) == {"args[1]": "w"}


def test_step_text_and_html_name_the_parameters():
    from pallaslab.views.step import StepView

    fn, args = CATALOG["shifted_block_wrong"].case()
    wb = Workbench(pallaslab.capture(fn, *args), options={"arg_names": ["x"]})
    view = StepView(wb.context(0))
    view.step()
    assert re.search(r"^ +x_ref \(args\[0\] = x\) +input ", view.to_text(), re.M)
    assert re.search(r"^ +o_ref \(outputs\) +output ", view.to_text(), re.M)
    assert "x_ref (args[0] = x)" in view.to_html()
