"""Block-size what-if: try candidate block sizes, see VMEM per chip, copies and predicted time.

`make(block_sizes) -> (fn, args)` builds the kernel for one candidate (`block_sizes` is whatever
the caller iterates over: a tuple, a dict, an int). Every candidate is captured (traced, not
run), then judged per chip by the occupancy model, the tiling table (fetches, HBM bytes) and
the pipeline model (predicted time). A candidate fits a chip when its buffers and the matrix
product its body materialises fit the scoped-VMEM limit (`Occupancy.need_bytes`, the rule of
the `vmem-spill-risk` finding). With a `compiler` (the Memory view passes libtpu's, through
`pallaslab.lower`, when a compile is asked for) each chip also gets the real compiler's
verdict, which then decides the ranking: candidates accepted on every chip first, fastest
first.
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
from pallaslab.model import Capture, capture


@dataclasses.dataclass(frozen=True)
class CompilerVerdict:
    """The real compiler's word on one candidate on one chip."""

    compiles: bool
    need_bytes: int | None = None  # scoped VMEM it needs: its OOM figure or the bisected need
    error: str | None = None  # the refusal's diagnostic code ("vmem-oom"); None: it compiles


# (the candidate's capture, the kernel's index, the chip) -> the compiler's verdict
Compiler = Callable[[Capture, int, str], CompilerVerdict]


@dataclasses.dataclass(frozen=True)
class ChipVerdict:
    chip: str
    vmem_bytes: int  # the buffers
    limit: int
    fits: bool  # buffers plus body_bytes fit the limit (`Occupancy.need_fits`)
    predicted_time: float  # seconds (nan when the pipeline cannot be modelled)
    body_bytes: int = 0  # the matrix product the body materialises beside the buffers
    compiler: CompilerVerdict | None = None  # when a compile was asked for

    @property
    def need_bytes(self) -> int:
        return self.vmem_bytes + self.body_bytes

    @property
    def accepted(self) -> bool:
        """The compiler's verdict where it was asked, else the estimate's."""
        return self.compiler.compiles if self.compiler is not None else self.fits


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
        """The estimate: buffers plus what the body materialises fit every chip."""
        return self.error is None and all(c.fits for c in self.chips)

    @property
    def compiles(self) -> bool | None:
        """The compiler accepts it on every chip (None: no compile was asked for)."""
        if self.error is not None:
            return False
        if not self.chips or any(c.compiler is None for c in self.chips):
            return None
        return all(c.accepted for c in self.chips)

    @property
    def accepted(self) -> bool:
        return self.error is None and all(c.accepted for c in self.chips)

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
        return self.rows[0] if self.rows and self.rows[0].accepted else None

    @property
    def compiled(self) -> bool:
        return any(c.compiler is not None for r in self.rows for c in r.chips)

    def to_json(self) -> list[dict[str, Any]]:
        return [{"block_sizes": repr(r.block_sizes), "kernel": r.kernel,
                 "programs": r.programs, "fetches": r.fetches, "hbm_bytes": r.hbm_bytes,
                 "fits": r.fits, "compiles": r.compiles, "error": r.error,
                 "chips": {c.chip: {**dataclasses.asdict(c), "need_bytes": c.need_bytes}
                           for c in r.chips}} for r in self.rows]

    def __str__(self) -> str:
        """VMEM per chip as buffers + the body's matrix product, KiB ('!!': does not fit);
        with a compile, libtpu's verdict beside ('ok', or 'no' and the MiB it needs)."""
        compiled = self.compiled
        head = f"{'block sizes':<22}{'fetches':>9}{'HBM MiB':>10}" + "".join(
            f"{c + ' VMEM KiB':>20}" + (f"{c + ' libtpu':>17}" if compiled else "")
            + f"{c + ' us':>10}" for c in self.chips)
        lines = [head]
        for r in self.rows:
            if r.error:
                lines.append(f"{r.block_sizes!r:<22} error: {r.error}")
                continue
            hbm = f"{r.hbm_bytes / 2**20:.2f}" if r.hbm_bytes is not None else "?"
            cells = "".join(_chip_cells(c, compiled) for c in r.chips)
            lines.append(f"{r.block_sizes!r:<22}{r.fetches or 0:>9}{hbm:>10}{cells}")
        return "\n".join(lines)


def _chip_cells(c: ChipVerdict, compiled: bool) -> str:
    vmem = f"{c.vmem_bytes / 1024:.0f}" + (f"+{c.body_bytes / 1024:.0f}" if c.body_bytes else "")
    cells = f"{vmem:>17}{'' if c.fits else ' !!':<3}"
    if compiled:
        cells += f"{compiler_text(c.compiler):>17}"
    return cells + f"{c.predicted_time * 1e6:>10.1f}"


def compiler_text(verdict: CompilerVerdict | None) -> str:
    """'ok', 'no (18.36 MiB)', 'no (vmem-oom)'; '-' where no compile ran."""
    if verdict is None:
        return "-"
    if verdict.compiles:
        return "ok"
    if verdict.need_bytes is not None:
        return f"no ({verdict.need_bytes / 2**20:.2f} MiB)"
    return f"no ({verdict.error or 'refused'})"


def what_if(make: Callable[[Any], Sequence[Any]], candidates: Iterable[Any],
            chips: Sequence[str] = DEFAULT_CHIPS, *, kernel: int = 0,
            compiler: Compiler | None = None) -> WhatIfTable:
    """Judge every candidate block size; rows ranked accepted-everywhere first (the compiler's
    verdict where `compiler` is given, else the estimate's), then fastest."""
    rows = [_row(make, c, tuple(chips), kernel, compiler) for c in candidates]
    rows.sort(key=lambda r: (not r.accepted, r.error is not None, r.worst_time))
    return WhatIfTable(chips=tuple(chips), rows=tuple(rows))


def _row(make: Callable[[Any], Sequence[Any]], candidate: Any, chips: tuple[str, ...],
         index: int, compiler: Compiler | None) -> WhatIfRow:
    try:
        built = make(candidate)
        fn, args = built[0], built[1]
        kwargs = built[2] if len(built) > 2 else {}
        cap = capture(fn, *args, **kwargs)
        k = cap[index]
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
        row = _judge(k, candidate, chips)
    except Exception as err:  # an analysis that cannot judge it is a row naming why, not a crash
        return WhatIfRow(candidate, k.name, k.programs, None, None, (), error=(
            f"block sizes {candidate!r}: kernel {k.name!r} could not be analysed: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")))
    if compiler is None:
        return row
    # outside the guard above: a compiler that cannot run (no libtpu) says so to the caller
    return dataclasses.replace(row, chips=tuple(
        dataclasses.replace(c, compiler=compiler(cap, index, c.chip)) for c in row.chips))


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
        verdicts.append(ChipVerdict(occ.chip, occ.bytes, occ.limit, occ.need_fits, time,
                                    body_bytes=occ.product_bytes))
    return WhatIfRow(candidate, k.name, k.programs, fetches, hbm, tuple(verdicts))
