"""Kernel cases: `path/to/file.py:function`, a zero-argument function returning `(fn, args)`
or `(fn, args, kwargs)`. The CLI and the report load kernels this way.

On the command line a case argument may also name several cases (`expand_case_arguments`):
a file without `:function` means every case it defines (each public top-level `def` that needs
no argument, in the file's order), a directory every `*.py` file directly in it whose name does
not start with `_` (sorted), and a glob (`cases/*.py`, `cases/**/*.py`, `k.py` patterns with
`:function` too) every file or directory it matches.

When the user's own code fails (the case file does not import, the case function raises or
needs arguments, their kernel raises while being traced) the error is a `CaseCodeError`
carrying *their* traceback: pallaslab's, JAX's internal and the import machinery's frames
removed, so their own line (or that of the library they called) is the last frame shown.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import glob
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pallaslab.errors import CaseError, PallasLabError, error_line

if TYPE_CHECKING:
    from pallaslab.model import Capture


class CaseCodeError(CaseError):
    """The user's own code raised: importing a case file, calling a case function, or while
    pallaslab traced their function. `user_traceback` is their traceback, their line last."""

    def __init__(self, message: str, original: BaseException) -> None:
        super().__init__(message)
        self.original = original
        self.user_traceback = user_traceback(original)


@dataclasses.dataclass(frozen=True)
class Case:
    spec: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def load_case(spec: str) -> Case:
    factory = load_function(spec, what="case")
    func_name = spec.rpartition(":")[2]
    _require_no_arguments(spec, func_name, factory)
    try:
        result = factory()
    except (Exception, SystemExit) as err:  # SystemExit: a case must not end pallaslab
        raise CaseCodeError(f"case {spec!r}: {func_name}() raised {_describe(err)}",
                            err) from err
    return _validate(spec, func_name, result)


def capture_case(case: Case) -> Capture:
    """Trace the case's function and capture its kernels; the user's own errors while tracing
    (their kernel raises, shapes that do not fit) become a `CaseCodeError`."""
    from pallaslab.model import capture

    with tracing_user_code(case):
        return capture(case.fn, *case.args, **case.kwargs)


@contextlib.contextmanager
def tracing_user_code(case: Case) -> Iterator[None]:
    """Inside, what the case's own code raises becomes a `CaseCodeError` with their
    traceback; pallaslab's verdicts and bugs pass as they are."""
    try:
        yield
    except PallasLabError:
        raise  # our own verdict (no kernel, a bad index map), its message says it all
    except (Exception, SystemExit) as err:
        if not _raised_in_user_code(err):
            raise  # a bug of ours, not theirs: its whole traceback helps
        name = getattr(case.fn, "__name__", "the case's function")
        raise CaseCodeError(f"case {case.spec!r}: tracing {name} raised {_describe(err)}",
                            err) from err


def load_function(spec: str, *, what: str = "reference") -> Any:
    """`path/to/file.py:NAME` -> the callable NAME defined in that file."""
    path_text, sep, func_name = spec.rpartition(":")
    if not sep or not path_text or not func_name:
        raise CaseError(f"{what} {spec!r} is not of the form path/to/file.py:function")
    path = Path(path_text)
    if not path.is_file():
        raise CaseError(f"{what} {spec!r}: no such file {str(path)!r}")
    try:
        module = _import_file(path)
    except (Exception, SystemExit) as err:
        raise CaseCodeError(f"{what} {spec!r}: importing {path.name} raised {_describe(err)}",
                            err) from err
    fn = getattr(module, func_name, None)
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
    folder = str(path.resolve().parent)
    before = set(sys.modules)
    sys.path.insert(0, folder)
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(folder)
    _pickle_by_value(set(sys.modules) - before, folder)
    return module


def _pickle_by_value(names: set[str], folder: str) -> None:
    """Sibling modules the case imported from its own folder travel by value to the executor
    worker, which does not have that folder on its path."""
    import cloudpickle

    for name in names:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None) or ""
        if module is not None and str(Path(file).resolve().parent) == folder:
            cloudpickle.register_pickle_by_value(module)


def _require_no_arguments(spec: str, func_name: str, factory: Callable[..., Any]) -> None:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return  # a builtin or C callable: let calling it tell
    required = [p.name for p in signature.parameters.values()
                if p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:
        raise CaseError(f"case {spec!r}: {func_name}() ({_where(factory)}) needs argument(s) "
                        f"{', '.join(required)}; a case is a function of no arguments "
                        "returning (fn, args) or (fn, args, kwargs)")


def _where(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:
        return "defined elsewhere"
    return f"{Path(code.co_filename).name}:{code.co_firstlineno}"


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


# --- case arguments: files, directories, globs -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CaseEntry:
    """One case a command-line argument named: its spec, or why the argument names none."""
    spec: str
    error: CaseError | None = None


@dataclasses.dataclass(frozen=True)
class CaseList:
    entries: tuple[CaseEntry, ...]
    several: bool  # more than one argument, or one that is a directory, a glob or a whole file


def expand_case_arguments(arguments: list[str]) -> CaseList:
    """The cases named by command-line arguments (see the module's docstring). An argument
    that names none (a glob matching nothing, a directory without case files) is an entry
    holding its error, so the other cases still run. A lone `file.py:function` is not
    expanded: loading it reports its errors as a single case always did."""
    entries: list[CaseEntry] = []
    several = len(arguments) != 1
    for argument in arguments:
        found = _expand(argument)
        several = several or found != [CaseEntry(argument)]
        entries += found
    return CaseList(tuple(entries), several)


def _expand(argument: str) -> list[CaseEntry]:
    path_text, sep, func_name = argument.rpartition(":")
    if not sep:
        path_text, func_name = argument, ""
    if glob.has_magic(path_text):
        matches = sorted(glob.glob(path_text, recursive=True))
        if not matches:
            return [CaseEntry(argument, CaseError(
                f"case argument {argument!r}: the pattern {path_text!r} matches no file or "
                "directory"))]
        return [e for m in matches for e in _expand_path(argument, Path(m), func_name)]
    if not Path(path_text).exists():
        return [CaseEntry(argument)]  # load_case says what is wrong, as for any single case
    return _expand_path(argument, Path(path_text), func_name)


def _expand_path(argument: str, path: Path, func_name: str) -> list[CaseEntry]:
    if path.is_dir():
        if func_name:
            return [CaseEntry(argument, CaseError(
                f"case argument {argument!r}: {str(path)!r} is a directory; a directory names "
                "every case of its *.py files, :function goes with a file"))]
        return _directory_cases(argument, path)
    if not path.is_file():
        return [CaseEntry(argument, CaseError(
            f"case argument {argument!r}: no such file or directory {str(path)!r}"))]
    if func_name:
        return [CaseEntry(f"{path}:{func_name}")]
    return _file_cases(path)


def _directory_cases(argument: str, folder: Path) -> list[CaseEntry]:
    files = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    if not files:
        return [CaseEntry(argument, CaseError(
            f"case argument {argument!r}: the directory {str(folder)!r} holds no case file "
            "(*.py whose name does not start with '_')"))]
    return [e for f in files for e in _file_cases(f)]


def _file_cases(path: Path) -> list[CaseEntry]:
    """Every public top-level `def` of the file that needs no argument, read from its source
    (nothing is imported or run to list them)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError) as err:
        return [CaseEntry(str(path), CaseError(
            f"case file {str(path)!r} cannot be read for its cases: {error_line(err)}"))]
    names = [node.name for node in tree.body
             if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
             and _needs_no_argument(node.args)]
    if not names:
        return [CaseEntry(str(path), CaseError(
            f"case file {str(path)!r} defines no case: a case is a public top-level function "
            "of no arguments returning (fn, args) or (fn, args, kwargs)"))]
    return [CaseEntry(f"{path}:{name}") for name in names]


def _needs_no_argument(args: ast.arguments) -> bool:
    positional = args.posonlyargs + args.args
    return len(args.defaults) == len(positional) and all(
        default is not None for default in args.kw_defaults)


# --- the user's traceback ----------------------------------------------------------------------

# Frames from these directories are machinery, not the user's code.
_MACHINERY = (str(Path(__file__).resolve().parent), str(Path(importlib.__file__).resolve().parent))


_JAX_FILTER_NOTE = "JAX has removed its internal frames"


def _machinery_roots() -> tuple[str, ...]:
    """Directories of machinery frames: pallaslab, importlib, JAX's internals (`jax/_src`) and
    jaxlib. The kernels JAX ships (`jax/experimental/pallas/ops/...`) are library code the
    user called: their frames stay, so an error raised inside one shows where."""
    roots = list(_MACHINERY)
    for name, inner in (("lowering", ""), ("jax", "/_src"), ("jaxlib", "")):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            path = str(Path(module.__file__).resolve().parent)  # type: ignore[arg-type]
            roots.append(path + inner)
    return tuple(roots)


def _is_user_frame(filename: str, roots: tuple[str, ...]) -> bool:
    if filename.startswith("<frozen ") or filename == "<string>":
        return False  # importlib's bootstrap, runpy
    resolved = str(Path(filename).resolve())
    return not any(resolved == root or resolved.startswith(root + "/") for root in roots)


def _raised_in_user_code(err: BaseException) -> bool:
    """Whether the innermost frame outside JAX is the user's: their code raised, or called
    JAX wrongly (JAX's own frames come last then), rather than pallaslab failing."""
    jax_roots = tuple(r for r in _machinery_roots() if r.endswith(("/jax/_src", "/jaxlib")))
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if _is_user_frame(frame.filename, jax_roots):  # i.e. not a JAX frame
            return _is_user_frame(frame.filename, _machinery_roots())
    return False


def user_traceback(err: BaseException) -> str:
    """`err` formatted as Python would, keeping only the user's frames (chained exceptions
    too). A SyntaxError still shows the file, line and caret."""
    te = traceback.TracebackException.from_exception(err)
    _filter(te, _machinery_roots(), set())
    return "".join(te.format())


def _filter(te: traceback.TracebackException, roots: tuple[str, ...], seen: set[int]) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if _is_user_frame(f.filename, roots)])
    if te.__notes__:  # JAX's note on its own frame filtering: ours removed them already
        te.__notes__ = [n for n in te.__notes__ if _JAX_FILTER_NOTE not in str(n)]
    for chained in (te.__cause__, te.__context__):
        if chained is not None:
            _filter(chained, roots, seen)


def _describe(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"SystemExit({err.code!r})"
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else error_line(err)
