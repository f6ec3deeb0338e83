"""Concrete data for abstract arguments.

Executors need arrays; a case may give `jax.ShapeDtypeStruct`s. Each abstract leaf `i` (in
`jax.tree.leaves` order) gets data from `jax.random.fold_in(jax.random.key(seed), i)`,
`seed = DEFAULT_SEED = 0` unless asked otherwise, so every executor and every run sees the same
inputs:

- floating (f64/f32/bf16/f16/fp8): standard normal, drawn in float32 and cast;
- signed and unsigned integers: uniform in [0, 8) (small, non-negative: safe as indices,
  sizes and loop bounds);
- bool: fair coin flips;
- integer operands that feed a kernel's scalar prefetch (index maps read them): uniform in
  [0, n) with the largest n (tried from the operands' block counts down) for which every
  block the index maps then select lies inside its array.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from pallaslab.settings import size_text

DEFAULT_SEED = 0
INT_HIGH = 8  # integers are drawn from [0, INT_HIGH)


def is_abstract(x: Any) -> bool:
    return isinstance(x, jax.ShapeDtypeStruct)


def any_abstract(args: Any) -> bool:
    return any(is_abstract(x) for x in jax.tree.leaves(args))


def random_leaf(aval: Any, index: int, seed: int = DEFAULT_SEED, high: int = INT_HIGH) -> Any:
    """Deterministic data of `aval`'s shape and dtype (see the module docstring)."""
    key = jax.random.fold_in(jax.random.key(seed), index)
    shape, dtype = tuple(aval.shape), jnp.dtype(aval.dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return jax.random.normal(key, shape, jnp.float32).astype(dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        return jax.random.randint(key, shape, 0, max(1, high), jnp.int32).astype(dtype)
    if dtype == jnp.bool_:
        return jax.random.bernoulli(key, 0.5, shape)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        re, im = jax.random.normal(key, (2, *shape), jnp.float32)
        return (re + 1j * im).astype(dtype)
    raise TypeError(f"cannot make random data of dtype {dtype} for an abstract argument")


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One array of a run's inputs or outputs, sized from its shape and dtype alone."""

    name: str  # "args[0]", "kwargs['x']", "outputs[1]"
    shape: tuple[int, ...]
    dtype: str  # short form: "f32", "bf16", "i32"
    nbytes: int

    def __str__(self) -> str:
        return f"{self.name} ({self.dtype}[{','.join(map(str, self.shape))}], " \
               f"{size_text(self.nbytes)})"


def array_leaves(tree: Any, prefix: str) -> list[Leaf]:
    """Every leaf with a shape and a dtype (arrays, `ShapeDtypeStruct`s), named by its path;
    nothing is allocated or read."""
    found = []
    for path, x in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_abstract)[0]:
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is None or dtype is None:
            continue
        dtype = jnp.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        found.append(Leaf(prefix + jax.tree_util.keystr(path), tuple(shape),
                          _short_dtype(dtype), nbytes))
    return found


def _short_dtype(dtype: Any) -> str:
    """JAX's short form: f32, bf16, i8, u32, c64, bool; other dtypes by their name."""
    for long, short in (("bfloat", "bf"), ("float", "f"), ("uint", "u"), ("int", "i"),
                        ("complex", "c")):
        if dtype.name.startswith(long) and dtype.name[len(long):].isdigit():
            return short + dtype.name[len(long):]
    return dtype.name


def concretize(args: Any, *, seed: int = DEFAULT_SEED,
               high: Callable[[int], int] | None = None) -> Any:
    """`args` with every `ShapeDtypeStruct` leaf replaced by deterministic random data.

    `high(i)` may give the integer range of leaf `i` (scalar-prefetch operands).
    """
    leaves, tree = jax.tree.flatten(args, is_leaf=is_abstract)
    out = [
        random_leaf(x, i, seed, high(i) if high is not None else INT_HIGH)
        if is_abstract(x) else x
        for i, x in enumerate(leaves)
    ]
    return jax.tree.unflatten(tree, out)


def concretize_for_kernels(fn: Callable[..., Any], args: tuple[Any, ...],
                           kwargs: dict[str, Any], *, seed: int = DEFAULT_SEED
                           ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Concrete (args, kwargs) for running `fn`; scalar-prefetch integers are kept in range."""
    if not any_abstract((args, kwargs)):
        return args, kwargs
    prefetch_leaves = _prefetch_leaves(fn, args, kwargs)
    if not prefetch_leaves:
        return concretize((args, kwargs), seed=seed)
    for n in _candidate_ranges(fn, args, kwargs):
        concrete = concretize((args, kwargs), seed=seed, high=_range_for(prefetch_leaves, n))
        if _blocks_in_bounds(fn, *concrete):
            return concrete
    return concretize((args, kwargs), seed=seed, high=_range_for(prefetch_leaves, 1))


def _range_for(prefetch_leaves: set[int], n: int) -> Callable[[int], int]:
    def high(i: int) -> int:
        return n if i in prefetch_leaves else INT_HIGH

    return high


def _prefetch_leaves(fn: Callable[..., Any], args: tuple, kwargs: dict) -> set[int]:
    """Flat positions of the arguments passed straight to some kernel's scalar prefetch."""
    from pallaslab.model import _jax, capture

    try:
        cap = capture(fn, *args, **kwargs)
    except Exception:  # the user's own tracing error surfaces when the executor runs
        return set()
    jaxpr = cap.handle.closed_jaxpr.jaxpr
    positions = {v: i for i, v in enumerate(jaxpr.invars)}
    found: set[int] = set()
    for k in cap:
        n_lead = k.handle.num_dynamic_grid + len(k.scalar_prefetch)
        for var in _jax.kernel_leading_invars(k)[:n_lead]:
            if var in positions:
                found.add(positions[var])
    return found


def _candidate_ranges(fn: Callable[..., Any], args: tuple, kwargs: dict) -> list[int]:
    from pallaslab.model import capture

    cap = capture(fn, *args, **kwargs)
    counts: set[int] = set()
    for k in cap:
        for op in k.blocked_operands:
            for size, dim in zip(op.block_extent or (), op.shape, strict=True):
                counts.add(max(1, -(-dim // max(size, 1))))
    return sorted(counts, reverse=True)


def _blocks_in_bounds(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict) -> bool:
    from pallaslab.analysis.findings import Rules, out_of_bounds
    from pallaslab.analysis.tiling import tile
    from pallaslab.model import capture

    cap = capture(fn, *args, **kwargs)
    for k in cap:
        t = tile(k)
        if t is not None and any(True for _ in out_of_bounds(k, t, Rules(tpu=True, gpu=False))):
            return False
    return True
