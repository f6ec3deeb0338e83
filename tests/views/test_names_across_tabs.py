"""One name for one thing across the tabs (issue 39 item 4): a source line and a semaphore
read the same in Step, Devices and Pipeline; an output's heading in Compare reads right for any
output name; a `*args` body's refs are named as its code names them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cloudpickle
import jax
import jax.numpy as jnp
import kernels_multi
import pytest
from catalog import rand
from compared import explained, wrong_comparison
from helpers import line_ref
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from kernels_multi import ANY, SHARD, _on_devices

import pallaslab
from pallaslab.util.names import ref_name
from pallaslab.views.base import SAVED_CLASS, saved_fragment
from pallaslab.views.compare import CompareView
from pallaslab.views.step_devices import DeviceStepView
from pallaslab.workbench import Workbench

DEVICES = 4


def gather(x):
    """The ring all-gather with its body's own parameter names (local_sem, send_sem, ...)."""
    n = jax.device_count()

    def kernel(shard):
        return pl.pallas_call(
            kernels_multi._all_gather_body,
            out_shape=jax.ShapeDtypeStruct((n, *shard.shape), shard.dtype),
            grid=(n - 1,), in_specs=[ANY], out_specs=ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.DMA((n - 1,))])(shard)

    return _on_devices(kernel)(x)


@pytest.fixture(scope="module")
def tabs():
    # Sent to the worker by value, as a notebook's kernel is: its lines come back as
    # "<dynamic-code>:N" there, and every tab must still name them as the user's file does.
    for module in (kernels_multi, sys.modules[__name__]):
        cloudpickle.register_pickle_by_value(module)
    args = (rand((DEVICES * SHARD[0], SHARD[1])),)
    wb = Workbench(pallaslab.capture(gather, *args), options={"devices": DEVICES})
    step = wb.step()
    assert isinstance(step, DeviceStepView)
    try:
        result = pallaslab.run(gather, *args, devices=DEVICES)
        step.run()
        yield (step._payload(live=True), wb.view("devices", result=result).payload(),
               wb.view("pipeline", result=result).payload(), step.to_text())
    finally:
        step.close()
        for module in (kernels_multi, sys.modules[__name__]):
            cloudpickle.unregister_pickle_by_value(module)


def test_step_devices_and_pipeline_name_a_line_as_the_users_file(tabs):
    step, devices, pipeline, text = tabs
    local = line_ref("local.start()", kernels_multi.__file__)
    assert {s["source"] for s in step["semaphores"]} == \
        {s["source"] for s in devices["semaphores"]} >= {local}
    assert {t["source"] for t in step["transfers"]} == {t["source"] for t in devices["transfers"]}
    assert {o["source"] for o in pipeline["recorded"]["ops"]} >= {local}
    assert "<dynamic-code>" not in text and local in text  # a landed DMA's source column


def test_step_devices_and_pipeline_name_a_semaphore_by_the_bodys_parameter(tabs):
    step, devices, pipeline, _ = tabs
    named = {"local_sem (scratch[0])", "send_sem (scratch[1])", "recv_sems[0] (scratch[2][0])"}
    assert {s["name"] for s in step["semaphores"]} == {s["name"] for s in devices["semaphores"]}
    assert {s["name"] for s in devices["semaphores"]} >= named
    recorded = {o["semaphore_name"] for o in pipeline["recorded"]["ops"]} - {None}
    assert recorded >= named
    assert {o["semaphore"] for o in pipeline["manual"]} == {
        "local_sem (scratch[0])", "send_sem (scratch[1])", "recv_sems (scratch[2])"}


def test_a_star_args_body_names_its_refs_as_its_code_does():
    assert ref_name("*args[0]", "args[1]") == "args[0]"
    assert ref_name("*args[0]", "args[1] = x") == "args[0]"
    assert ref_name("*refs[2]", "scratch[0]") == "refs[2] (scratch[0])"
    assert ref_name("x_ref", "args[0]", "any") == "x_ref (args[0], any)"

    def body(*args):
        args[1][...] = args[0][...] * 2.0

    x = jnp.ones((16, 128), jnp.float32)
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    cap = pallaslab.capture(lambda a: pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,), in_specs=[spec],
        out_specs=spec, interpret=True)(a), x)
    text = Workbench(cap).to_text()
    assert "*args" not in text and "args[0]" in text


def test_tutorial_01_calls_an_output_block_kept_in_vmem_by_the_grids_word():
    """The prose names the Grid's copy badge as the badge reads: "in VMEM" for an output block
    the reduction keeps, "revisit" for an input's."""
    tests = Path(__file__).resolve().parents[1]
    badges = (tests.parent / "pallaslab/views/static/grid_overlays.js").read_text()
    assert 'output ? "in VMEM" : "revisit"' in badges
    cells = json.loads((tests.parent / "notebooks/01_grids_and_blockspecs.ipynb").read_text())
    prose = " ".join("".join(c["source"]) for c in cells["cells"] if c["cell_type"] == "markdown")
    prose = " ".join(prose.split())
    assert "the output's block shows *in VMEM* while `kk` advances" in prose
    assert "output shows *revisit*" not in prose


def test_a_static_compare_says_the_verdict_then_why_before_its_tables():
    """A saved notebook's copy is read top down: the diagnosis opens it, headed by the output's
    name as code (an output called `outputs` reads "Why output `outputs` is wrong")."""
    wb, view, _ = wrong_comparison()
    html = CompareView(wb.context(0), explained(view.comparison)).to_html()
    why = html.index('<h4 class="pl-cmp-h">Why output <code>outputs</code> is wrong</h4>')
    assert html.index("pl-cmp-verdict") < why < html.index('class="pl-table pl-cmp-runs"')
    assert why < html.index(">max abs err</th>")


def test_the_saved_copy_is_not_scrolled_into_notebook_7s_short_box():
    assert (f".jp-CodeCell.jp-mod-outputsScrolled .jp-Cell-outputArea:has(.{SAVED_CLASS})"
            " { max-height: none; overflow-y: visible; }") in saved_fragment("<p>copy</p>")


def _doubling(x_ref, o_ref):
    y = x_ref[...] * 2.0
    o_ref[...] = y + 1.0


def _doubled(x):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_doubling, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(2,), in_specs=[spec], out_specs=spec, interpret=True)(x)


def test_single_device_step_names_a_body_line_sent_by_value_as_the_users_file():
    """A notebook's body runs in the worker as "<dynamic-code>": the Step table's equation
    lines read as the user's file names them (as Devices does), even for a line no DMA or
    semaphore shares."""
    from pallaslab.model._jax.stepper import EquationValue
    from pallaslab.views.step import equation_entry

    kernel = pallaslab.capture(_doubled, jnp.ones((16, 128), jnp.float32)).kernels[0]
    line = line_ref("o_ref[...] = y + 1.0", __file__)
    n = line.rpartition(":")[2]
    eq = EquationValue(index=0, primitive="add", text="c = add b 1.0",
                       source=f"<dynamic-code>:{n}", outputs=())
    assert equation_entry(eq, kernel)["source"] == line
    assert equation_entry(eq)["source"] == f"<dynamic-code>:{n}"  # no kernel: not guessed
    outside = EquationValue(index=0, primitive="add", text="", source="<dynamic-code>:1",
                            outputs=())
    assert equation_entry(outside, kernel)["source"] == "<dynamic-code>:1"  # not the body's


def test_the_grid_names_its_kernel_and_nested_pipelines_through_the_shared_names():
    from pallaslab.views import grid

    kernel = pallaslab.capture(_doubled, jnp.ones((16, 128), jnp.float32)).kernels[0]
    assert grid.empty_grid_payload(kernel)["source"] == line_ref("def _doubling", __file__)
    body = Path(grid.__file__).read_text()
    assert "short_source" not in body and "source_name(" in body
