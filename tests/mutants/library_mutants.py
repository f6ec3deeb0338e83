"""Single-bug mutants of a kernel no one here wrote: tokamax's (0.0.17, PyPI) splash flash
attention forward kernel (`tokamax/_src/ops/experimental/tpu/splash_attention/
splash_attention_kernel.py`), each called through tokamax's own public op
(`PallasMosaicTpuFlashAttention`, which transposes q, k, v to heads-major, vmaps over the batch
and transposes the kernel's output back), on a CPU under `tokamax.config.cross_compile`.

The installed library is never edited: each mutant patches, only while its function runs, ONE
thing the library's forward wrapper looks up by module name:
- `pl` (jax.experimental.pallas, as the kernel module sees it), with a stand-in whose
  `pallas_call` rewrites one BlockSpec's index map (the library's map composed with the bug), or
- `flash_attention_kernel` (the kernel body), with the library's own body given one wrong
  static argument.

`LIBRARY_MUTANTS` is kept apart from the hand-written catalog (`MUTANTS`), so its tallies stand
alone (benchmarks/bench_mutants.py, tests/execute/test_library_mutants.py). `wrong_under_jax`
checks a mutant is wrong under plain JAX (interpret mode), with no pallaslab involved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from mutant_registry import Case, Mutant, line_of

SEQ, HEADS, DIM, BLOCK = 384, 2, 128, 128
STEPS = SEQ // BLOCK  # q blocks = kv blocks = 3; the kernel's grid is (heads, q x kv steps)

LIBRARY_MUTANTS: dict[str, Mutant] = {}


def library_mutant(bug: str, *, kind: str, words: tuple[str, ...] = (),
                   operand: str | None = None) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        LIBRARY_MUTANTS[fn.__name__] = Mutant(fn, "splash_ok", bug, attention_ref, kind, words,
                                              operand)
        return fn

    return register


def _splash():
    from tokamax._src.ops.experimental.tpu.splash_attention import splash_attention_kernel

    return splash_attention_kernel


def _splash_file() -> str:
    return _splash().__file__


def attention_ref(q, k, v):
    """Plain softmax attention over [batch, seq, heads, dim], tokamax's default scale."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32))
    p = jax.nn.softmax(s / np.sqrt(q.shape[-1]), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v.astype(jnp.float32)).astype(q.dtype)


def _args():
    shape = (1, SEQ, HEADS, DIM)
    return tuple(jax.random.normal(jax.random.key(s), shape, jnp.float32).astype(jnp.bfloat16)
                 for s in range(3))


# -- one bug, patched in while the library's op runs ------------------------------------------

class _PallasWithBug:
    """`jax.experimental.pallas` as the kernel module sees it, except that `pallas_call` gives
    one BlockSpec (input `index` of q, k, v = 0, 1, 2 after the scalar-prefetch operands, or
    "out") the library's index map composed with `bug(block_indices, h_block, i, j)`."""

    def __init__(self, which: int | str, bug: Callable[..., tuple[Any, ...]]):
        from jax.experimental import pallas as pl

        self._pl, self._which, self._bug = pl, which, bug

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pl, name)

    def pallas_call(self, kernel: Any, *, grid_spec: Any, **kwargs: Any) -> Any:
        steps = STEPS

        def rewrite(spec: Any) -> Any:
            library_map = spec.index_map

            def index_map(h_block, grid_idx, *refs):
                i, j = grid_idx // steps, grid_idx % steps
                return self._bug(library_map(h_block, grid_idx, *refs), h_block, i, j)

            return dataclasses.replace(spec, index_map=index_map)

        if self._which == "out":
            grid_spec.out_specs = type(grid_spec.out_specs)(
                [rewrite(grid_spec.out_specs[0]), *grid_spec.out_specs[1:]])
        else:
            specs = list(grid_spec.in_specs)
            specs[self._which] = rewrite(specs[self._which])
            grid_spec.in_specs = type(grid_spec.in_specs)(specs)
        return self._pl.pallas_call(kernel, grid_spec=grid_spec, **kwargs)


def _map_bug(which: int | str, bug: Callable[..., tuple[Any, ...]]):
    return mock.patch.object(_splash(), "pl", _PallasWithBug(which, bug))


def _body_bug(**wrong: Callable[[Any], Any]):
    """The library's kernel body, with one static argument given a wrong value."""
    library_body = _splash().flash_attention_kernel

    def body(*refs, **static):
        for name, change in wrong.items():
            static[name] = change(static[name])
        return library_body(*refs, **static)

    return mock.patch.object(_splash(), "flash_attention_kernel", body)


@contextlib.contextmanager
def _no_bug() -> Iterator[None]:
    yield


def _attention(bug: Callable[[], Any], q, k, v):
    """tokamax's public flash-attention op, called as a user would, with `bug` patched in."""
    from tokamax._src import config
    from tokamax._src.ops.attention.pallas_mosaic_tpu import PallasMosaicTpuFlashAttention

    # JAX keeps the library's traces (its jit, its custom_vjp) across calls: a patch made after
    # a first call would go unseen, and a mutant's trace would outlive its patch.
    jax.clear_caches()
    with config.cross_compile(True), _fresh_trace(), bug():
        return PallasMosaicTpuFlashAttention()(q, k, v)


@contextlib.contextmanager
def _fresh_trace() -> Iterator[None]:
    """The library jits its forward (`_splash_attention`); a jit keeps its traces, so a patch
    made after the first call would go unseen. A fresh jit of the same function, per call."""
    splash = _splash()
    library = splash._splash_attention
    fresh = jax.jit(library.__wrapped__, static_argnames=[
        "is_mqa", "config", "save_residuals", "mask_value", "mask_function",
        "fwd_mask_sparsity", "dkv_mask_sparsity"])
    with mock.patch.object(splash, "_splash_attention", fresh):
        yield


def _case(bug: Callable[[], Any]) -> tuple[Any, ...]:
    return functools.partial(_attention, bug), _args()


def splash_ok():
    return _case(_no_bug)


# -- index maps (q, k, v are the kernel's inputs 0, 1, 2 after its scalar prefetch) ----------

@library_mutant("q's index map reverses the q blocks", kind="index-map", operand="args[7]")
def splash_q_map_reversed():
    return _case(lambda: _map_bug(0, lambda b, h, i, j: (b[0], STEPS - 1 - i, b[2])))


@library_mutant("q's index map always takes head block 0", kind="index-map",
                operand="args[7]")
def splash_q_map_head_fixed():
    return _case(lambda: _map_bug(0, lambda b, h, i, j: (0, b[1], b[2])))


@library_mutant("k's index map is off by one kv block (rotated)", kind="index-map",
                operand="args[8]")
def splash_k_map_off_by_one():
    return _case(lambda: _map_bug(1, lambda b, h, i, j: (b[0], (j + 1) % STEPS, b[2])))


@library_mutant("k's index map ignores the kv step (always block 0)", kind="index-map",
                operand="args[8]")
def splash_k_map_block_fixed():
    return _case(lambda: _map_bug(1, lambda b, h, i, j: (b[0], 0, b[2])))


@library_mutant("v's index map reverses the kv blocks", kind="index-map", operand="args[9]")
def splash_v_map_reversed():
    return _case(lambda: _map_bug(2, lambda b, h, i, j: (b[0], STEPS - 1 - j, b[2])))


@library_mutant("v's index map takes the other head", kind="index-map", operand="args[9]")
def splash_v_map_other_head():
    return _case(lambda: _map_bug(2, lambda b, h, i, j: (HEADS - 1 - b[0], b[1], b[2])))


@library_mutant("the output's index map reverses the q blocks", kind="index-map",
                operand="outputs")
def splash_out_map_reversed():
    return _case(lambda: _map_bug("out", lambda b, h, i, j: (b[0], STEPS - 1 - i, b[2])))


@library_mutant("the output's index map swaps the heads", kind="index-map", operand="outputs")
def splash_out_map_heads_swapped():
    return _case(lambda: _map_bug("out", lambda b, h, i, j: (HEADS - 1 - b[0], b[1], b[2])))


# -- the body (the library's own flash_attention_kernel, one static argument wrong) -----------

def _fused_store() -> str:
    return line_of(_splash_file(), "o_ref[...] = (o_scratch_ref[...] * l_inv)")


def _unfused_store() -> str:
    return line_of(_splash_file(), "o_ref[...] = o_scratch_ref[...].astype(o_ref.dtype)")


@library_mutant("the body is told one kv step fewer: the tile is stored a step early",
                kind="line", words=(_fused_store(),))
def splash_body_kv_steps_short():
    return _case(lambda: _body_bug(kv_steps=lambda n: n - 1))


@library_mutant("the body does not fuse 1/l, but the wrapper expects it to", kind="line",
                words=(_unfused_store(),))
def splash_body_reciprocal_not_fused():
    return _case(lambda: _body_bug(fuse_reciprocal=lambda f: not f))


# -- plain JAX: each mutant is wrong ----------------------------------------------------------

def run_in_jax(case: Case) -> np.ndarray:
    from jax.experimental.pallas import tpu as pltpu

    fn, args = case()
    with pltpu.force_tpu_interpret_mode():
        return np.asarray(jax.jit(fn)(*args).astype(jnp.float32))


def wrong_under_jax(case: Case, tol: float = 0.05) -> float:
    """The mutant's largest error against the unmutated library under plain JAX (interpret
    mode); more than `tol` is wrong (the unmutated op is within 0.004 of attention_ref)."""
    return float(np.max(np.abs(run_in_jax(case) - run_in_jax(splash_ok))))
