"""The kernel function's own parameter names for its operands (`Operand.param`): "x_ref"
beside Pallas's origin "args[0]", read from the body's debug info, or from the function's
source when JAX traced it through a wrapper taking `*refs`."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from pallaslab.model._jax.base import PALLAS_CALL
from pallaslab.model.kernel import Kernel


def with_params(kernel: Kernel) -> Kernel:
    """The kernel with every operand's `param`: the kernel function's own parameter name.

    The body's parameters come in Pallas's operand order (scalar prefetch, inputs, outputs,
    scratch); `kernel_arg_names` maps the ones after the scalar prefetch.
    """
    eqn = kernel.handle.eqn
    if eqn.primitive is PALLAS_CALL:
        by_origin = {origin: name for name, origin in kernel_arg_names(kernel).items()}
        names = eqn.params["jaxpr"].debug_info.arg_names or ()
        if (star := _varargs_at(kernel.source)) is not None:
            by_origin = {o: _param_label(n, star) for o, n in by_origin.items()}
        prefetch = [op.origin for op in kernel.operands if op.scalar_prefetch]
        by_origin.update(zip(prefetch, names[: len(prefetch)], strict=False))
    else:  # mesh kernels: the body takes the inputs then the outputs
        names = eqn.params["jaxprs"][0].debug_info.arg_names or ()
        if any("[" in str(n) for n in names):  # a wrapper's `*refs` (plgpu.kernel)
            names = _parameters_at(kernel.source) or names
        by_origin = dict(zip((op.origin for op in kernel.operands), names, strict=False))
    operands = tuple(dataclasses.replace(op, param=str(by_origin[op.origin]))
                     if by_origin.get(op.origin) else op for op in kernel.operands)
    return dataclasses.replace(kernel, operands=operands)


def _param_label(name: str, star: str) -> str:
    """A parameter name as the kernel function spells it: the elements of its `*refs`, which
    JAX names "refs[0]", read "*refs[0]" (not to be taken for a Pallas origin such as
    `args[0]`); a pytree parameter's leaves ("x_value_refs[0]") stay as they are."""
    return f"*{name}" if name.startswith(f"{star}[") else name


def _parameters_at(source: str | None) -> tuple[str, ...] | None:
    """The positional parameter names of the function defined at "file.py:LINE" (read from
    the file), for bodies JAX traced through a wrapper taking `*refs`."""
    node = function_at(source)
    return None if node is None else tuple(
        a.arg for a in (*node.args.posonlyargs, *node.args.args))


def _varargs_at(source: str | None) -> str | None:
    """The name of the `*args` parameter of the function defined at "file.py:LINE", if any."""
    node = function_at(source)
    return None if node is None or node.args.vararg is None else node.args.vararg.arg


def function_at(source: str | None) -> Any:
    """The `def` (an ast node) at "file.py:LINE", read from the file; None when not found."""
    import linecache

    path, _, line = (source or "").rpartition(":")
    if not path or not line.isdigit():
        return None
    return _defs_by_line("".join(linecache.getlines(path))).get(int(line))


@functools.lru_cache(maxsize=32)
def _defs_by_line(text: str) -> dict[int, Any]:
    """Every `def` of a file's text by its line and its decorators' lines. Kept per text: a
    warm loop captures the same kernel again and again, and parsing its file each time cost
    more than the rest of the capture; an edited file is another text."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    defs: dict[int, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for lineno in (*(d.lineno for d in node.decorator_list), node.lineno):
                defs.setdefault(lineno, node)
    return defs


def kernel_arg_names(kernel: Kernel) -> dict[str, str]:
    """The kernel body's parameter names (e.g. "x_ref") -> operand origins.

    TPU interpret mode names operands by these in its error messages.
    """
    eqn = kernel.handle.eqn
    if eqn.primitive is not PALLAS_CALL:
        return {}
    names = eqn.params["jaxpr"].debug_info.arg_names
    if names is None:
        return {}
    gm = eqn.params["grid_mapping"]
    body_ops = [op for op in kernel.operands if not op.scalar_prefetch]
    return {str(n): op.origin for n, op in
            zip(names[gm.num_index_operands:], body_ops, strict=False)}
