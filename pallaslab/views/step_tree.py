"""The Step view's one structure: a stepped kernel as a tree of parts (`views.parts`).

The view's text and static HTML render this tree, so the stepped program, the programs that
wrote mismatched blocks, each block as the program read it and as it left it (what its stores
wrote), the program's equations with their source lines and values, and the run's notes and
error are worded here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pallaslab.views.parts import Code, Inline, Line, Note, Part, Section, Table, Text

NO_PROGRAMS = "the grid has no programs: there is nothing to step"
NOT_STARTED = "no program has run yet: wb.step().step() runs the first"
MISMATCH_SHOWN = 8  # programs named in the line that counts the mismatched ones
BLOCK_COLUMNS = ("operand", "role", "block", "changed", "as read", "as written")
EQUATION_COLUMNS = ("#", "equation", "source", "value")


def step_tree(p: Mapping[str, Any], program_at: Callable[[int], Sequence[int]]) -> Section:
    """The payload `p` (`step.StepPayload`) as one tree; `program_at(step)`: the program ids
    of a step."""
    title: list[Inline] = ["Step kernel ", f"{p['index']} ", Code(p["kernel"]),
                           f": {p['position']:,}/{p['programs']:,} programs run"]
    if p["program"] is not None:
        title += [", last program ", Code(str(tuple(p["program"]))), f" (step {p['step']})"]
    children: list[Part] = []
    if p["mismatch_steps"]:
        children.append(mismatch_line(p["mismatch_steps"], program_at))
    if not p["programs"]:
        children.append(Line((Text(NO_PROGRAMS, "dim"),), css="pl-dim"))
    elif p["program"] is None:
        children.append(Line((Text(NOT_STARTED, "dim"),), css="pl-dim"))
    if p["blocks"]:
        children.append(Table(BLOCK_COLUMNS, tuple(
            (b["label"], b["role"], str(tuple(b["block_index"])),
             Text("yes", "ok") if b["changed"] else "no", b["summary_before"], b["summary_after"])
            for b in p["blocks"]), css="pl-step-block-table"))
    if p["equations"]:
        children.append(Table(EQUATION_COLUMNS, tuple(
            (str(e["index"]), e["text"], e["source"] or "?", "; ".join(e["values"]))
            for e in p["equations"]), numeric=(0,), css="pl-step-eqns"))
        hidden = p["equations_total"] - len(p["equations"])
        if hidden > 0:
            children.append(Line((Text(f"{hidden:,} more equation(s) not shown", "dim"),),
                                 css="pl-dim"))
    children += [Note(n, "note", css="pl-dim pl-step-note") for n in p["notes"]]
    if p["error"]:
        children.append(Note(p["error"], "error"))
    return Section(tuple(title), tuple(children), css="pl-step-static")


def mismatch_line(steps: Sequence[int], program_at: Callable[[int], Sequence[int]]) -> Line:
    """"2 program(s) wrote mismatched blocks: (2,), (3,)"."""
    shown = ", ".join(str(tuple(program_at(s))) for s in steps[:MISMATCH_SHOWN])
    more = " …" if len(steps) > MISMATCH_SHOWN else ""
    return Line((f"{len(steps):,} program(s) wrote mismatched blocks: ", Code(shown), more),
                css="pl-step-mismatch")
