"""Several cases in one call (`inspect`, `compare`, `lower`): one process, so one warm JAX,
one executor worker and one lowering cache for all of them.

The arguments are expanded by `pallaslab.cases.expand_case_arguments` (files, `file.py:func`,
directories, globs). A lone `file.py:func` keeps the single-case output exactly: its usual
JSON object, its errors ending the command as before. Otherwise every case runs, whatever
the others did, and `--json` prints `{"cases": [...]}`: each entry `{"case": SPEC, ...}` with
that case's usual object, or its `{"error": {...}}`; the first error is repeated at the top
(`"error"`), as every failed command's JSON has one. The exit status is the worst (0 < 1 < 2).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from pallaslab.cases import CaseEntry, expand_case_arguments
from pallaslab.cli._shared import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    console,
    describe_error,
    error_json,
    print_error,
    print_json,
    safe,
)
from pallaslab.util.text import visible


@dataclasses.dataclass(frozen=True)
class CaseOutcome:
    """What one case gave: its exit status and its usual JSON object."""
    status: int
    json: dict[str, Any]


RunOne = Callable[[str], CaseOutcome]  # runs the case SPEC, printing its text form unless --json


def run_cases(arguments: list[str], json_mode: bool, run_one: RunOne) -> int:
    """Run every case the arguments name; print the JSON (one object) and return the status."""
    listed = expand_case_arguments(arguments)
    if not listed.several:
        outcome = run_one(listed.entries[0].spec)  # errors end the command, as they always did
        if json_mode:
            print_json(outcome.json)
        return outcome.status
    entries, statuses = [], []
    for entry in listed.entries:
        if not json_mode:
            console().rule(f"[bold]{safe(entry.spec)}[/]", align="left")
        outcome = _one_of_several(entry, run_one, json_mode)
        entries.append({"case": entry.spec, **outcome.json})
        statuses.append(outcome.status)
    if json_mode:
        print_json(cases_json(entries))
    else:
        _summary(statuses)
    return max(statuses, default=EXIT_OK)


def cases_json(entries: list[dict[str, Any]]) -> dict[str, Any]:
    payload: dict[str, Any] = {"cases": entries}
    failed = next((e["error"] for e in entries if "error" in e), None)
    if failed is not None:
        payload["error"] = failed
    return payload


def _one_of_several(entry: CaseEntry, run_one: RunOne, json_mode: bool) -> CaseOutcome:
    """One case, its error its own entry (Ctrl-C and SIGTERM still end the command)."""
    if entry.error is not None:
        return _failed(entry.error, json_mode)
    try:
        return run_one(entry.spec)
    except UsageError as err:  # e.g. a --stage this case's lowering did not produce
        message = f"{err.prog}: error: {err}"
        print_error(message)
        return CaseOutcome(EXIT_ERROR, error_json("usage", message))
    except Exception as err:
        return _failed(err, json_mode)


def _failed(err: Exception, json_mode: bool) -> CaseOutcome:
    err_type, message, tb = describe_error(err)
    if tb and not json_mode:
        sys.stderr.write(visible(tb))
    print_error(message)
    return CaseOutcome(EXIT_ERROR, error_json(err_type, message + (f"\n{tb}" if tb else "")))


def _summary(statuses: list[int]) -> None:
    counts = {s: statuses.count(s) for s in (EXIT_OK, EXIT_FAILED, EXIT_ERROR)}
    console().print(f"{len(statuses)} case(s): {counts[EXIT_OK]} clean, {counts[EXIT_FAILED]} "
                    f"failed (exit 1), {counts[EXIT_ERROR]} could not finish (exit 2)")
