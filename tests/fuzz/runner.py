"""Judging a drawn kernel: the oracles (plain JAX `interpret=True`, the NumPy model) first,
then pallaslab's `compare` and its check (the tiling analysis's error findings, what
`pallaslab check` fails on), and one outcome per kernel."""

from __future__ import annotations

import dataclasses
import traceback
from pathlib import Path

import numpy as np

import pallaslab
from fuzz.build import build, inputs
from fuzz.casefile import write_case
from fuzz.model import expected
from fuzz.spec import Generated, Kernel

# Outcomes. Failures (a case file is written for each):
INTERNAL_ERROR = "internal-error"  # pallaslab raised, or an executor failed on a valid kernel
FALSE_ERROR = "false-error"  # an error finding (check's or compare's) on a correct kernel
DISAGREEMENT = "disagreement"  # compare's executors or the reference differ on a correct kernel
MUTANT_MISSED = "mutant-missed"  # compare passed a wrong variant
ORACLE_DISAGREEMENT = "oracle-disagreement"  # plain JAX and the NumPy model differ (ours or JAX's)
FAILURES = (INTERNAL_ERROR, FALSE_ERROR, DISAGREEMENT, MUTANT_MISSED, ORACLE_DISAGREEMENT)
# Others:
PASSED = "passed"
MUTANT_CAUGHT = "mutant-caught"
EQUIVALENT_MUTANT = "equivalent-mutant"  # the mutant computes the right answer: not counted
INVALID_MUTANT = "invalid-mutant"  # plain JAX refuses the mutant: not counted

EXECUTORS = {"tpu-block": "vectorized,interpret,tpu-interpret,reference",
             "tpu-dma": "interpret,tpu-interpret,reference",
             "gpu-triton": "vectorized,interpret,reference"}


@dataclasses.dataclass(frozen=True)
class Verdict:
    generated: Generated
    outcome: str
    detail: str = ""
    check_errors: tuple[str, ...] = ()  # error finding codes of the check (mutants: tallied)
    unavailable: tuple[str, ...] = ()  # executors that could not run it (and why)
    case_file: Path | None = None


def tolerance(kernel: Kernel) -> tuple[float, float]:
    """(rtol, atol) for the oracles against each other: bf16 anywhere rounds to 2^-8."""
    return (2e-2, 2e-2) if "bfloat16" in repr(kernel) else (1e-4, 1e-4)


def close(a: np.ndarray, b: np.ndarray, kernel: Kernel) -> bool:
    rtol, atol = tolerance(kernel)
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def judge(g: Generated, *, timeout: float = 60.0, out_dir: Path | None = None) -> Verdict:
    verdict = _judge(g, timeout)
    if verdict.outcome in FAILURES and out_dir is not None:
        path = write_case(g, verdict.outcome, verdict.detail, EXECUTORS[g.kernel.family], out_dir)
        verdict = dataclasses.replace(verdict, case_file=path)
    return verdict


def _judge(g: Generated, timeout: float) -> Verdict:
    args = inputs(g.kernel, g.index)
    want = expected(g.reference_kernel, args)
    plain = np.asarray(build(g.reference_kernel, interpret=True)(*args))
    if not close(plain, want, g.kernel):
        return Verdict(g, ORACLE_DISAGREEMENT, "interpret=True and the NumPy model differ")
    if g.mutation:
        try:
            mutant_plain = np.asarray(build(g.kernel, interpret=True)(*args))
        except Exception as err:
            return Verdict(g, INVALID_MUTANT, f"{type(err).__name__}: {err}"[:200])
        if close(mutant_plain, want, g.kernel):
            return Verdict(g, EQUIVALENT_MUTANT)
    fn = build(g.kernel)
    try:
        comparison = pallaslab.compare(fn, *args, executors=EXECUTORS[g.kernel.family],
                                       reference=lambda *a: want, timeout=timeout)
        check_errors = _check(fn, args)
    except Exception:
        return Verdict(g, INTERNAL_ERROR, traceback.format_exc(limit=-3))
    return _classify(g, comparison, check_errors)


def _check(fn: object, args: tuple[np.ndarray, ...]) -> tuple[str, ...]:
    """What `pallaslab check CASE` (no --target) fails on: the error findings of the analysis
    of every captured kernel, by its own backend's rules."""
    from pallaslab.analysis.inspection import inspect_capture

    found = inspect_capture(pallaslab.capture(fn, *args))
    return tuple(f.code for i in found for f in i.findings if f.severity == "error")


def _classify(g: Generated, c: object, check_errors: tuple[str, ...]) -> Verdict:
    statuses = c.statuses  # type: ignore[attr-defined]
    unavailable = tuple(f"{n}: {s.reason}" for n, s in statuses.items()
                        if s.status == "unavailable")
    failed = {n: s for n, s in statuses.items() if s.status in ("failed", "timed-out")}
    errors = tuple(f.code for f in c.findings if f.severity == "error")  # type: ignore[attr-defined]
    mismatched = [f"{p.a} vs {p.b}: {p.mismatched_elements} elements, max abs {p.max_abs_err:g}"
                  for o in c.outputs for p in o.pairs if not p.allclose]  # type: ignore[attr-defined]
    base = {"check_errors": check_errors, "unavailable": unavailable}
    if g.mutation:
        caught = c.outcome in ("mismatch", "errors")  # type: ignore[attr-defined]
        said = f"{g.mutation}: {c.verdict()}"  # type: ignore[attr-defined]
        return Verdict(g, MUTANT_CAUGHT if caught else MUTANT_MISSED, said, **base)
    if failed:
        detail = "; ".join(f"{n} {s.status}: {_first_line(s.reason)}" for n, s in failed.items())
        return Verdict(g, INTERNAL_ERROR, detail, **base)
    if mismatched:
        return Verdict(g, DISAGREEMENT, "; ".join(mismatched), **base)
    if errors or check_errors:
        return Verdict(g, FALSE_ERROR, f"compare: {errors}, check: {check_errors}", **base)
    return Verdict(g, PASSED, **base)


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:300] if text else ""
