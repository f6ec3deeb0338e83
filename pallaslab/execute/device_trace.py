"""A function's kernels as traced on N simulated devices, described by the worker that has them.

A kernel inside `shard_map` is traced per device: its grid and its operands' shapes depend on
the mesh, which a function usually builds from `jax.devices()`. The notebook's process has its
own devices (one CPU), so a workbench opened with `devices=N` asks the N-device worker (the one
its Step and Devices tabs run in) to capture the call and inspect each kernel there, as
`pallaslab inspect CASE --devices N` does in a process of N devices. What comes back is what
the views need: each kernel (without its handle on JAX's objects, which cannot travel) and its
inspection (tiling, findings, VMEM), made there.

The request travels as the stepped runs' do ("open-device-stepper", `"stepper": "trace"`,
routed by `pallaslab.execute.stepping.step_requests`).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pallaslab.analysis.findings import Finding
from pallaslab.analysis.inspection import KernelInspection
from pallaslab.execute.worker import isolation
from pallaslab.model import Kernel
from pallaslab.model.source_names import short_source


@dataclasses.dataclass(frozen=True)
class DeviceTrace:
    """The kernels of a call as traced on `devices` simulated devices, each with its
    inspection made there (`error`: why there are none)."""

    devices: int
    inspections: tuple[KernelInspection, ...] = ()
    error: str | None = None

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        return tuple(i.kernel for i in self.inspections)


def trace_on_devices(fn: Callable[..., Any], args: Sequence[Any],
                     kwargs: Mapping[str, Any] | None = None, *, devices: int,
                     backend: str | None = None, chip: str | None = None,
                     timeout: float | None = None,
                     sources: Iterable[Kernel] = ()) -> DeviceTrace:
    """Capture `fn(*args, **kwargs)` in the worker with `devices` CPU devices and inspect its
    kernels there (`backend`: whose rules the findings follow; `chip`: the abstract TPU to
    trace under, as the local capture did). `sources`: the kernels captured here, whose
    source lines name the lines the worker knows only as cloudpickle's "<dynamic-code>"."""
    reply = _ask_worker(fn, args, kwargs, devices, timeout, f"tracing on {devices} devices",
                        {"backend": backend, "chip": chip})
    if isinstance(reply, str):
        return DeviceTrace(devices, error=reply)
    if "inspections" not in reply:
        return DeviceTrace(devices, error=reply.get("error")
                           or "the worker process gave no description")
    fix = _source_fixer(sources)
    return DeviceTrace(devices, tuple(_with_sources(i, fix) for i in reply["inspections"]))


def lower_on_devices(fn: Callable[..., Any], args: Sequence[Any],
                     kwargs: Mapping[str, Any] | None = None, *, devices: int, position: int,
                     target: str, compile: bool, chip: str | None = None,
                     timeout: float | None = None) -> Any:
    """The `position`-th kernel of `fn(*args, **kwargs)` as traced on `devices` simulated
    devices, lowered (and compiled, when asked) for `target` in the worker that has them: a
    `KernelLowering`, or a string saying why there is none."""
    reply = _ask_worker(fn, args, kwargs, devices, timeout,
                        f"lowering on {devices} devices",
                        {"chip": chip, "lower": {"target": target, "compile": compile,
                                                 "position": position}})
    if isinstance(reply, str):
        return reply
    return reply.get("lowering") or reply.get("error") or "the worker process gave no lowering"


def _ask_worker(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any] | None,
                devices: int, timeout: float | None, label: str,
                extra: Mapping[str, Any]) -> dict[str, Any] | str:
    """The N-device worker's reply to a "trace" request, or why there is none."""
    try:
        work = pickle.loads(isolation.encode_request(
            {"fn": fn, "args": tuple(args), "kwargs": dict(kwargs or {}), "devices": devices,
             **extra}, kind="open-device-stepper"))
    except Exception as err:
        return (f"the call cannot be sent to the worker process "
                f"({isolation.why_not_sent(err)})")
    work.update({"stepper": "trace", "key": f"trace-{os.getpid()}"})
    done = isolation.call_worker(
        pickle.dumps(work), isolation.time_limit(timeout), label=label,
        running=lambda count, where: "the trace",
        interrupted=lambda seconds, what: f"{label}: interrupted after {seconds:.1f} s",
        devices=devices)
    if done.failed is not None or done.timed_out is not None:
        return str(done.failed or done.timed_out)
    reply = done.reply
    if not isinstance(reply, dict):
        return "the worker process gave no description"
    return reply


# --- in the worker ------------------------------------------------------------------------------


def describe(work: Mapping[str, Any]) -> dict[str, Any]:
    """The worker's side: {"inspections": (KernelInspection, ...)} or {"error": str}."""
    import jax

    from pallaslab.analysis.inspection import inspect_kernel
    from pallaslab.model import capture

    devices = work["devices"]
    if jax.device_count() != devices:
        return {"error": f"the worker process for devices={devices} has {jax.device_count()} "
                         "devices ($XLA_FLAGS or $JAX_PLATFORMS of this environment override "
                         "the simulated device count)"}
    try:
        chip = {"chip": work["chip"]} if work.get("chip") else {}
        cap = capture(work["fn"], *work["args"], **chip, **work["kwargs"])
        if work.get("lower"):
            return _lowered(cap, **work["lower"])
        inspections = tuple(inspect_kernel(k, backend=work.get("backend")) for k in cap)
    except Exception as err:
        first = (str(err).splitlines() or [""])[0]
        return {"error": f"capturing the function on {devices} devices failed in the worker "
                         f"process: {type(err).__name__}: {first}"}
    return {"inspections": tuple(dataclasses.replace(i, kernel=_travelling(i.kernel))
                                 for i in inspections)}


def _lowered(cap: Any, target: str, compile: bool, position: int) -> dict[str, Any]:
    from pallaslab.lowering import lower

    return {"lowering": lower(cap, target=target, compile=compile).kernels[position]}


def _travelling(kernel: Kernel) -> Kernel:
    """The kernel without its handle on JAX's objects (they stay in the worker)."""
    return dataclasses.replace(kernel, handle=None,
                               pipelines=tuple(_travelling(p) for p in kernel.pipelines))


# --- source lines -------------------------------------------------------------------------------

_DYNAMIC = re.compile(r"<dynamic-code>:(\d+)")


def _source_fixer(kernels: Iterable[Kernel]) -> Callable[[str, bool], str]:
    """Puts back the user's file (or notebook cell) where the local kernels know a source
    line of that number, one only; `shown`: text the user reads, named as the views name it."""
    known: dict[str, set[str]] = {}
    for k in kernels:
        for source in (k.source, k.call_site, *(d.source for d in k.dmas),
                       *(op.source for op in k.semaphore_ops),
                       *(op.index_map_source for op in k.operands)):
            if source:
                known.setdefault(source.rsplit(":", 1)[-1], set()).add(source)

    def fix(text: str, shown: bool) -> str:
        def user_line(m: re.Match[str]) -> str:
            if len(known.get(m[1], ())) != 1:
                return m[0]
            source = next(iter(known[m[1]]))
            return short_source(source) if shown else source
        return _DYNAMIC.sub(user_line, text) if "<dynamic-code>" in text else text
    return fix


def _with_sources(insp: KernelInspection, fix: Callable[[str, bool], str]) -> KernelInspection:
    return dataclasses.replace(
        insp, kernel=_fixed(insp.kernel, fix),
        findings=tuple(dataclasses.replace(f, message=fix(f.message, True))
                       for f in insp.findings))


def _fixed(value: Any, fix: Callable[[str, bool], str]) -> Any:
    """`value` with every "<dynamic-code>:N" in its strings fixed, through its dataclasses and
    tuples (kernels, operands, DMAs, semaphore operations, nested pipelines)."""
    if isinstance(value, str):
        return fix(value, False)
    if type(value) is tuple:
        return tuple(_fixed(v, fix) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, (type, Finding)):
        changes = {f.name: _fixed(getattr(value, f.name), fix)
                   for f in dataclasses.fields(value) if f.name != "handle"}
        return dataclasses.replace(value, **{n: v for n, v in changes.items()
                                             if v is not getattr(value, n)})
    return value
