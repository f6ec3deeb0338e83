"""The Workbench API: `pallaslab.inspect(fn, *args, **kwargs)`."""

from __future__ import annotations

import pytest
from kernels import CATALOG, matmul, rand

import pallaslab
from pallaslab.workbench import Workbench, WorkbenchError


def test_inspect_opens_a_workbench_over_every_kernel():
    fn, args = CATALOG["two_kernels"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    assert [k.name for k in wb.kernels] == ["matmul_kernel", "softmax_kernel"]
    assert wb.grid(1).ctx.kernel.name == "softmax_kernel"
    assert wb.grid("softmax_kernel") is wb.grid(1)  # views are built once
    assert wb.overview().ctx.kernel.index == 0
    assert repr(wb).startswith("<Workbench ")


def test_static_arguments_such_as_interpret_are_held_static():
    wb = pallaslab.inspect(matmul, rand((256, 256)), rand((256, 128), seed=1), bm=64,
                           interpret=True)
    assert wb.kernels[0].grid == (4, 1, 2)


def test_findings_of_all_kernels():
    fn, args = CATALOG["uncovered_output"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    assert [f.code for f in wb.findings] == ["uncovered-output"]
    assert "uncovered-output" in wb.to_text()


def test_options_are_checked_with_clear_messages():
    fn, args = CATALOG["matmul_f32"].case()[:2]
    cap = pallaslab.capture(fn, *args)
    with pytest.raises(WorkbenchError, match="unknown tab 'memry': the tabs are overview, grid"):
        Workbench(cap, tab="memry")
    with pytest.raises(WorkbenchError, match="unknown target 'tpu-v9'"):
        Workbench(cap, targets=["tpu-v9"])
    with pytest.raises(WorkbenchError, match="unknown TPU chip 'v1'"):
        Workbench(cap, chips=["v1"])
    with pytest.raises(WorkbenchError, match=r"no kernel 3 in this workbench; it shows: \[0\]"):
        Workbench(cap).grid(3)
    with pytest.raises(AttributeError):
        Workbench(cap).nonexistent  # noqa: B018


def test_targets_choose_the_rules():
    fn, args = CATALOG["reduction_revisited_output"].case()[:2]
    cap = pallaslab.capture(fn, *args)
    assert not Workbench(cap, targets=["tpu-v5e"]).findings
    gpu = Workbench(cap, targets=["gpu-h100"]).findings
    assert "parallel-write-conflict" in [f.code for f in gpu]


def test_widget_is_a_tab_per_kernel_built_lazily():
    pytest.importorskip("anywidget")
    fn, args = CATALOG["two_kernels"].case()[:2]
    wb = Workbench(pallaslab.capture(fn, *args), tab="overview")
    box = wb.widget
    assert len(box.children) == 2
    header, tabs = box.children[0].children
    assert "matmul_kernel" in header.value
    assert tabs.titles[:2] == ("Overview", "Grid")
    assert tabs.selected_index == 0
    assert tabs.children[0].children and not any(c.children for c in tabs.children[1:])
    tabs.selected_index = 1
    grid_widget = tabs.children[1].children[0]
    assert grid_widget.payload["kernel"] == "matmul_kernel"
    bundle = wb._repr_mimebundle_()
    assert {"text/plain", "text/html", "application/vnd.jupyter.widget-view+json"} <= set(bundle)


def test_grid_widget_sends_tables_as_binary_buffers():
    pytest.importorskip("anywidget")
    from ipywidgets.widgets.widget import _remove_buffers

    fn, args = CATALOG["scalar_prefetch_gather"].case()[:2]
    widget = pallaslab.inspect(fn, *args).grid().widget
    _state, paths, buffers = _remove_buffers(widget.get_state())
    assert ["payload", "tables", 0] in paths
    assert bytes(buffers[paths.index(["payload", "tables", 0])]) == \
        bytes(memoryview(__import__("numpy").array([3, 1, 2, 0, 3, 3], "<i4")))


def test_view_options_reach_the_tab_builder():
    from kernels import CATALOG, shifted_block_reference

    import pallaslab

    fn, args = CATALOG["shifted_block_wrong"].case()
    wb = pallaslab.inspect(fn, *args)
    low = wb.lowering(target="gpu-h100")
    assert "gpu-h100" in low.to_text()
    cmp = wb.compare(executors=["interpret", "reference"], reference=shifted_block_reference)
    assert "(2,)" in cmp.to_text()
    assert wb.compare() is cmp  # the latest view is the one the tab shows


def test_profile_puts_the_measured_timeline_beside_the_model():
    from kernels import CATALOG

    import pallaslab

    fn, args = CATALOG["matmul_f32"].case()
    view = pallaslab.inspect(fn, *args).profile()
    assert view.name == "pipeline"
    assert "measured" in view.to_text().lower()
