"""A standing corpus of production Pallas kernels no one here wrote: tokamax's (PyPI, in the
test extra), at small shapes, each captured on a CPU host the way a kernel author would.

`CORPUS` maps a name to a zero-argument function returning `(fn, args)` — like a catalog case
— run under `tokamax.config.cross_compile(True)` (tokamax checks the device kind otherwise).
Used by tests/test_production_corpus.py and benchmarks/production_corpus.py.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
from catalog import rand

S = jax.ShapeDtypeStruct
Case = Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]
CORPUS: dict[str, Case] = {}


def corpus_case(fn: Case) -> Case:
    CORPUS[fn.__name__] = fn
    return fn


@contextlib.contextmanager
def tokamax_on_cpu() -> Iterator[None]:
    """tokamax refuses ops whose device is not the one they are written for; cross-compiling
    is what pallaslab does on a CPU host."""
    from tokamax._src import config

    with config.cross_compile(True):
        yield


def _op(module: str, cls: str) -> Any:
    import importlib

    return getattr(importlib.import_module(f"tokamax._src.ops.{module}"), cls)()


@corpus_case
def tpu_flash_attention():
    op = _op("attention.pallas_mosaic_tpu", "PallasMosaicTpuFlashAttention")
    q = rand((2, 512, 4, 128), jnp.bfloat16)
    return (lambda q, k, v: op(q, k, v)), (q, rand(q.shape, jnp.bfloat16, 1),
                                           rand(q.shape, jnp.bfloat16, 2))


@corpus_case
def triton_flash_attention_f16():
    op = _op("attention.pallas_triton", "PallasTritonFlashAttention")
    q = S((1, 256, 2, 64), jnp.float16)
    return (lambda q, k, v: op(q, k, v)), (q, q, q)


@corpus_case
def triton_flash_attention_f32():
    op = _op("attention.pallas_triton", "PallasTritonFlashAttention")
    q = S((1, 256, 2, 64), jnp.float32)
    return (lambda q, k, v: op(q, k, v)), (q, q, q)


@corpus_case
def ragged_dot_gmm():
    op = _op("ragged_dot.pallas_mosaic_tpu", "PallasMosaicTpuRaggedDot")
    lhs, rhs = rand((512, 256), jnp.bfloat16), rand((4, 256, 256), jnp.bfloat16, 1)
    sizes = jnp.asarray([128, 256, 0, 128], jnp.int32)
    return (lambda lhs, rhs, sizes: op(lhs, rhs, group_sizes=sizes)), (lhs, rhs, sizes)


@corpus_case
def router_topk():
    op = _op("router_topk.pallas_mosaic_tpu", "PallasTpuRouterTopK")
    return _from_arg_spec(op, "router_topk", "e256_k8_t64")


@corpus_case
def deepseek_rope():
    op = _op("deepseek_rope.pallas_mosaic_tpu", "PallasTpuDeepseekRope")
    return _from_arg_spec(op, "deepseek_rope", "dsv4_rope_kv_t4096_d512")


@corpus_case
def grouped_lowrank_proj():
    op = _op("grouped_lowrank_proj.pallas_mosaic_tpu", "PallasTpuGroupedLowrankProj")
    return _from_arg_spec(op, "grouped_lowrank_proj", "dsv4_t128_g16_r1024")


def _from_arg_spec(op: Any, module: str, name: str) -> tuple[Callable[..., Any], tuple]:
    """tokamax's own benchmark argument spec `name` (abstract arrays and static options)."""
    import importlib

    specs = importlib.import_module(f"tokamax._src.ops.{module}.arg_specs").ARG_SPECS
    (spec,) = [s for s in specs if s.name == name]
    arrays = {k: v for k, v in spec.args.items() if isinstance(v, S)}
    static = {k: v for k, v in spec.args.items() if k not in arrays}
    keys = tuple(arrays)
    fn = functools.partial(_call_with, op, keys, static)
    return fn, tuple(arrays[k] for k in keys)


def _call_with(op: Any, keys: tuple[str, ...], static: dict[str, Any], *arrays: Any) -> Any:
    return op(**dict(zip(keys, arrays, strict=True)), **static)
