"""How close this process is to the kernel's limit on memory mappings (Linux).

Every executable XLA compiles on the CPU is loaded into mappings of its own, and JAX keeps
the executables of every function it has run. A worker that runs thousands of different
kernels (a fuzz campaign, a long notebook) approaches `vm.max_map_count`; past it, XLA can no
longer load what it compiles ("Failed to materialize symbols") and LLVM may abort. The parent
checks its worker after each request and replaces it before that (`worker/isolation.py`).
"""

from __future__ import annotations

import os
from pathlib import Path

LIMIT_ENV = "PALLASLAB_WORKER_MAX_MAPS"  # a lower limit, for tests
SHARE = 0.6  # of the limit: past it, the worker is replaced


def limit() -> int | None:
    """The mapping limit that applies (None: not known here, e.g. not Linux)."""
    text = os.environ.get(LIMIT_ENV)
    if text and text.isdigit():
        return int(text)
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return None


def count(pid: int | str = "self") -> int | None:
    """Process `pid`'s memory mappings (None: not known here)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return None


def nearly_full(pid: int | str = "self") -> bool:
    most, now = limit(), count(pid)
    return most is not None and now is not None and now > SHARE * most
