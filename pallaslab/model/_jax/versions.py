"""Which JAX this process runs, and which versions pallaslab supports.

Every difference between supported JAX versions is decided here, by the modules of this package
that differ (never in the rest of pallaslab): `JAX_VERSION >= (0, 12)` and the like.
"""

from __future__ import annotations

import re

import jax

# Each supported (major, minor): capture, analyses, executors and lowering work on all of them.
SUPPORTED_JAX: tuple[tuple[int, int], ...] = ((0, 11), (0, 12))


def _parse(version: str) -> tuple[int, int, int]:
    """`"0.12.0.1"` -> `(0, 12, 0)`, `"0.11.2.dev20250101"` -> `(0, 11, 2)`."""
    parts = [int(m.group()) if (m := re.match(r"\d+", p)) else 0 for p in version.split(".")]
    parts += [0, 0, 0]
    return parts[0], parts[1], parts[2]


JAX_VERSION: tuple[int, int, int] = _parse(jax.__version__)


def jax_supported(version: tuple[int, ...] = JAX_VERSION) -> bool:
    return tuple(version[:2]) in SUPPORTED_JAX
