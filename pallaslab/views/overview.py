"""The Overview view: what the kernel is, its operands, and every finding."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypedDict

from pallaslab.analysis.inspection import (
    KernelInspection,
    caller_names,
    kernel_json,
    operand_labels,
)
from pallaslab.views._html import visible_payload
from pallaslab.views.base import View
from pallaslab.views.context import KernelContext
from pallaslab.views.overview_tree import overview_tree
from pallaslab.views.parts import Section, to_html, to_text
from pallaslab.views.registry import register_tab


class OverviewPayload(TypedDict):
    kernel: dict[str, Any]  # the `inspect --json` kernel object (docs/architecture.md)
    compiler_params: dict[str, dict[str, str]]
    cost: dict[str, int] | None
    note: str | None  # why there is no grid view, when there is none
    # the workbench was opened with devices=N but the kernel was traced here on fewer devices
    devices_note: str | None


def overview_payload(insp: KernelInspection, note: str | None = None,
                     callers: Mapping[str, str] | None = None,
                     devices_note: str | None = None) -> OverviewPayload:
    """`callers`: input origin -> the caller's expression for it (see `caller_names`)."""
    k = insp.kernel
    cost = None
    if k.cost_estimate is not None:
        c = k.cost_estimate
        cost = {"flops": c.flops, "transcendentals": c.transcendentals,
                "bytes_accessed": c.bytes_accessed}
    # Unset fields (None / False) are noise: show what the kernel author (or Pallas) chose.
    params = {backend: {name: repr(value) for name, value in fields.items()
                        if value is not None and value is not False}
              for backend, fields in k.compiler_params.items()}
    kernel = kernel_json(insp)
    labels = operand_labels(k, callers)
    for op in kernel["operands"]:
        op["label"] = labels[op["origin"]]  # "x_ref (args[0] = x)": what the views show
        op["argument"] = (callers or {}).get(op["origin"])
    return visible_payload(OverviewPayload(
        kernel={**kernel, "index": k.index}, compiler_params=params, cost=cost, note=note,
        devices_note=devices_note))


def traced_devices_note(ctx: KernelContext) -> str | None:
    """Which trace the tabs describe, for a kernel inside shard_map in a workbench opened with
    `devices=N`: the one on N simulated devices (the run of the Step and Devices tabs), or,
    when that trace could not be made, this process's on fewer devices, and why."""
    if (traced := ctx.devices_traced) is not None:
        return (f"traced on {traced} simulated devices (in the worker process that runs "
                "them): this grid and these shapes are each device's, the kernel the Step and "
                "Devices tabs run")
    mesh = ctx.kernel.device_mesh
    asked = ctx.options.get("devices")
    if mesh is None or not asked:
        return None
    here = math.prod(size for _, size in mesh.axes)
    if here == int(asked):
        return None
    why = f" ({ctx.devices_trace_error})" if ctx.devices_trace_error else ""
    return (f"traced in this process on {here} device(s){why}: this grid and these shapes are "
            f"that trace's; the Step and Devices tabs run the kernel on {asked} simulated "
            "devices, where its grid and shards may differ (`pallaslab inspect CASE --devices "
            f"{asked}` traces it on {asked})")


class OverviewView(View):
    """Kernel facts, the operand table and the findings."""

    name = "overview"
    module = "overview.js"

    def __init__(self, ctx: KernelContext):
        self.ctx = ctx

    def _payload(self) -> OverviewPayload:
        from pallaslab.analysis.tiling import tiling_unavailable_reason

        ctx = self.ctx
        callers = caller_names(ctx.capture, ctx.kernel, ctx.options.get("arg_names"))
        return overview_payload(ctx.inspection, tiling_unavailable_reason(ctx.kernel), callers,
                                traced_devices_note(ctx))

    def payload(self) -> dict[str, Any]:
        return dict(self._payload())

    def tree(self) -> Section:
        """The kernel as one tree (`overview_tree`): what the text and HTML forms render."""
        p = self._payload()
        return overview_tree(p["kernel"], self.ctx.kernel.index, note=p["note"],
                             devices_note=p["devices_note"])

    def to_text(self) -> str:
        return to_text(self.tree())

    def to_html(self) -> str:
        return to_html(self.tree())


register_tab("overview", order=10, title="Overview", build=OverviewView)
