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
    from pallaslab.views.parts import Part

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
    """Human-readable: the Overview's tree of one kernel, with the VMEM it needs per chip and
    what its body does beyond its BlockSpecs."""
    from pallaslab.analysis.inspection import kernel_json, operand_labels
    from pallaslab.cli._parts import to_rich
    from pallaslab.views.overview_tree import overview_tree

    data = kernel_json(insp)
    labels = operand_labels(insp.kernel)
    for op in data["operands"]:
        op["label"] = labels[op["origin"]]
    out.print(to_rich(overview_tree(data, insp.kernel.index, details=details(insp, data),
                                    jaxprs=False)))
    out.print()


def details(insp: KernelInspection, data: dict) -> list[Part]:
    """What the terminal adds to the Overview: the abstract chip it traced under, nested
    pipelines, scoped buffers and DMAs, fused functions in a line each, VMEM per chip."""
    from pallaslab.analysis.occupancy import spill_note
    from pallaslab.views.parts import Line, Text

    parts: list[Part] = []
    if data["traced_for_chip"]:
        why = ("a SparseCore kernel, traced for a chip with SparseCores"
               if data["mesh"] and "Subcore" in data["mesh"]["kind"]
               else "its tracing asks the chip")
        parts.append(Line((Text(f"traced under an abstract TPU {data['traced_for_chip']} "
                                f"({why}; no TPU attached)", "dim"),)))
    parts += [Line((line,)) for line in nested_lines(data) + fusion_lines(data["fusion"])]
    for target, v in data["vmem"].items():
        parts.append(Line((f"VMEM on {target}: ", Text(
            f"{v['bytes'] / 1024:,.0f} KiB of {v['limit'] / 1024:,.0f} KiB",
            "ok" if v["fits"] else "bad"))))
    if data["vmem"] and (note := spill_note(insp.kernel)):
        parts.append(Line((Text(f"note: {note}", "dim"),)))
    return parts


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
