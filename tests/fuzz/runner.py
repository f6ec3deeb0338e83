"""Judging a drawn kernel: the oracles (plain JAX `interpret=True`, the NumPy model) first,
then pallaslab's `compare` and its check (the tiling analysis's error findings, what
`pallaslab check` fails on), and one outcome per kernel.

`judge_many(batch=N)` judges kernels together: one `compare` (and one check) of a function
that calls N of them, each output against its own kernel's NumPy model. A batch whose
verdicts might not be each kernel's own (a failed or unavailable executor, a mismatch of a
correct kernel, an error finding, a mutant whose output matched) is split in halves and
judged again, down to single kernels. Off by default (N = 1): on 2 CPU cores a batch costs
more than its kernels one by one (XLA compiles the batch's computations no faster, and nothing
compiled is reused across batches); benchmarks/bench_fuzz.py measures both."""

from __future__ import annotations

import dataclasses
import itertools
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import pallaslab
from fuzz.build import build, inputs
from fuzz.casefile import write_case
from fuzz.model import expected
from fuzz.spec import AtomicKernel, Generated, Kernel, MosaicGpuKernel, RemoteKernel

Args = tuple[np.ndarray, ...]
Fn = Callable[..., Any]

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
             "gpu-triton": "vectorized,interpret,reference",
             "tpu-pipeline": "vectorized,interpret,tpu-interpret,reference",
             "gpu-atomics": "vectorized,interpret,reference",
             "mosaic-gpu": "gpu-interpret,reference",
             "tpu-multi": "tpu-interpret,reference"}


@dataclasses.dataclass(frozen=True)
class Verdict:
    generated: Generated
    outcome: str
    detail: str = ""
    check_errors: tuple[str, ...] = ()  # error finding codes of the check (mutants: tallied)
    unavailable: tuple[str, ...] = ()  # executors that could not run it (and why)
    case_file: Path | None = None


def tolerance(kernel: Kernel) -> tuple[float, float]:
    """(rtol, atol) for the oracles against each other: bf16 (or f16) anywhere rounds to 2^-8
    (2^-11), a bf16 round trip included (XLA may keep the f32 value: its excess precision)."""
    bf16 = ("bfloat16" in repr(kernel) or "float16" in repr(kernel)
            or getattr(kernel, "round_trip", False))
    return (2e-2, 2e-2) if bf16 else (1e-4, 1e-4)


def close(a: np.ndarray, b: np.ndarray, kernel: Kernel) -> bool:
    rtol, atol = tolerance(kernel)
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def judge(g: Generated, *, timeout: float = 60.0, out_dir: Path | None = None) -> Verdict:
    return _written(_judge(g, timeout), out_dir)


def _judge(g: Generated, timeout: float) -> Verdict:
    args, want, early = _oracles(g)
    return early or _compare_one(g, args, want, timeout)


def _oracles(g: Generated) -> tuple[Args, np.ndarray, Verdict | None]:
    """The kernel's inputs, the expected output, and the verdict the oracles alone give (None:
    pallaslab's compare judges it). The expected output is plain JAX's (`interpret=True`),
    once the NumPy model agrees with it: the same XLA ops as pallaslab's executors, so a
    transcendental that XLA and NumPy round one ulp apart is no disagreement."""
    args = inputs(g.kernel, g.index)
    if isinstance(g.kernel, AtomicKernel | MosaicGpuKernel | RemoteKernel):
        return args, *_model_oracle(g, args)
    plain = np.asarray(build(g.reference_kernel, interpret=True)(*args))
    return args, plain, _judge_by_oracles(g, args, plain)


def _model_oracle(g: Generated, args: Args) -> tuple[np.ndarray, Verdict | None]:
    """The NumPy model alone, where plain JAX cannot run the kernel (JAX's interpreter
    discharges no masked or rank-0 atomic; its GPU interpreter refuses a Mosaic GPU
    pipeline's predicated copies; a kernel across devices needs them, which this process does
    not simulate); it also models each mutant, so an equivalent one is still set aside."""
    want = expected(g.reference_kernel, args)
    if g.mutation and close(expected(g.kernel, args), want, g.kernel):
        return want, Verdict(g, EQUIVALENT_MUTANT)
    return want, None


def _judge_by_oracles(g: Generated, args: Args, plain: np.ndarray) -> Verdict | None:
    if not close(plain, expected(g.reference_kernel, args), g.kernel):
        return Verdict(g, ORACLE_DISAGREEMENT, "interpret=True and the NumPy model differ")
    if g.mutation:
        try:
            mutant_plain = np.asarray(build(g.kernel, interpret=True)(*args))
        except Exception as err:
            return Verdict(g, INVALID_MUTANT, f"{type(err).__name__}: {err}"[:200])
        if close(mutant_plain, plain, g.kernel):
            return Verdict(g, EQUIVALENT_MUTANT)
    return None


def _compare_one(g: Generated, args: Args, want: np.ndarray, timeout: float) -> Verdict:
    try:
        comparison, check_errors = _compare(build(g.kernel), args, want, g.kernel, timeout)
    except Exception:
        return Verdict(g, INTERNAL_ERROR, traceback.format_exc(limit=-3))
    return _classify(g, comparison, sum(check_errors, ()))


def _compare(fn: Fn, args: Args, want: object, kernel: Kernel,
             timeout: float) -> tuple[Any, tuple[tuple[str, ...], ...]]:
    """pallaslab's compare of `fn`, and its check per captured kernel, traced once for both
    (a kernel across devices: compared on its simulated devices, where it is traced again)."""
    captured = pallaslab.capture(fn, *args)
    devices = getattr(kernel, "devices", None)
    comparison = pallaslab.compare(fn, *args, executors=EXECUTORS[kernel.family],
                                   reference=lambda *a: want, timeout=timeout,
                                   captured=None if devices else captured, devices=devices)
    return comparison, _check(captured)


def _check(captured: Any) -> tuple[tuple[str, ...], ...]:
    """What `pallaslab check CASE` (no --target) fails on, per captured kernel: the error
    findings of its analysis, by its own backend's rules."""
    from pallaslab.analysis.inspection import inspect_capture

    return tuple(tuple(f.code for f in i.findings if f.severity == "error")
                 for i in inspect_capture(captured))


# --- many kernels at once ----------------------------------------------------------------------

Pending = tuple[int, Generated, Args, np.ndarray]


def judge_many(gs: Sequence[Generated], *, timeout: float = 60.0, out_dir: Path | None = None,
               batch: int = 1) -> list[Verdict]:
    """`judge` of each of `gs`, in order: the kernels the oracles leave to pallaslab compared
    `batch` at a time (see the module's docstring)."""
    verdicts: dict[int, Verdict] = {}
    pending: dict[tuple[str, bool, bool], list[Pending]] = {}
    for n, g in enumerate(gs):
        args, want, early = _oracles(g)
        if early is not None:
            verdicts[n] = _written(early, out_dir)
            continue
        pending.setdefault(_batch_key(g), []).append((n, g, args, want))
    for group in pending.values():
        for start in range(0, len(group), batch):
            for n, verdict in _compare_batch(group[start:start + batch], timeout):
                verdicts[n] = _written(verdict, out_dir)
    return [verdicts[n] for n in range(len(gs))]


def _batch_key(g: Generated) -> tuple[str, bool, bool]:
    """Kernels batched together: one family (one executor list), correct or mutants, and alike
    in whether TPU interpret mode refuses them (a "parallel" grid dimension after another),
    so a batch's unavailable executor is each kernel's own."""
    semantics = getattr(g.kernel, "semantics", ())
    refused = any(a != "parallel" and b == "parallel"
                  for a, b in itertools.pairwise(semantics))
    return g.kernel.family, bool(g.mutation), refused


def _compare_batch(batch: Sequence[Pending], timeout: float) -> list[tuple[int, Verdict]]:
    """Clean (each kernel's verdict what it alone gets) or split in halves, down to one."""
    if len(batch) == 1:
        n, g, args, want = batch[0]
        return [(n, _compare_one(g, args, want, timeout))]
    fns = [build(g.kernel) for _, g, _, _ in batch]
    starts = np.cumsum([0, *(len(args) for _, _, args, _ in batch)])

    def together(*flat: Any) -> tuple[Any, ...]:
        return tuple(f(*flat[a:b]) for f, a, b in zip(fns, starts, starts[1:], strict=False))

    flat = tuple(a for _, _, args, _ in batch for a in args)
    wants = tuple(want for *_, want in batch)
    try:
        c, check_errors = _compare(together, flat, wants, batch[0][1].kernel, timeout)
        verdicts = _split(c, check_errors, [g for _, g, _, _ in batch])
    except Exception:
        verdicts = None
    if verdicts is None:
        half = len(batch) // 2
        return _compare_batch(batch[:half], timeout) + _compare_batch(batch[half:], timeout)
    return list(zip((n for n, *_ in batch), verdicts, strict=True))


def _split(c: Any, check_errors: tuple[tuple[str, ...], ...],
           gs: list[Generated]) -> list[Verdict] | None:
    """Each kernel's verdict from the batch's comparison, where it is the one the kernel alone
    gets (None: it may not be). Every executor must have run (TPU interpret mode may refuse a
    batch whose every grid it refuses); correct kernels: all close, no error finding;
    mutants: each one's own output mismatched (caught by that alone)."""
    refused = _batch_key(gs[0])[2]
    ran = all(s.status == "ran" or (refused and name == "tpu-interpret"
                                    and s.status == "unavailable")
              for name, s in c.statuses.items())
    if not ran or len(c.outputs) != len(gs) or len(check_errors) != len(gs):
        return None
    unavailable = tuple(f"{name}: {s.reason}" for name, s in c.statuses.items()
                        if s.status == "unavailable")
    if gs[0].mutation:
        if not all(any(not p.allclose for p in o.pairs) for o in c.outputs):
            return None
        return [Verdict(g, MUTANT_CAUGHT, f"{g.mutation}: MISMATCH", errors, unavailable)
                for g, errors in zip(gs, check_errors, strict=True)]
    if not c.allclose or any(f.severity == "error" for f in c.findings) or any(check_errors):
        return None
    return [Verdict(g, PASSED, unavailable=unavailable) for g in gs]


def _written(verdict: Verdict, out_dir: Path | None) -> Verdict:
    g = verdict.generated
    if verdict.outcome not in FAILURES or out_dir is None:
        return verdict
    path = write_case(g, verdict.outcome, verdict.detail, EXECUTORS[g.kernel.family], out_dir)
    return dataclasses.replace(verdict, case_file=path)


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
