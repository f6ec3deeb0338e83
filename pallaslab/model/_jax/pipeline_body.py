"""The user's function behind a TPU `emit_pipeline` equation's body jaxpr: its name, its
"file.py:LINE" and the names of its block parameters.

Up to JAX 0.12.0 the body jaxpr is traced from the user's function itself, so its debug info
names it. From 0.12.1 JAX traces it through a wrapper of its own (`_trace_body`) that takes
the pipeline step and the grid sizes first (2*len(grid)+1 scalars, named `ps_and_grid...`) and
the blocks as `b_args[i]`: the user's function is then the first user frame inside that
wrapper on the body's equations' tracebacks, and its parameter names come from its source.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import linecache
from typing import Any

from jax._src import source_info_util

from pallaslab.model._jax.equation_fields import func_source
from pallaslab.model._jax.versions import JAX_VERSION

_WRAPPER = "_trace_body"
_LEADING_PREFIX = "ps_and_grid"


@dataclasses.dataclass(frozen=True)
class PipelineBody:
    name: str | None
    source: str | None  # "file.py:LINE" of its def
    block_params: tuple[str | None, ...]  # one per block ref, in the body's order


def pipeline_body(eqn: Any, n_blocks: int) -> PipelineBody:
    """What the user wrote as the body of an `emit_pipeline` equation with `n_blocks` block
    refs."""
    body = eqn.params["body_jaxpr"]
    names = tuple(getattr(body.debug_info, "arg_names", None) or ())
    if JAX_VERSION < (0, 12, 1):
        name, source = func_source(body)
        return PipelineBody(name, source, _padded(names, n_blocks))
    frame = _user_body_frame(body)
    if frame is None:  # a body with no equations of the user's: JAX's names are all we have
        leading = sum(str(n).startswith(_LEADING_PREFIX) for n in names)
        return PipelineBody(None, None, _padded(names[leading:], n_blocks))
    params = _parameter_names(frame.file_name, frame.function_start_line)
    # With `_explicit_indices` the user's body takes the pipeline step first.
    skip = 1 if eqn.params.get("_explicit_indices") else 0
    return PipelineBody(frame.function_name.rsplit(".", 1)[-1],
                        f"{frame.file_name}:{frame.function_start_line}",
                        _padded(params[skip:], n_blocks))


def _padded(names: tuple[Any, ...], n: int) -> tuple[str | None, ...]:
    return tuple(str(names[k]) if k < len(names) and names[k] else None for k in range(n))


def _user_body_frame(body: Any) -> Any:
    """The outermost user frame inside JAX's body wrapper on the first equation that has one."""
    for eqn in _equations(body.jaxpr if hasattr(body, "jaxpr") else body):
        frames = list(eqn.source_info.traceback.frames) if eqn.source_info.traceback else []
        outer = next((i for i, f in enumerate(frames) if f.function_name.endswith(_WRAPPER)),
                     None)
        if outer is None:
            continue
        for frame in reversed(frames[:outer]):  # from the wrapper inwards
            if source_info_util.is_user_filename(frame.file_name):
                return frame
    return None


def _equations(jaxpr: Any) -> Any:
    from jax._src import core as jax_core

    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jax_core.jaxprs_in_params(eqn.params):
            yield from _equations(sub)


@functools.lru_cache(maxsize=256)
def _parameter_names(file_name: str, first_line: int) -> tuple[str, ...]:
    """The positional parameter names of the function or lambda defined at `first_line` of
    `file_name` (its decorators' line counts), () when the source cannot be read."""
    try:  # linecache also knows notebook cells
        tree = ast.parse("".join(linecache.getlines(file_name)))
    except (SyntaxError, ValueError):
        return ()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            lines = {node.lineno, *(getattr(d, "lineno", 0)
                                    for d in getattr(node, "decorator_list", ()))}
            if first_line in lines:
                args = node.args
                return tuple(a.arg for a in (*args.posonlyargs, *args.args))
    return ()
