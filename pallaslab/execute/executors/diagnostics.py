"""What the interpreters report, as findings naming the operand and the program.

TPU interpret mode reports races (with `on_race="warn"`, as log warnings, and carries on),
out-of-bounds reads and revisited output blocks (as exceptions that stop the run). Their
messages name buffers by TPU interpret mode's internal ids and kernel parameters by name;
`pallaslab.model._jax` maps both to Pallas's operand origins.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any

import jax

from pallaslab.analysis.findings import Finding
from pallaslab.execute.worker.monitor import RunMonitor
from pallaslab.model import Kernel, _jax
from pallaslab.model.source_names import cell_label, file_label

# Finding codes the executors add to the analysis codes (docs/architecture.md, "Stable contracts").
EXECUTOR_CODES = ("data-race", "out-of-bounds-read", "output-revisit", "interpret-error",
                  "interrupted", "unwritten-output", "debug-check-failed")

_RACE = re.compile(
    r"RACE DETECTED\n\s+(?P<op>read|write) of \('(?P<space>\w+)', (?P<buf>\d+), "
    r"(?P<bufdev>\d+), \d+\)"
    r"\[(?P<range>.*?)\] from \((?P<dev>\d+), (?P<core>\d+)\), (?P<frame>[^\n]*)\n"
    r".*?\n\s+(?P<op2>read|write) of .*?\[(?P<range2>.*?)\] from \((?P<dev2>\d+), "
    r"(?P<core2>\d+)\)(?:, (?P<frame2>[^\n]*))?", re.S)
_FRAME = re.compile(r"(?P<file>[^\s,:]+\.py|<dynamic-code>):(?P<line>\d+)")
_SLICE = re.compile(r"slice\((?P<a>-?\d+), (?P<b>-?\d+), 1\)")
_OOB_BLOCK = re.compile(
    r"Out-of-bounds block index (?P<block>\([^)]*\)) for input \"(?P<name>[^\"]+)\" in "
    r"iteration (?P<iter>\([^)]*\)) on device \d+ \(core (?P<core>\d+)\): reading "
    r"\[(?P<range>.*?)\] but input has shape (?P<shape>\([^)]*\))")
_OOB_READ = re.compile(
    r"Out-of-bounds read of \(\d+ (?P<core>\d+) (?P<space>\w+) (?P<buf>\d+)\): reading "
    r"\[(?P<range>.*?)\] but buffer has shape (?P<shape>\([^)]*\))")
_REVISIT = re.compile(
    r"Revisited block (?P<range>\(.*?\)) of output (?P<out>\d+) in iteration (?P<iter>\([^)]*\))"
    r"\. The block was previously visited in iterations (?P<first>\([^)]*\))")


class RaceLog(logging.Handler):
    """Collects TPU interpret mode's race warnings (it logs them to the root logger and its
    module logger) together with the program each racing core was running."""

    def __init__(self, monitor: RunMonitor):
        super().__init__(logging.WARNING)
        self.monitor = monitor
        self.races: list[tuple[str, int | None, tuple | None, tuple | None]] = []
        self._loggers = [logging.getLogger(), logging.getLogger(_jax.RACE_LOGGER)]

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "RACE DETECTED" not in message:
            return
        m = _RACE.search(message)
        now = self.monitor.program_on_core(int(m["core"])) if m else None
        other = self.monitor.program_on_core(int(m["core2"])) if m else None
        kernel = now[0] if now else self.monitor.kernel_now
        self.races.append((message, kernel, now[1] if now else None,
                           other[1] if other else None))

    def __enter__(self) -> RaceLog:
        for lg in self._loggers:
            lg.addHandler(self)
        # The module logger propagates to the root one: stop the record being seen twice.
        return self

    def __exit__(self, *exc: object) -> None:
        for lg in self._loggers:
            lg.removeHandler(self)


def race_findings(log: RaceLog, kernels: list[Kernel], transfers: Sequence[Any] = ()
                  ) -> Iterator[Finding]:
    """One `data-race` finding per distinct race as the user reads it (the interpreter's
    messages differ in internal DMA ids where the race is the same). `transfers` (the run's
    device record) name the cores whose async copies race in a mesh kernel."""
    seen: set[str] = set()
    for message, kernel_index, program, other in log.races:
        kernel = kernels[kernel_index] if kernel_index is not None else None
        cores = _copy_cores(message, kernel, transfers)
        if cores is not None:  # the DMAs' own "core" field is 0: the programs are the cores'
            program, other = (_core_program(log.monitor, c) for c in cores)
        finding = _race_finding(message, kernel, program, other, cores)
        if finding.message not in seen:
            seen.add(finding.message)
            yield finding


def _race_finding(message: str, kernel: Kernel | None, program: tuple | None,
                  other: tuple | None, cores: tuple[int, int] | None = None) -> Finding:
    m = _RACE.search(message)
    origin = _buffer_origin(kernel, m["space"], int(m["buf"])) if m and kernel else None
    # A mesh kernel's cores all run its one program: its races are named by core.
    mesh_cores = _own_cores(m) if m is not None and cores is None and kernel is not None \
        and kernel.kind == "mesh" else None
    programs = tuple(p for p in (program, other) if p is not None)
    remote = jax.device_count() > 1 and kernel is not None and kernel.communicates
    if m is not None:
        first, second = _actor(m, "", remote), _actor(m, "2", remote)
        if cores is not None:
            first, second = (f"{first} of core {c}" for c, first in zip(
                cores, (first, second), strict=True))
        lines = [f"the {op} at {at}" for op, at in ((m["op"], _frame(m["frame"], kernel)),
                                                    (m["op2"], _frame(m["frame2"], kernel)))
                 if at]
        where = f" Lines: {', '.join(lines)}." if lines else ""
        what = (f"{m['op']} of {origin or 'a buffer'}[{_range(m['range'])}] by {first} and "
                f"{m['op2']} of [{_range(m['range2'])}] by {second} are not ordered")
    else:
        first = second = where = ""
        what = message.splitlines()[0]
    if cores is not None or mesh_cores is not None:
        a, b = cores or mesh_cores or (0, 0)
        shown = f"between core {a} and core {b}"
    elif programs and all(p == () for p in programs):
        shown = "in the kernel's only program"
    else:
        shown = "between programs " + (" and ".join(str(p) for p in programs)
                                       or "unknown programs")
    name = f"{kernel.name}: " if kernel else ""
    if "DMA" in first + second or "async copy" in first + second:
        rule = _CROSS_DEVICE_RULE if remote else _LOCAL_DMA_RULE
    elif mesh_cores is not None:
        rule = ("The mesh's cores run at the same time. Rule: cores must not write the same "
                "memory (nor one read what another writes) without ordering them.")
    else:
        rule = ("TPU interpret mode ran the grid's \"parallel\" dimensions on 2 cores; on a "
                "chip with 2 TensorCores these programs run at the same time. Rule: programs "
                "that differ along a parallel dimension must not write the same memory.")
    return Finding(
        "data-race", "error",
        f"{name}{origin or 'an operand'}: data race {shown}: {what}. {rule}{where}",
        operand=origin, programs=programs,
    )


def _own_cores(m: re.Match[str]) -> tuple[int, int] | None:
    """The two cores of a race between two cores' own accesses (not DMAs in flight)."""
    n = jax.device_count()
    if int(m["dev"]) >= n or int(m["dev2"]) >= n or m["core"] == m["core2"]:
        return None
    return int(m["core"]), int(m["core2"])


def _actor(m: re.Match[str], side: str, remote: bool) -> str:
    """Who made one side of a race: a core, a device's core (several devices),
    or a DMA in flight (TPU interpret mode gives DMAs ids past the devices'): a remote one
    into a device, or a local async copy."""
    n = jax.device_count()
    device, core = int(m[f"dev{side}"]), m[f"core{side}"]
    if device >= n:
        return f"a DMA into device {m['bufdev']}" if remote else "an async copy"
    return f"device {device} (core {core})" if n > 1 else f"core {core}"


def _frame(text: str | None, kernel: Kernel | None) -> str | None:
    """"file.py:LINE" from the interpreter's "/path/file.py:LINE:COL (function)". A case
    file the worker process ran as "<dynamic-code>" is named by the kernel's own file."""
    m = _FRAME.search(text or "")
    if m is None:
        return None
    file = m["file"]
    if file == "<dynamic-code>":
        source = (kernel.source or "") if kernel is not None else ""
        home = source.rsplit(":", 1)[0]
        file = home if home.endswith(".py") or cell_label(home) else "line"
    name = file_label(file)
    return f"line {m['line']}" if name == "line" else f"{name}:{m['line']}"


def _range(text: str) -> str:
    """The interpreter's index "(1, slice(0, 64, 1), ...)" as "1, 0:64, ..."."""
    text = _SLICE.sub(lambda s: f"{s['a']}:{s['b']}", text)
    return text[1:-1] if len(text) > 2 and text[0] == "(" and text[-1] == ")" else text


_CROSS_DEVICE_RULE = (
    "One side is a DMA: it lands whenever its sender sends it. Rule: "
    "touch a buffer a remote copy writes only after waiting on the copy's receive semaphore, "
    "and overwrite a buffer a neighbour reads only after it signals it is done.")
_LOCAL_DMA_RULE = (
    "One side is an async copy: it lands at any time between its .start() and the .wait() on "
    "its semaphore. Rule: read a buffer an async copy writes only after .wait() on that "
    "copy's semaphore, and overwrite a buffer an async copy reads only after that .wait().")


def debug_check_findings(monitor: RunMonitor) -> Iterator[Finding]:
    """One `debug-check-failed` finding per distinct failed `pl.debug_check` message, with
    the programs (up to 8) where it failed."""
    by_message: dict[tuple[int | None, str], list[tuple[int, ...]]] = {}
    counts: dict[tuple[int | None, str], int] = {}
    for where, message in monitor.failed_checks:
        key = (where[0] if where else None, message)
        counts[key] = counts.get(key, 0) + 1
        programs = by_message.setdefault(key, [])
        if where and where[1] is not None and where[1] not in programs and len(programs) < 8:
            programs.append(where[1])
    for (kernel_index, message), programs in by_message.items():
        kernel = monitor.kernels[kernel_index] if kernel_index is not None else None
        name = f"{kernel.name}: " if kernel else ""
        shown = ", ".join(str(p) for p in programs) or "an unknown program"
        n = counts[(kernel_index, message)]
        yield Finding(
            "debug-check-failed", "error",
            f"{name}pl.debug_check failed {n:,} time(s), first in program(s) {shown}: "
            f"{message}", programs=tuple(programs))


def error_finding(message: str, kernels: list[Kernel], monitor: RunMonitor) -> Finding:
    """The finding for an exception that stopped an interpreted run."""
    kernel = kernels[monitor.kernel_now] if monitor.kernel_now is not None else None
    name = f"{kernel.name}: " if kernel else ""
    if m := _OOB_BLOCK.search(message):
        origin = _jax.kernel_arg_names(kernel).get(m["name"], m["name"]) if kernel else m["name"]
        program = _program(monitor, int(m["core"])) or _tuple(m["iter"])
        return Finding(
            "out-of-bounds-read", "error",
            f"{name}{origin}: program {program} reads block {m['block']}, elements "
            f"[{m['range']}], outside the array of shape {m['shape']}. Rule: every block an "
            "index map selects must lie inside its array.",
            operand=origin, programs=(program,), blocks=(_tuple(m["block"]),),
        )
    if m := _OOB_READ.search(message):
        origin = _buffer_origin(kernel, m["space"], int(m["buf"])) if kernel else None
        reader = _program(monitor, int(m["core"]))
        return Finding(
            "out-of-bounds-read", "error",
            f"{name}{origin or 'a buffer'}: program {reader} reads [{m['range']}] of a "
            f"{m['space'].upper()} buffer of shape {m['shape']}. Rule: reads must stay inside "
            "the buffer.",
            operand=origin, programs=(reader,) if reader else (),
        )
    if m := _REVISIT.search(message):
        j = int(m["out"])
        outs = kernel.outputs if kernel else ()
        origin = outs[j].origin if j < len(outs) else f"outputs[{j}]"
        revisit = _program(monitor, None) or _tuple(m["iter"])
        return Finding(
            "output-revisit", "error",
            f"{name}{origin}: program {revisit} writes output block {m['range']}, which "
            f"programs from {m['first']} wrote earlier with other blocks in between. On TPU "
            "the later write-back clobbers the earlier result. Rule: visit each output block "
            "in one run of consecutive steps.",
            operand=origin, programs=(revisit,),
        )
    return Finding("interpret-error", "error", f"{name}{short_error(message)}")


def _program(monitor: RunMonitor, core: int | None) -> tuple[int, ...] | None:
    if core is not None and (where := monitor.program_on_core(core)) is not None:
        return where[1]
    return None


def _buffer_origin(kernel: Kernel | None, space: str, buffer_id: int) -> str | None:
    if kernel is None:
        return None
    if kernel.kind == "mesh":
        origin = mesh_buffers(kernel).get((space, buffer_id))
        op = next((op for op in kernel.operands if op.origin == origin), None)
        return _named(op) if op is not None else origin
    return _jax.tpu_interpret_buffers(kernel).get((space, buffer_id))


def mesh_buffers(kernel: Kernel) -> dict[tuple[str, int], str]:
    """(memory space, buffer id) -> origin for a TPU mesh kernel: TPU interpret mode numbers
    buffers from 100, the HBM inputs and outputs first, then the scratch that is not in HBM
    (semaphores have their own ids), as for a pallas_call with no blocks."""
    found: dict[tuple[str, int], str] = {}
    in_hbm = [op for op in (*kernel.inputs, *kernel.outputs)
              if op.memory_space in ("any", "hbm")]
    rest = [op for op in kernel.operands if op not in in_hbm and not op.is_semaphore
            and op.memory_space not in ("any", "hbm")]
    for i, op in enumerate(in_hbm):
        found[("hbm", 100 + i)] = op.origin
    for i, op in enumerate(rest, start=100 + len(in_hbm)):
        found[(op.memory_space or "vmem", i)] = op.origin
    return found


def _named(op: Any) -> str:
    return f"{op.origin} ({op.param})" if op.param else op.origin


def _copy_cores(message: str, kernel: Kernel | None, transfers: Sequence[Any]
                ) -> tuple[int, int] | None:
    """The two cores whose async copies race, for a race between two DMAs of a mesh kernel
    (the interpreter names a DMA by its id, not its core): when the record holds exactly two
    copies into that buffer from those lines, started by two different cores."""
    m = _RACE.search(message)
    if m is None or kernel is None or kernel.kind != "mesh" or not transfers:
        return None
    n = jax.device_count()
    if int(m["dev"]) < n or int(m["dev2"]) < n:  # a core's own access names its core
        return None
    buffer = f"{m['space']} #{m['buf']}"  # the record's "hbm #101", or "outputs (hbm #101)"
    lines = {_frame(m[f], None) for f in ("frame", "frame2")}
    copies = [t for t in transfers
              if any(b == buffer or b.endswith(f"({buffer})") for b in (t.dst_buffer,
                                                                         t.src_buffer))
              and t.core is not None and t.source
              and _frame(t.source + ":0", None) in lines]
    cores = sorted({t.core for t in copies})
    return (cores[0], cores[1]) if len(copies) == 2 and len(cores) == 2 else None


def _core_program(monitor: RunMonitor, core: int) -> tuple | None:
    where = monitor.program_on_core(core)
    return where[1] if where else None


def _tuple(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"-?\d+", text))


def short_error(message: str) -> str:
    """The informative line of an interpreter error (XLA wraps callback tracebacks)."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", line):
            return line
    return lines[-1] if lines else message


# --- GPU interpret mode's races (warpgroups of a block sharing SMEM) ------------------------

_GPU_SIDE = (r"(?P<op{n}>write|read) of .*? from Warpgroup\(device_id=\d+, cluster_id=\d+, "
             r"block_id=(?P<block{n}>\d+), warpgroup_id=(?P<wg{n}>\d+)\),[ ]?"
             r"(?:(?P<where{n}>[^\s,]+?):(?P<line{n}>\d+):\d+)?")
_GPU_RACE = re.compile(_GPU_SIDE.format(n=1) + r".*?\n\s+" + _GPU_SIDE.format(n=2), re.S)
_GPU_RULE = ("Rule: a warpgroup may touch SMEM another warpgroup writes (or reads) only after "
             "waiting on a barrier that the other arrives on (plgpu.barrier_arrive / "
             "barrier_wait), or that its TMA copy completes.")


class GpuRaceLog(logging.Handler):
    """Collects GPU interpret mode's race reports (logged as warnings with `on_race="warn"`):
    unordered accesses by two warpgroups (or TMA copies) of a block."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "RACE DETECTED" in (message := record.getMessage()):
            self.messages.append(message)

    def __enter__(self) -> GpuRaceLog:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)


GPU_SAME_WARPGROUP_NOTE = (
    "races GPU interpret mode reported within one warpgroup (a TMA copy against that "
    "warpgroup's own access) are not findings: JAX 0.12's detector does not order a TMA "
    "copy before the barrier wait that completes it, and reports them even for JAX's own "
    "plgpu.emit_pipeline")


def gpu_race_findings(messages: list[str], kernels: list[Kernel]
                      ) -> tuple[tuple[Finding, ...], bool]:
    """One `data-race` finding per distinct race between two warpgroups, as the user reads
    it (block, warpgroups, lines); and whether races within one warpgroup were left out
    (`GPU_SAME_WARPGROUP_NOTE`)."""
    name = f"{kernels[0].name}: " if len(kernels) == 1 else ""
    found: dict[str, Finding] = {}
    left_out = False
    for message in messages:
        m = _GPU_RACE.search(message)
        if m is not None and m["wg1"] == m["wg2"]:
            left_out = True
            continue
        if m is None:  # a form this parser does not know: JAX's own first line
            lines = [line.strip() for line in message.splitlines() if line.strip()]
            text = f"{name}data race: {lines[1] if len(lines) > 1 else lines[0]}. {_GPU_RULE}"
        else:
            kernel = kernels[0] if len(kernels) == 1 else None
            sides = sorted(_gpu_side(m, n, kernel) for n in (1, 2))  # either comes first
            text = (f"{name}data race in block {m['block1']}: {sides[0]} and {sides[1]} are "
                    f"not ordered. {_GPU_RULE}")
        found.setdefault(text, Finding("data-race", "error", text))
    return tuple(found.values()), left_out


def _gpu_side(m: re.Match[str], n: int, kernel: Kernel | None) -> str:
    """"the read at f.py:12 by warpgroup 1" (a TMA copy has no line: "at ?")."""
    where = m[f"where{n}"]
    at = _frame(f"{where}:{m[f'line{n}']}", kernel) if where else None
    return f"the {m[f'op{n}']} at {at or '?'} by warpgroup {m[f'wg{n}']}"
