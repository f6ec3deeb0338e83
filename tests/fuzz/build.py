"""Description -> `(fn, args)`: the Pallas function a description stands for, and its inputs.

`interpret=True` gives the plain-JAX oracle run of the same kernel (no pallaslab involved)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plt

from fuzz.ops import ELEMENTWISE, REDUCTIONS, np_dtype
from fuzz.spec import (
    AtomicKernel,
    BlockKernel,
    DmaKernel,
    Kernel,
    MosaicGpuKernel,
    Operand,
    PipelineKernel,
    RemoteKernel,
    TritonKernel,
)

Fn = Callable[..., Any]


def build(kernel: Kernel, *, interpret: bool = False) -> Fn:
    """The kernel function. Its `pallas_call` is made inside each call, so what travels to
    pallaslab's executor worker is this module's function and the description."""
    return functools.partial(_call, kernel, interpret)


def _call(kernel: Kernel, interpret: bool, *args: Any) -> Any:
    builder = {BlockKernel: _block_fn, DmaKernel: _dma_fn, TritonKernel: _triton_fn,
               PipelineKernel: _pipeline_fn, AtomicKernel: _atomic_fn,
               MosaicGpuKernel: _mosaic_gpu_fn, RemoteKernel: _remote_fn}
    return builder[type(kernel)](kernel, interpret)(*args)


def inputs(kernel: Kernel, seed: int) -> tuple[np.ndarray, ...]:
    """The kernel function's arguments: seeded normal data (and the prefetch table first)."""
    rng = np.random.default_rng(seed)
    if isinstance(kernel, BlockKernel):
        arrays = tuple(_normal(rng, o.shape, o.dtype) for o in kernel.inputs)
        table = (np.asarray(kernel.prefetch, np.int32),) if kernel.prefetch else ()
        return table + arrays
    if isinstance(kernel, DmaKernel):
        return (_normal(rng, kernel.shape, kernel.dtype),)
    if isinstance(kernel, PipelineKernel):
        return tuple(_normal(rng, kernel.shape, kernel.dtype) for _ in kernel.rows)
    if isinstance(kernel, AtomicKernel):
        return _atomic_inputs(kernel, rng)
    if isinstance(kernel, MosaicGpuKernel):
        return tuple(_normal(rng, kernel.shape, kernel.dtype) for _ in kernel.cols)
    if isinstance(kernel, RemoteKernel):
        return (_normal(rng, kernel.shape, "float32"),)
    count = 2 if kernel.two_inputs else 1
    return tuple(_normal(rng, kernel.shape, "float32") for _ in range(count))


def _atomic_inputs(k: AtomicKernel, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """The values (and a histogram's bin per value), then the zeros the output starts at."""
    zeros = np.zeros(k.out_shape, np.float32)
    if k.layout == "histogram":
        return (rng.integers(0, k.bins, k.n).astype(np.int32), _normal(rng, (k.n,), "float32"),
                zeros)
    shape = (k.bins, k.n) if k.layout == "split" else (k.n,)
    return _normal(rng, shape, "float32"), zeros


def _normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return rng.standard_normal(shape, np.float32).astype(np_dtype(dtype))


# --- TPU BlockSpec kernels ---------------------------------------------------------------------


def index_map(kernel: BlockKernel, expr: str) -> Fn:
    """The operand's index map: its expression as a lambda over the grid coordinates (and the
    scalar-prefetch ref `p`)."""
    names = ", ".join(kernel.coords) + (", p" if kernel.prefetch else "")
    extents = zip(kernel.coords, kernel.grid, strict=True)
    scope = {f"n{c}": n for c, n in extents} | {"min": jnp.minimum}
    return eval(f"lambda {names}: {expr}", scope)


def _spec(kernel: BlockKernel, o: Operand) -> pl.BlockSpec:
    block = tuple(pl.Squeezed() if b is None else b for b in o.block)
    return pl.BlockSpec(block, index_map(kernel, o.index_map))


def _block_fn(k: BlockKernel, interpret: bool) -> Fn:
    out = k.output
    acc_shape = tuple(b for b in out.block if b is not None)
    scratch = [pltpu.VMEM(acc_shape, jnp.float32)] if k.body in ("reduce", "dot") else []
    in_specs = [_spec(k, o) for o in k.inputs]
    params = pltpu.CompilerParams(dimension_semantics=k.semantics)
    out_shape = jax.ShapeDtypeStruct(out.shape, np_dtype(out.dtype))
    body = functools.partial(_block_body, k)
    if k.prefetch:
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=k.grid, in_specs=in_specs, out_specs=_spec(k, out),
            scratch_shapes=scratch)
        call = pl.pallas_call(body, out_shape=out_shape, grid_spec=grid_spec,
                              compiler_params=params, interpret=interpret)
    else:
        call = pl.pallas_call(body, out_shape=out_shape, grid=k.grid, in_specs=in_specs,
                              out_specs=_spec(k, out), scratch_shapes=scratch,
                              compiler_params=params, interpret=interpret)
    return call


def _block_body(k: BlockKernel, *refs: Any) -> None:
    refs = refs[1:] if k.prefetch else refs  # the table is read by the index maps only
    n_in = len(k.inputs)
    in_refs, o_ref, scratch = refs[:n_in], refs[n_in], refs[n_in + 1:]
    store = _guarded_store(k)
    if k.body == "elementwise":
        _elementwise(k, in_refs, o_ref, store)
    else:
        _accumulate(k, in_refs, o_ref, scratch[0], store)


def _guarded_store(k: BlockKernel | DmaKernel) -> Callable[[Callable[[], None]], None]:
    """Runs a store, or with `skip_last_store`, every program's store but the grid's last."""
    if not k.skip_last_store:
        return lambda write: write()
    # Read here, at the body's top level: the HLO interpreter cannot lower a program_id
    # inside a pl.when branch.
    last = functools.reduce(jnp.logical_and, [pl.program_id(a) == n - 1
                                              for a, n in enumerate(k.grid)])
    return lambda write: pl.when(jnp.logical_not(last))(write)


def _value(o: Operand, ref: Any, rows: Any = None) -> jax.Array:
    v = ref[...] if rows is None else ref[rows, :]
    return (v.T if o.transposed else v).astype(jnp.float32)


def _round_trip(k: BlockKernel, v: jax.Array) -> jax.Array:
    return v.astype(jnp.bfloat16).astype(jnp.float32) if k.round_trip else v


def _elementwise(k: BlockKernel, in_refs: tuple[Any, ...], o_ref: Any, store: Any) -> None:
    op = ELEMENTWISE[k.op][1]
    dtype = np_dtype(k.output.dtype)

    def compute(rows: Any = None) -> jax.Array:
        values = (_value(o, r, rows) for o, r in zip(k.inputs, in_refs, strict=True))
        return _round_trip(k, op(*values))

    if not k.chunk_rows:
        store(lambda: o_ref.__setitem__(Ellipsis, compute().astype(dtype)))
        return

    def write() -> None:
        def step(c: Any, carry: Any) -> Any:
            rows = pl.ds(pl.multiple_of(c * k.chunk_rows, k.chunk_rows), k.chunk_rows)
            o_ref[rows, :] = compute(rows).astype(dtype)
            return carry
        jax.lax.fori_loop(0, o_ref.shape[0] // k.chunk_rows, step, 0)

    store(write)


def _accumulate(k: BlockKernel, in_refs: tuple[Any, ...], o_ref: Any, acc: Any,
                store: Any) -> None:
    last = len(k.grid) - 1
    init, fold = (0.0, None) if k.body == "dot" else REDUCTIONS[k.op][:2]
    if not k.skip_init:
        @pl.when(pl.program_id(k.coords.index(k.init_coord)) == 0)
        def _init() -> None:
            acc[...] = jnp.full(acc.shape, init, jnp.float32)

    if k.body == "dot":
        x, y = (r[...] for r in in_refs)
        acc[...] += jnp.dot(x, y, preferred_element_type=jnp.float32)
    else:
        v = _round_trip(k, _value(k.inputs[0], in_refs[0]))
        if k.output.block[-1] == 1:  # a row reduction: fold the block's columns first
            v = jnp.sum(v, -1, keepdims=True) if k.op == "sum" else jnp.max(v, -1, keepdims=True)
        acc[...] = fold(acc[...], v)

    @pl.when(pl.program_id(last) == k.grid[last] - 1)
    def _write_back() -> None:
        store(lambda: o_ref.__setitem__(Ellipsis, acc[...].astype(o_ref.dtype)))


# --- TPU manual-DMA kernels --------------------------------------------------------------------


def _dma_fn(k: DmaKernel, interpret: bool) -> Fn:
    rows, cols = k.rows, k.shape[1]
    dtype = np_dtype(k.dtype)
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    out_spec = any_spec if k.output_in_hbm else pl.BlockSpec((rows, cols), lambda i: (i, 0))
    scratch = [pltpu.VMEM((rows, cols), dtype), pltpu.SemaphoreType.DMA(())]
    scratch += [pltpu.VMEM((rows, cols), dtype)] if k.output_in_hbm else []
    call = pl.pallas_call(
        functools.partial(_dma_body, k), out_shape=jax.ShapeDtypeStruct(k.shape, dtype),
        grid=k.grid, in_specs=[any_spec], out_specs=out_spec, scratch_shapes=scratch,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=interpret)
    return call


def _copy(k: DmaKernel, src: Any, dst: Any, sem: Any) -> None:
    if k.copy == "sync":
        pltpu.sync_copy(src, dst)
    else:
        c = pltpu.make_async_copy(src, dst, sem)
        c.start()
        c.wait()


def _dma_body(k: DmaKernel, x_hbm: Any, o_ref: Any, buf: Any, sem: Any, *out_buf: Any) -> None:
    i = pl.program_id(0)
    store = _guarded_store(k)
    source = eval(f"lambda i, ni: {k.source}", {"min": jnp.minimum})(i, k.grid[0])
    if k.sub_chunks > 1:
        piece = k.rows // k.sub_chunks

        def step(c: Any, carry: Any) -> Any:
            _copy(k, x_hbm.at[pl.ds(source * k.rows + c * piece, piece)],
                  buf.at[pl.ds(c * piece, piece)], sem)
            return carry
        jax.lax.fori_loop(0, k.sub_chunks, step, 0)
    else:
        _copy(k, x_hbm.at[pl.ds(source * k.rows, k.rows)], buf, sem)
    value = ELEMENTWISE[k.op][1](buf[...].astype(jnp.float32)).astype(buf.dtype)

    def write() -> None:
        if k.output_in_hbm:
            out_buf[0][...] = value
            pltpu.sync_copy(out_buf[0], o_ref.at[pl.ds(i * k.rows, k.rows)])
        else:
            o_ref[...] = value
    store(write)


# --- TPU in-kernel pipelines (emit_pipeline) ---------------------------------------------------


def _pipeline_fn(k: PipelineKernel, interpret: bool) -> Fn:
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    call = pl.pallas_call(
        functools.partial(_pipeline_body, k),
        out_shape=jax.ShapeDtypeStruct(k.shape, np_dtype(k.dtype)), grid=k.grid,
        in_specs=[any_spec] * len(k.rows), out_specs=any_spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=interpret)
    if not interpret:
        return call
    # Tracing emit_pipeline asks the TPU for its tiling: plain JAX on a CPU host needs an
    # abstract TPU (v5e) to trace it under.
    from jax.sharding import AbstractDevice, AbstractMesh, AxisType

    device = AbstractDevice(device_kind="TPU v5 lite", num_cores=1, platform="tpu")
    mesh = AbstractMesh((1,), ("x",), (AxisType.Auto,), abstract_device=device)

    def under_abstract_tpu(*args: Any) -> Any:
        with jax.sharding.use_abstract_mesh(mesh):
            return call(*args)
    return under_abstract_tpu


def _pipeline_body(k: PipelineKernel, *refs: Any) -> None:
    *in_hbm, o_hbm = refs
    ni, _ = k.inner_grid
    part = pl.ds(pl.program_id(0) * (ni * k.block), ni * k.block)
    block = (k.block, 128)

    def spec(expr: str) -> pl.BlockSpec:
        row = eval(f"lambda i, ni: {expr}", {"min": jnp.minimum})
        return pl.BlockSpec(block, lambda i, j: (row(i, ni), j))

    def inner(*block_refs: Any) -> None:
        *ins, out = block_refs
        values = (r[...].astype(jnp.float32) for r in ins)
        out[...] = ELEMENTWISE[k.op][1](*values).astype(out.dtype)

    pltpu.emit_pipeline(inner, grid=k.inner_grid, in_specs=[spec(m) for m in k.rows],
                        out_specs=spec(k.out_map))(*(r.at[part] for r in in_hbm), o_hbm.at[part])


# --- Triton-style GPU kernels ------------------------------------------------------------------

TRITON = plt.CompilerParams(num_warps=4)


def _triton_fn(k: TritonKernel, interpret: bool) -> Fn:
    body = functools.partial(_vector_body if k.layout == "vector" else _rows_body, k)
    call = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(k.shape, jnp.float32),
                          grid=k.grid, compiler_params=TRITON, interpret=interpret)
    return call


def _triton_store(k: TritonKernel, write: Callable[[], None]) -> None:
    if k.skip_last_store:
        pl.when(pl.program_id(0) != k.grid[0] - 1)(write)
    else:
        write()


def _vector_body(k: TritonKernel, *refs: Any) -> None:
    *in_refs, o_ref = refs
    start = pl.program_id(0) * k.block
    mask = start + jnp.arange(k.block) < k.valid + k.mask_shift
    window = pl.ds(start, k.block)
    values = [plt.load(r.at[window], mask=mask, other=0.0) for r in in_refs]
    result = ELEMENTWISE[k.op][1](*values)
    _triton_store(k, lambda: plt.store(o_ref.at[window], result, mask=mask))


def _rows_body(k: TritonKernel, *refs: Any) -> None:
    *in_refs, o_ref = refs
    row = pl.program_id(0)
    mask = jnp.arange(k.block) < k.valid + k.mask_shift
    fill = 0.0 if k.op == "sum" or k.other_zero else -jnp.inf
    x = plt.load(in_refs[0].at[row, :], mask=mask, other=fill)
    if k.two_inputs:
        x = x + plt.load(in_refs[1].at[row, :], mask=mask, other=0.0)
    folded = jnp.sum(x) if k.op == "sum" else jnp.max(x)

    def write() -> None:
        plt.store(o_ref.at[row, :], x - folded, mask=mask)
        plt.store(o_ref.at[row, :], jnp.zeros_like(x), mask=~mask)
    _triton_store(k, write)


# --- Triton atomics ------------------------------------------------------------------------------

ATOMICS = {"add": plt.atomic_add, "max": plt.atomic_max, "min": plt.atomic_min}
# What a masked-off lane loads: the op's identity, so it changes no fold.
FILLS = {"add": 0.0, "max": -float("inf"), "min": float("inf")}
FOLDS = {"add": jnp.sum, "max": jnp.max, "min": jnp.min}


def _atomic_fn(k: AtomicKernel, interpret: bool) -> Fn:
    body = functools.partial(_atomic_body, k)
    arity = 3 if k.layout == "histogram" else 2

    def fn(*args: Any) -> Any:
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(k.out_shape, jnp.float32),
                              grid=k.grid, input_output_aliases={arity - 1: 0},
                              compiler_params=TRITON, interpret=interpret)(*args)
    return fn


def _atomic_body(k: AtomicKernel, *refs: Any) -> None:
    *in_refs, _, o_ref = refs  # the zeros input is o_ref's buffer
    start = pl.program_id(0) * k.block
    lanes = start + jnp.arange(k.block) < k.n
    if k.layout == "histogram":
        index_ref, value_ref = in_refs
        window = pl.ds(start, k.block)
        index = plt.load(index_ref.at[window], mask=lanes, other=0)
        values = plt.load(value_ref.at[window], mask=lanes, other=0.0)
        if k.index_shift:
            index = (index + k.index_shift) % k.bins
        ATOMICS[k.op](o_ref, index, values, mask=lanes)
        return
    (x_ref,) = in_refs
    if k.layout == "counter":
        x = plt.load(x_ref.at[pl.ds(start, k.block)], mask=lanes, other=FILLS[k.op])
        folded, where = FOLDS[k.op](x), ()
    else:
        x = plt.load(x_ref.at[:, pl.ds(start, k.block)],
                     mask=jnp.broadcast_to(lanes[None, :], (k.bins, k.block)),
                     other=FILLS[k.op])
        folded, where = FOLDS[k.op](x, axis=1), pl.ds(0, k.bins)
    if k.plain_store:
        o_ref[where] = folded
    else:
        ATOMICS[k.op](o_ref, where, folded)


# --- Mosaic GPU pipelines ------------------------------------------------------------------------


def _mosaic_gpu_fn(k: MosaicGpuKernel, interpret: bool) -> Fn:
    """`plgpu.kernel` has no interpret flag: plain JAX runs it only under GPU interpret mode,
    which refuses the pipeline's predicated copies, so the NumPy model is its oracle."""
    from jax.experimental.pallas import mosaic_gpu as plgpu

    return plgpu.kernel(functools.partial(_mosaic_gpu_body, k),
                        out_type=jax.ShapeDtypeStruct(k.shape, np_dtype(k.dtype)),
                        grid=k.grid, grid_names=("b",))


def _mosaic_gpu_body(k: MosaicGpuKernel, *refs: Any) -> None:
    from jax.experimental.pallas import mosaic_gpu as plgpu

    *in_gmem, o_gmem = refs
    b, nc = jax.lax.axis_index("b"), k.tiles
    row = eval(f"lambda b, nb: {k.out_row}", {"min": jnp.minimum})(b, k.blocks)

    def spec(expr: str, block_row: Any) -> Any:
        col = eval(f"lambda c, nc: {expr}", {"min": jnp.minimum})
        return plgpu.BlockSpec((k.rows, k.tile), lambda c: (block_row, col(c, nc)))

    def step(_: Any, *tiles: Any) -> None:
        *ins, out = tiles
        values = (t[...].astype(jnp.float32) for t in ins)
        out[...] = ELEMENTWISE[k.op][1](*values).astype(out.dtype)

    plgpu.emit_pipeline(step, grid=(nc,), in_specs=[spec(m, b) for m in k.cols],
                        out_specs=[spec(k.out_col, row)],
                        max_concurrent_steps=k.stages)(*in_gmem, o_gmem)


# --- kernels across devices ----------------------------------------------------------------------


def _remote_fn(k: RemoteKernel, interpret: bool) -> Fn:
    """Under `shard_map` over every device JAX has (a worker's N simulated devices; a ring
    of one where it is traced on this process's one CPU device)."""
    from jax.sharding import PartitionSpec as P

    def fn(x: Any) -> Any:
        mesh = jax.make_mesh((jax.device_count(),), ("x",),
                             axis_types=(jax.sharding.AxisType.Auto,))
        call = pl.pallas_call(
            functools.partial(_remote_body, k),
            out_shape=jax.ShapeDtypeStruct((k.rows, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            scratch_shapes=[pltpu.VMEM((k.rows, 128), jnp.float32),
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            interpret=pltpu.InterpretParams() if interpret else False)
        return jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                             check_vma=False)(x)
    return fn


def _remote_body(k: RemoteKernel, x_hbm: Any, o_ref: Any, received: Any, send: Any,
                 recv: Any) -> None:
    me, n = jax.lax.axis_index("x"), jax.lax.axis_size("x")
    copy = pltpu.make_async_remote_copy(x_hbm, received, send, recv,
                                        device_id=(jax.lax.rem(me + k.shift, n),))
    copy.start()
    copy.wait_send()
    if k.wait_recv:
        copy.wait_recv()
    o_ref[...] = ELEMENTWISE[k.op][1](received[...])
