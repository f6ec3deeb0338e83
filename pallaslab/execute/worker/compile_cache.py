"""Hits and misses of the executors' cache of compiled computations (see
`pallaslab.execute.worker.running`), in this process or in the executor worker process, where
isolated executors (`interpret`, `tpu-interpret`, `vectorized`, ...) run."""

from __future__ import annotations

import pickle
from typing import Literal

from pallaslab.errors import PallasLabError
from pallaslab.execute.worker import isolation, running
from pallaslab.model._jax.compiled import CacheStats

STATS_TIMEOUT = 60.0  # seconds: the answer is immediate once the worker has started

__all__ = ["CacheStats", "WorkerStatsError", "capture_cache_stats", "compile_cache_stats"]


class WorkerStatsError(PallasLabError, RuntimeError):
    """The executor worker process did not answer a request for its cache statistics."""


def compile_cache_stats(where: Literal["here", "worker"] = "here") -> CacheStats:
    """The compiled-computation cache's statistics: of this process (`"here"`: in-process
    runs), or of the executor worker (`"worker"`; started if it is not running)."""
    if where == "here":
        return running.compile_cache_stats()
    if where != "worker":
        raise ValueError(f"compile_cache_stats(where={where!r}): where is 'here' or 'worker'")
    done = isolation.call_worker(
        pickle.dumps({"kind": "compile-cache-stats"}), STATS_TIMEOUT,
        label="compile-cache-stats", running=lambda count, where: "the statistics request",
        interrupted=lambda seconds, what: f"compile_cache_stats interrupted after "
                                          f"{seconds:.1f} s")
    if not isinstance(done.reply, CacheStats):
        why = done.failed or done.timed_out or f"it answered {done.reply!r}"
        raise WorkerStatsError(f"the executor worker process did not report its compile cache "
                               f"statistics: {why}")
    return done.reply


def capture_cache_stats() -> dict[str, int]:
    """The executor worker's captured calls kept between runs (a repeated run, or a second
    executor of one comparison, skips the trace): {"hits", "misses", "size", "maxsize"}."""
    done = isolation.call_worker(
        pickle.dumps({"kind": "capture-cache-stats"}), STATS_TIMEOUT,
        label="capture-cache-stats", running=lambda count, where: "the statistics request",
        interrupted=lambda seconds, what: f"capture_cache_stats interrupted after "
                                          f"{seconds:.1f} s")
    if not isinstance(done.reply, dict) or "hits" not in done.reply:
        why = done.failed or done.timed_out or f"it answered {done.reply!r}"
        raise WorkerStatsError(f"the executor worker process did not report its capture "
                               f"cache statistics: {why}")
    return dict(done.reply)
