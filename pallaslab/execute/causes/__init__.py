"""Why an output is wrong: causes named for the outputs a comparison found mismatched.

- `index-map` (`dependence`): an input's (or the output's) index map made the programs that
  wrote a mismatched block read other blocks than the reference needs;
- `line` (`provenance`): the source lines (and programs) that last wrote the wrong elements;
- `first-visit` (`provenance`): an output or scratch block read before any program wrote it
  (an accumulator not initialised on its first visit).

Causes are found only on a mismatch (a passing comparison pays nothing), only for BlockSpec
`pallas_call` kernels whose outputs the function returns directly, and nothing is said where
they do not apply. The work is bounded (blocks examined, programs re-run) and the messages
say when it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from pallaslab.analysis.tiling import Tiling, tile, tiling_unavailable_reason
from pallaslab.execute.causes.cause import Cause, CauseKind
from pallaslab.execute.causes.dependence import index_map_causes
from pallaslab.execute.causes.provenance import Provenance, record_provenance
from pallaslab.execute.pair import PairComparison
from pallaslab.execute.protocol import Prepared
from pallaslab.model import Kernel

__all__ = ["Cause", "CauseKind", "Provenance", "find_causes"]


@dataclasses.dataclass(frozen=True)
class OutputCauses:
    causes: tuple[Cause, ...]
    provenance: Provenance | None


def find_causes(prepared: Prepared, outputs: Sequence[Sequence[PairComparison]],
                reference: Callable[..., Any] | None) -> tuple[OutputCauses | None, ...]:
    """Per output (its pairs of executors compared): its causes and provenance, or None where
    nothing mismatched or causes do not apply (not a kernel's output as it returned, not a
    BlockSpec grid)."""
    found: list[OutputCauses | None] = []
    recorded: dict[int, Any] = {}
    for i, pairs in enumerate(outputs):
        pair = _judged_pair(pairs)
        info = prepared.output_info[i]
        kernel = _kernel_of(prepared, info.kernel)
        tiling = _tiling(kernel)
        if pair is None or kernel is None or tiling is None or info.origin is None:
            found.append(None)
            continue
        causes: list[Cause] = []
        if reference is not None and "reference" in (pair.a, pair.b):
            causes += _blame_index_maps(prepared, kernel, tiling, info.origin, pair, reference, i)
        if kernel.index not in recorded:
            recorded[kernel.index] = record_provenance(prepared, kernel, tiling)
        record = recorded[kernel.index]
        provenance = record.provenance.get(info.origin) if record is not None else None
        if record is not None:
            causes += record.causes_for(info.origin, pair.mismatch)
        found.append(OutputCauses(tuple(causes), provenance))
    return tuple(found)


def _blame_index_maps(prepared: Prepared, kernel: Kernel, tiling: Tiling, origin: str,
                      pair: PairComparison, reference: Callable[..., Any], output: int
                      ) -> tuple[Cause, ...]:
    """Index-map causes; none when the analysis itself fails (a cause is an explanation on
    top of the comparison: it never stops one)."""
    try:
        return index_map_causes(kernel, tiling, origin, pair.mismatched_blocks, reference,
                                prepared.args, prepared.kwargs, output,
                                prepared.capture.argument_positions(kernel))
    except Exception:
        return ()


def _judged_pair(pairs: Sequence[PairComparison]) -> PairComparison | None:
    """The mismatched pair to explain: against the reference when there is one."""
    bad = [p for p in pairs if not p.allclose and p.error is None and p.mismatch.size]
    with_ref = [p for p in bad if "reference" in (p.a, p.b)]
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
