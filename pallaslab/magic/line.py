"""The cell's last line as a function to trace once: its value expression (or an assignment's),
the arrays it names, the caller's expression for each argument, and its value rebuilt from the
trace's outputs."""

from __future__ import annotations

import ast
import dataclasses
import functools
import symtable
import types
from collections.abc import Callable, Sequence
from typing import Any

from IPython.core.error import UsageError

from pallaslab.magic.host import split_line
from pallaslab.magic.user_code import eval_code, eval_with

SHAPES = ("e.g. `matmul(x, y)`, `out = matmul(x, y)` or `jnp.sum(matmul(x, y)) * 2`")


def last_value(node: ast.stmt) -> tuple[ast.expr, ast.Module | None]:
    """The last statement's value expression, and (for an assignment) the statement that
    assigns `__pl_value` to its targets as the original would."""
    value = ast.Name("__pl_value", ast.Load())
    stmt: ast.stmt | None = None
    if isinstance(node, ast.Expr):
        return node.value, None
    if isinstance(node, ast.Assign):
        expr, stmt = node.value, ast.Assign(targets=node.targets, value=value)
    elif isinstance(node, ast.AugAssign):
        expr, stmt = node.value, ast.AugAssign(target=node.target, op=node.op, value=value)
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        expr, stmt = node.value, ast.AnnAssign(target=node.target, annotation=node.annotation,
                                               value=value, simple=node.simple)
    else:
        shown = ast.unparse(node).splitlines()[0]
        raise UsageError(f"%%pallas: the cell's last line must be an expression or an "
                         f"assignment whose value launches the kernel(s), {SHAPES}; it is "
                         f"`{shown}`")
    for n in ast.walk(stmt):
        if isinstance(n, (ast.expr, ast.stmt)) and not hasattr(n, "lineno"):
            ast.copy_location(n, node)
    return expr, ast.fix_missing_locations(ast.Module(body=[stmt], type_ignores=[]))


_MISSING = object()


@dataclasses.dataclass
class Traced:
    """The function the magic traces, its arguments, and how to rebuild the line's value."""

    fn: Callable[..., Any]  # records the value's structure when traced
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    call: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]  # the user's, for compare
    arg_names: tuple[str, ...] | None  # the caller's expression for each traced argument
    label: str  # the line, as shown in messages
    treedef: Any = None
    kept: list[Any] = dataclasses.field(default_factory=list)  # non-traced leaves, or _MISSING
    # the part of the line run on the traced part's value (`print(...)`), see `host`
    finish: Callable[[Any], Any] | None = None

    @property
    def sendable(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """The traced call as a worker process can trace it again: its flat outputs are this
        trace's (the user's function, returning the leaves tracing computed)."""
        from pallaslab.model.capture import TracedLeaves

        fn, args, kwargs = self.call
        return TracedLeaves(fn), args, kwargs

    @property
    def computed(self) -> tuple[bool, ...]:
        """For each leaf of the line's value: did the trace compute it (an output of the
        capture), or is it a Python value or an array the call did not compute?"""
        return tuple(v is _MISSING for v in self.kept)

    def value(self, outputs: Sequence[Any]) -> Any:
        """The line's value: its traced leaves from `outputs`, the others as they were, and
        the rest of the line (`print(...)`) run on them."""
        __tracebackhide__ = True
        import jax

        it = iter(outputs)
        leaves = [next(it) if v is _MISSING else v for v in self.kept]
        core = jax.tree_util.tree_unflatten(self.treedef, leaves)
        return core if self.finish is None else self.finish(core)


class ComputedPart:
    """A reference function returning the leaves of its result at the positions the traced
    call computed (`Traced.computed`): what it is compared with are the capture's outputs,
    which hold no Python values. A result of another leaf count is returned whole (the
    comparison then says how it differs). Picklable when the reference is, for the worker."""

    def __init__(self, reference: Callable[..., Any], computed: tuple[bool, ...]) -> None:
        self.reference = reference
        self.computed = computed
        self.__name__ = getattr(reference, "__name__", type(reference).__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        result = self.reference(*args, **kwargs)
        leaves = jax.tree_util.tree_leaves(result)
        if len(leaves) != len(self.computed):
            return result
        return [v for v, c in zip(leaves, self.computed, strict=True) if c]


def traced_line(expr: ast.expr, filename: str, flags: int, ns: dict[str, Any]) -> Traced:
    """The line to trace: all of it, or (`print(f(x))`, `results.append(f(x))`, `(out :=
    f(x)).sum()`) its core, with the rest run on the computed values (see `host`)."""
    __tracebackhide__ = True
    split = split_line(expr, lambda node: _evaluate(node, filename, flags, ns))
    core = expr if split is None else _core_expression(split.cores, expr)
    traced = _traced_expression(core, filename, flags, ns, _label(expr))
    if split is not None:
        shell = ast.fix_missing_locations(ast.Expression(split.shell))
        code = compile(shell, filename, "eval", flags=flags, dont_inherit=True)
        traced.finish = functools.partial(_finish, code, ns, split.callees, len(split.cores))
    traced.fn = _recording(traced.fn, traced)
    return traced


def _traced_expression(expr: ast.expr, filename: str, flags: int, ns: dict[str, Any],
                       label: str) -> Traced:
    __tracebackhide__ = True
    if isinstance(expr, ast.Call) and _plain_call(expr):
        fn, args, kwargs, texts, kw_texts = _evaluate_call(expr, filename, flags, ns)
        traced = Traced(fn, tuple(args), kwargs, (fn, tuple(args), kwargs), None, label)
        traced.arg_names = _argument_names(args, texts, kwargs, kw_texts)
        return traced
    names = _array_names(expr, ns)
    lam = ast.Lambda(args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names],
                                        kwonlyargs=[], kw_defaults=[], defaults=[]),
                     body=expr)
    ast.copy_location(lam, expr)
    code = compile(ast.fix_missing_locations(ast.Expression(lam)), filename, "eval",
                   flags=flags, dont_inherit=True)
    fn = eval(code, ns)  # defines the function; runs nothing of the user's
    fn.__name__ = fn.__qualname__ = "cell"
    values = tuple(ns[n] for n in names)
    traced = Traced(fn, values, {}, (fn, values, {}), None, label)
    traced.arg_names = _argument_names(values, list(names), {}, {})
    return traced


def _core_expression(cores: Sequence[ast.expr], line: ast.expr) -> ast.expr:
    """The traced part of a split line: its one core, or a tuple of them."""
    if len(cores) == 1:
        return cores[0]
    return ast.fix_missing_locations(ast.copy_location(ast.Tuple(list(cores), ast.Load()), line))


def _finish(code: Any, ns: dict[str, Any], callees: dict[str, Any], count: int,
            core: Any) -> Any:
    """The line's value: its shell run on the core's computed value(s)."""
    __tracebackhide__ = True
    values = (core,) if count == 1 else tuple(core)
    local = {**callees, **{f"__pl_core{i}": v for i, v in enumerate(values)}}
    return eval_with(code, ns, local)


def _label(expr: ast.expr) -> str:
    text = ast.unparse(expr).splitlines()[0]
    return text if len(text) <= 60 else text[:57] + "..."


def _plain_call(call: ast.Call) -> bool:
    """A call whose callee and arguments launch nothing themselves (no call inside them):
    evaluating those first, as Python does, and tracing only the call captures everything."""
    parts: list[ast.AST] = [call.func, *call.args, *(k.value for k in call.keywords)]
    return not any(isinstance(n, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom,
                                  ast.NamedExpr))
                   for part in parts for n in ast.walk(part))


def _array_names(expr: ast.expr, ns: dict[str, Any]) -> list[str]:
    """The free names the expression reads that hold arrays (or pytrees of arrays only), in
    the order they first appear."""
    text = ast.unparse(expr)
    free: set[str] = set()
    try:
        tables = symtable.symtable(f"lambda: ({text})", "<cell>", "exec").get_children()
        while tables:
            table = tables.pop()
            free |= {s.get_name() for s in table.get_symbols()
                     if s.is_global() and s.is_referenced()}
            tables.extend(table.get_children())
    except SyntaxError:  # pragma: no cover - the cell parsed, so its unparse does too
        free = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    loads = sorted((n for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id in free),
                   key=lambda n: (n.lineno, n.col_offset))
    names: list[str] = []
    for n in loads:
        if n.id not in names and n.id in ns and _only_arrays(ns[n.id]):
            names.append(n.id)
    return names


def _array_leaf(leaf: Any) -> bool:
    """An array the trace takes as an argument. NumPy scalars stay static, as in `capture`."""
    import jax
    import numpy as np

    return isinstance(leaf, (jax.Array, np.ndarray, jax.ShapeDtypeStruct))


def _only_arrays(value: Any) -> bool:
    import jax

    if callable(value) or isinstance(value, types.ModuleType):
        return False
    leaves = jax.tree_util.tree_leaves(value)
    return bool(leaves) and all(_array_leaf(leaf) for leaf in leaves)


def _holds_array(value: Any) -> bool:
    """As `pallaslab.capture` decides which arguments it traces (the others stay static)."""
    from pallaslab.model.capture import holds_array

    return holds_array(value)


def _argument_names(args: Sequence[Any], texts: Sequence[str], kwargs: dict[str, Any],
                    kw_texts: dict[str, str]) -> tuple[str, ...]:
    """The caller's expression for each argument the trace takes (`x`, `w.T`, `params`), in
    the order of the traced function's flat arguments: positional ones in order, then
    keywords sorted by name (as JAX flattens them). Arguments holding no array are bound
    before tracing (static), so they have no name here; an argument that is a pytree of arrays
    has one name for all its leaves."""
    names = [t for a, t in zip(args, texts, strict=True) if _holds_array(a)]
    names += [kw_texts[k] for k in sorted(kwargs) if _holds_array(kwargs[k])]
    return tuple(names)


def _is_primary(text: str) -> bool:
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.List,
                             ast.Tuple, ast.Dict))


def _recording(fn: Callable[..., Any], traced: Traced) -> Callable[..., Any]:
    """`fn`, returning its traced leaves only and remembering the value's structure and its
    other leaves (Python values, arrays it did not compute), to rebuild the value from the
    trace's outputs."""
    import jax

    def record(*args: Any, **kwargs: Any) -> list[Any]:
        out = fn(*args, **kwargs)
        leaves, traced.treedef = jax.tree_util.tree_flatten(out)
        traced.kept = [_MISSING if isinstance(v, jax.core.Tracer) else v for v in leaves]
        return [v for v in leaves if isinstance(v, jax.core.Tracer)]

    try:
        return functools.wraps(fn)(record)
    except (AttributeError, TypeError):  # pragma: no cover - an exotic callable
        return record


def _evaluate_call(call: ast.Call, filename: str, flags: int, ns: dict[str, Any]
                   ) -> tuple[Any, list[Any], dict[str, Any], list[str], dict[str, str]]:
    """The callee, positional and keyword arguments of the call, each evaluated once, and the
    caller's text for each argument."""

    __tracebackhide__ = True

    def ev(expr: ast.expr) -> Any:
        __tracebackhide__ = True
        return _evaluate(expr, filename, flags, ns)

    fn = ev(call.func)
    args: list[Any] = []
    texts: list[str] = []
    for a in call.args:
        if isinstance(a, ast.Starred):
            items = list(ev(a.value))
            text = ast.unparse(a.value)
            base = text if _is_primary(text) else f"({text})"
            args.extend(items)
            texts.extend(f"{base}[{i}]" for i in range(len(items)))
        else:
            args.append(ev(a))
            texts.append(ast.unparse(a))
    kwargs: dict[str, Any] = {}
    kw_texts: dict[str, str] = {}
    for kw in call.keywords:
        if kw.arg is None:
            values = dict(ev(kw.value))
            text = ast.unparse(kw.value)
            base = text if _is_primary(text) else f"({text})"
            kwargs.update(values)
            kw_texts.update({k: f"{base}[{k!r}]" for k in values})
        else:
            kwargs[kw.arg] = ev(kw.value)
            kw_texts[kw.arg] = ast.unparse(kw.value)
    return fn, args, kwargs, texts, kw_texts


def _evaluate(expr: ast.expr, filename: str, flags: int, ns: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    code = compile(ast.fix_missing_locations(ast.Expression(expr)), filename, "eval",
                   flags=flags, dont_inherit=True)
    return eval_code(code, ns)


def tracer_holders(ns: dict[str, Any], hidden: Any = ()) -> set[str]:
    """The notebook's names (but `hidden`) whose values hold JAX tracers: looked for in
    lists, tuples, sets and dicts a few levels and a thousand items deep, and in the
    attributes of the objects they name."""
    return {name for name, value in list(ns.items())
            if not name.startswith("_") and name not in hidden and _holds_tracer(value, 3)}


def _holds_tracer(value: Any, depth: int) -> bool:
    import collections
    import itertools

    import jax

    if isinstance(value, jax.core.Tracer):
        return True
    if depth == 0 or isinstance(value, (str, bytes, types.ModuleType, type, types.FunctionType,
                                        jax.Array)):
        return False
    items: Any
    if isinstance(value, (list, tuple, set, frozenset, collections.deque)):
        items = value
    elif isinstance(value, dict):
        items = value.values()
    elif depth == 3 and isinstance(getattr(value, "__dict__", None), dict):
        items = list(vars(value).values())
    else:
        return False
    return any(_holds_tracer(v, depth - 1) for v in itertools.islice(items, 1000))


def leaked_tracers_error(names: set[str], label: str) -> UsageError:
    shown = ", ".join(f"`{n}`" for n in sorted(names))
    example = sorted(names)[0]
    return UsageError(
        f"%%pallas: tracing the cell's last line `{label}` stored JAX tracers in {shown}: the "
        "line is traced once, as under jax.jit, so what it stores while tracing is not an "
        "array (a later cell using it fails with UnexpectedTracerError). Make the kernel call "
        f"the last line's value (`out = f(x)`) and store it in the next cell "
        f"(`{example}.append(out)`); rebuild {shown} first")


def value_tracer_error(label: str) -> UsageError:
    return UsageError(
        f"%%pallas: the value of the cell's last line `{label}` holds JAX tracers (a lazy "
        "iterator or a function consumed after the trace?): make the kernel call the last "
        "line's value (`out = f(x)`) and use it in the next cell")
