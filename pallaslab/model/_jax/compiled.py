"""Compiled functions kept across captures, keyed by what they compute (a structural key).

Every `%%pallas` run traces the user's line again, so each capture holds new jaxpr objects, and
JAX's own caches (keyed on those objects) miss: the kernel would be compiled again for the value
and again for the whole-grid index maps. Here a compiled function is kept under a *structural
key* of what it computes: the jaxpr's equations (primitives, operands, params, avals), its
constants' bytes, shapes and dtypes. An identical re-capture finds it; any difference (a block
shape, a dtype, an index map, a constant) gives another key, so a stale result is never
returned. Objects the key cannot describe by value (a function in a param) make it uncacheable:
those run as before.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import functools
import hashlib
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import jax
import numpy as np
from jax._src import config as jax_config
from jax._src import core as jax_core
from jax._src import source_info_util


class Unkeyable(Exception):
    """A value the structural key cannot describe by value (e.g. a function)."""


# --------------------------------------------------------------------------------------------
# Structural keys


def structural_key(value: Any) -> Hashable:
    """A hashable key equal for values that compute the same thing: jaxprs by their equations
    (variables numbered in binding order), arrays by shape, dtype and bytes, dataclasses by
    their fields, containers element-wise, other hashable objects by their own equality.
    Raises `Unkeyable` for what has no value equality (functions, unhashable objects)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return (type(value).__name__, value)
    if isinstance(value, jax_core.Jaxpr):
        return _known_jaxpr_key(value)
    if isinstance(value, jax_core.Tracer):
        # JAX 0.11's emit_pipeline keeps its index maps' closed-over program ids (tracers of
        # the kernel's trace) among a jaxpr's constants: no value to key by.
        raise Unkeyable("a tracer has no value")
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        return _array_key(value)
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, enum.Enum):
        return ("enum", type(value).__qualname__, value.name)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(structural_key(v) for v in value))
    if isinstance(value, Mapping):
        return ("mapping", tuple(sorted((repr(k), structural_key(v)) for k, v in value.items())))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted(repr(structural_key(v)) for v in value)))
    if isinstance(value, type):
        return ("type", value.__module__, value.__qualname__)
    if dataclasses.is_dataclass(value):
        return (type(value).__module__, type(value).__qualname__,
                tuple((f.name, structural_key(getattr(value, f.name)))
                      for f in dataclasses.fields(value)))
    if callable(value):
        raise Unkeyable(f"a {type(value).__name__} has no value equality")
    try:
        hash(value)
    except TypeError:
        raise Unkeyable(f"a {type(value).__name__} is not hashable") from None
    # Avals, shardings, tree definitions...: their own equality (identity-equal objects only
    # ever match themselves, which is safe: a miss).
    return ("object", type(value).__qualname__, value)


def _array_key(value: Any) -> Hashable:
    data = np.asarray(value)
    return ("array", data.shape, data.dtype.str, hashlib.sha256(data.tobytes()).hexdigest())


class PerObject[T]:
    """Values computed from an object, kept while it lives (weak keys): JAX hands a repeated
    capture the very same jaxpr objects, so what is derived from one is computed once. An
    object that cannot be weakly referenced gets its value computed each time."""

    def __init__(self) -> None:
        self._values: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, obj: Any, make: Callable[[Any], T]) -> T:
        with self._lock:
            found = self._values.get(obj)
        if found is None:
            found = make(obj)
            with contextlib.suppress(TypeError), self._lock:
                self._values[obj] = found
        return found


_JAXPR_KEYS: PerObject[Hashable] = PerObject()


def _known_jaxpr_key(jaxpr: Any) -> Hashable:
    return _JAXPR_KEYS.get(jaxpr, _jaxpr_key)


def _jaxpr_key(jaxpr: Any) -> Hashable:
    numbers: dict[Any, int] = {}

    def atom(v: Any) -> Hashable:
        if isinstance(v, jax_core.Literal):
            return ("literal", structural_key(v.val), structural_key(v.aval))
        if isinstance(v, jax_core.DropVar):
            return ("drop", structural_key(v.aval))
        return numbers.setdefault(v, len(numbers))

    def binder(v: Any) -> Hashable:
        return (atom(v), structural_key(v.aval))

    return ("jaxpr",
            tuple(binder(v) for v in jaxpr.all_invars),
            tuple(structural_key(c) for c in jaxpr.consts),  # a closed jaxpr's constant values
            tuple((e.primitive.name, tuple(atom(v) for v in e.invars), structural_key(e.params),
                   tuple(binder(v) for v in e.outvars)) for e in jaxpr.eqns),
            tuple(atom(v) for v in jaxpr.outvars))


# --------------------------------------------------------------------------------------------
# A bounded LRU of compiled functions


@dataclasses.dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    uncacheable: int  # lookups whose key could not be made (run uncached)
    size: int
    maxsize: int


class CompiledCache[T]:
    """Compiled functions by structural key, the least recently used dropped past `maxsize`."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._entries: collections.OrderedDict[Hashable, T] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._hits = self._misses = self._uncacheable = 0

    def get(self, key: Callable[[], Hashable], make: Callable[[], T]) -> T:
        """The function under `key()`, made by `make()` on a miss (or every time when the key
        cannot be made)."""
        try:
            k = key()
        except Unkeyable:
            with self._lock:
                self._uncacheable += 1
            return make()
        with self._lock:
            if k in self._entries:
                self._hits += 1
                self._entries.move_to_end(k)
                return self._entries[k]
        made = make()
        with self._lock:
            self._misses += 1
            self._entries[k] = made
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return made

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._uncacheable, len(self._entries),
                              self.maxsize)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# --------------------------------------------------------------------------------------------
# The captured computation's value, with its compiled equations kept


_EQUATIONS: CompiledCache[Callable[..., Any]] = CompiledCache(maxsize=32)


def equation_cache_stats() -> CacheStats:
    """Hits and misses of the compiled equations of `cached_jaxpr_callable`."""
    return _EQUATIONS.stats()


def cached_jaxpr_callable(closed_jaxpr: Any) -> Callable[..., list[Any]]:
    """Evaluate a closed jaxpr on flat arguments as `jaxpr_as_fun` does (eagerly, equation by
    equation, so the value is the plain call's), except that an equation holding a
    sub-computation (a kernel, a `jit`) runs a jitted function kept by structural key: JAX
    compiles such an equation afresh for every new capture, and a re-run now reuses it."""

    def run(*args: Any) -> list[Any]:
        jaxpr = closed_jaxpr
        env: dict[Any, Any] = dict(zip(jaxpr.all_invars, (*jaxpr.consts, *args), strict=True))

        def read(v: Any) -> Any:
            return v.val if isinstance(v, jax_core.Literal) else env[v]

        with jax_config.debug_nans(False):  # as jaxpr_as_fun (ops may disable it locally)
            for eqn in jaxpr.eqns:
                name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
                with (source_info_util.user_context(eqn.source_info.traceback,
                                                    name_stack=name_stack), eqn.ctx.manager):
                    outs = _bind(eqn, [read(v) for v in eqn.invars])
                for v, out in zip(eqn.outvars, outs, strict=True):
                    if not isinstance(v, jax_core.DropVar):
                        env[v] = out
        return [read(v) for v in jaxpr.outvars]

    return run


def _bind(eqn: Any, args: list[Any]) -> list[Any]:
    params = eqn.primitive.get_bind_params(eqn.params)
    if _compiles_a_subcomputation(eqn):
        jitted = _EQUATIONS.get(lambda: _equation_key(eqn),
                                lambda: jax.jit(functools.partial(_bind_one, eqn.primitive,
                                                                  params)))
        return list(jitted(*args))
    return _bind_one(eqn.primitive, params, *args)


def _compiles_a_subcomputation(eqn: Any) -> bool:
    """A kernel or jit equation with variables only (a literal operand would reach the jitted
    function as a strongly typed array, not as the equation's literal)."""
    return (any(True for _ in jax_core.jaxprs_in_params(eqn.params))
            and not any(isinstance(v, jax_core.Literal) for v in eqn.invars))


def _equation_key(eqn: Any) -> Hashable:
    return ("equation", eqn.primitive.name, structural_key(eqn.params),
            tuple(structural_key(v.aval) for v in eqn.invars))


def _bind_one(primitive: Any, params: dict[str, Any], *args: Any) -> list[Any]:
    out = primitive.bind(*args, **params)
    return list(out) if primitive.multiple_results else [out]
