"""Autotuning: rank a kernel's configs (block sizes, ...) by the model and the compiler.

`tune(fn, space, *args, chip=..., target=..., compile_top=k, timeout=...)` captures
`fn(*args, **config)` for every config of `space`, judges each (static findings, VMEM/SMEM
fit per chip, the pipeline model's predicted time and its bound) and asks the real compiler
(`pallaslab.lower(..., compile=True)`, cached) about the best few. `tune_captures` does the
same from a function `config -> Capture` (the CLI's cases and `%%pallas --tune` use it).

Its modules: `space` (the candidate configs and `--param` text, no JAX), `estimate` (one
candidate on one chip: fit, time, bound), `search` (the loop, the compiler's verdicts),
`result` (the frozen `TuneResult` and `Candidate`), `view` (one tree of parts for text, HTML
and the CLI), `heatmap` (matplotlib, imported when drawn), `widget` (the live Tune view:
`static/tune.js`, displayed with its static copy) and `plotly_heatmap` (its heatmap as plotly's
FigureWidget where plotly is installed). Names load on first use, so
parsing `--param` imports no JAX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pallaslab.tuning.result import Candidate, ChipEstimate, TuneResult
    from pallaslab.tuning.search import tune, tune_captures
    from pallaslab.tuning.space import TuneSpaceError, configs, parse_param

__all__ = ["Candidate", "ChipEstimate", "TuneResult", "TuneSpaceError", "configs",
           "parse_param", "tune", "tune_captures"]

_HOMES = {"Candidate": "result", "ChipEstimate": "result", "TuneResult": "result",
          "tune": "search", "tune_captures": "search", "TuneSpaceError": "space",
          "configs": "space", "parse_param": "space"}


def __getattr__(name: str) -> object:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"pallaslab.tuning.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'pallaslab.tuning' has no attribute {name!r}")
