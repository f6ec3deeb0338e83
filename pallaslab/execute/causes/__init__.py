"""Why an output is wrong: causes named for the outputs a comparison found mismatched.

- `index-map` (`dependence`): an input's (or the output's) index map made the programs that
  wrote a mismatched block read other blocks than the reference needs;
- `line` (`provenance`): the source lines (and programs) that last wrote the wrong elements;
- `first-visit` (`provenance`): an output or scratch block read before any program wrote it
  (an accumulator not initialised on its first visit).

Causes are found only on a mismatch (a passing comparison pays nothing), only for BlockSpec
`pallas_call` kernels whose outputs the function returns directly or through a wrapper that
only moves or casts their elements (`wrapped`: transposed, reshaped, sliced, padded, ...; a
wrapper that combines elements, such as a sum, is said in one line), and nothing is said
where they do not apply. The work is bounded (blocks examined, programs re-run) and the messages
say when it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from pallaslab.analysis.tiling import Tiling, tile, tiling_unavailable_reason
from pallaslab.execute.causes.body_lines import Expected, body_lines
from pallaslab.execute.causes.cause import Cause, CauseKind
from pallaslab.execute.causes.dependence import index_map_causes
from pallaslab.execute.causes.provenance import Provenance, Recorded, record_provenance
from pallaslab.execute.causes.wrapped import (
    ElementTrace,
    Trace,
    kernel_origin,
    trace_kernel_inputs,
    traced_label,
    traced_provenance,
)
from pallaslab.execute.comparing.pair import PairComparison
from pallaslab.execute.protocol import Prepared
from pallaslab.execute.registry import reference_executor
from pallaslab.model import Kernel

__all__ = ["Cause", "CauseKind", "Provenance", "find_causes"]


@dataclasses.dataclass(frozen=True)
class OutputCauses:
    causes: tuple[Cause, ...]
    provenance: Provenance | None


def find_causes(prepared: Prepared, outputs: Sequence[Sequence[PairComparison]],
                reference: Callable[..., Any] | None,
                traces: Sequence[Trace | None] | None = None
                ) -> tuple[OutputCauses | None, ...]:
    """Per output (its pairs of executors compared; `traces`: for an output a wrapper made
    from a kernel output, where its elements came from): its causes and provenance, or None
    where nothing mismatched or causes do not apply (not a kernel's output, as it returned
    or traced through a wrapper; not a BlockSpec grid)."""
    found: list[OutputCauses | None] = []
    recorded: dict[int, Recorded | None] = {}
    for i, pairs in enumerate(outputs):
        pair = _judged_pair(pairs)
        trace = traces[i] if traces is not None else None
        target = _target(prepared, i, trace)
        if pair is None or target is None:
            found.append(None)
            continue
        found.append(_output_causes(prepared, target, pair, reference, i, recorded))
    return tuple(found)


@dataclasses.dataclass(frozen=True)
class _Target:
    """The kernel output a function output's wrong elements are explained on."""

    kernel: Kernel
    tiling: Tiling
    origin: str  # the kernel output's origin
    label: str  # how the line cause names the output
    trace: ElementTrace | None  # None: the function returns the kernel output as it is


def _target(prepared: Prepared, i: int, trace: Trace | None) -> _Target | None:
    info = prepared.output_info[i]
    if info.origin is not None:
        kernel = _kernel_of(prepared, info.kernel)
        tiling = _tiling(kernel)
        return None if kernel is None or tiling is None else \
            _Target(kernel, tiling, info.origin, info.origin, None)
    if not isinstance(trace, ElementTrace):
        return None
    kernel = _kernel_of(prepared, trace.kernel)
    tiling = _tiling(kernel)
    if kernel is None or tiling is None:
        return None
    return _Target(kernel, tiling, kernel_origin(prepared, trace),
                   traced_label(info.name, prepared, trace), trace)


def _output_causes(prepared: Prepared, target: _Target, pair: PairComparison,
                   reference: Callable[..., Any] | None, i: int,
                   recorded: dict[int, Recorded | None]) -> OutputCauses:
    kernel, trace = target.kernel, target.trace
    wrong = pair.mismatch if trace is None else trace.to_kernel(pair.mismatch)
    causes: list[Cause] = []
    if reference is not None and reference_executor() in (pair.a, pair.b):
        causes += _blame_index_maps(prepared, target, pair, reference, i)
    if kernel.index not in recorded:
        recorded[kernel.index] = record_provenance(prepared, kernel, target.tiling)
    record = recorded[kernel.index]
    if record is None:
        return OutputCauses(tuple(causes), None)
    provenance = record.provenance.get(target.origin)
    expected = _expected(prepared, pair, reference, i) if trace is None else None
    causes += [_through(c, target, record, wrong, provenance, expected) if c.kind == "line"
               else c for c in record.causes_for(target.origin, wrong, target.label)]
    if provenance is not None and trace is not None:
        provenance = traced_provenance(provenance, trace)
    return OutputCauses(tuple(causes), provenance)


def _expected(prepared: Prepared, pair: PairComparison, reference: Callable[..., Any] | None,
              output: int) -> Callable[[], Expected | None]:
    """The reference's values of output `output`, computed only when asked for."""
    def values() -> Expected | None:
        if reference is None or reference_executor() not in (pair.a, pair.b):
            return None
        out = jax.tree.leaves(reference(*prepared.args, **prepared.kwargs))[output]
        return Expected(np.asarray(out), pair.rtol, pair.atol)
    return values


def _through(cause: Cause, target: _Target, record: Recorded, wrong: Any,
             provenance: Provenance | None,
             expected: Callable[[], Expected | None] | None = None) -> Cause:
    """The line cause with the body lines its wrong values flow through (as it was when
    they cannot be found: a cause is an explanation, it never stops a comparison)."""
    if provenance is None or record.replay is None:
        return cause
    try:
        found = body_lines(target.kernel, record.replay, target.origin, wrong, provenance,
                           expected() if expected is not None else None)
    except Exception:
        return cause
    if found is None:
        return cause
    lines, said = found
    return dataclasses.replace(cause, through=lines, message=f"{cause.message}; {said}")


def _blame_index_maps(prepared: Prepared, target: _Target, pair: PairComparison,
                      reference: Callable[..., Any], output: int) -> tuple[Cause, ...]:
    """Index-map causes; none when the analysis itself fails (a cause is an explanation on
    top of the comparison: it never stops one)."""
    try:
        return index_map_causes(target.kernel, target.tiling, target.origin,
                                pair.mismatched_blocks, reference, prepared.args,
                                prepared.kwargs, output,
                                prepared.capture.argument_positions(target.kernel),
                                target.trace, trace_kernel_inputs(prepared, target.kernel))
    except Exception:
        return ()


def _judged_pair(pairs: Sequence[PairComparison]) -> PairComparison | None:
    """The mismatched pair to explain: against the reference when there is one."""
    bad = [p for p in pairs if not p.allclose and p.error is None and p.mismatch.size]
    with_ref = [p for p in bad if reference_executor() in (p.a, p.b)]
    chosen = with_ref or bad
    return chosen[0] if chosen else None


def _kernel_of(prepared: Prepared, index: int | None) -> Kernel | None:
    if index is None:
        return None
    kernel = prepared.capture[index]
    if kernel.kind != "pallas_call" or kernel.handle is None or \
            any(d is None for d in kernel.grid):
        return None
    return kernel


def _tiling(kernel: Kernel | None) -> Tiling | None:
    if kernel is None or tiling_unavailable_reason(kernel) is not None:
        return None
    return tile(kernel)
