"""One flat hierarchy of pallaslab errors.

Every message names the object (an operand's origin, a kernel's name), where it comes from
(source location), the rule that was broken and the value that broke it. A user's own exception
raised while tracing their function is never wrapped: it surfaces as it would without pallaslab.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, TracebackType


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


class ChipNeededError(PallasLabError, RuntimeError):
    """Tracing asked for the device kind, and without a TPU only a chip named can answer."""


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


# --- an untested JAX --------------------------------------------------------------------------
# pallaslab reads JAX's private modules (`pallaslab.model._jax`), which change even in patch
# releases. On a JAX outside `pallaslab.model._jax.versions.TESTED_JAX`, an error pallaslab
# raises on no one's account (an AttributeError reading a field JAX renamed, ...) is said as
# what it most likely is: the CLI's error line, `%%pallas` and the API all word it here.


class UntestedJaxWarning(UserWarning):
    """The running JAX is not one of the releases pallaslab is tested with (given once, at
    import of `pallaslab.model._jax`)."""


class UntestedJaxError(PallasLabError, RuntimeError):
    """pallaslab failed on a JAX it is not tested with: the message names that JAX, the tested
    releases, the error and where in pallaslab it was raised; the original error is its
    `__cause__`."""


_PACKAGE = Path(__file__).resolve().parent  # pallaslab/
_OURS = (str(_PACKAGE) + os.sep, str(_PACKAGE.parent / "lowering") + os.sep)
_COMPAT = str(_PACKAGE / "model" / "_jax") + os.sep
_VERSIONS = "pallaslab.model._jax.versions"
_standalone_versions: list[ModuleType | None] = []


def _versions() -> ModuleType | None:
    """`pallaslab.model._jax.versions`, the tested releases' one list: as imported, else (the
    compat layer itself failed to import on this JAX) loaded on its own from its file, which
    needs only JAX. None when even that fails (no JAX at all)."""
    if (module := sys.modules.get(_VERSIONS)) is not None:
        return module
    if not _standalone_versions:
        import importlib.util

        try:
            spec = importlib.util.spec_from_file_location(
                "_pallaslab_jax_versions", _PACKAGE / "model" / "_jax" / "versions.py")
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except Exception:
            module = None
        _standalone_versions.append(module)
    return _standalone_versions[0]


def _our_file(filename: str) -> str | None:
    """The file's path from the repository root ("pallaslab/model/_jax/kernels.py") when it is
    pallaslab's own, else None."""
    path = os.path.realpath(filename)
    for root in _OURS:
        if path.startswith(root):
            return str(Path(path).relative_to(_PACKAGE.parent))
    return None


def _library_file(filename: str) -> bool:
    """Whether a frame's file is JAX's or Python's own: frames that neither the user nor
    pallaslab wrote, passed over when asking whose code raised."""
    if filename.startswith("<frozen "):
        return True
    path = os.path.realpath(filename)
    for name in ("jax", "jaxlib"):
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and path.startswith(os.path.dirname(os.path.realpath(file)) + os.sep):
            return True
    import sysconfig

    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
    return path.startswith(stdlib) and "site-packages" not in path


def _frames(err: BaseException) -> list[traceback.FrameSummary]:
    tb: TracebackType | None = err.__traceback__
    return list(traceback.extract_tb(tb)) if tb is not None else []


def raised_by_pallaslab(err: BaseException) -> bool:
    """Whether pallaslab's own code raised `err`: the innermost frame that is neither JAX's nor
    Python's is pallaslab's (a user's function, traced by pallaslab, that raised is theirs).
    An error without a traceback counts as pallaslab's."""
    frames = _frames(err)
    for frame in reversed(frames):
        if _our_file(frame.filename) is not None:
            return True
        if not _library_file(frame.filename):
            return False
    return True


def _where(err: BaseException) -> tuple[str, bool]:
    """("pallaslab/model/_jax/equation_fields.py:43", True): the innermost frame of the compat
    layer in the error's traceback (or of its causes), else pallaslab's innermost frame with
    False ("" when no frame is pallaslab's)."""
    chain: list[BaseException] = []
    seen: BaseException | None = err
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    ours: str = ""
    for e in chain:
        for frame in reversed(_frames(e)):
            if (name := _our_file(frame.filename)) is None:
                continue
            if os.path.realpath(frame.filename).startswith(_COMPAT):
                return f"{name}:{frame.lineno}", True
            ours = ours or f"{name}:{frame.lineno}"
    return ours, False


def untested_jax_failure(err: BaseException, version: str | None = None) -> str | None:
    """How an unexpected error (no `PallasLabError`, not the user's own) reads on a JAX that
    pallaslab is not tested with; None on a tested JAX, or for an error pallaslab's code did
    not raise (the caller then says what it says today). `version`: the JAX to judge, the
    running one's when None. E.g.

        JAX 0.12.2 is newer than the releases pallaslab is tested with (0.11.2, 0.12.0.1,
        0.12.1); this failed reading JAX's internals: AttributeError: 'BlockMapping' object
        has no attribute 'transformed_block_aval' (in pallaslab/model/_jax/equation_fields.py:43)
    """
    if isinstance(err, PallasLabError) or not isinstance(err, Exception):
        return None
    versions = _versions()
    said = versions.untested_jax(version) if versions is not None else None
    if said is None or not raised_by_pallaslab(err):
        return None
    where, reading = _where(err)
    what = "this failed reading JAX's internals" if reading else \
        "pallaslab failed, most likely for that reason"
    return f"{said}; {what}: {error_line(err)}" + (f" (in {where})" if where else "")


def untested_jax_errors[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    """Decorates an API function: on an untested JAX, an unexpected error that pallaslab's code
    raised becomes an `UntestedJaxError` saying so (`untested_jax_failure`), raised from it;
    anything else (a tested JAX, the user's own error, a `PallasLabError`) propagates as is."""

    @functools.wraps(fn)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        __tracebackhide__ = True
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            if (message := untested_jax_failure(err)) is None:
                raise
            raise UntestedJaxError(message) from err

    return checked

