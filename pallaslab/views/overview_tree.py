"""The Overview's one structure: a kernel's facts, operands, fused functions and findings as a
tree of parts (`pallaslab.views.parts`). The view's text and static HTML and `pallaslab
inspect`'s terminal output render it, so a kernel is described in one place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pallaslab.views import _html
from pallaslab.views.parts import Badge, Code, Inline, Line, Note, Part, Section, Table, Text

FUSED_TITLE = "Fused into this kernel"
OPERAND_COLUMNS = ("operand", "role", "shape", "dtype", "block", "memory", "buffers", "fetches",
                   "HBM bytes")


def overview_tree(kernel: Mapping[str, Any], index: int, *, note: str | None = None,
                  devices_note: str | None = None, details: Sequence[Part] = (),
                  jaxprs: bool = True) -> Section:
    """`kernel` is the `inspect --json` kernel object with each operand's `label`; `details`
    (what the CLI adds: VMEM, nested pipelines) go before the findings; `jaxprs`: show each
    fused function's jaxpr."""
    k = kernel
    children: list[Part] = [facts_line(k)]
    if k["call_site"]:
        children.append(Line(("call site ", k["call_site"]), css="pl-dim"))
    if k["context"]:
        children.append(Line(("inside ", " > ".join(k["context"])), css="pl-dim"))
    children += [Note(note)] if note else []
    if devices_note:  # the tab's readers find it by its role
        children.append(Section((), (Note(devices_note),), css="pl-dim",
                                data=(("role", "devices-note"),)))
    children.append(operand_table(k["operands"]))
    if k["fusion"] and jaxprs:
        children.append(fused_section(k["fusion"]))
    children += list(details)
    children += findings_lines(k["findings"])
    title: tuple[Inline, ...] = (f"Kernel {index}: ", Code(k["name"]),
                                 Text(f"  ({k['source'] or '?'})", "dim"))
    return Section(title, tuple(children), css="pl-overview-tree")


def facts_line(k: Mapping[str, Any]) -> Line:
    semantics = ", ".join(k["dimension_semantics"] or []) or "-"
    return Line((f"grid {grid_text(k['grid'])} = {programs_text(k['programs'])} programs; "
                 f"semantics: {semantics}; backend: {k['backend'] or 'unspecified'}",))


def operand_table(operands: Sequence[Mapping[str, Any]]) -> Table:
    rows = tuple(
        (o["label"], o["role"] + (" (prefetch)" if o.get("scalar_prefetch") else ""),
         _html.shape(o["shape"]), o["dtype"], _html.shape(o["block_shape"]), o["memory_space"],
         _html.num(o["buffers"]), _html.num(o["fetches"]), _html.num(o["hbm_bytes"]))
        for o in operands)
    return Table(OPERAND_COLUMNS, rows, numeric=(6, 7, 8))


def findings_lines(findings: Sequence[Mapping[str, Any]]) -> list[Part]:
    """"error parallel-write-conflict: ..." per finding (JSON form), or that there are none."""
    if not findings:
        return [Line((Text("no findings", "ok"),), css="pl-ok")]
    return [Line((Badge(f["severity"], "bad" if f["severity"] == "error" else ""), " ",
                  Code(f["code"]), f": {f['message']}"), css=f"pl-finding pl-{f['severity']}")
            for f in findings]


def fused_heading(f: Mapping[str, Any]) -> str:
    """"args[0]  (kernels_tpu.py:389)" after "prologue ->": what the function feeds or is
    applied to."""
    arrow = "->" if f["role"] == "prologue" else "applied to"
    return f"{arrow} {f['operand']}  ({', '.join(f['sources']) or '?'})"


def fused_section(fusion: Mapping[str, Any]) -> Section:
    """The functions `fuser.fuse` pulled into the kernel, each with its jaxpr."""
    return Section((FUSED_TITLE,), tuple(
        Section((Badge(f["role"]), " ", fused_heading(f)),
                tuple(Line((Code(line),), css="pl-mono") for line in f["jaxpr"].splitlines()),
                css="pl-fused", data=(("role", f["role"]),))
        for f in fusion["functions"]), css="pl-fusion")


def programs_text(programs: int | None) -> str:
    return "?" if programs is None else f"{programs:,}"  # 0 is an empty grid, not unknown


def grid_text(grid: Sequence[int | None]) -> str:
    return " x ".join("?" if g is None else str(g) for g in grid) or "()"
