"""`pallaslab inspect CASE... [--json]`: grid, operands, fetches and findings of every kernel.

Its imports of the analyses (and so of JAX) wait until it runs: `pallaslab --help` and usage
errors do not pay for them.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import TYPE_CHECKING

from pallaslab.cases import capture_case, load_case
from pallaslab.cli._many import CaseOutcome, run_cases
from pallaslab.cli._shared import (
    CASES_HELP,
    EXIT_OK,
    chip_name,
    console,
    device_count,
    safe,
    simulate_cpu_devices,
)

if TYPE_CHECKING:
    from pallaslab.analysis.inspection import KernelInspection

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show the grid, BlockSpecs, fetches and findings",
                       description="Show the grid, BlockSpecs, fetches, VMEM and findings of "
                                   "every kernel a case launches.")
    p.add_argument("cases", nargs="+", metavar="CASE", help=CASES_HELP)
    p.add_argument("--json", action="store_true", help="print the stable JSON form (several "
                   "cases: {\"cases\": [...]})")
    p.add_argument("--chip", action="append", default=None, metavar="CHIP", type=chip_name,
                   help="TPU chip for the VMEM section (repeatable; default v5e and v6e)")
    p.add_argument("--devices", type=device_count, default=None, metavar="N",
                   help="trace the case on N simulated CPU devices (kernels inside shard_map "
                        "as N chips run them)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.devices:
        simulate_cpu_devices(args.devices)
    return run_cases(args.cases, args.json, lambda spec: inspect_case(spec, args))


def inspect_case(spec: str, args: argparse.Namespace) -> CaseOutcome:
    from pallaslab.analysis.inspection import capture_json, inspect_capture
    from pallaslab.analysis.occupancy import DEFAULT_CHIPS

    case = load_case(spec)
    if args.chip:
        # The first --chip is also the abstract TPU for kernels whose tracing asks the chip
        # (capture's own `chip` keyword, handed through the case's keyword arguments).
        case = dataclasses.replace(case, kwargs={**case.kwargs, "chip": args.chip[0]})
    cap = capture_case(case)
    inspections = inspect_capture(cap, chips=args.chip or DEFAULT_CHIPS)
    if not args.json:
        out = console()
        for note in cap.notes:
            out.print(f"[dim]{safe(note)}[/]")
        for insp in inspections:
            render(insp, out)
    return CaseOutcome(EXIT_OK, capture_json(inspections))


def render(insp: KernelInspection, out) -> None:
    """Human-readable: a header, the operand table and the findings of one kernel."""
    from rich.table import Table

    from pallaslab.analysis.inspection import kernel_json
    from pallaslab.analysis.occupancy import spill_note

    data = kernel_json(insp)
    grid = " x ".join("?" if g is None else str(g) for g in data["grid"]) or "()"
    semantics = safe(", ".join(data["dimension_semantics"] or []) or "-")
    where = data["source"] or "?"
    context = f"  [dim]inside {safe(' > '.join(data['context']))}[/]" if data["context"] else ""
    out.print(f"[bold]kernel {insp.kernel.index}: {safe(data['name'])}[/]  "
              f"[dim]{safe(where)}[/]{context}")
    programs = "?" if data["programs"] is None else f"{data['programs']:,}"
    out.print(f"  grid {grid} = {programs} programs   semantics: {semantics}   "
              f"backend: {data['backend'] or 'unspecified'}")
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for col in ("operand", "role", "shape", "dtype", "block", "memory", "bufs", "fetches",
                "HBM bytes"):
        table.add_column(col, justify="right" if col in ("fetches", "HBM bytes", "bufs")
                         else "left")
    arrays = (data["fusion"] or {}).get("operand_arrays", {})
    for op in data["operands"]:
        origin = f"{op['origin']} = {arrays[op['origin']]}" if op["origin"] in arrays \
            else op["origin"]
        table.add_row(
            safe(f"{op['param']} ({origin})" if op["param"] else origin),
            op["role"] + (" (prefetch)" if op["scalar_prefetch"] else ""),
            _shape(op["shape"]), op["dtype"],
            _shape(op["block_shape"]) if op["block_shape"] is not None else "-",
            safe(op["memory_space"]), _num(op.get("buffers")), _num(op["fetches"]),
            _num(op["hbm_bytes"]),
        )
    out.print(table)
    if data["traced_for_chip"]:
        why = ("a SparseCore kernel, traced for a chip with SparseCores"
               if data["mesh"] and "Subcore" in data["mesh"]["kind"]
               else "its tracing asks the chip")
        out.print(f"  [dim]traced under an abstract TPU {safe(data['traced_for_chip'])} "
                  f"({why}; no TPU attached)[/]")
    for line in nested_lines(data):
        out.print(f"  {safe(line)}")
    for line in fusion_lines(data["fusion"]):
        out.print(f"  {safe(line)}")
    for target, v in data["vmem"].items():
        style = "green" if v["fits"] else "bold red"
        out.print(f"  VMEM on {target}: [{style}]{v['bytes'] / 1024:,.0f} KiB of "
                  f"{v['limit'] / 1024:,.0f} KiB[/]")
    if data["vmem"] and (note := spill_note(insp.kernel)):
        out.print(f"  [dim]note: {safe(note)}[/]")
    if not insp.findings:
        out.print("  [green]no findings[/]")
    for f in insp.findings:
        out.print(f"  [{SEVERITY_STYLE[f.severity]}]{f.severity} {f.code}[/]: {safe(f.message)}")
    out.print()


def nested_lines(data: dict) -> list[str]:
    """Briefly, what the kernel body does beyond its BlockSpecs: each nested pipeline (grid and
    operand windows), run_scoped buffers and manual DMAs."""
    lines = []
    for p in data["pipelines"]:
        grid = " x ".join("?" if g is None else str(g) for g in p["grid"]) or "()"
        lines.append(f"pipeline {p['name']} ({p['call_site'] or '?'}): grid {grid}")
        for op in p["operands"]:
            block = _shape(op["block_shape"]) if op["block_shape"] is not None else "-"
            fetches = f", {op['fetches']:,} fetches" if op["fetches"] is not None else ""
            lines.append(f"  {op['param'] or op['origin']} ({op['origin']}): block {block} "
                         f"of {op['outer'] or '?'} {_shape(op['shape'])}, "
                         f"{op['memory_space']}, {_num(op['buffer_count'])} buffers{fetches}")
    for op in data["scoped"]:
        name = f"{op['param']} ({op['origin']})" if op["param"] else op["origin"]
        lines.append(f"scoped {name}: {_shape(op['shape'])} {op['dtype']} "
                     f"{op['memory_space']}")
    for d in data["dmas"]:
        sem = f" on {d['semaphore']}" if d["semaphore"] else ""
        loop = " (in a loop)" if d["repeated"] else ""
        size = "size known only at run time" if d["bytes"] is None else f"{d['bytes']:,} B"
        lines.append(f"{d['kind']} DMA {d['src']} ({d['src_memory_space']}) -> {d['dst']} "
                     f"({d['dst_memory_space']}): {_shape(d['shape'])} {d['dtype']}, "
                     f"{size}{sem}{loop}  ({d['source'] or '?'})")
    return lines


def fusion_lines(fusion: dict | None) -> list[str]:
    """One line per function `fuser.fuse` pulled into the kernel: role, the operand it feeds
    (prologue) or is applied to (epilogue), the user's arrays, its primitives, its lines."""
    if not fusion:
        return []
    lines = []
    for f in fusion["functions"]:
        arrays = [name for origin, name in fusion["operand_arrays"].items()
                  if origin == f["operand"] or origin.startswith(f["operand"] + "[")]
        reads = f" from {', '.join(arrays)}" if arrays else ""
        arrow = "->" if f["role"] == "prologue" else "applied to"
        prims = ", ".join(_PRIMITIVE.findall(f["jaxpr"])) or "-"
        where = ", ".join(f["sources"]) or "?"
        lines.append(f"fused {f['role']} {arrow} {f['operand']}{reads}: {prims}  ({where})")
    return lines


_PRIMITIVE = re.compile(r"= ([a-z_][\w]*)")


def _shape(shape: list) -> str:
    return str(tuple(shape))


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
