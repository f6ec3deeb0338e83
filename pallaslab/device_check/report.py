"""One kernel's result in the device check, and the summary file they are gathered into."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

# agreed: the subject (the device) ran and matched every other executor that ran;
# mismatch: it ran and differed; incomplete: it did not run, or nothing ran beside it;
# failed: the kernel could not be loaded, captured or compared; timed-out: its own time
# limit (or the check's) stopped it; skipped: it does not compile for this GPU; not-run: the
# check's time ran out first.
KernelStatus = Literal["agreed", "mismatch", "incomplete", "failed", "timed-out", "skipped",
                       "not-run"]
SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class KernelReport:
    case: str
    status: KernelStatus
    reason: str | None = None
    kernel: str | None = None  # the captured kernel's name
    backend: str | None = None  # "triton", "mosaic_gpu", ...
    executors: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    executors_ran: tuple[str, ...] = ()
    outputs_compared: int = 0  # outputs with at least one pair of the subject compared
    max_abs_err: float | None = None  # over the subject's pairs
    mismatched_programs: tuple[tuple[int, ...], ...] = ()  # grid programs the subject differs in
    pairs: tuple[dict[str, Any], ...] = ()
    verdict: str | None = None  # the comparison's own verdict line
    kernel_time_s: float | None = None  # the kernel's events in the trace, summed
    trace_events: int = 0
    trace_lanes: tuple[str, ...] = ()
    trace_file: str | None = None  # relative to the check's folder
    device_event_names: tuple[tuple[str, int], ...] = ()
    profile_error: str | None = None
    wall_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for key in ("executors_ran", "trace_lanes"):
            out[key] = list(out[key])
        out["mismatched_programs"] = [list(p) for p in self.mismatched_programs]
        out["device_event_names"] = [list(n) for n in self.device_event_names]
        out["pairs"] = list(self.pairs)
        return out


@dataclasses.dataclass(frozen=True)
class Summary:
    status: Literal["running", "complete", "no-gpu", "time-limit", "error"]
    device: dict[str, Any] | None
    reason: str | None
    kernels: tuple[KernelReport, ...]
    elapsed_s: float
    time_limit_s: float
    kernel_limit_s: float

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for k in self.kernels:
            found[k.status] = found.get(k.status, 0) + 1
        return found

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "status": self.status,
                "reason": self.reason, "device": self.device,
                "elapsed_s": round(self.elapsed_s, 3), "time_limit_s": self.time_limit_s,
                "kernel_limit_s": self.kernel_limit_s, "counts": self.counts(),
                "kernels": [k.to_json() for k in self.kernels]}


def write_summary(folder: str | Path, summary: Summary) -> Path:
    """Write `folder/summary.json` whole or not at all (a reader, or a check killed while
    writing, never sees half a file)."""
    path = Path(folder) / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary.to_json(), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path


def exit_status(summary: Summary) -> int:
    """The check's exit status (see the package's docstring)."""
    from pallaslab.device_check import EXIT_AGREED, EXIT_NO_GPU, EXIT_PROBLEMS

    if summary.status == "no-gpu":
        return EXIT_NO_GPU
    good = ("agreed", "skipped")
    ok = summary.status == "complete" and summary.kernels and \
        all(k.status in good for k in summary.kernels) and \
        any(k.status == "agreed" for k in summary.kernels)
    return EXIT_AGREED if ok else EXIT_PROBLEMS


def text_lines(summary: Summary) -> Sequence[str]:
    """The check's result for a terminal, one line per kernel."""
    device = summary.device or {}
    head = (f"device check: {summary.status}"
            + (f" on {device.get('name')} (JAX {device.get('jax')})" if device else "")
            + (f": {summary.reason}" if summary.reason else ""))
    lines = [head]
    if summary.status == "no-gpu":
        return [*lines, f"  {len(summary.kernels)} kernels not run"]
    for k in summary.kernels:
        err = "" if k.max_abs_err is None else f" max|err| {k.max_abs_err:.3g}"
        took = "" if k.kernel_time_s is None else f" kernel {k.kernel_time_s * 1e6:.1f} us"
        why = f" ({k.reason})" if k.reason and k.status != "agreed" else ""
        lines.append(f"  {k.status:<10} {k.case}{err}{took}{why}")
    return lines


def report_from_json(data: dict[str, Any]) -> KernelReport:
    """A kernel's report as the child process wrote it (`KernelReport.to_json`)."""
    fields = {f.name for f in dataclasses.fields(KernelReport)}
    kept = {k: v for k, v in data.items() if k in fields}
    for key in ("executors_ran", "trace_lanes"):
        kept[key] = tuple(kept.get(key, ()))
    kept["mismatched_programs"] = tuple(tuple(p) for p in kept.get("mismatched_programs", ()))
    kept["device_event_names"] = tuple((str(n), int(c))
                                       for n, c in kept.get("device_event_names", ()))
    kept["pairs"] = tuple(kept.get("pairs", ()))
    return KernelReport(**kept)
