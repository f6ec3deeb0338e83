"""Rules JAX's Mosaic GPU interpreter lacks, given to it while pallaslab runs a kernel.

A predicated SMEM -> GMEM copy (`plgpu.copy_smem_to_gmem(..., predicate=p)`, which
`plgpu.emit_pipeline` issues to write an output block back only when the block changes or the
pipeline ends) stops JAX's interpreter with "predicate not supported". Its semantics are
documented ("predicate: a boolean indicating whether the copy should be performed"): the copy
is issued when `p` holds and skipped otherwise, which is what the rule here interprets, as a
`lax.cond` around the interpreter's own unpredicated copy. The rule is installed on the
interpreter class for the duration of a run's tracing (`predicated_copies()`), never in JAX's
files, and only when the interpreter has no rule of its own.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

_LOCK = threading.Lock()
_METHOD = "_interpret_copy_smem_to_gmem_p"
NOTE = ("predicated SMEM->GMEM copies (emit_pipeline's output write-back) issued by "
        "pallaslab's rule: copied when the predicate holds, skipped otherwise (JAX's Mosaic "
        "GPU interpreter has none)")


@contextlib.contextmanager
def predicated_copies() -> Iterator[None]:
    """JAX's Mosaic GPU interpreter, within this block, interprets predicated copies."""
    from jax._src.pallas.mosaic_gpu.interpret import jaxpr_interpret

    cls = jaxpr_interpret.JaxprInterpreter
    with _LOCK:
        original = getattr(cls, _METHOD)
        installed = getattr(original, "_pallaslab_rule", False)
        if not installed:
            setattr(cls, _METHOD, _with_predicate(original))
    try:
        yield
    finally:
        if not installed:
            with _LOCK:
                setattr(cls, _METHOD, original)


def _with_predicate(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def rule(self: Any, eqn: Any, token: Any, src: Any, dst: Any, *flat_args: Any,
             has_user_predicate: bool, **params: Any) -> Any:
        if not has_user_predicate:
            return original(self, eqn, token, src, dst, *flat_args,
                            has_user_predicate=False, **params)
        import jax
        import jax.numpy as jnp

        *transforms, predicate = flat_args

        def copy(token: Any) -> Any:
            return original(self, eqn, token, src, dst, *transforms,
                            has_user_predicate=False, **params)[0]

        token = jax.lax.cond(jnp.asarray(predicate, jnp.bool_).reshape(()), copy,
                             lambda token: token, token)
        return token, []

    rule._pallaslab_rule = True  # type: ignore[attr-defined]
    return rule


def uses_predicated_copies(kernel: Any) -> bool:
    """Does the kernel's body issue a predicated SMEM -> GMEM copy (the rule above)?"""
    from pallaslab.model._jax.chips import body_jaxprs
    from pallaslab.model._jax.rewrite import contains

    def predicated(eqn: Any) -> bool:
        return (eqn.primitive.name == "copy_smem_to_gmem"
                and bool(eqn.params.get("has_user_predicate")))

    return any(contains(j, predicated) for j in body_jaxprs(kernel))


@contextlib.contextmanager
def interpreter_rules(counts: Any = None) -> Iterator[None]:
    """Every rule pallaslab gives JAX's Mosaic GPU interpreter, within this block (`counts`:
    the global semaphores' counts, shared by traces that are one launch)."""
    from pallaslab.model._jax.gpu_global_semaphores import global_semaphores

    with predicated_copies(), global_semaphores(counts):
        yield


def rule_notes(kernels: Any) -> tuple[str, ...]:
    """The notes of the rules these kernels use (what a run modelled beyond JAX)."""
    from pallaslab.model._jax import gpu_global_semaphores as sems

    used = ((uses_predicated_copies, NOTE), (sems.uses_global_semaphores, sems.NOTE))
    return tuple(note for uses, note in used if any(uses(k) for k in kernels))
