"""Vectorized index maps: every operand's block indices for many programs in one jitted call
(shared by identical re-captures), and one program's, evaluated alone."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax._src import tree_util
from jax._src.interpreters import partial_eval as pe
from jax._src.pallas import core as pallas_core
from jax._src.state import discharge as state_discharge
from jax._src.state import indexing

from pallaslab.model._jax.compiled import CacheStats, CompiledCache, structural_key
from pallaslab.model._jax.equation_fields import is_numpy_dtype
from pallaslab.model._jax.nested_outer import Closure
from pallaslab.model.kernel import Kernel


def index_map_evaluator(
    gm: Any, closure: Closure | None = None, outer_rank: int = 0,
) -> Callable[[np.ndarray, Sequence[np.ndarray]], list[np.ndarray]] | None:
    """One jitted, vmapped function computing every operand's block indices for many programs.

    Called with `program_ids` of shape (grid_rank, P) in execution order and the concrete
    scalar-prefetch arrays; returns one (P, ndim + b) int array per block mapping: the block
    index along each dimension, then the slice size of each of its b `pl.BoundedSlice`
    dimensions (whose index map returns a `pl.ds(start, size)`: start in elements). The jitted
    function is shared by identical re-captures (`_INDEX_MAPS`), so a re-run does not compile
    it again.

    A nested pipeline's index maps may close over values of its enclosing kernel: then the
    first `outer_rank` program ids are the enclosing kernel's, and `closure` computes those
    values from them (`nested_outer`).
    """
    mappings = list(gm.block_mappings)
    if not mappings:
        return None
    if closure is not None:
        batched = _batched_index_maps(gm, closure, outer_rank)
    else:
        batched = _INDEX_MAPS.get(lambda: _index_maps_key(gm), lambda: _batched_index_maps(gm))

    # One table per blocked operand (`Kernel.blocked_operands`): semaphores passed between
    # kernels have a block mapping but no window.
    windowed = [i for i, bm in enumerate(mappings) if is_numpy_dtype(bm.array_aval.dtype)]

    def evaluate(program_ids: np.ndarray, prefetch: Sequence[np.ndarray]) -> list[np.ndarray]:
        ids = np.ascontiguousarray(program_ids, dtype=np.int32)
        with jax.default_device(jax.devices("cpu")[0]):
            outs = batched(ids, tuple(np.asarray(p) for p in prefetch))
        return [np.asarray(outs[i]) for i in windowed]

    return evaluate


# The whole-grid index-map functions of recent captures, by what they compute (each costs a
# compile, ~0.25 s for a matmul).
_INDEX_MAPS: CompiledCache[Callable[..., list[jax.Array]]] = CompiledCache(maxsize=32)


def index_map_cache_stats() -> CacheStats:
    """Hits and misses of the whole-grid index-map functions."""
    return _INDEX_MAPS.stats()


def _index_maps_key(gm: Any) -> Hashable:
    """What the batched index maps compute: the grid's rank and, per block mapping, its index
    map jaxpr, block shape and array's shape/dtype (the grid's extent and the prefetch arrays'
    shapes are the jitted function's own arguments)."""
    return ("index-maps", len(gm.grid),
            tuple((structural_key(bm.index_map_jaxpr), structural_key(bm.block_shape),
                   structural_key(bm.array_aval)) for bm in gm.block_mappings))


def _batched_index_maps(gm: Any, closure: Closure | None = None, outer_rank: int = 0
                        ) -> Callable[..., list[jax.Array]]:
    mappings = list(gm.block_mappings)
    n_grid = len(gm.grid)
    pure = [_pure_index_map(bm, with_consts=closure is not None) for bm in mappings]
    n_consts = [len(bm.index_map_jaxpr.consts) if closure is not None else 0
                for bm in mappings]

    def all_maps(ids: jax.Array, prefetch: tuple[jax.Array, ...]) -> list[jax.Array]:
        outer = [ids[d] for d in range(outer_rank)]
        scalars = [ids[outer_rank + d] for d in range(n_grid)]
        consts = closure(outer) if closure is not None else []
        outs = []
        for j, (fn, bm) in enumerate(zip(pure, mappings, strict=True)):
            first = sum(n_consts[:j])
            mine = consts[first:first + n_consts[j]]
            starts, sizes = _starts_and_sizes(bm, fn(*mine, *scalars, *prefetch))
            vals = [*starts, *sizes]
            outs.append(jnp.stack([jnp.asarray(v, jnp.int32) for v in vals]) if vals
                        else jnp.zeros((0,), jnp.int32))
        return outs

    return jax.jit(jax.vmap(all_maps, in_axes=(1, None)))


def _starts_and_sizes(bm: Any, outs: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(an index per block dimension, the sizes of its BoundedSlice dimensions): a bounded
    dimension's index map returns a `pl.ds(start, size)`, whose static fields live in the
    output tree rather than among the outputs."""
    tree = bm.index_map_out_tree  # (discharged refs' values follow the outputs)
    indices = tree_util.tree_unflatten(tree, list(outs)[: tree.num_leaves])
    if not isinstance(indices, (tuple, list)):
        indices = (indices,)
    starts, sizes = [], []
    for dim, index in zip(bm.block_shape, indices, strict=False):
        if isinstance(index, indexing.Slice):
            starts.append(index.start)
            if isinstance(dim, pallas_core.BoundedSlice):
                sizes.append(index.size)
        else:
            starts.append(index)
    return starts, sizes


def _pure_index_map(bm: Any, with_consts: bool = False) -> Callable[..., list[Any]]:
    """The index map as a pure function; `with_consts`: of its closed-over values first (they
    belong to the enclosing kernel's trace, so they are passed in, never read)."""
    closed = bm.index_map_jaxpr
    if with_consts:
        closed = pe.convert_constvars_jaxpr(closed)
    jaxpr = state_discharge.discharge_state(closed, strip_memory_space=True)
    return jax_core.jaxpr_as_fun(jaxpr)


def eval_index_map_once(kernel: Kernel, origin: str, program: Sequence[int]) -> tuple[int, ...]:
    """Evaluate one operand's index map for one program, the slow way (benchmarks, tests)."""
    gm = kernel.handle.eqn.params["grid_mapping"]
    for bm in gm.block_mappings:
        if bm.origin == origin:
            fn = _pure_index_map(bm)
            out = fn(*[jnp.int32(p) for p in program], *kernel.prefetch_values)
            return tuple(int(v) for v in _starts_and_sizes(bm, out)[0])
    raise KeyError(origin)


