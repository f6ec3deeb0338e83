"""What the computation around a kernel does with its outputs.

A library may leave part of an output unwritten on purpose and select it away right after
the kernel (megablox `gmm` with `group_offset` zeroes the rows of other groups with
`jnp.where`): every use of the output goes through a `select_n`, so whatever the unwritten
elements held cannot reach the result unless the mask keeps them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pallaslab.model._jax.base import Jaxpr


def selected_after(jaxpr: Any, outvars: Sequence[Any]) -> tuple[str | None, ...]:
    """Per kernel output variable: where ("file.py:LINE", or "?" when unknown) a select
    that every use of it goes through is made; None when some use is not a select's case
    (or the output leaves the jaxpr as it is)."""
    return tuple(_select_site(jaxpr, var) for var in outvars)


def _select_site(jaxpr: Any, var: Any) -> str | None:
    if any(v is var for v in jaxpr.outvars):
        return None
    uses = [e for e in jaxpr.eqns if any(v is var for v in e.invars)]
    if not uses:
        return None
    sites = []
    for eqn in uses:
        if eqn.primitive.name == "select_n" and eqn.invars[0] is not var:
            sites.append(_library_site(eqn))
            continue
        inner = _single_body(eqn.params)
        if inner is None or len(inner.invars) != len(eqn.invars):
            return None  # any other use may read what the kernel left there
        for position, v in enumerate(eqn.invars):
            if v is var and _select_site(inner, inner.invars[position]) is None:
                return None
        sites.append(_library_site(eqn))  # the call (`jnp.where` is itself a jit) says where
    return sites[0]


def _single_body(params: Any) -> Any:
    """The one jaxpr a call-like equation (jit, custom_jvp_call, ...) runs, else None."""
    bodies = list(_bodies(params))
    return bodies[0] if len(bodies) == 1 else None


def _bodies(params: Any) -> Iterator[Any]:
    for value in params.values():
        for v in value if isinstance(value, tuple) else (value,):
            inner = getattr(v, "jaxpr", v)  # a ClosedJaxpr's own jaxpr
            if isinstance(inner, Jaxpr):
                yield inner


def _library_site(eqn: Any) -> str:
    """The innermost line outside JAX's internals that made `eqn` (a library's own line, such
    as megablox's `jnp.where`, counts: the user's frame would be their call of the library)."""
    traceback = eqn.source_info.traceback
    for frame in traceback.frames if traceback is not None else ():
        if "/jax/_src/" not in frame.file_name:
            return f"{frame.file_name}:{frame.line_num}"
    return "?"
