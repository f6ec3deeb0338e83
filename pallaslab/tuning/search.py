"""The tune: every config captured and judged by the model, the best few by the compiler."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pallaslab.analysis.chips import DEFAULT_CHIPS, normalize
from pallaslab.analysis.chips import chip as get_chip
from pallaslab.analysis.findings import find
from pallaslab.analysis.tiling import tile
from pallaslab.errors import PallasLabError
from pallaslab.model import Capture, capture
from pallaslab.tuning.estimate import estimate
from pallaslab.tuning.result import Candidate, TuneResult, Verdict
from pallaslab.tuning.space import Config, TuneSpaceError, configs

CaptureOf = Callable[[Config], Capture]
# A candidate out only by the VMEM estimate (no error finding) and needing at most this share
# of the limit is "over by the estimate": the estimate errs by this much on real kernels
# (tokamax's ragged dot on 7x: 32.5 of 32 MiB, libtpu compiles it), so when the compiler is
# asked (`compile_top` > 0) its verdict decides.
BORDERLINE = 1.25
OVER_BY_ESTIMATE = "over by the estimate"


def tune(fn: Callable[..., Any], space: Mapping[str, Iterable[Any]] | Sequence[Mapping[str, Any]],
         *args: Any, chip: str | Sequence[str] | None = None, target: str | None = None,
         compile_top: int = 3, timeout: float | None = None, **kwargs: Any) -> TuneResult:
    """Rank the configs of `space` for `fn(*args, **kwargs, **config)`.

    Each config is captured (traced, nothing runs); a config whose capture fails (a block
    that does not divide its array, rejected by the kernel's own check or by Pallas) or whose
    static findings hold an error is out, with its reason. The others get, per chip, their
    VMEM/SMEM fit (a candidate that does not fit a chip is out, naming the chip and the
    bytes) and the pipeline model's predicted time and bound. The `compile_top` fastest are
    then compiled by the real compiler for `target` (libtpu for a TPU target; default: each
    chip's TPU target), cached on disk; one it refuses is out, and the next is compiled,
    until `compile_top` compile or the ranking is exhausted. A candidate out only by the
    VMEM estimate and within 25% of the limit is "over by the estimate": it is compiled in
    its place by predicted time, and the compiler's verdict decides.

    Args:
        fn: builds and calls the kernel for one config, `fn(*args, **config)`.
        space: parameter names to candidate values (their product), or a list of configs.
        *args: `fn`'s arguments (arrays or `jax.ShapeDtypeStruct`s).
        chip: TPU chip(s) to model ("v5e"; default the target's chip, else v5e and v6e).
        target: the compiler's target ("tpu-v5e"); default: each chip's.
        compile_top: how many of the fastest to compile (0: the model only).
        timeout: seconds for the whole tune; configs not reached by then are out, saying so.
        **kwargs: `fn`'s other keyword arguments.

    Returns:
        A `TuneResult`: `.best`, `.candidates` (ranked first), `.to_text()`, `.to_html()`,
        `.to_json()`.

    Raises:
        TuneSpaceError: `space` names no configs, or a parameter that is not an identifier.
        UnknownTargetError, ValueError: an unknown target or chip.
    """
    def capture_of(config: Config) -> Capture:
        return capture(functools.partial(fn, **kwargs, **config), *args)

    return tune_captures(capture_of, space, chip=chip, target=target,
                         compile_top=compile_top, timeout=timeout)


def tune_captures(capture_of: CaptureOf,
                  space: Mapping[str, Iterable[Any]] | Sequence[Mapping[str, Any]], *,
                  chip: str | Sequence[str] | None = None, target: str | None = None,
                  compile_top: int = 3, timeout: float | None = None,
                  progress: Callable[[int, int], None] | None = None) -> TuneResult:
    """`tune` over `capture_of(config) -> Capture` (a case, a notebook line)."""
    listed = configs(space)
    if isinstance(compile_top, bool) or not isinstance(compile_top, int) or compile_top < 0:
        raise TuneSpaceError(f"tune: compile_top={compile_top!r}; rule: a whole number >= 0 "
                             "(0: the model only)")
    chips, targets = _chips_and_targets(chip, target, compile_top)
    deadline = None if timeout is None else time.monotonic() + timeout
    judged = []
    stopped = None
    for i, config in enumerate(listed):
        if deadline is not None and time.monotonic() > deadline:
            stopped = (f"the time limit of {timeout:g} s ran out after {i} of {len(listed)} "
                       "candidates")
            judged.append(Candidate(config, reason=f"not judged: {stopped}"))
            continue
        judged.append(judge(capture_of, config, chips))
        if progress is not None:
            progress(i + 1, len(listed))
    ranked = _ranked(judged)
    if targets and compile_top:
        ranked = _compiled(ranked, targets, compile_top, deadline)
    params = tuple(dict.fromkeys(name for config in listed for name in config))
    return TuneResult(chips, targets, params, tuple(ranked), compile_top, stopped)


def _chips_and_targets(chip: str | Sequence[str] | None, target: str | None,
                       compile_top: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from pallaslab.lowering.targets import get_target

    tgt = get_target(target) if target is not None else None
    chips: tuple[str, ...]
    if chip is None:
        chips = (tgt.chip,) if tgt is not None and tgt.chip else DEFAULT_CHIPS
    else:
        chips = (chip,) if isinstance(chip, str) else tuple(chip)
    chips = tuple(normalize(c) for c in chips)
    if not compile_top:
        return chips, ()
    if tgt is not None:
        return chips, (tgt.name,)
    return chips, tuple(get_chip(c).target for c in chips)


def judge(capture_of: CaptureOf, config: Config, chips: Sequence[str]) -> Candidate:
    """One config: captured, its findings, its fit and time per chip."""
    try:
        cap = capture_of(config)
    except Exception as err:  # a config the kernel or Pallas rejects is out, not a crash
        return Candidate(config, reason=f"capture failed: {_first_line(err)}")
    try:
        kernels = [(k, tile(k)) for k in cap]
        found = [f for k, t in kernels for f in find(k, t, backend="tpu")]
        chip_estimates = tuple(estimate(kernels, c) for c in chips)
    except PallasLabError as err:
        return Candidate(config, reason=f"could not be analysed: {_first_line(err)}")
    texts = tuple(f"{f.code} ({f.severity}): {f.message}" for f in found
                  if f.severity in ("error", "warning"))
    errors = [f for f in found if f.severity == "error"]
    reason = None
    over = False
    if errors:
        reason = f"{errors[0].code}: {errors[0].message}"
    elif unfit := [c for c in chip_estimates if not c.fits]:
        over = all(c.vmem_bytes <= BORDERLINE * c.limit for c in unfit)
        reason = (f"{OVER_BY_ESTIMATE + ': ' if over else ''}does not fit "
                  f"{', '.join(c.chip for c in unfit)}: {unfit[0].reason}")
    return Candidate(config, chip_estimates, texts, reason=reason, capture=cap,
                     over_estimate=over)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    if isinstance(err, PallasLabError) and text:  # ours (a case's error): it names its cause
        return text.splitlines()[0]
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def _ranked(candidates: Iterable[Candidate]) -> list[Candidate]:
    listed = list(candidates)
    ins = sorted((c for c in listed if not c.out), key=lambda c: c.time())
    outs = [c for c in listed if c.out]
    return [dataclasses.replace(c, rank=i + 1) for i, c in enumerate(ins)] + outs


def _compiled(ranked: list[Candidate], targets: Sequence[str], k: int,
              deadline: float | None) -> list[Candidate]:
    """Compile down the ranking until `k` compile; a refused one is out, naming the code.
    Candidates over by the estimate (`Candidate.over_estimate`) take their place in the
    ranking by predicted time and are compiled too: the compiler's verdict decides (one it
    accepts is ranked, saying so; one it refuses stays out)."""
    contenders = sorted((c for c in ranked if not c.out or c.over_estimate),
                        key=lambda c: c.time())
    out: list[Candidate] = [c for c in ranked if c.out and not c.over_estimate]
    accepted = 0
    for c in contenders:
        if accepted >= k or (deadline is not None and time.monotonic() > deadline):
            out.append(c)
            continue
        verdicts = tuple(compiler_verdict(c, t) for t in targets)
        refused = [v for v in verdicts if not v.compiles]
        if refused:
            v = refused[0]
            over = f"{OVER_BY_ESTIMATE}, and " if c.over_estimate else ""
            c = dataclasses.replace(c, verdicts=verdicts, reason=(
                f"{over}the compiler refuses it for {v.target}: {v.code}: {v.message}"))
        else:
            accepted += 1
            c = dataclasses.replace(c, verdicts=verdicts, reason=None)
        out.append(c)
    return _ranked(out)


def compiler_verdict(candidate: Candidate, target: str) -> Verdict:
    """The real compiler's verdict on every kernel of the candidate (`pallaslab.lower` with
    `compile=True`, cached on disk by the lowering cache)."""
    from pallaslab.lowering import lower  # the backend layer loads only when a compile is asked

    result = lower(candidate.capture, target=target, compile=True)
    cached = all(k.cached for k in result.kernels)
    for k in result.kernels:
        if not (k.ok and k.compiled):
            first = k.errors[0] if k.errors else None
            return Verdict(target, False, first.code if first else "refused",
                           first.message.splitlines()[0] if first else None, cached)
    return Verdict(target, True, cached=cached)
