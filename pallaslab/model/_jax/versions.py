"""Which JAX this process runs, and which JAX releases pallaslab is tested with.

Every difference between supported JAX versions is decided here, by the modules of this package
that differ (never in the rest of pallaslab): `JAX_VERSION >= (0, 12)` and the like.

pallaslab reads JAX's private modules (`jax._src.pallas`), which change even in patch releases,
so what counts is the exact release: `TESTED_JAX` lists the releases the test suite runs on.
Any other JAX gets one warning at import (`base`), and an error of pallaslab's own raised on it
says which JAX it is (`pallaslab.errors.untested_jax_failure`).
"""

from __future__ import annotations

import re

import jax

# The JAX releases pallaslab is tested with, oldest first, as `jax.__version__` spells them
# (compared in full: 0.12.0.1 is tested, 0.12.0 is not). The one list: everything else derives.
TESTED_JAX: tuple[str, ...] = ("0.11.2", "0.12.0.1", "0.12.1")

# The running JAX's version string: read through this name, so that tests can stand in another.
JAX_VERSION_TEXT: str = jax.__version__


def _parse(version: str) -> tuple[int, int, int]:
    """`"0.12.0.1"` -> `(0, 12, 0)`, `"0.11.2.dev20250101"` -> `(0, 11, 2)`."""
    parts = [int(m.group()) if (m := re.match(r"\d+", p)) else 0 for p in version.split(".")]
    parts += [0, 0, 0]
    return parts[0], parts[1], parts[2]


def _release(version: str) -> tuple[tuple[int, ...], bool]:
    """(the release's numbers, trailing zeros dropped; whether it is a final release):
    `"0.12.0.1"` -> `((0, 12, 0, 1), True)`, `"0.12.1rc1"` -> `((0, 12, 1), False)`,
    `"0.12.2.dev20260101"` -> `((0, 12, 2), False)`, `"0.12.1+cuda"` -> `((0, 12, 1), False)`."""
    text = version.strip()
    m = re.match(r"\d+(?:\.\d+)*", text)
    if m is None:
        return (), False
    numbers = [int(p) for p in m.group().split(".")]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers), m.end() == len(text)


JAX_VERSION: tuple[int, int, int] = _parse(JAX_VERSION_TEXT)

# Each (major, minor) of a tested release: capture, analyses, executors and lowering work on
# all of them.
SUPPORTED_JAX: tuple[tuple[int, int], ...] = tuple(sorted({_parse(v)[:2] for v in TESTED_JAX}))


def jax_tested(version: str | None = None) -> bool:
    """Whether `version` (the running JAX's when None) is one of `TESTED_JAX`, in full."""
    numbers, final = _release(JAX_VERSION_TEXT if version is None else version)
    return final and any(numbers == _release(t)[0] for t in TESTED_JAX)


def untested_jax(version: str | None = None) -> str | None:
    """None for a tested JAX; else the sentence that says how `version` (the running JAX's
    when None) stands to the tested releases, for a message: "JAX 0.12.2 is newer than the
    releases pallaslab is tested with (0.11.2, 0.12.0.1, 0.12.1)" (or "older than", or "is
    not one of" for one between them, a pre-release or a local build of a tested one)."""
    version = JAX_VERSION_TEXT if version is None else version
    if jax_tested(version):
        return None
    numbers = _release(version)[0]
    tested = [_release(t)[0] for t in TESTED_JAX]
    if numbers > max(tested):  # 0.12.2, 0.13.0.dev...: past every tested release
        relation = "is newer than"
    elif numbers < min(tested) or (numbers == min(tested) and not _release(version)[1]):
        relation = "is older than"  # 0.11.1, or a pre-release of the oldest tested one
    else:
        relation = "is not one of"
    return (f"JAX {version} {relation} the releases pallaslab is tested with "
            f"({', '.join(TESTED_JAX)})")


def untested_jax_warning(version: str | None = None) -> str | None:
    """The warning `base` gives once at import on an untested JAX (None on a tested one)."""
    said = untested_jax(version)
    if said is None:
        return None
    return (f"{said}. pallaslab reads JAX's private internals, which change even in patch "
            "releases: capture, analyses, runs and lowering may fail or miss kernels, and an "
            "error pallaslab raises while reading them names this JAX. Install one of "
            f"the tested releases (pip install jax=={TESTED_JAX[-1]}) for results you can "
            "rely on.")
