"""The record of a multi-device run, read from TPU interpret mode's own log.

With `InterpretParams(logging_mode=SEMAPHORE | SHARED_MEMORY)` the interpreter logs, per
simulated device and core, every buffer read and write (with the buffer's key: memory space,
buffer id, device, core), every semaphore signal (with every core's count) and every completed
wait, each followed by the user's source line. `DeviceRecorder` listens to that log (a
`logging.Handler`; nothing in JAX is patched) and turns it into a `DeviceRecord`: a DMA is a
read on one device followed on the same thread by a write (on the same or another device) and
the signal of its semaphore, at the copy's source line.
"""

from __future__ import annotations

import ast
import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pallaslab.model._jax.log_recorder import LogRecorder
from pallaslab.model.devices import DeviceRecord, SemaphoreEvent, Transfer

LOGGER = "jax._src.pallas.mosaic.interpret.shared_memory"
MAX_LINES = 200_000  # a kernel body's loads and stores are logged too: keep the record bounded

_LINE = re.compile(r"^Device (\d+), core (\d+): `(\w+)` -- (.*)$")
_KEY = re.compile(r"key=(\([^)]*\))")
_SHAPE = re.compile(r"(?:result|value)\.shape=(\([^)]*\))")
_SIGNAL = re.compile(r"semaphore=(\d+), inc=(\d+)")
_WAIT = re.compile(r"semaphore=(\d+) finished waiting for value=(\d+)")
_COUNTS = re.compile(r"count_by_core=(\[[^\]]*\])")
_SOURCE = re.compile(r"^(\S+?):(\d+):\d+ ")

Destination = Callable[[str | None, int], int | None]  # (copy's source, sender) -> receiver
Names = dict[tuple[str, int], str]  # (memory space, buffer id) -> operand origin
_RANGE = re.compile(r"rnge=(\(.*?\)), in_bounds")
_SLICE = re.compile(r"slice\((-?\d+), (-?\d+), -?\d+\)")


def logging_mode() -> Any:
    from jax._src.pallas.mosaic.interpret.params import LoggingMode

    return LoggingMode.SEMAPHORE | LoggingMode.SHARED_MEMORY


@dataclass
class _Op:
    name: str
    device: int
    lines: list[str] = field(default_factory=list)
    core: int = 0  # the core (of `device`) whose thread logged it


class DeviceRecorder(LogRecorder):
    """While active (a context manager), collects TPU interpret mode's log into a record."""

    def __init__(self, num_devices: int):
        super().__init__(LOGGER, MAX_LINES)
        self.num_devices = num_devices

    def record(self, destination: Destination | None = None,
               names: Names | None = None) -> DeviceRecord:
        """The record; `destination(source, device)` is where the remote copy at `source`
        started on `device` sends (None: unknown), to pair the halves of remote DMAs;
        `names`: (memory space, buffer id) -> the kernel operand it holds."""
        return _parse(self.snapshot(), self.num_devices, self.truncated,
                      destination or (lambda source, device: None), names or {})

    @property
    def lines(self) -> int:
        """How many log lines came so far (a stepped run's sign of progress)."""
        return len(self._lines)

    def thread_devices(self) -> dict[int, int]:
        """Thread id -> the simulated device it runs, as the log names them."""
        found: dict[int, int] = {}
        for thread, message in self.snapshot():
            if thread not in found and (m := _LINE.match(message)):
                found[thread] = int(m[1])
        return found


def _parse(lines: list[tuple[int, str]], num_devices: int, truncated: bool,
           destination: Destination, names: Names) -> DeviceRecord:
    ops: list[tuple[int, _Op]] = []  # (thread, op) in the order each op completed
    open_ops: dict[int, _Op] = {}
    for thread, message in lines:
        m = _LINE.match(message)
        if m is None:
            continue
        device, core, name, rest = int(m[1]), int(m[2]), m[3], m[4]
        op = open_ops.get(thread)
        if op is None or op.name != name or op.device != device:
            if op is not None and _sourceless_wait(op):
                ops.append((thread, op))
            op = open_ops[thread] = _Op(name, device, core=core)
        op.lines.append(rest)
        # The op's last line is its source: "file:line:col (fn)", or "None" / "." where the
        # equation has none (sync_copy's DMA).
        if _SOURCE.match(rest) or rest in ("None", "."):
            ops.append((thread, op))
            del open_ops[thread]
    ops += [(thread, op) for thread, op in open_ops.items() if _sourceless_wait(op)]
    return _record(ops, num_devices, truncated, destination, names)


def _sourceless_wait(op: _Op) -> bool:
    """A completed `pl.semaphore_wait`: the interpreter logs it with no source line, so it
    ends where the thread's next operation starts (or the log ends)."""
    return op.name == "wait" and len(op.lines) >= 2 and bool(_WAIT.search(op.lines[0]))


def _record(ops: list[tuple[int, _Op]], num_devices: int, truncated: bool,
            destination: Destination, names: Names) -> DeviceRecord:
    """A DMA run by one thread logs its read, its write and its semaphore's signal in a row;
    a remote DMA whose halves ran on the two devices logs the read then the send semaphore's
    signal on the sender, and the write then the receive semaphore's signal on the receiver:
    the halves are paired by the copy's line and the device its `device_id` names."""
    transfers: list[Transfer] = []
    semaphores: list[SemaphoreEvent] = []
    counts: dict[int, list[int]] = {}  # semaphore -> count by global core, as last logged
    last: dict[int, list[_Op]] = defaultdict(list)  # thread -> its two latest ops
    sent: dict[str | None, list[tuple[int, int, tuple[str, int, int]]]] = defaultdict(list)
    started: dict[tuple[int, str | None], int] = defaultdict(int)

    def transfer(seq: int, src: tuple[str, int, int], dst: tuple[str, int, int],
                 shape: tuple[int, ...], nbytes: int, source: str | None,
                 region: tuple[tuple[int, int], ...] | None, core: int | None = None) -> None:
        key = (src[2], source)
        transfers.append(Transfer(
            seq, src[2], dst[2], _label(src, names), _label(dst, names), shape, nbytes, source,
            started[key], names.get((dst[0], dst[1])), region, core))
        started[key] += 1

    for seq, (thread, op) in enumerate(ops):
        text = " ".join(op.lines)
        source = _source(op.lines[-1])
        if op.name == "signal" and (m := _SIGNAL.search(text)):
            sem, inc = int(m[1]), int(m[2])
            device, core = _signalled_core(counts, sem, text, inc, num_devices, op.device,
                                           op.core)
            semaphores.append(SemaphoreEvent(seq, "signal", device, sem, inc, source, core,
                                             op.core))
            before = [o for o in last[thread] if _source(o.lines[-1]) == source]
            kinds = [o.name for o in before]
            if kinds == ["get_buffer_content", "store_buffer_content"]:  # a whole DMA
                src, dst = _key(before[0]), _key(before[1])
                if destination(source, src[2]) not in (None, dst[2]):
                    # run by the receiver, which logs the read as its own: the sender is the
                    # device whose copy lands here
                    senders = [d for d in range(num_devices) if destination(source, d) == dst[2]]
                    src = (src[0], src[1], senders[0]) if len(senders) == 1 else src
                transfer(seq, src, dst, _shape(before[1]), inc, source, _region(before[1]),
                         before[1].core)
            elif kinds[-1:] == ["get_buffer_content"]:  # the send half of a remote DMA
                sent[source].append((seq, inc, _key(before[-1])))
            elif kinds[-1:] == ["store_buffer_content"]:  # the receive half
                dst = _key(before[-1])
                waiting = sent[source]
                match = next((i for i, (_, _, src) in enumerate(waiting)
                              if destination(source, src[2]) == dst[2]), 0 if waiting else None)
                if match is not None:
                    _, nbytes, src = waiting.pop(match)
                    transfer(seq, src, dst, _shape(before[-1]), nbytes, source,
                             _region(before[-1]), before[-1].core)
        elif op.name == "wait" and (m := _WAIT.search(text)):
            if c := _COUNTS.search(text):  # the wait took its value: the counts went down
                counts[int(m[1])] = [int(v) for v in ast.literal_eval(c[1])]
            semaphores.append(SemaphoreEvent(seq, "wait", op.device, int(m[1]), int(m[2]),
                                             source, op.core, op.core))
        last[thread] = [*last[thread][-1:], op]
    in_flight = tuple(
        Transfer(seq, src[2], to if (to := destination(source, src[2])) is not None else -1,
                 _label(src, names), "?", (), nbytes, source, started[(src[2], source)])
        for source, sends in sent.items() for seq, nbytes, src in sends)
    return DeviceRecord(num_devices, tuple(transfers), tuple(semaphores), truncated,
                        in_flight)


def _signalled_core(counts: dict[int, list[int]], sem: int, text: str, inc: int,
                    num_devices: int, device: int, core: int) -> tuple[int, int | None]:
    """The device and core whose count of `sem` went up by `inc` (the interpreter logs every
    core's count); the signaller's own where the counts do not say."""
    m = _COUNTS.search(text)
    if m is None:
        return device, None
    now = [int(v) for v in ast.literal_eval(m[1])]
    before = counts.get(sem, [0] * len(now))
    counts[sem] = now
    per_device = max(1, len(now) // max(1, num_devices))
    moved = [i for i, (a, b) in enumerate(zip(before, now, strict=False)) if b - a == inc]
    return (moved[0] // per_device, moved[0] % per_device) if moved else (device, None)


def _key(op: _Op) -> tuple[str, int, int]:
    m = _KEY.search(op.lines[0])
    space, buffer, device, *_ = ast.literal_eval(m[1]) if m else ("?", -1, op.device)
    return str(space), int(buffer), int(device)


def _label(key: tuple[str, int, int], names: Names) -> str:
    origin = names.get((key[0], key[1]))
    plain = f"{key[0]} #{key[1]}"
    return f"{origin} ({plain})" if origin else plain


def _region(op: _Op) -> tuple[tuple[int, int], ...] | None:
    """The written region of the buffer ("rnge" in the log): None for the whole buffer."""
    m = _RANGE.search(op.lines[0])
    if m is None or m[1] == "()":
        return None
    try:
        parts = ast.literal_eval(_SLICE.sub(r"(\1, \2)", m[1]))
    except (ValueError, SyntaxError):
        return None
    parts = parts if isinstance(parts, tuple) else (parts,)
    return tuple((p, p + 1) if isinstance(p, int) else (int(p[0]), int(p[1])) for p in parts)


def _shape(op: _Op) -> tuple[int, ...]:
    m = _SHAPE.search(" ".join(op.lines))
    return tuple(ast.literal_eval(m[1])) if m else ()


def _source(line: str) -> str | None:
    m = _SOURCE.match(line)
    return f"{m[1]}:{m[2]}" if m else None


def destination_from(kernels: Any, num_devices: int) -> Destination:
    """Where each remote copy of `kernels` sends from each device, by evaluating its captured
    `device_id` expression (one mesh axis: `axis_index` = the device, `axis_size` = the device
    count); None where the expression uses anything else."""
    by_source = {d.source: d.device_id for k in kernels for d in k.dmas
                 if d.kind == "remote" and d.device_id and d.source}

    def destination(source: str | None, device: int) -> int | None:
        text = by_source.get(source)
        if text is None:
            return None
        text = re.sub(r"axis_index\(\w+\)", str(device), text)
        text = re.sub(r"axis_size\(\w+\)", str(num_devices), text)
        try:
            value = _evaluate(ast.parse(text, mode="eval").body)
        except (ValueError, SyntaxError, ZeroDivisionError):
            return None
        return value if 0 <= value < num_devices else None

    return destination


def _evaluate(node: ast.AST) -> int:
    """Integer arithmetic as XLA does it (`%` and `//` truncate toward zero)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Tuple) and len(node.elts) == 1:
        return _evaluate(node.elts[0])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp):
        a, b = _evaluate(node.left), _evaluate(node.right)
        match node.op:
            case ast.Add():
                return a + b
            case ast.Sub():
                return a - b
            case ast.Mult():
                return a * b
            case ast.Mod():
                return int(math.fmod(a, b)) if b else _zero()
            case ast.FloorDiv():
                return int(a / b) if b else _zero()
    raise ValueError(f"not a device id of one mesh axis: {ast.dump(node)}")


def _zero() -> int:
    raise ZeroDivisionError
