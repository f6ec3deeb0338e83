"""Kernel cases: `path/to/file.py:function`, a zero-argument function returning `(fn, args)`
or `(fn, args, kwargs)`. The CLI and the report load kernels this way."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pallaslab.errors import CaseError


@dataclasses.dataclass(frozen=True)
class Case:
    spec: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def load_case(spec: str) -> Case:
    factory = load_function(spec, what="case")
    return _validate(spec, spec.rpartition(":")[2], factory())


def load_function(spec: str, *, what: str = "reference") -> Any:
    """`path/to/file.py:NAME` -> the callable NAME defined in that file."""
    path_text, sep, func_name = spec.rpartition(":")
    if not sep or not path_text or not func_name:
        raise CaseError(f"{what} {spec!r} is not of the form path/to/file.py:function")
    path = Path(path_text)
    if not path.is_file():
        raise CaseError(f"{what} {spec!r}: no such file {str(path)!r}")
    fn = getattr(_import_file(path), func_name, None)
    if fn is None:
        raise CaseError(f"{what} {spec!r}: {path.name} defines no {func_name!r}")
    if not callable(fn):
        raise CaseError(f"{what} {spec!r}: {func_name} is a {type(fn).__name__}, not a function")
    return fn


def _import_file(path: Path) -> Any:
    name = f"_pallaslab_case_{abs(hash(str(path.resolve())))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # The case's own directory is importable, as when running the file as a script.
    sys.path.insert(0, str(path.resolve().parent))
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def _validate(spec: str, func_name: str, result: Any) -> Case:
    rule = "a case returns (fn, args) or (fn, args, kwargs)"
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        shown = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
        raise CaseError(f"case {spec!r}: {func_name}() returned {shown}; {rule}")
    fn, args, *rest = result
    kwargs = rest[0] if rest else {}
    if not callable(fn):
        raise CaseError(f"case {spec!r}: fn is a {type(fn).__name__}, not callable; {rule}")
    if not isinstance(args, (tuple, list)):
        raise CaseError(f"case {spec!r}: args is a {type(args).__name__}, not a tuple; {rule}")
    if not isinstance(kwargs, dict):
        raise CaseError(f"case {spec!r}: kwargs is a {type(kwargs).__name__}, not a dict; {rule}")
    return Case(spec, fn, tuple(args), dict(kwargs))
