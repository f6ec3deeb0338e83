"""The device check's supervisor: runs the kernels in a child process (`child.py`), gives
each its own time limit and the whole check one, and rewrites the summary after every event.

It never imports JAX itself: on a GPU machine the child must be the only process holding the
GPU (JAX takes most of its memory when it starts).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pallaslab.device_check.report import (
    KernelReport,
    Summary,
    report_from_json,
    write_summary,
)

POLL = 0.2  # seconds between looks at the child and its progress file
START_LIMIT = 180.0  # seconds for the child to import JAX and find the GPU


class _Check:
    """The state of one check: reports so far, the device, the clock."""

    def __init__(self, folder: Path, cases: Sequence[str], time_limit: float,
                 kernel_limit: float, subject: str) -> None:
        self.folder, self.cases, self.subject = folder, list(cases), subject
        self.time_limit, self.kernel_limit = time_limit, kernel_limit
        self.started = time.monotonic()
        self.reports: dict[str, KernelReport] = {}
        self.device: dict[str, Any] | None = None
        self.children = 0

    def left(self) -> float:
        return self.time_limit - (time.monotonic() - self.started)

    def pending(self) -> list[str]:
        return [c for c in self.cases if c not in self.reports]

    def summary(self, status: Any, reason: str | None = None) -> Summary:
        why = "no GPU is attached" if status == "no-gpu" else reason
        kernels = tuple(self.reports.get(c) or KernelReport(c, "not-run", why)
                        for c in self.cases)
        return Summary(status, self.device, reason, kernels, time.monotonic() - self.started,
                       self.time_limit, self.kernel_limit)

    def save(self, status: Any = "running", reason: str | None = None) -> Summary:
        summary = self.summary(status, reason)
        write_summary(self.folder, summary)
        return summary


def run_check(folder: str | Path, cases: Sequence[str], *, time_limit: float,
              kernel_limit: float, subject: str = "device") -> Summary:
    """Check `cases` on the GPU, writing `folder/summary.json` as it goes; returns the last
    summary written. `subject`: the executor compared with the others (a dry run on a CPU
    names another than `device`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    check = _Check(folder, cases, time_limit, kernel_limit, subject)
    check.save()
    while True:
        pending = check.pending()
        if check.children and not pending:
            return check.save("complete")
        if check.left() <= 0:
            return check.save("time-limit", f"the check's time limit of {time_limit:g} s "
                                            "passed before these kernels ran")
        ended = _one_child(check, pending)
        if ended is not None:
            return ended


def _one_child(check: _Check, pending: list[str]) -> Summary | None:
    """Run a child on the pending cases until it ends or is killed; a final summary when the
    check is over (no GPU, or the child could not start), else None (go on)."""
    check.children += 1
    progress = check.folder / f"progress-{check.children}.jsonl"
    progress.unlink(missing_ok=True)  # a former check's, in a folder used again
    log = open(check.folder / f"child-{check.children}.log", "wb")  # noqa: SIM115
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the GPU's memory, as needed
    proc = subprocess.Popen(
        [sys.executable, "-m", "pallaslab.device_check.child", "--out", str(check.folder),
         "--progress", str(progress), "--kernel-limit", str(check.kernel_limit),
         "--subject", check.subject, "--", *pending],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        return _watch(check, proc, progress)
    finally:
        _kill(proc)
        log.close()


def _watch(check: _Check, proc: subprocess.Popen[bytes], progress: Path) -> Summary | None:
    seen = 0
    current: str | None = None
    since = time.monotonic()
    while True:
        events, seen = _new_events(progress, seen)
        for event in events:
            if event["event"] == "device":
                check.device = event["device"]
                if check.device is None:
                    return check.save("no-gpu", event["reason"])
            elif event["event"] == "start":
                current, since = event["case"], time.monotonic()
            elif event["event"] == "done":
                check.reports[event["case"]] = report_from_json(event["report"])
                current = None
                check.save()
        if proc.poll() is not None and not _new_events(progress, seen)[0]:
            return _child_ended(check, proc, current)
        waited = time.monotonic() - since
        if check.device is None and waited > START_LIMIT:
            return check.save("error", f"the check's process found no device within "
                                       f"{START_LIMIT:g} s: {_log_tail(check)}")
        if current is not None and (waited > check.kernel_limit or check.left() <= 0):
            limit = min(check.kernel_limit, waited)
            check.reports[current] = KernelReport(
                current, "timed-out", f"stopped by its time limit after {limit:.0f} s "
                f"(kernel limit {check.kernel_limit:g} s, check limit {check.time_limit:g} s)",
                wall_s=waited)
            check.save()
            return None
        if check.left() <= 0:
            return None
        time.sleep(POLL)


def _child_ended(check: _Check, proc: subprocess.Popen[bytes],
                 current: str | None) -> Summary | None:
    if check.device is None:
        return check.save("error", f"the check's process exited with status "
                                   f"{proc.returncode} before finding a device: "
                                   f"{_log_tail(check)}")
    if current is not None:  # it died in a kernel (a crash in the driver, out of memory)
        check.reports[current] = KernelReport(
            current, "failed", f"the check's process exited with status {proc.returncode} "
            f"while running it: {_log_tail(check)}")
        check.save()
    elif check.pending():  # ended between kernels without saying why
        return check.save("error", f"the check's process exited with status "
                                   f"{proc.returncode}: {_log_tail(check)}")
    return None


def _new_events(path: Path, seen: int) -> tuple[list[dict[str, Any]], int]:
    """Complete lines past the first `seen` bytes, and the new count of bytes read."""
    try:
        with open(path, "rb") as f:
            f.seek(seen)
            data = f.read()
    except FileNotFoundError:
        return [], seen
    complete = data[: data.rfind(b"\n") + 1]
    events = [json.loads(line) for line in complete.splitlines() if line.strip()]
    return events, seen + len(complete)


def _log_tail(check: _Check, lines: int = 4) -> str:
    path = check.folder / f"child-{check.children}.log"
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no output)"
    return " | ".join(text[-lines:]) or "(no output)"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)
