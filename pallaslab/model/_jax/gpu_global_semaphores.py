"""Global semaphores (`pl.get_global(plgpu.SemaphoreType.REGULAR)`) for JAX's Mosaic GPU
interpreter, which has no semaphore at all ("No ir_type_handler for aval type AbstractRef").

The semantics followed are Mosaic GPU's lowering: `get_global` reserves semaphores in a GMEM
buffer shared by every block of the launch, zero at its start; `semaphore_signal` adds `inc`;
`semaphore_wait(value, decrement=True)` blocks until the count is at least `value`, then takes
`value` off; `semaphore_read` returns the count. Here each count is a host integer and each
operation a callback on the interpreter's token, so it is ordered with the thread's loads,
stores and copies as on the device.

JAX's interpreter runs the grid's blocks one after another (the threads of one cluster at
once). A wait whose count no earlier block (nor a thread running beside it) brings up can never
pass here, although on a device a later block might signal it: that wait stops the run with a
NotImplementedError saying so, a limit of this executor, never a verdict on the kernel.

The interpreter dispatches primitives in a closed `match`, so the rule cannot be one more case:
a jaxpr holding a semaphore operation is interpreted in segments, JAX's interpreter evaluating
the equations between them and the rule here each semaphore operation, with the token threaded
through. Installed on the interpreter class only within `global_semaphores()`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pallaslab.model._jax.equation_fields import call_site_of

_LOCK = threading.Lock()
_FIRST_HANDLE = 0x5E_0000  # a global semaphore's value in the interpreter: its handle
WAIT_LIMIT_S = 10.0  # a wait no running thread has signalled for this long is stuck
NOTE = ("global semaphores (pl.get_global) counted by pallaslab's rule, one count per "
        "launch shared by all blocks: signal adds, wait blocks until the count is reached and "
        "takes it off (JAX's Mosaic GPU interpreter has none); blocks run in grid order, so a "
        "wait for a later block's signal cannot be run here")


@dataclasses.dataclass
class _Counts:
    """One launch's global semaphores: the count of each (handle, element)."""

    shapes: dict[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    counts: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)
    changed: threading.Condition = dataclasses.field(default_factory=threading.Condition)
    handles: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)
    # stepped launches: the counts before each program ran, in the order programs ran
    before: dict[tuple[int, ...], dict[tuple[int, int], int]] = dataclasses.field(
        default_factory=dict)

    def handle(self, key: tuple[str, int], shape: tuple[int, ...]) -> int:
        """The handle of the global semaphore `key` (its call site and ordinal there): the
        same for every trace sharing these counts, as one block after another is stepped."""
        if key not in self.handles:
            self.handles[key] = _FIRST_HANDLE + len(self.handles)
            self.shapes[self.handles[key]] = shape
        return self.handles[key]

    def rewound_to(self, program: tuple[int, ...]) -> None:
        """Before `program` runs in a stepped launch: the counts as they were before it ran the
        last time, when it ran before (the stepper went back); kept to rewind to later."""
        with self.changed:
            if program in self.before:
                kept = list(self.before)[:list(self.before).index(program)]
                self.counts = dict(self.before[program])
                self.before = {p: self.before[p] for p in kept}
            self.before[program] = dict(self.counts)

    def signal(self, token: Any, handle: Any, index: Any, inc: Any, *, where: str) -> Any:
        key = self._key(handle, index, where)
        with self.changed:
            self.counts[key] = self.counts.get(key, 0) + int(inc)
            self.changed.notify_all()
        return token

    def wait(self, token: Any, handle: Any, index: Any, value: Any, *, decrement: bool,
             concurrent: int, where: str) -> Any:
        key, value = self._key(handle, index, where), int(value)
        with self.changed:
            # Alone in its step, no thread can signal while it waits: fail at once.
            limit = WAIT_LIMIT_S if concurrent > 1 else 0.0
            if not self.changed.wait_for(lambda: self.counts.get(key, 0) >= value, limit):
                raise NotImplementedError(
                    f"the semaphore wait at {where} waits for a count of {value} on a global "
                    f"semaphore that stays at {self.counts.get(key, 0)}: the interpreter runs "
                    "blocks one after another in grid order, so a signal from a later block "
                    "cannot reach it (on a device it might); run it on a GPU")
            if decrement:
                self.counts[key] -= value
        return token

    def read(self, token: Any, handle: Any, index: Any, *, where: str) -> Any:
        import numpy as np

        with self.changed:
            return token, np.int32(self.counts.get(self._key(handle, index, where), 0))

    def _key(self, handle: Any, index: Any, where: str) -> tuple[int, int]:
        handle = int(handle)
        if handle not in self.shapes:
            raise NotImplementedError(
                f"the semaphore operation at {where} is on a semaphore that is not a global "
                "one (pl.get_global): JAX's Mosaic GPU interpreter has no other semaphores")
        size = math.prod(self.shapes[handle])
        index = int(index)
        if not 0 <= index < size:
            raise IndexError(f"the semaphore operation at {where} indexes element {index} of "
                             f"a global semaphore array of {size}")
        return handle, index


@dataclasses.dataclass
class _Trace:
    """A trace within `global_semaphores()`: the counts its operations use, and how many
    `get_global` calls it met at each call site (a call's ordinal there names it)."""

    counts: _Counts
    seen: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


_ACTIVE: list[_Trace] = []  # the traces under way (innermost last)


def launch_counts() -> _Counts:
    """Fresh counts, for traces that are one launch together (the blocks of a stepped run)."""
    return _Counts()


@contextlib.contextmanager
def global_semaphores(counts: _Counts | None = None) -> Iterator[None]:
    """JAX's Mosaic GPU interpreter, within this block, interprets global semaphores. A kernel
    traced here counts them in `counts` (fresh ones when None): the traced computation keeps
    them, so each trace is one launch unless traces share counts."""
    from jax._src.pallas.mosaic_gpu.interpret import jaxpr_interpret

    cls = jaxpr_interpret.JaxprInterpreter
    with _LOCK:
        original = cls.interpret
        installed = getattr(original, "_pallaslab_rule", False)
        if not installed:
            cls.interpret = _in_segments(original)  # type: ignore[method-assign]
        _ACTIVE.append(_Trace(counts or _Counts()))
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE.pop()
            if not installed:
                cls.interpret = original  # type: ignore[method-assign]


def _rules() -> dict[Any, Callable[..., tuple[Any, list[Any]]]]:
    from jax._src.pallas import primitives as pallas_primitives
    from jax._src.pallas.mosaic_gpu import primitives as gpu_primitives

    return {pallas_primitives.get_global_p: _get_global,
            pallas_primitives.semaphore_signal_p: _signal,
            pallas_primitives.semaphore_wait_p: _wait,
            gpu_primitives.semaphore_wait_p: _wait,
            pallas_primitives.semaphore_read_p: _read}


def uses_global_semaphores(kernel: Any) -> bool:
    """Does the kernel's body take a global semaphore (`pl.get_global`)?"""
    from pallaslab.model._jax.chips import body_jaxprs
    from pallaslab.model._jax.rewrite import contains

    return any(contains(j, lambda eqn: eqn.primitive.name == "get_global")
               for j in body_jaxprs(kernel))


def _in_segments(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def interpret(self: Any, jaxpr: Any, token: Any, *args: Any) -> Any:
        rules = _rules()
        if not any(eqn.primitive in rules for eqn in jaxpr.eqns):
            return original(self, jaxpr, token, *args)
        from jax._src import core as jax_core

        env = dict(zip([*jaxpr.constvars, *jaxpr.invars], args, strict=True))

        def read(v: Any) -> Any:
            return v.val if isinstance(v, jax_core.Literal) else env[v]

        for segment in _segments(jaxpr.eqns, rules):
            if len(segment) == 1 and segment[0].primitive in rules:
                eqn = segment[0]
                token, outs = rules[eqn.primitive](self, eqn, token, [read(v) for v in eqn.invars])
            else:
                sub = _sub_jaxpr(jaxpr, segment)
                token, outs = original(self, sub, token, *(env[v] for v in sub.invars))
                eqn = None
            outvars = segment[0].outvars if eqn is not None else sub.outvars
            env.update(zip(outvars, outs, strict=True))
        return token, [read(v) for v in jaxpr.outvars]

    interpret._pallaslab_rule = True  # type: ignore[attr-defined]
    return interpret


def _segments(eqns: Sequence[Any], rules: Any) -> Iterator[list[Any]]:
    """The equations in runs: each semaphore operation alone, the others between them."""
    run: list[Any] = []
    for eqn in eqns:
        if eqn.primitive in rules:
            if run:
                yield run
            run = []
            yield [eqn]
        else:
            run.append(eqn)
    if run:
        yield run


def _sub_jaxpr(jaxpr: Any, segment: list[Any]) -> Any:
    """A jaxpr of `segment`'s equations: its inputs what they read from before it, its outputs
    what they define that the rest of `jaxpr` reads."""
    from jax._src import core as jax_core

    defined: set[Any] = set()
    invars: list[Any] = []
    for eqn in segment:
        for v in eqn.invars:
            if isinstance(v, jax_core.Var) and v not in defined and v not in invars:
                invars.append(v)
        defined.update(eqn.outvars)
    inside = {id(e) for e in segment}
    read_after = {v for e in jaxpr.eqns if id(e) not in inside for v in e.invars
                  if isinstance(v, jax_core.Var)} | {v for v in jaxpr.outvars
                                                      if isinstance(v, jax_core.Var)}
    outvars = [v for e in segment for v in e.outvars if v in read_after]
    effects = jax_core.join_effects(*(e.effects for e in segment))
    return jax_core.Jaxpr([], invars, outvars, segment, effects,
                          debug_info=jaxpr.debug_info.with_unknown_names())


def _trace() -> _Trace:
    if not _ACTIVE:
        raise NotImplementedError("global semaphores are interpreted within "
                                  "pallaslab's global_semaphores() only")
    return _ACTIVE[-1]


def _counts() -> _Counts:
    return _trace().counts


def _where(eqn: Any) -> str:
    from pallaslab.model.source_names import short_source

    site = call_site_of(eqn)
    return short_source(site) if site else "an unknown line"


def _get_global(interp: Any, eqn: Any, token: Any, invals: list[Any]) -> tuple[Any, list[Any]]:
    import jax.numpy as jnp
    from jax._src.pallas import core as pallas_core

    what = eqn.params["what"]
    if not jnp.issubdtype(what.dtype, pallas_core.semaphore):
        raise NotImplementedError(f"pl.get_global of {what} at {_where(eqn)}: only semaphores "
                                  "are global in Mosaic GPU")
    trace, site = _trace(), _where(eqn)
    trace.seen[site] += 1
    handle = trace.counts.handle((site, trace.seen[site]), tuple(int(d) for d in what.shape))
    return token, [jnp.int32(handle)]


def _call(fn: Callable[..., Any], token: Any, *operands: Any, result: Any = None) -> Any:
    from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
    from jax.experimental import io_callback

    return io_callback(fn, result or gpu_callbacks.TOKEN_SHAPE_DTYPE, token, *operands)


def _unflatten(eqn: Any, invals: list[Any]) -> Any:
    return eqn.params["args_tree"].unflatten(invals)


def _signal(interp: Any, eqn: Any, token: Any, invals: list[Any]) -> tuple[Any, list[Any]]:
    ref, transforms, inc, device_id, core_index = _unflatten(eqn, invals)
    if device_id is not None or core_index is not None:
        raise NotImplementedError(f"a remote semaphore signal at {_where(eqn)} (device_id or "
                                  "core_index): only a global semaphore of this launch is "
                                  "interpreted")
    index = _element(eqn, ref, transforms)
    fn = functools.partial(_counts().signal, where=_where(eqn))
    return _call(fn, token, ref, index, inc), []


def _wait(interp: Any, eqn: Any, token: Any, invals: list[Any]) -> tuple[Any, list[Any]]:
    ref, transforms, value, decrement = _unflatten(eqn, invals)
    index = _element(eqn, ref, transforms)
    fn = functools.partial(_counts().wait, decrement=bool(decrement), where=_where(eqn),
                           concurrent=int(interp.num_concurrent_threads))
    return _call(fn, token, ref, index, value), []


def _read(interp: Any, eqn: Any, token: Any, invals: list[Any]) -> tuple[Any, list[Any]]:
    import jax
    import jax.numpy as jnp
    from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks

    ref, transforms = _unflatten(eqn, invals)
    index = _element(eqn, ref, transforms)
    fn = functools.partial(_counts().read, where=_where(eqn))
    token, value = _call(fn, token, ref, index, result=(
        gpu_callbacks.TOKEN_SHAPE_DTYPE, jax.ShapeDtypeStruct((), jnp.int32)))
    return token, [value]


def _element(eqn: Any, ref: Any, transforms: Any) -> Any:
    """The flat index of the semaphore element `transforms` select (0 for a scalar one); only
    integer indexing is followed (a slice of semaphores is not one semaphore)."""
    import jax.numpy as jnp
    from jax._src.state.indexing import NDIndexer

    index = jnp.int32(0)
    for transform in transforms or ():
        if not isinstance(transform, NDIndexer) or not all(
                not hasattr(i, "size") or getattr(i, "shape", None) == ()
                for i in transform.indices):
            raise NotImplementedError(f"the semaphore operation at {_where(eqn)} takes "
                                      f"{type(transform).__name__} of a global semaphore array: "
                                      "only integer indexing is interpreted")
        for i, size in zip(transform.indices, transform.shape, strict=True):
            index = index * size + jnp.asarray(i, jnp.int32)
    return index
