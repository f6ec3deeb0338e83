"""One flat hierarchy of pallaslab errors.

Every message names the object (an operand's origin, a kernel's name), where it comes from
(source location), the rule that was broken and the value that broke it. A user's own exception
raised while tracing their function is never wrapped: it surfaces as it would without pallaslab.
"""

from __future__ import annotations

import traceback
from pathlib import Path


def error_line(err: BaseException) -> str:
    """"Type: message" (the message's first line); an exception raised without a message says
    where it was raised instead ("AttributeError (raised at matmul.py:34)")."""
    lines = str(err).strip().splitlines()
    if lines:
        return f"{type(err).__name__}: {lines[0]}"
    frames = traceback.extract_tb(err.__traceback__)
    at = f" (raised at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}{at}"


class PallasLabError(Exception):
    """Base class for every error pallaslab raises on its own account."""


class CaseError(PallasLabError, ValueError):
    """A kernel case (`file.py:function`) cannot be loaded or does not return `(fn, args)`."""


class NoKernelError(PallasLabError, ValueError):
    """The function launched no Pallas kernel."""


class IndexMapError(PallasLabError, ValueError):
    """A BlockSpec index map returns the wrong number of values or non-integer values."""


class X64Error(PallasLabError, ValueError):
    """A 64-bit dtype used while JAX's 64-bit mode (jax_enable_x64) is off."""


class KernelSelectionError(PallasLabError, IndexError):
    """A kernel was asked for by an index or name that the capture does not have."""


class SettingError(PallasLabError, ValueError):
    """A `PALLASLAB_*` environment variable set to a value its rule refuses (`settings`)."""


class MemoryBudgetError(PallasLabError, MemoryError):
    """A run would hold more memory than its budget ($PALLASLAB_MEMORY_BUDGET), refused
    before any of it is allocated."""


class MissingDependencyError(PallasLabError, ImportError):
    """An optional dependency is not installed; the message says what to install."""


class UnavailableError(PallasLabError, RuntimeError):
    """A feature needs something this machine does not have (e.g. an attached TPU)."""


def missing(feature: str, module: str, extra: str) -> MissingDependencyError:
    """The error for an optional dependency that is not importable."""
    return MissingDependencyError(
        f"{feature} needs the Python package '{module}', which is not installed. "
        f'Install it with: pip install "pallaslab[{extra}]"'
    )
