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
from pallaslab.util.text import visible
from pallaslab.views import _html
from pallaslab.views._html import esc, visible_payload
from pallaslab.views.base import View
from pallaslab.views.context import KernelContext
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

    def to_text(self) -> str:
        p = self._payload()
        k = p["kernel"]
        lines = [f"Kernel {self.ctx.kernel.index}: {k['name']}  ({k['source'] or '?'})",
                 f"  grid {_grid(k['grid'])} = {_programs(k['programs'])} programs; semantics: "
                 f"{', '.join(k['dimension_semantics'] or []) or '-'}; backend: "
                 f"{k['backend'] or 'unspecified'}"]
        for op in k["operands"]:
            lines.append(f"  {op['label']:<12} {op['role']:<7} {op['dtype']}{op['shape']} "
                         f"block {_html.shape(op['block_shape'])} {op['memory_space']} "
                         f"fetches {_html.num(op['fetches'])}")
        if p["devices_note"]:
            lines.append(f"  note: {p['devices_note']}")
        lines += fused_text(k["fusion"])
        lines += [f"  {f['severity']} {f['code']}: {f['message']}" for f in k["findings"]]
        if not k["findings"]:
            lines.append("  no findings")
        return visible("\n".join(lines))

    def to_html(self) -> str:
        p = self._payload()
        k = p["kernel"]
        facts = [("source", k["source"] or "?"), ("call site", k["call_site"] or "?"),
                 ("grid", f"{_grid(k['grid'])} = {_html.num(k['programs'])} programs"),
                 ("semantics", ", ".join(k["dimension_semantics"] or []) or "-"),
                 ("backend", k["backend"] or "unspecified"),
                 ("inside", " > ".join(k["context"]) or "-")]
        dl = "".join(f"<dt>{esc(a)}</dt><dd>{esc(b)}</dd>" for a, b in facts)
        ops = _html.table(
            ("operand", "role", "shape", "dtype", "block", "memory", "buffers", "fetches",
             "HBM bytes"),
            [(o["label"], o["role"], _html.shape(o["shape"]), o["dtype"],
              _html.shape(o["block_shape"]), o["memory_space"], _html.num(o["buffer_count"]),
              _html.num(o["fetches"]), _html.num(o["hbm_bytes"])) for o in k["operands"]],
            numeric=(6, 7, 8))
        note = "".join(f'<p class="pl-dim"{attr}>{esc(text)}</p>' for text, attr in (
            (p["note"], ""), (p["devices_note"], ' data-role="devices-note"')) if text)
        return (f'<h3 class="pl-title">Kernel {self.ctx.kernel.index}: <code>{esc(k["name"])}'
                f'</code></h3><dl class="pl-facts">{dl}</dl>{note}{ops}'
                + fused_html(k["fusion"]) + _html.findings_list(self.ctx.findings))


FUSED_TITLE = "Fused into this kernel"


def _fused_heading(f: Mapping[str, Any]) -> str:
    """"prologue -> args[0] (kernels_tpu.py:389)": what the function feeds or is applied to."""
    arrow = "->" if f["role"] == "prologue" else "applied to"
    return f"{f['role']} {arrow} {f['operand']}  ({', '.join(f['sources']) or '?'})"


def fused_text(fusion: Mapping[str, Any] | None) -> list[str]:
    """The functions `fuser.fuse` pulled into the kernel, each with its jaxpr, as text."""
    if not fusion:
        return []
    lines = [f"  {FUSED_TITLE}:"]
    for f in fusion["functions"]:
        lines.append(f"    {_fused_heading(f)}")
        lines += [f"      {line}" for line in f["jaxpr"].splitlines()]
    return lines


def fused_html(fusion: Mapping[str, Any] | None) -> str:
    if not fusion:
        return ""
    items = "".join(
        f'<li data-role="{esc(f["role"])}"><span class="pl-badge">{esc(f["role"])}</span> '
        f'{esc(_fused_heading(f).split(" ", 1)[1])}<pre class="pl-mono">{esc(f["jaxpr"])}'
        "</pre></li>" for f in fusion["functions"])
    return (f'<div class="pl-fusion"><div class="pl-title">{FUSED_TITLE}</div>'
            f'<ul class="pl-findings">{items}</ul></div>')


def _programs(programs: int | None) -> str:
    return "?" if programs is None else f"{programs:,}"  # 0 is an empty grid, not unknown


def _grid(grid: list[int | None]) -> str:
    return " x ".join("?" if g is None else str(g) for g in grid) or "()"


register_tab("overview", order=10, title="Overview", build=OverviewView)
