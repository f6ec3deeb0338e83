"""Block-size what-if: try candidate block sizes, see VMEM per chip, copies and predicted time.

`make(block_sizes) -> (fn, args)` builds the kernel for one candidate (`block_sizes` is whatever
the caller iterates over: a tuple, a dict, an int). Every candidate is captured (traced, not
run), then judged per chip by the occupancy model, the tiling table (fetches, HBM bytes) and
the pipeline model (predicted time). Rows are ranked: candidates that fit every chip first,
fastest first.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pallaslab.analysis.chips import DEFAULT_CHIPS
from pallaslab.analysis.occupancy import occupancy
from pallaslab.analysis.pipeline import PipelineError, pipeline
from pallaslab.analysis.tiling import tile
from pallaslab.model import capture


@dataclasses.dataclass(frozen=True)
class ChipVerdict:
    chip: str
    vmem_bytes: int
    limit: int
    fits: bool
    predicted_time: float  # seconds (nan when the pipeline cannot be modelled)


@dataclasses.dataclass(frozen=True)
class WhatIfRow:
    block_sizes: Any
    kernel: str
    programs: int | None
    fetches: int | None  # HBM<->VMEM block copies over the grid, all operands
    hbm_bytes: int | None
    chips: tuple[ChipVerdict, ...]
    error: str | None = None  # the candidate could not be built or captured

    @property
    def fits(self) -> bool:
        return self.error is None and all(c.fits for c in self.chips)

    def chip(self, name: str) -> ChipVerdict:
        for c in self.chips:
            if c.chip == name:
                return c
        raise KeyError(name)

    @property
    def worst_time(self) -> float:
        times = [c.predicted_time for c in self.chips]
        return max(times) if times and not any(math.isnan(t) for t in times) else math.inf


@dataclasses.dataclass(frozen=True)
class WhatIfTable:
    chips: tuple[str, ...]
    rows: tuple[WhatIfRow, ...]  # best first

    @property
    def best(self) -> WhatIfRow | None:
        return self.rows[0] if self.rows and self.rows[0].fits else None

    def to_json(self) -> list[dict[str, Any]]:
        return [{"block_sizes": repr(r.block_sizes), "kernel": r.kernel,
                 "programs": r.programs, "fetches": r.fetches, "hbm_bytes": r.hbm_bytes,
                 "fits": r.fits, "error": r.error,
                 "chips": {c.chip: dataclasses.asdict(c) for c in r.chips}} for r in self.rows]

    def __str__(self) -> str:
        head = f"{'block sizes':<22}{'fetches':>9}{'HBM MiB':>10}" + "".join(
            f"{c + ' VMEM KiB':>16}{c + ' us':>10}" for c in self.chips)
        lines = [head]
        for r in self.rows:
            if r.error:
                lines.append(f"{r.block_sizes!r:<22} error: {r.error}")
                continue
            hbm = f"{r.hbm_bytes / 2**20:.2f}" if r.hbm_bytes is not None else "?"
            cells = "".join(
                f"{c.vmem_bytes / 1024:>13.0f}{'' if c.fits else ' !!':<3}"
                f"{c.predicted_time * 1e6:>10.1f}" for c in r.chips)
            lines.append(f"{r.block_sizes!r:<22}{r.fetches or 0:>9}{hbm:>10}{cells}")
        return "\n".join(lines)


def what_if(make: Callable[[Any], Sequence[Any]], candidates: Iterable[Any],
            chips: Sequence[str] = DEFAULT_CHIPS, *, kernel: int = 0) -> WhatIfTable:
    """Judge every candidate block size; rows ranked fits-everywhere first, then fastest."""
    rows = [_row(make, c, tuple(chips), kernel) for c in candidates]
    rows.sort(key=lambda r: (not r.fits, r.error is not None, r.worst_time))
    return WhatIfTable(chips=tuple(chips), rows=tuple(rows))


def _row(make: Callable[[Any], Sequence[Any]], candidate: Any, chips: tuple[str, ...],
         index: int) -> WhatIfRow:
    try:
        built = make(candidate)
        fn, args = built[0], built[1]
        kwargs = built[2] if len(built) > 2 else {}
        k = capture(fn, *args, **kwargs)[index]
    except Exception as err:  # a candidate Pallas itself rejects is a row, not a crash
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return WhatIfRow(candidate, "?", None, None, None, (), error=first)
    empty = [i for i, g in enumerate(k.grid) if isinstance(g, int) and g == 0]
    if empty:
        grid = "(" + ", ".join("?" if g is None else str(g) for g in k.grid) + ")"
        return WhatIfRow(candidate, k.name, 0, None, None, (), error=(
            f"block sizes {candidate!r} give kernel {k.name!r} the grid {grid}: grid axis "
            f"{', '.join(map(str, empty))} is zero, so no program runs and the output is never "
            "written (rule: every grid axis must be at least 1; a block larger than its array "
            "dimension makes dimension // block zero)"))
    try:
        return _judge(k, candidate, chips)
    except Exception as err:  # an analysis that cannot judge it is a row naming why, not a crash
        return WhatIfRow(candidate, k.name, k.programs, None, None, (), error=(
            f"block sizes {candidate!r}: kernel {k.name!r} could not be analysed: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")))


def _judge(k: Any, candidate: Any, chips: tuple[str, ...]) -> WhatIfRow:
    t = tile(k)
    fetches = hbm = None
    if t is not None:
        windowed = [o for o in t.operands.values() if o.windowed]
        fetches = sum(o.fetches or 0 for o in windowed)
        hbm = sum(o.hbm_bytes or 0 for o in windowed)
    verdicts = []
    for chip in chips:
        occ = occupancy(k, chip)
        try:
            time = pipeline(k, chip, tiling=t).summary.predicted_time if t else math.nan
        except PipelineError:
            time = math.nan
        verdicts.append(ChipVerdict(occ.chip, occ.bytes, occ.limit, occ.fits, time))
    return WhatIfRow(candidate, k.name, k.programs, fetches, hbm, tuple(verdicts))
