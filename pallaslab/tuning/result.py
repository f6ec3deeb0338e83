"""What a tune found: per candidate its config, per chip its fit, predicted time and bound,
its findings and the compiler's verdict, or why it is out."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pallaslab.tuning.space import config_text

BOUNDS = ("compute", "HBM", "exposed DMA", "per-step overhead")


@dataclasses.dataclass(frozen=True)
class ChipEstimate:
    """One candidate on one TPU chip."""

    chip: str
    fits: bool  # its VMEM/SMEM buffers (and the matrix product its body keeps) fit the limit
    vmem_bytes: int  # buffers plus the body's matrix product
    limit: int  # the scoped-VMEM limit
    time: float | None  # predicted seconds (None: not modelled)
    bound: str | None  # one of BOUNDS
    model: str  # "pipeline", or "roofline" where the kernel moves its own data
    reason: str | None = None  # why it does not fit
    flops: float | None = None  # the kernels' modelled ops (the roofline chart's work)
    hbm_bytes: int | None = None  # the bytes they move to and from HBM

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The real compiler's word on one candidate for one target."""

    target: str
    compiles: bool
    code: str | None = None  # the refusal's diagnostic code ("vmem-oom")
    message: str | None = None
    cached: bool = False

    @property
    def text(self) -> str:
        return "ok" if self.compiles else f"refused ({self.code or 'error'})"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Candidate:
    config: dict[str, Any]
    chips: tuple[ChipEstimate, ...] = ()
    findings: tuple[str, ...] = ()  # "code (severity): message" of its error and warning findings
    verdicts: tuple[Verdict, ...] = ()  # the compiler's, where it ran
    reason: str | None = None  # why it is out (None: in the ranking)
    rank: int | None = None  # 1 is the best; None: out
    capture: Any = dataclasses.field(default=None, repr=False, compare=False)  # for compiles
    # Out only by the VMEM estimate, within 25% of the limit: the compiler decides when asked.
    over_estimate: bool = False

    @property
    def out(self) -> bool:
        return self.reason is not None

    @property
    def decided_by(self) -> str | None:
        """Who decided a candidate over by the estimate: "the compiler" (it ran), else "the
        estimate"; None for every other candidate."""
        if not self.over_estimate:
            return None
        return "the compiler" if self.verdicts else "the estimate"

    @property
    def label(self) -> str:
        return config_text(self.config)

    def chip(self, name: str) -> ChipEstimate:
        for c in self.chips:
            if c.chip == name:
                return c
        raise KeyError(name)

    def time(self, chip: str | None = None) -> float:
        """Predicted seconds on `chip` (default: the slowest chip); inf when not modelled."""
        times = [c.time for c in self.chips if chip is None or c.chip == chip]
        if not times or any(t is None for t in times):
            return math.inf
        return max(t for t in times if t is not None)

    @property
    def compiles(self) -> bool | None:
        """The compiler accepts it for every target asked (None: it was not compiled)."""
        return all(v.compiles for v in self.verdicts) if self.verdicts else None

    def to_json(self) -> dict[str, Any]:
        return {"config": {k: _jsonable(v) for k, v in self.config.items()}, "rank": self.rank,
                "out": self.out, "reason": self.reason, "findings": list(self.findings),
                "compiles": self.compiles, "verdicts": [v.to_json() for v in self.verdicts],
                "over_estimate": self.over_estimate, "decided_by": self.decided_by,
                "chips": {c.chip: c.to_json() for c in self.chips}}


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """Every candidate, ranked ones first (fastest predicted on the slowest chip), then the
    ones that are out, each with its reason."""

    chips: tuple[str, ...]
    targets: tuple[str, ...]  # the compiler's targets (empty: no compile asked)
    params: tuple[str, ...]  # the parameter names, in the space's order
    candidates: tuple[Candidate, ...]
    compile_top: int = 0
    stopped: str | None = None  # why some candidates were not judged (a time limit)

    @property
    def ranked(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if not c.out)

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    def top(self, k: int = 3, chip: str | None = None) -> tuple[Candidate, ...]:
        """The `k` fastest in candidates on `chip` (default: the ranking's order)."""
        if chip is None:
            return self.ranked[:k]
        return tuple(sorted(self.ranked, key=lambda c: c.time(chip))[:k])

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {"chips": list(self.chips), "targets": list(self.targets),
                "params": list(self.params), "compile_top": self.compile_top,
                "stopped": self.stopped,
                "best": None if best is None else {k: _jsonable(v)
                                                   for k, v in best.config.items()},
                "candidates": [c.to_json() for c in self.candidates]}

    def tree(self, *, heatmap: bool = False) -> Any:
        from pallaslab.tuning.view import tune_tree

        return tune_tree(self, heatmap=heatmap)

    def to_text(self, width: int | None = None) -> str:
        from pallaslab.views.parts import to_text

        return to_text(self.tree(), width)

    def to_html(self) -> str:
        from pallaslab.views.parts import to_html

        return to_html(self.tree(heatmap=True))

    def _repr_html_(self) -> str:
        return self.to_html()

    def widget(self) -> Any:
        """The live Tune view (an anywidget; needs `pallaslab[notebook]`)."""
        from pallaslab.tuning.widget import tune_widget

        return tune_widget(self)

    def _ipython_display_(self) -> None:  # a cell's value: the live view, then its static copy
        from pallaslab.tuning.widget import display_tune

        display_tune(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's text form
        printer.text(self.to_text())

    def __str__(self) -> str:
        return self.to_text()
