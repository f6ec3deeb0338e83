"""The GPU rows of tokamax's published autotuning table: built through tokamax with their
config, captured on this CPU for their GPU, predicted by `gpu_model` (issue 42).

The row reader, problem parser and `BuildError` are `published`'s. tokamax's
`pallas_triton_{gated_linear_unit,ragged_dot,normalization}` ops are `jax_triton.triton_call`
kernels, not Pallas: never captured, they are traced for their launches instead (grid, warps,
stages, arrays: `model/_jax/foreign.py`) and predicted from those and the problem's work.
A row's flops are the problem's (its dots' work, from its shapes): the captured Triton and
Mosaic GPU bodies loop over key/value or k tiles with trip counts known only at run time, and
Mosaic GPU's matrix products are `wgmma`/`tcgen05` ops that the jaxpr's dot count does not see.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

from pallaslab.analysis import published as pub
from pallaslab.analysis.gpu_model import (
    GpuPrediction,
    gpu_prediction,
    gpu_spec,
    launch_work,
    predict_work,
)
from pallaslab.errors import PallasLabError
from pallaslab.model._jax.chips import kernel_body_vector_ops
from pallaslab.model._jax.xla_ops import xla_boundary_bytes

HARDWARE_GPUS = {"H100 80GB HBM3": "h100", "B200": "b200"}
# The compute capability tokamax picks its kernel generation by (sm90: Hopper, sm100: Blackwell;
# CUDA C Programming Guide, "Compute Capabilities").
_CAPABILITY = {"h100": 9.0, "b200": 10.0}
# tokamax's Triton ops that are `jax_triton.triton_call` kernels, not Pallas.
TRITON_CALL_OPS = ("gated_linear_unit", "ragged_dot", "normalization", "normalization_vjp")


def gpu_of(row: pub.Row) -> str | None:
    return HARDWARE_GPUS.get(row.hardware)


def is_triton_call(row: pub.Row) -> bool:
    """Is the row's op one of tokamax's `jax_triton` kernels (not Pallas)?"""
    return backend_op(row) in {("triton", op) for op in TRITON_CALL_OPS}


def gpu_rows(rows: list[pub.Row]) -> Iterator[pub.Row]:
    return (r for r in rows if r.hardware in HARDWARE_GPUS)


def backend_op(row: pub.Row) -> tuple[str, str]:
    """("triton" | "mosaic_gpu", op) from the op file name."""
    name = row.op_file.removeprefix("pallas_")
    for backend in ("mosaic_gpu", "triton"):
        if name.startswith(backend + "_"):
            return backend, name.removeprefix(backend + "_")
    return "?", name


@contextlib.contextmanager
def _as_gpu(gpu: str, *, devices: bool = False) -> Iterator[None]:
    """tokamax picks a kernel generation from the default device's compute capability, and
    sizes persistent grids by its SM count (`core_count`); on this CPU it is told the row's
    GPU's (and cross-compiles, as for TPU rows)."""
    import jax
    import tokamax
    from jax.extend import backend
    from tokamax._src import gpu_utils

    saved = gpu_utils._compute_capability, backend.get_default_device, jax.devices
    cpu = saved[1]()
    gpu_utils._compute_capability = lambda device=None: _CAPABILITY[gpu]
    backend.get_default_device = lambda: _GpuCores(cpu, gpu_spec(gpu).sms)
    if devices:  # tokamax's Triton ops size their grid groups by jax.devices()[0].core_count
        jax.devices = lambda *a, **k: [_GpuCores(d, gpu_spec(gpu).sms) for d in saved[2](*a, **k)]
    try:
        with tokamax.config.cross_compile(True):
            yield
    finally:
        gpu_utils._compute_capability, backend.get_default_device, jax.devices = saved


class _GpuCores:
    """The CPU device, with the SM count of the GPU it stands for."""

    def __init__(self, device: Any, sms: int) -> None:
        self._device, self.core_count = device, sms

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)

    def __hash__(self) -> int:
        return hash(self._device)

    def __eq__(self, other: object) -> bool:
        return self._device == getattr(other, "_device", other)


def _attention(row: pub.Row, cfg: dict[str, Any], backend: str, gpu: str) -> pub.Built:
    arrays = pub.problem_arrays(row.problem)
    q, k, v = pub.need(arrays, "q", "k", "v")
    for name in ("q_start", "k_start", "softcap", "paging"):
        if pub.field(row.problem, name) not in (None, "None"):
            raise pub.BuildError(f"{name} not supported", f"{row.problem[:120]!r}")
    causal = pub.flag(row.problem, "causal")
    extra = [n for n in ("bias", "bool_mask") if n in arrays]  # passed as arrays, as published
    if backend == "triton":
        from tokamax._src.ops.attention import pallas_triton as mod

        op: Any = mod.PallasTritonFlashAttention(config=mod.Config(**cfg),
                                                 bypass_device_check=True)
    else:
        from tokamax._src.ops.attention import pallas_mosaic_gpu as mgpu

        config = mgpu.ConfigSM100 if gpu == "b200" else mgpu.ConfigSM90
        op = mgpu.PallasMosaicGpuFlashAttention(config=config(**cfg), bypass_device_check=True)

    def fn(q: Any, k: Any, v: Any, *rest: Any) -> Any:
        named = dict(zip(extra, rest, strict=True))
        return op(q, k, v, is_causal=causal, bias=named.get("bias"),
                  mask=named.get("bool_mask"))

    return pub.Built(fn, tuple(pub.sds(a) for a in (q, k, v, *(arrays[n] for n in extra))))


def _glu(row: pub.Row, cfg: dict[str, Any], backend: str, gpu: str) -> pub.Built:
    from tokamax._src.ops.gated_linear_unit import pallas_mosaic_gpu as mod

    x, w = pub.need(pub.problem_arrays(row.problem), "x", "weights")
    activation = _activation(row)
    op = mod.PallasMosaicGpuGatedLinearUnit(config=mod.Config(**cfg), bypass_device_check=True)

    def fn(x: Any, w: Any) -> Any:
        return op(x, w, activation=activation)

    return pub.Built(fn, (pub.sds(x), pub.sds(w)))


def _ragged_dot(row: pub.Row, cfg: dict[str, Any], backend: str, gpu: str) -> pub.Built:
    import jax.numpy as jnp
    from tokamax._src.ops.ragged_dot import pallas_mosaic_gpu as mod

    lhs, rhs = pub.need(pub.problem_arrays(row.problem), "lhs", "rhs")
    dims = pub.ragged_dot_dims(row.problem)
    op = mod.PallasMosaicGpuRaggedDot(config=mod.Config(**cfg), bypass_device_check=True)

    def fn(a: Any, b: Any, gs: Any) -> Any:
        return op(a, b, group_sizes=gs, ragged_dot_dimension_numbers=dims)

    return pub.Built(fn, (pub.sds(lhs), pub.sds(rhs),
                          jnp.asarray(pub.group_sizes(row.problem))))


def _attention_vjp(row: pub.Row, cfg: dict[str, Any], backend: str, gpu: str) -> pub.Built:
    if backend == "triton":
        from tokamax._src.ops.attention import pallas_triton_vjp as mod

        op: Any = mod.PallasTritonFlashAttentionVjp(config=mod.Config(**cfg),
                                                    bypass_device_check=True)
    else:
        from tokamax._src.ops.attention import pallas_mosaic_gpu_vjp as mgpu

        op = mgpu.PallasMosaicGpuFlashAttentionVjp(config=mgpu.Config(**cfg),
                                                   bypass_device_check=True)
    return pub.attention_vjp(row, op, bias_and_mask=True)


def _triton_glu(row: pub.Row, cfg: dict[str, Any], backend: str, gpu: str) -> pub.Built:
    from tokamax._src.ops.gated_linear_unit import triton as mod

    x, w = pub.need(pub.problem_arrays(row.problem), "x", "weights")
    activation = _activation(row)
    op = mod.TritonGatedLinearUnit(config=mod.Config(**cfg))
    return pub.Built(lambda x, w: op(x, w, activation=activation), (pub.sds(x), pub.sds(w)))


def _triton_ragged_dot(row: pub.Row, cfg: dict[str, Any], backend: str,
                       gpu: str) -> pub.Built:
    import jax.numpy as jnp
    from tokamax._src.ops.ragged_dot import triton as mod

    lhs, rhs = pub.need(pub.problem_arrays(row.problem), "lhs", "rhs")
    dims = pub.ragged_dot_dims(row.problem)
    op = mod.TritonRaggedDot(config=mod.Config(**cfg))

    def fn(a: Any, b: Any, gs: Any) -> Any:
        return op(a, b, group_sizes=gs, ragged_dot_dimension_numbers=dims)

    return pub.Built(fn, (pub.sds(lhs), pub.sds(rhs),
                          jnp.asarray(pub.group_sizes(row.problem))))


def _normalization_options(row: pub.Row) -> dict[str, Any]:
    return {"axis": int(pub.field(row.problem, "axis") or -1),
            "epsilon": float(pub.field(row.problem, "epsilon") or 1e-6),
            "scale_offset": float(pub.field(row.problem, "scale_offset") or 0.0),
            "subtract_mean": pub.flag(row.problem, "subtract_mean")}


def _triton_normalization(row: pub.Row, cfg: dict[str, Any], backend: str,
                          gpu: str) -> pub.Built:
    from tokamax._src.ops.normalization import triton as mod

    a = pub.problem_arrays(row.problem)
    (x,) = pub.need(a, "x")
    named = [n for n in ("scale", "offset") if n in a]
    op, options = mod.TritonNormalization(config=mod.Config(**cfg)), _normalization_options(row)

    def fn(x: Any, *rest: Any) -> Any:
        given = dict(zip(named, rest, strict=True))
        return op(x, given.get("scale"), given.get("offset"), **options)

    return pub.Built(fn, tuple(pub.sds(s) for s in (x, *(a[n] for n in named))))


def _triton_normalization_vjp(row: pub.Row, cfg: dict[str, Any], backend: str,
                              gpu: str) -> pub.Built:
    from tokamax._src.ops.normalization import triton as mod

    a = pub.problem_arrays(row.problem)
    out, dout, x = pub.need(a, "out", "dout", "x")
    residuals = pub.residual_shapes(row)
    named = [n for n in ("scale", "offset") if n in a]
    op, options = mod.TritonNormalizationVjp(config=mod.Config(**cfg)), _normalization_options(row)

    def fn(mean: Any, rstd: Any, out: Any, dout: Any, x: Any, *rest: Any) -> Any:
        given = dict(zip(named, rest, strict=True))
        return op((mean, rstd), out, dout, x, given.get("scale"), given.get("offset"),
                  **options)

    arrays = (*residuals, out, dout, x, *(a[n] for n in named))
    return pub.Built(fn, tuple(pub.sds(s) for s in arrays))


def _activation(row: pub.Row) -> Any:
    import jax

    name = (pub.field(row.problem, "activation") or "").rsplit(".", 1)[-1]
    return {"sigmoid": jax.nn.sigmoid, "silu": jax.nn.silu, "swish": jax.nn.swish,
            "gelu": jax.nn.gelu, "relu": jax.nn.relu}.get(name)


# tokamax's `jax_triton` ops, by op name.
_TRITON_CALL_BUILDERS: dict[str, Callable[[pub.Row, dict[str, Any], str, str], pub.Built]] = {
    "gated_linear_unit": _triton_glu,
    "ragged_dot": _triton_ragged_dot,
    "normalization": _triton_normalization,
    "normalization_vjp": _triton_normalization_vjp,
}
_BUILDERS: dict[str, Callable[[pub.Row, dict[str, Any], str, str], pub.Built]] = {
    "flash_attention": _attention,
    "flash_attention_vjp": _attention_vjp,
    "gated_linear_unit": _glu,
    "ragged_dot": _ragged_dot,
}


def build(row: pub.Row) -> pub.Built:
    gpu = gpu_of(row)
    if gpu is None:
        raise pub.BuildError("not a GPU row", f"hardware {row.hardware!r}")
    backend, op = backend_op(row)
    builder = (_TRITON_CALL_BUILDERS if is_triton_call(row) else _BUILDERS).get(op)
    if builder is None:
        raise pub.BuildError(f"op not supported yet ({op})", row.op_file)
    try:
        return builder(row, pub.config(row), backend, gpu)
    except pub.BuildError:
        raise
    except (TypeError, ValueError) as err:
        raise pub.BuildError(f"config rejected by tokamax ({type(err).__name__})",
                             f"line {row.line}: {str(err).splitlines()[0]}") from err


def problem_flops(row: pub.Row) -> float:
    """The dots' flops of a row's problem, from its shapes (the matrix products it defines)."""
    _, op = backend_op(row)
    a = pub.problem_arrays(row.problem)
    if op.startswith("flash_attention"):
        scores, d, dv = _attention_scores(row)
        first, second = _computed_shares(row)
        # forward: S = QK^T (d) and O = PV (dv); backward: the dK/dV pass recomputes S and
        # forms dP = dO V^T (dv), dV = P^T dO (dv), dK = dS^T Q (d); the dQ pass recomputes S
        # and dP and forms dQ = dS K (d) (tokamax's two backward kernels, FlashAttention-2).
        if op == "flash_attention":
            return 2.0 * scores * first * (d + dv)
        return 2.0 * scores * (first * (d + 2 * dv + d) + second * (d + dv + d))
    if op == "gated_linear_unit":
        x, w = a["x"][0], a["weights"][0]
        return 2.0 * math.prod(x[:-1]) * x[-1] * math.prod(w[1:])
    if op == "ragged_dot":
        lhs, rhs = a["lhs"][0], a["rhs"][0]
        contracting = pub.ragged_dot_dims(row.problem).dot_dimension_numbers[0]
        k = lhs[contracting[0][0]]
        groups = 1 if contracting[0][0] == 0 else rhs[0]  # ragged contracting: no group axis
        return 2.0 * math.prod(lhs) * math.prod(rhs) / (k * groups)
    raise pub.BuildError(f"op not supported yet ({op})", row.op_file)


@dataclasses.dataclass(frozen=True)
class GpuRowPrediction:
    row: pub.Row
    predicted_s: float
    kernels: tuple[str, ...]
    bounds: tuple[str, ...]
    xla_s: float = 0.0  # of predicted_s: XLA's HBM traffic between and around the kernels

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.row.median_s


def predict(row: pub.Row) -> GpuRowPrediction:
    """Build, capture for the row's GPU and predict; the problem's flops spread over the
    kernels in proportion to the blocks each launches."""
    from pallaslab.model import capture

    built = build(row)
    gpu = gpu_of(row) or "h100"
    if is_triton_call(row):
        return _predict_launches(row, built, gpu)
    try:
        with _as_gpu(gpu):
            cap = capture(built.fn, *built.args)
    except PallasLabError as err:
        raise pub.BuildError(f"capture failed ({type(err).__name__})", str(err)) from err
    except NotImplementedError as err:
        raise pub.BuildError("tokamax: not implemented", str(err).splitlines()[0]) from err
    except AttributeError as err:  # tokamax's kernel asks the JAX version for what it lacks
        raise pub.BuildError("tokamax failed tracing (AttributeError)", repr(err)) from err
    _fits(row, gpu, max((_kernel_bytes(k) for k in cap.kernels), default=0))
    padding = _head_dim_padding(row, cap.kernels)
    flops = problem_flops(row) * padding
    preds = _kernel_predictions(cap.kernels, gpu, flops, problem_transcendentals(row),
                                pipeline_steps(row))
    xla_s = _xla_s(cap.handle.closed_jaxpr, gpu) if cap.handle is not None else 0.0
    return GpuRowPrediction(row, sum(p.time_s for p in preds) + xla_s,
                            tuple(k.name for k in cap.kernels), tuple(p.bound for p in preds),
                            xla_s)


def _fits(row: pub.Row, gpu: str, nbytes: float) -> None:
    """A kernel whose arrays outgrow the GPU's memory cannot have run as the problem is
    published (tokamax's B200 table names some ragged dots with a group per row)."""
    capacity = gpu_spec(gpu).memory_bytes
    if nbytes > capacity:
        raise pub.BuildError(
            "the problem as published does not fit the GPU's memory",
            f"a kernel's arrays take {nbytes / 1e9:,.0f} GB, the {gpu.upper()} has "
            f"{capacity / 1e9:,.0f} GB: {row.problem[:100]!r}")


def _kernel_bytes(kernel: Any) -> int:
    return sum(math.prod(o.shape) * o.dtype.itemsize for o in kernel.operands
               if o.role in ("input", "output"))


def _xla_s(closed_jaxpr: Any, gpu: str) -> float:
    """XLA's ops between the kernels: their HBM traffic, and a launch for each fusion that
    writes a result (counted as one per result written: multi-output fusions aside)."""
    xla = xla_boundary_bytes(closed_jaxpr)
    return xla.bytes / gpu_spec(gpu).hbm_bytes_per_s + xla.results * gpu_spec(gpu).launch_s


def _predict_launches(row: pub.Row, built: pub.Built, gpu: str) -> GpuRowPrediction:
    """A `jax_triton` row: its launches traced (not captured: not Pallas), each predicted
    from its grid, warps, stages and arrays with the problem's flops and transcendentals
    spread over the launches in proportion to their programs."""
    from pallaslab.model._jax.foreign import trace_triton_launches

    try:
        with _as_gpu(gpu, devices=True):
            launches, closed = trace_triton_launches(built.fn, *built.args)
    except (TypeError, ValueError, NotImplementedError) as err:
        raise pub.BuildError(f"tokamax failed tracing ({type(err).__name__})",
                             str(err).splitlines()[0] if str(err) else repr(err)) from err
    if not launches:
        raise pub.BuildError("no triton_call launch traced", row.op_file)
    _fits(row, gpu, max(launch.hbm_bytes for launch in launches))
    _, op = backend_op(row)
    flops = 0.0 if op.startswith("normalization") else problem_flops(row)
    trans = problem_transcendentals(row) or 0.0
    total = sum(max(1, launch.programs) for launch in launches)
    preds = [predict_work(launch_work(launch, flops=flops * share, flops_source="problem",
                                      transcendentals=trans * share), gpu)
             for launch in launches
             for share in (max(1, launch.programs) / total,)]
    xla_s = _xla_s(closed, gpu)
    return GpuRowPrediction(row, sum(p.time_s for p in preds) + xla_s,
                            tuple(launch.name for launch in launches),
                            tuple(p.bound for p in preds), xla_s)


def _head_dim_padding(row: pub.Row, kernels: tuple[Any, ...]) -> float:
    """How much wider the kernels' head dim is than the problem's: tokamax pads q, k and v's
    head dim (16 -> 64 on Mosaic GPU) and the kernels do the padded dots."""
    _, op = backend_op(row)
    if not op.startswith("flash_attention"):
        return 1.0
    q = pub.problem_arrays(row.problem)["q"][0]
    dims = [o.shape[-1] for k in kernels for o in k.inputs
            if len(o.shape) == len(q) and tuple(o.shape[:-1]) == tuple(q[:-1])]
    return max(dims, default=q[-1]) / q[-1] if dims else 1.0


def _attention_scores(row: pub.Row) -> tuple[float, int, int]:
    """(scores of the whole, unmasked problem, q/k head dim, v head dim)."""
    a = pub.problem_arrays(row.problem)
    (*batch, sq, hq, d), (*_, sk, _, dv) = a["q"][0], a["v"][0]
    return math.prod(batch) * hq * sq * sk, d, dv


# The (q, kv) block sizes of each pass, by the row's config: the forward's; the backward's
# dK/dV pass, then its dQ pass.
_BLOCKS = (("block_q", "block_kv"), ("block_q", "block_k"), ("block_q_dkv", "block_kv_dkv"),
           ("block_q_dq", "block_kv_dq"), ("block_m1", "block_n1"), ("block_m2", "block_n2"))


def _computed_shares(row: pub.Row) -> tuple[float, float]:
    """The share of the scores each pass computes (the forward's or dK/dV's, then dQ's): all
    of them, or under a causal mask the blocks on or below the diagonal, whole (a block the
    diagonal crosses is computed entire, then masked)."""
    causal = (pub.field(row.problem, "causal") or pub.field(row.problem, "is_causal")
              or "").lower() == "true"
    if not causal:
        return 1.0, 1.0
    a = pub.problem_arrays(row.problem)
    sq, sk = a["q"][0][-3], a["v"][0][-3]
    cfg = pub.config(row)
    blocks = [(int(cfg[q]), int(cfg[k])) for q, k in _BLOCKS if cfg.get(q) and cfg.get(k)]
    shares = [_causal_share(sq, sk, bq, bk) for bq, bk in blocks] or [0.5]
    return shares[0], shares[-1]


def _causal_share(sq: int, sk: int, bq: int, bk: int) -> float:
    """Share of an sq x sk score matrix in the bq x bk blocks a causal kernel computes."""
    computed = sum(bq * bk * min(math.ceil(sk / bk), math.ceil(min(sk, (i + 1) * bq) / bk))
                   for i in range(math.ceil(sq / bq)))
    return min(1.0, computed / (sq * sk))


def problem_transcendentals(row: pub.Row) -> float | None:
    """The exponentials and activations a row's problem computes (None: none worth counting):
    attention's exp of every score, once forward and in each of the two backward passes (both
    recompute P = exp(S - L)); a gated linear unit's activation of every output."""
    _, op = backend_op(row)
    a = pub.problem_arrays(row.problem)
    if op.startswith("flash_attention"):
        first, second = _computed_shares(row)
        return _attention_scores(row)[0] * (first if op == "flash_attention" else first + second)
    if op == "gated_linear_unit" and pub.field(row.problem, "activation") not in (None, "None"):
        x, w = a["x"][0], a["weights"][0]
        return float(math.prod(x[:-1]) * w[-1])
    return None


def pipeline_steps(row: pub.Row) -> int:
    """Steps of the copy pipeline each output tile runs, where the op restarts it per tile
    (0: not known, or many): tokamax's Mosaic GPU gated linear unit runs one
    `emit_pipeline_warp_specialized` over the contracting dim, `tile_k` at a time, per tile."""
    _, op = backend_op(row)
    tile_k = pub.config(row).get("tile_k")
    if op != "gated_linear_unit" or not tile_k:
        return 0
    return math.ceil(pub.problem_arrays(row.problem)["x"][0][-1] / int(tile_k))


def _kernel_predictions(kernels: tuple[Any, ...], gpu: str, flops: float,
                        transcendentals: float | None = None,
                        steps: int = 0) -> list[GpuPrediction]:
    blocks = [max(1, k.programs or 1) for k in kernels]
    total = sum(blocks)
    trans = [kernel_body_vector_ops(k)[1] * b for k, b in zip(kernels, blocks, strict=True)]
    return [gpu_prediction(k, gpu, flops=flops * b / total, flops_source="problem",
                           transcendentals=None if transcendentals is None or not t
                           else transcendentals * t / sum(trans), pipeline_steps=steps)
            for k, b, t in zip(kernels, blocks, trans, strict=True)]
