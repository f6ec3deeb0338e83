"""The Pipeline view's recorded run: what TPU interpret mode logged of a kernel's manual DMAs
and semaphore operations — each DMA as it happened (bytes, the region it wrote, which
iteration of its line), each signal and completed wait — where the static listing can only
say "once per iteration"."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from typing import TypedDict

from pallaslab.execute.registry import executor_of_mode, find_spec
from pallaslab.model import Kernel
from pallaslab.model.devices import DeviceRecord, SemaphoreEvent, Transfer
from pallaslab.views import _html
from pallaslab.views.names import semaphore_name, source_name
from pallaslab.views.parts import Line, Part, Section, Text

MAX_RECORDED = 2_000  # events carried to the widget (the summary counts them all)
FOLDED_ROWS = 12  # events shown before a long table is unfolded (as pipeline_record.js)
GPU_NOTE = ("Mosaic GPU interpret mode logs a barrier wait only when it had to wait, and a "
            "TMA copy only when it signals a barrier (copies to GMEM do not)")


class RecordedOp(TypedDict):
    seq: int  # position in the run's log (its order)
    op: str  # "dma", "signal", "wait"
    src: str | None  # "args[0] (hbm #100)"
    dst: str | None
    region: str | None  # rows/columns of the destination written: "[64:128, 0:128]"
    bytes: int | None  # DMA bytes; signal: the increment; wait: the value waited for
    semaphore: int | None  # the interpreter's semaphore id
    semaphore_name: str | None  # the kernel's name for it ("scratch[2][0]"), when it has one
    source: str | None  # "file.py:LINE"
    iteration: int | None  # DMAs: how many DMAs this line had started before this one


class RunRecord(TypedDict):
    executor: str  # who recorded it
    ops: list[RecordedOp]
    lines: list[str]  # per source line: how often it ran and what it moved
    truncated: bool  # the run's log, or the events carried here, stopped at a limit
    note: str | None  # what the log leaves out


def run_record(kernel: Kernel, record: DeviceRecord, executor: str | None = None
               ) -> RunRecord:
    """The kernel's part of a run's record, in the order it happened (`executor`: the one
    that recorded it, by default TPU interpret mode's)."""
    executor = executor or executor_of_mode("tpu")
    mode = _mode(executor)
    transfers = [_attributed(t, kernel) for t in record.transfers]
    transfers = [t for t in transfers if _belongs(t.source, kernel)]
    # TPU interpret mode's ids of the kernel's semaphore operands (a sync_copy's own has none)
    tpu = mode == "tpu"
    started: Counter[tuple[int, str | None]] = Counter()  # the lines as attributed here
    ops = []
    for t in transfers:
        ops.append(RecordedOp(seq=t.seq, op="dma", src=t.src_buffer, dst=t.dst_buffer,
                              region=_region_text(t.dst_region), bytes=t.nbytes,
                              semaphore=None, semaphore_name=None,
                              source=source_name(t.source, kernel),
                              iteration=started[(t.src_device, t.source)]))
        started[(t.src_device, t.source)] += 1
    ops += [RecordedOp(seq=s.seq, op=s.kind, src=None, dst=None, region=None, bytes=s.amount,
                       semaphore=s.semaphore,
                       semaphore_name=semaphore_name(kernel, s.semaphore) if tpu else None,
                       source=source_name(source, kernel), iteration=None)
            for s, source in _semaphore_sources(record, transfers) if _belongs(source, kernel)]
    ops.sort(key=lambda o: (o["seq"], o["op"] != "dma"))
    return RunRecord(executor=executor, ops=ops[:MAX_RECORDED],
                     lines=_per_line(ops, mode == "gpu"),
                     truncated=record.truncated or len(ops) > MAX_RECORDED,
                     note=GPU_NOTE if mode == "gpu" else None)


def _attributed(t: Transfer, kernel: Kernel) -> Transfer:
    """A DMA the log gives no line (sync_copy's) gets the line of the kernel's one sync copy
    between the same refs (a ref the log does not name, e.g. a run_scoped buffer, matches
    any)."""
    if t.source is not None:
        return t
    src, dst = _origin(t.src_buffer), t.dst_origin
    lines = {d.source for d in kernel.dmas if d.kind == "sync" and src in (None, d.src)
             and dst in (None, d.dst)}
    if len(lines) != 1:
        return t
    return dataclasses.replace(t, source=lines.pop())


def _semaphore_sources(record: DeviceRecord, transfers: list[Transfer]
                       ) -> list[tuple[SemaphoreEvent, str | None]]:
    """Each semaphore event with its line; where the log gives none (sync_copy's own
    semaphore), the line of the DMA that signalled it, and of that signal for its wait."""
    by_seq = {t.seq: t.source for t in transfers}
    last_signal: dict[int, str | None] = {}
    out = []
    for e in record.semaphores:
        source = e.source
        if source is None:
            source = by_seq.get(e.seq) if e.kind == "signal" else last_signal.get(e.semaphore)
        if e.kind == "signal":
            last_signal[e.semaphore] = source
        out.append((e, source))
    return out


def _belongs(source: str | None, kernel: Kernel) -> bool:
    """An event of this kernel: at one of its DMA or semaphore lines (a kernel with no lines
    known, or an event with none, is kept)."""
    known = {d.source for d in kernel.dmas} | {s.source for s in kernel.semaphore_ops}
    known.discard(None)
    return source is None or not known or source in known


def _per_line(ops: Iterable[RecordedOp], barriers: bool = False) -> list[str]:
    counts: Counter[tuple[str, str]] = Counter()
    moved: Counter[str] = Counter()
    for o in ops:
        line = o["source"] or "(no line)"
        counts[(line, o["op"])] += 1
        if o["op"] == "dma":
            moved[line] += o["bytes"] or 0
    out = []
    for line in dict.fromkeys(line for line, _ in counts):
        parts = [f"{counts[(line, op)]} {_plural(op, counts[(line, op)], barriers)}"
                 for op in ("dma", "signal", "wait") if counts[(line, op)]]
        bytes_ = f" ({_html.num(moved[line])} B)" if moved[line] else ""
        out.append(f"{line}: {', '.join(parts)}{bytes_}")
    return out


def _plural(op: str, n: int, barriers: bool = False) -> str:
    words = {"dma": "TMA copy", "signal": "barrier phase", "wait": "completed wait"} \
        if barriers else {"dma": "DMA", "signal": "signal", "wait": "completed wait"}
    word = words[op]
    if n == 1:
        return word
    return word[:-1] + "ies" if word.endswith("copy") else word + "s"


def _origin(label: str) -> str | None:
    """"scratch[1] (vmem #103)" -> "scratch[1]"; a buffer the kernel does not name -> None."""
    head, sep, _ = label.partition(" (")
    return head if sep else None


def _region_text(region: tuple[tuple[int, int], ...] | None) -> str | None:
    if region is None:
        return None
    return "[" + ", ".join(str(a) if b == a + 1 else f"{a}:{b}" for a, b in region) + "]"


# --- static forms ---------------------------------------------------------------------------


def op_line(o: RecordedOp, barriers: bool = False) -> str:
    where = f" at {o['source']}" if o["source"] else ""
    if o["op"] == "dma":
        region = f" {o['region']}" if o["region"] else ""
        nth = f" (#{o['iteration'] + 1} of its line)" if o["iteration"] is not None else ""
        what = "TMA copy" if barriers else "DMA"
        return f"{o['seq']:>5}  {what} {o['src']} -> {o['dst']}{region}, " \
               f"{_html.num(o['bytes'])} B{where}{nth}"
    if barriers:
        done = "completed phase" if o["op"] == "signal" else "waited for phase"
        return f"{o['seq']:>5}  barrier {o['semaphore']} {done} {o['bytes']}{where}"
    amount = "+" if o["op"] == "signal" else "waited for "
    return f"{o['seq']:>5}  {o['op']} semaphore {semaphore_label(o)} ({amount}{o['bytes']})" \
           f"{where}"


def _mode(executor: str) -> str | None:
    """What the recording executor interprets (`ExecutorSpec.mode`: "tpu", "gpu")."""
    spec = find_spec(executor)
    return None if spec is None else spec.mode


def semaphore_label(o: RecordedOp) -> str:
    """The kernel's name for the semaphore, else the interpreter's id ("#2002")."""
    if o["semaphore"] is None:
        return ""
    return o["semaphore_name"] or f"#{o['semaphore']}"


def record_section(rec: RunRecord, limit: int = 40) -> Section:
    """The recorded run: per source line, then the first `limit` events in order."""
    gpu = _mode(rec["executor"]) == "gpu"
    events: list[Part] = [Line((op_line(o, gpu),)) for o in rec["ops"][:limit]]
    if len(rec["ops"]) > limit:
        events.append(Line((Text(f"... {len(rec['ops']) - limit} more", "dim"),), css="pl-dim"))
    children: list[Part] = [Line((Text(line, "dim"),), css="pl-dim") for line in rec["lines"]]
    children += [Line((Text(rec["note"], "dim"),), css="pl-dim")] if rec["note"] else []
    children.append(Section((f"In order ({len(rec['ops'])} events)",), tuple(events),
                            css="pl-record-events"))
    return Section((f"Recorded run ({rec['executor']}), per line",), tuple(children),
                   css="pl-record")
