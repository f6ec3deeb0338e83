"""One kernel of the device check: compared across executors, then profiled through the
Pipeline tab's profile path."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pallaslab.device_check.cases import CheckCase, registered_reference
from pallaslab.device_check.report import KernelReport, KernelStatus

BACKSTOP = 30.0  # seconds past the kernel's limit for the runs' own time limits


def check_kernel(case: CheckCase, folder: str | Path, limit: float, *,
                 subject: str = "device",
                 capability: tuple[int, int] | None = None) -> KernelReport:
    """Compare `subject` (the `device` executor; another executor where no GPU is, as in the
    tests) with the kernel's interpreter and its reference, then profile it (for real on the
    device, interpreted otherwise). Every failure becomes the report's status and reason."""
    t0 = time.perf_counter()
    if why := case.skip_reason(capability):
        return KernelReport(case.spec, "skipped", why)
    try:
        report = _compared(case, limit, subject)
    except Exception as err:  # a kernel's failure is its report, never the check's end
        return KernelReport(case.spec, "failed", _one_line(err),
                            wall_s=time.perf_counter() - t0)
    report = _profiled(report, case, Path(folder), on_device=subject == "device")
    return _with(report, wall_s=time.perf_counter() - t0)


def _compared(case: CheckCase, limit: float, subject: str) -> KernelReport:
    from pallaslab.cases import capture_case, load_case
    from pallaslab.execute import compare
    from pallaslab.execute.registry import executor_of_mode, reference_executor

    loaded = load_case(case.spec)
    reference = registered_reference(case.name)
    kernel = capture_case(loaded)[0]
    interpreter = executor_of_mode("gpu" if kernel.backend == "mosaic_gpu" else "hlo")
    executors = list(dict.fromkeys([subject, interpreter, *(
        [reference_executor()] if reference is not None else [])]))
    # The supervisor stops the kernel at `limit`; the runs' own limit is only a backstop.
    comparison = compare(loaded.fn, *loaded.args, executors=executors, reference=reference,
                         timeout=limit + BACKSTOP, **loaded.kwargs)
    data = comparison.to_json()
    pairs = [dict(pair, output=o["origin"]) for o in data["outputs"] for pair in o["pairs"]
             if subject in (pair["a"], pair["b"])]
    errors = [p["max_abs_err"] for p in pairs if p["max_abs_err"] is not None]
    programs = sorted({tuple(p) for pair in pairs for p in pair["programs"]})
    statuses = data["executors_status"]
    ran = tuple(name for name, s in statuses.items() if s["status"] == "ran")
    status: KernelStatus
    if subject not in ran:
        status, reason = "incomplete", f"{subject} did not run: {statuses[subject]['reason']}"
    elif not pairs:
        status, reason = "incomplete", f"nothing ran beside {subject}: " + "; ".join(
            f"{n}: {s['status']} ({s['reason']})" for n, s in statuses.items() if n != subject)
    elif all(p["allclose"] for p in pairs):
        status, reason = "agreed", None
    else:
        status = "mismatch"
        reason = "; ".join(f"{p['output']}: {p['a']} vs {p['b']}: {p['mismatched_elements']} "
                           "elements differ" for p in pairs if not p["allclose"])
    return KernelReport(
        case.spec, status, reason, kernel=kernel.name, backend=kernel.backend,
        executors=statuses, executors_ran=ran,
        outputs_compared=len({p["output"] for p in pairs}),
        max_abs_err=max(errors) if errors else None, mismatched_programs=tuple(programs),
        pairs=tuple(_short_pair(p) for p in pairs), verdict=data["verdict"])


def _short_pair(pair: dict[str, Any]) -> dict[str, Any]:
    keep = ("output", "a", "b", "max_abs_err", "max_rel_err", "mismatched_elements",
            "allclose", "rtol", "atol", "mismatched_blocks", "programs", "error")
    return {k: pair.get(k) for k in keep}


def _profiled(report: KernelReport, case: CheckCase, folder: Path, *,
              on_device: bool) -> KernelReport:
    """The kernel under JAX's profiler, read as the Pipeline tab reads it: the trace becomes
    a `ProfileTimeline`, and that the measured track the tab draws beside the model."""
    from pallaslab.cases import capture_case, load_case
    from pallaslab.execute.profile import device_event_names, profile
    from pallaslab.views.pipeline_payload import PROFILE_STEP_KIND, track

    try:
        loaded = load_case(case.spec)
        kernel = capture_case(loaded)[0]
        timeline = profile(kernel, interpret=not on_device,
                           trace_dir=str(folder / "traces" / case.name))
    except Exception as err:  # no trace is the profile's failure, not the comparison's
        return _with(report, profile_error=_one_line(err))
    trace = timeline.trace_file
    report = _with(report, kernel_time_s=timeline.total_time,
                   trace_file=os.path.relpath(trace, folder) if trace else None)
    try:
        ev = timeline.events
        drawn = track(f"measured · {timeline.device}", "profile", ev, PROFILE_STEP_KIND,
                      float(ev.end.max()) if len(ev) else 0.0)
        names = tuple(device_event_names(trace)) if trace else ()
    except Exception as err:
        return _with(report, profile_error=f"the measured track: {_one_line(err)}")
    return _with(report, trace_events=drawn["count"], trace_lanes=tuple(drawn["lanes"]),
                 device_event_names=names)


def _with(report: KernelReport, **changes: Any) -> KernelReport:
    import dataclasses

    return dataclasses.replace(report, **changes)


def _one_line(err: BaseException) -> str:
    text = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
    return f"{type(err).__name__}: {text[:400]}"
