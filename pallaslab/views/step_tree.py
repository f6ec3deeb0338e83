"""The Step view's one structure: a stepped kernel as a tree of parts (`views.parts`).

The view's text and static HTML render this tree, so the stepped program, the programs that
wrote mismatched blocks, each block as the program read it and as it left it (what its stores
wrote), the program's equations with their source lines and values, and the run's notes and
error are worded here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pallaslab.views._html import num
from pallaslab.views.overview_tree import findings_lines
from pallaslab.views.parts import Code, Inline, Line, Markup, Note, Part, Section, Table, Text

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


# --- on N simulated devices (`step_devices.DeviceStepView`) -----------------------------------


def device_step_tree(p: Mapping[str, Any], lanes: str | None) -> Section:
    """The payload `p` (`step_devices.StepDevicesPayload`) as one tree: how far the devices
    ran, the notes, the run's result, findings and error, one row per device, the lanes
    (`lanes`: their SVG, when any event happened), the DMAs in flight and those landed."""
    state = device_state(p)
    children: list[Part] = [Note(n, "note", css="pl-dim pl-step-note") for n in p["notes"]]
    if p["status"] is not None:
        children.append(Line(("result: ", Text(p["status"], "ok" if p["status"] == "ran"
                                               else "bad")), css="pl-sd-result"))
    children += findings_lines(p["findings"]) if p["findings"] else []
    if p["error"]:
        children.append(Note(p["error"], "error"))
    children.append(Table(DEVICE_COLUMNS, tuple(
        (f"device {r['device']}", f"{r['programs']}" + (f"/{r['total']}" if r["total"] else ""),
         f"{r['status']}: {r['detail']}", str(r["sent"]), str(r["received"]),
         str(r["in_flight"]), str(r["signals"]), str(r["waits"])) for r in p["rows"]),
        numeric=(3, 4, 5, 6, 7), css="pl-sd-devices"))
    if p["started"]:
        signals, waits = (sum(r[k] for r in p["rows"]) for k in ("signals", "waits"))
        children.append(Line((f"semaphores: {signals} signals, {waits} completed waits",)))
    if lanes:
        children.append(Markup(lanes))
    if p["in_flight"]:
        children.append(Section((IN_FLIGHT,), (Table(
            ("step", "from", "to", "bytes", "source"),
            tuple((str(t["step"]), f"device {t['src']}", _dst(t), num(t["bytes"]),
                   t["source"] or "?") for t in p["in_flight"]), numeric=(0, 3)),),
            css="pl-sd-in-flight"))
    if p["transfers"]:
        latest = (f", the latest {len(p['transfers'])}"
                  if p["transfers_total"] > len(p["transfers"]) else "")
        children.append(Section((f"Landed: {p['transfers_total']:,} DMAs{latest}",), (Table(
            ("step", "from", "to", "bytes", "buffers", "source"),
            tuple((str(t["step"]), f"device {t['src']}", _dst(t), num(t["bytes"]),
                   t["buffers"], t["source"] or "?") for t in p["transfers"]),
            numeric=(0, 3)),), css="pl-sd-landed"))
    title = ("Step kernel ", f"{p['index']} ", Code(p["kernel"]),
             f" on {p['devices']} devices: {state}")
    return Section(title, tuple(children), css="pl-step-static pl-step-devices")


IN_FLIGHT = "In flight (sent, not landed)"
DEVICE_COLUMNS = ("device", "programs", "status", "sent", "received", "in flight", "signals",
                  "waits")


def device_state(p: Mapping[str, Any]) -> str:
    """"not stepped yet", "1 lockstep step(s), 8 DMAs landed, 0 in flight (last: ...)"."""
    if not p["started"]:
        return "not stepped yet"
    head = "the run ended" if p["done"] else f"{p['position']} lockstep step(s)"
    return (f"{head}, {p['transfers_total']:,} DMAs landed, {len(p['in_flight'])} in flight"
            + (f" (last: {p['last']})" if p["last"] else ""))


def _dst(t: Mapping[str, Any]) -> str:
    return f"device {t['dst']}" if t["dst"] >= 0 else "device ?"
