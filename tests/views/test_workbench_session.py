"""The workbench owns what its Compare and Step views share (`wb.session`): running both
leaves the frozen `Capture` as it was, and the contexts can be read as soon as it is made."""

from __future__ import annotations

import dataclasses

import pytest
from kernels import CATALOG, shifted_block_reference

import pallaslab
from pallaslab.views.compare import compare_workbench
from pallaslab.workbench import Workbench


def test_compare_and_step_leave_the_capture_as_it_was():
    fn, args = CATALOG["shifted_block_wrong"].case()
    wb = pallaslab.inspect(fn, *args)
    cap = wb.capture
    before = dict(cap.__dict__)
    view = compare_workbench(wb, executors=("interpret", "reference"),
                             reference=shifted_block_reference)
    step = wb.step()
    step.step(2)
    assert not view.comparison.passed and step.stepper.position == 2
    assert cap.__dict__.keys() == before.keys()
    assert all(cap.__dict__[k] is v for k, v in before.items())
    # the state is the workbench's, handed to every view in its context
    assert wb.session.comparison is view.comparison
    assert wb.context(0).session is wb.session and step.session is wb.session
    assert wb.session.step_views[0] is step
    with pytest.raises(dataclasses.FrozenInstanceError):
        cap.function_name = "other"  # type: ignore[misc]
    again = dataclasses.replace(cap)
    assert again == cap and again.__dict__.keys() == before.keys()


def test_a_second_workbench_on_the_same_capture_has_its_own_comparison():
    fn, args = CATALOG["shifted_block_wrong"].case()
    wb = pallaslab.inspect(fn, *args)
    compare_workbench(wb, executors=("interpret", "reference"),
                      reference=shifted_block_reference)
    other = Workbench(wb.capture)
    assert other.session.comparison is None
    assert "compare" not in [t.name for t in other.tabs()]


def test_the_contexts_are_readable_at_once_with_the_call_the_workbench_was_made_with():
    fn, args = CATALOG["shifted_block_wrong"].case()
    call = (fn, tuple(args), {})
    wb = Workbench(pallaslab.capture(fn, *args), call=call)
    (ctx,) = wb.contexts  # read first, before any view
    assert ctx.session is wb.session and wb.session.call is call
    assert wb.session.call_args() is call and wb.session.workbench is wb
