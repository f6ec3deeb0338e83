"""The part of the cell's last line that runs on the computed values, outside the trace.

The line is traced once, as `jax.jit` would trace it, so Python in it sees tracers. That is
right for everything that computes arrays, and wrong for what only consumes the line's values:
`print(f(x))` would print a tracer, `results.append(f(x))` would store one in the notebook,
`f"{f(x).max()}"` would format one, and `(out := f(x)).sum()` would bind `out` inside the
trace. Such a line is split: its *core* (`f(x)`, every argument of those calls, each
expression formatted) is traced, and its *shell* (the call of `print`, `results.append`,
`str`, the f-string, the `:=` binding and what applies to its value) runs as the plain cell
would, once the core's values are computed.

The shell is made of:
- calls whose callee (a name or attribute chain, evaluated first, as Python does) only
  consumes values: `print`, `repr`, `str`, `float`, `len`, IPython's `display`,
  `np.asarray`, and any method of a built-in non-array object (`list.append`, `dict.update`,
  `str.format`, `file.write`);
- f-strings, and `:=` bindings (with the attributes, subscripts, operators, tuples and
  method calls on their value around them).

Everything else stays traced, as before. A `:=` that would stay inside the trace (in a call
that may launch a kernel, a comprehension, a lambda, `and`/`or`, `x if c else y`) is a
UsageError saying what to write instead.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import types
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError

# Built-ins that only consume their arguments (no callback, no lazy iterator over them).
_CONSUMERS = ("print", "repr", "ascii", "format", "len", "hash", "id", "isinstance", "setattr",
              "str", "float", "int", "bool", "complex", "bytes")
_TRANSPARENT = (ast.Attribute, ast.Subscript, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List,
                ast.Set, ast.Dict, ast.Starred, ast.Slice)
_NOT_HOST = object()


@dataclasses.dataclass(frozen=True)
class Split:
    """The line as traced core expressions and the shell that finishes it."""

    cores: tuple[ast.expr, ...]  # traced (each `__pl_core{i}` in the shell)
    shell: ast.expr  # the line, with the cores and callees replaced by names
    callees: dict[str, Any]  # `__pl_fn{i}`: each shell call's callee, evaluated once


def split_line(expr: ast.expr, evaluate: Callable[[ast.expr], Any]) -> Split | None:
    """The line's split, or None when all of it is traced. `evaluate(node)` evaluates a callee
    expression in the notebook's namespace. Raises UsageError for a `:=` that stays traced."""
    splitter = _Splitter(evaluate)
    shell = splitter.visit(expr)
    for core in splitter.cores if shell is not None else [expr]:
        _reject_traced_walrus(core)
    if shell is None:
        return None
    return Split(tuple(splitter.cores), shell, splitter.callees)


def host_callable(fn: Any) -> bool:
    """Does calling `fn` only consume its arguments (no kernel to launch, nothing traced)?"""
    import jax
    import numpy as np
    from IPython.core import display_functions

    consumers = [getattr(builtins, n) for n in _CONSUMERS]
    consumers += [display_functions.display, np.asarray, np.array, np.asanyarray]
    if any(fn is c for c in consumers):
        return True
    if isinstance(fn, (types.BuiltinMethodType, types.MethodWrapperType)):
        owner = getattr(fn, "__self__", None)
        return owner is not None and not isinstance(
            owner, (types.ModuleType, type, jax.Array, np.ndarray, np.generic, jax.core.Tracer))
    return False


class _Splitter:
    def __init__(self, evaluate: Callable[[ast.expr], Any]) -> None:
        self.evaluate = evaluate
        self.cores: list[ast.expr] = []
        self.callees: dict[str, Any] = {}

    def part(self, node: ast.expr) -> ast.expr:
        """`node` in the shell: its own shell, or a name for its traced value."""
        return self.shell_or_core(node)[0]

    def shell_or_core(self, node: ast.expr) -> tuple[ast.expr, bool]:
        """(`node` in the shell, whether any of it runs in the shell)."""
        shell = self.visit(node)
        if shell is not None:
            return shell, True
        name = ast.Name(f"__pl_core{len(self.cores)}", ast.Load())
        self.cores.append(node)
        return ast.copy_location(name, node), False

    def visit(self, node: ast.expr) -> ast.expr | None:
        """The shell version of `node`, or None when all of it is traced."""
        if isinstance(node, ast.NamedExpr):
            return _located(ast.NamedExpr(node.target, self.part(node.value)), node)
        if isinstance(node, ast.JoinedStr):
            return _located(ast.JoinedStr([self._formatted(v) for v in node.values]), node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, _TRANSPARENT):
            return self._around(node)
        return None

    def _formatted(self, value: ast.expr) -> ast.expr:
        if not isinstance(value, ast.FormattedValue):
            return value
        spec = self.visit(value.format_spec) if value.format_spec is not None else None
        return _located(ast.FormattedValue(self.part(value.value), value.conversion,
                                           spec or value.format_spec), value)

    def _call(self, node: ast.Call) -> ast.expr | None:
        callee = self._host_callee(node)
        if callee is not _NOT_HOST:
            name = f"__pl_fn{len(self.callees)}"
            self.callees[name] = callee
            func: ast.expr = _located(ast.Name(name, ast.Load()), node.func)
        elif isinstance(node.func, ast.Attribute) and _has_walrus(node.func.value):
            # `(out := f(x)).sum()`: a method of the bound value, applied as Python would
            func = _located(ast.Attribute(self.part(node.func.value), node.func.attr,
                                          ast.Load()), node.func)
        else:
            return None
        args = [self.part(a) for a in node.args]
        keywords = [_located(ast.keyword(k.arg, self.part(k.value)), k) for k in node.keywords]
        return _located(ast.Call(func, args, keywords), node)

    def _host_callee(self, node: ast.Call) -> Any:
        """The callee's value when the call belongs to the shell (else `_NOT_HOST`)."""
        if not _dotted(node.func) or any(isinstance(a, (ast.Lambda, ast.GeneratorExp))
                                         for a in (*node.args,
                                                   *(k.value for k in node.keywords))):
            return _NOT_HOST
        try:
            callee = self.evaluate(node.func)
        except Exception:  # the trace raises it as the user's own error, at their line
            return _NOT_HOST
        return callee if host_callable(callee) else _NOT_HOST

    def _around(self, node: ast.expr) -> ast.expr | None:
        """An attribute, subscript, operator or display around a shell part is shell too."""
        if not any(_has_shell_part(child) for child in ast.iter_child_nodes(node)):
            return None
        mark = (len(self.cores), len(self.callees))
        new = _copy_with(node, self)
        if new is None:  # no part of it turned out to be shell: trace it whole
            del self.cores[mark[0]:]
            for name in list(self.callees)[mark[1]:]:
                del self.callees[name]
        return new


def _copy_with(node: ast.expr, splitter: _Splitter) -> ast.expr | None:
    """`node` with each child in the shell (None when no child has a shell part)."""
    fields: dict[str, Any] = {}
    shelled = False

    def child(value: Any) -> Any:
        nonlocal shelled
        if not isinstance(value, ast.expr):
            return value
        new, is_shell = splitter.shell_or_core(value)
        shelled |= is_shell
        return new

    for field, value in ast.iter_fields(node):
        fields[field] = [child(v) for v in value] if isinstance(value, list) else child(value)
    if not shelled:
        return None
    return _located(type(node)(**fields), node)


def _has_shell_part(node: ast.AST) -> bool:
    """May `node` hold a shell part (cheap, syntactic: a call, an f-string or a `:=`)?"""
    return any(isinstance(n, (ast.Call, ast.JoinedStr, ast.NamedExpr)) for n in ast.walk(node))


def _has_walrus(node: ast.AST) -> bool:
    return any(isinstance(n, ast.NamedExpr) for n in ast.walk(node))


def _dotted(node: ast.expr) -> bool:
    """A name or an attribute chain on a name (`print`, `results.append`, `np.asarray`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _reject_traced_walrus(core: ast.expr) -> None:
    for n in ast.walk(core):
        if isinstance(n, ast.NamedExpr):
            target = ast.unparse(n.target)
            value = ast.unparse(n.value)
            value = value if len(value) <= 40 else value[:37] + "..."
            raise UsageError(
                f"%%pallas: `{target} := ...` in the cell's last line would bind `{target}` "
                "inside the traced expression, not in the notebook; assign it instead: "
                f"`{target} = {value}` as the last line, and use `{target}` in the next cell")


def _located(new: Any, old: ast.AST) -> Any:
    ast.copy_location(new, old)
    return ast.fix_missing_locations(new)
