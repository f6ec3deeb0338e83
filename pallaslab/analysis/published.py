"""Published device timings of production kernels: tokamax's autotuning results.

tokamax publishes, per chip, the winning config and five device timings of each problem it
autotunes. `read_rows` reads that table flattened to CSV (hardware, op, problem, config,
median and all times); `build` turns one TPU row into the tokamax call that launches the same
kernel (its public op API with the row's config, arguments as `jax.ShapeDtypeStruct`s, so
nothing is allocated); `predict` captures it for the row's chip and runs the pipeline model.
A row that cannot be built raises `BuildError` with the reason, for the caller to tally.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pallaslab.errors import PallasLabError

# The table's hardware names -> our chip names. "TPU7x(Ironwood, 1 JAX device)" is one
# TensorCore of the two-core chip; "TPU v5p" is one megacore device (both TensorCores).
HARDWARE_CHIPS = {
    "TPU v5e": "v5e",
    "TPU v5p": "v5p",
    "TPU v6e": "v6e",
    "TPU7x(Ironwood, 1 JAX device)": "7x",
}
OPS = {
    "pallas_mosaic_tpu_ragged_dot": "ragged_dot",
    "pallas_mosaic_tpu_flash_attention": "flash_attention",
    "pallas_mosaic_tpu_flash_attention_vjp": "flash_attention_vjp",
    "pallas_mosaic_tpu_linear_softmax_cross_entropy_loss": "lsce",
    "pallas_mosaic_tpu_linear_softmax_cross_entropy_loss_vjp": "lsce_vjp",
}


class BuildError(PallasLabError, ValueError):
    """A published row whose kernel cannot be built; `reason` is the short tally key."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Row:
    """One published timing: the problem, the config that won and its measured times."""

    hardware: str
    op_file: str
    problem: str
    config: str  # JSON text, as published
    median_s: float
    times_s: tuple[float, ...]
    line: int  # 1-based line in the CSV, for messages

    @property
    def chip(self) -> str | None:
        return HARDWARE_CHIPS.get(self.hardware)

    @property
    def op(self) -> str | None:
        return OPS.get(self.op_file)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.op_file, self.problem, self.config, self.hardware)


def read_rows(path: str | Path) -> list[Row]:
    """Every row of the published table (TPU and GPU alike)."""
    rows = []
    with open(path, newline="") as f:
        for line, rec in enumerate(csv.DictReader(f), start=2):
            times = tuple(float(t) * 1e-3 for t in rec["times_ms"].split())
            rows.append(Row(hardware=rec["hardware"], op_file=rec["op_file"],
                            problem=rec["problem"], config=rec["config"],
                            median_s=float(rec["median_ms"]) * 1e-3, times_s=times, line=line))
    return rows


def tpu_rows(rows: list[Row]) -> Iterator[Row]:
    return (r for r in rows if r.hardware.startswith("TPU"))


def round_robin(rows: list[Row]) -> list[Row]:
    """Rows reordered one per (op, hardware) in turn, so a partial run covers them all."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.op_file, row.hardware), []).append(row)
    queues = list(groups.values())
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


def ratio_stats(ratios: list[float]) -> str:
    """Median predicted/measured and the shares within 1.25x and 2x, as one text."""
    if not ratios:
        return "median ratio   -   within 1.25x   -   within 2x   -"
    r = np.asarray(ratios)
    off = np.maximum(r, 1 / r)
    return (f"median ratio {np.median(r):5.2f}  within 1.25x {np.mean(off <= 1.25):4.0%}  "
            f"within 2x {np.mean(off <= 2):4.0%}")


# --- parsing the flattened problem text ------------------------------------------------------

_ARRAY = re.compile(r"(\w+)=\"?(bf16|f32|i32|f16|i8|bool)\[([\d,]*)\]")
_DTYPES = {"bf16": "bfloat16", "f32": "float32", "i32": "int32", "f16": "float16", "i8": "int8",
           "bool": "bool"}


def problem_arrays(problem: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) of every `name=dtype[dims]` array in a problem's text."""
    out = {}
    for name, dt, dims in _ARRAY.findall(problem):
        out[name] = (tuple(int(d) for d in dims.split(",") if d), _DTYPES[dt])
    return out


def field(problem: str, name: str) -> str | None:
    """The text of `name=value` (or `"name": value`) in a problem's text; None if absent."""
    m = re.search(rf"(?:^|[\s;,{{]\"?){re.escape(name)}\"?\s*[=:]\s*\"?([^\s;,}}\"]+)", problem)
    return m.group(1) if m else None


def flag(problem: str, name: str) -> bool:
    """A boolean field that must be present."""
    value = field(problem, name)
    if value is None:
        raise BuildError("problem text incomplete", f"no {name}= in {problem[:80]!r}")
    return value.lower() == "true"


def config(row: Row) -> dict[str, Any]:
    """The row's config as keyword arguments of the op's Config."""
    try:
        cfg = json.loads(row.config)
    except json.JSONDecodeError as err:
        raise BuildError("config is not JSON", f"line {row.line}: {row.config!r}: {err}") from err
    if not isinstance(cfg, dict):
        raise BuildError("config is not a JSON object", f"line {row.line}: {row.config!r}")
    # A JSON array is a tuple field (LSCE's `buffer_count`): tokamax hashes its configs.
    return {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items()}


def group_sizes(problem: str) -> np.ndarray:
    """The ragged dot's group sizes: tokamax's seeded uniform-multinomial draw, reproduced
    exactly; for an explicit list (not published) its count, sum and nonzero groups, the rows
    split evenly over the nonzero groups (an approximation: the real split is not known)."""
    import tokamax

    m = re.search(r"uniform-multinomial\(num_groups=(\d+);total=(\d+);numpy seed(\d+)\)", problem)
    if m:
        g, total, seed = (int(x) for x in m.groups())
        return np.asarray(tokamax.generate_ragged_dot_group_sizes(
            m=total, num_groups=g, seed=seed), np.int32)
    m = re.search(r"group_sizes=explicit \[([\d, ]+)\]", problem)
    if m:
        return np.asarray([int(x) for x in m.group(1).split(",")], np.int32)
    m = re.search(r"explicit list len=(\d+) sum=(\d+) nonzero=(\d+)", problem)
    if m:
        g, total, nonzero = (int(x) for x in m.groups())
        sizes = np.zeros(g, np.int32)
        share, extra = divmod(total, max(nonzero, 1))
        sizes[:nonzero] = share
        sizes[:extra] += 1
        return sizes
    raise BuildError("group sizes not described", f"{problem[:120]!r}")


# --- building the tokamax call ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Built:
    """A traceable call launching the row's kernel(s): `fn(*args)`."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]


def build(row: Row) -> Built:
    """The tokamax call of a TPU row, with the row's config forced."""
    if row.chip is None:
        raise BuildError("not a TPU row", f"hardware {row.hardware!r}")
    builder = _BUILDERS.get(row.op or "")
    if builder is None:
        raise BuildError("op not supported", f"{row.op_file!r}")
    try:
        return builder(row, config(row))
    except BuildError:
        raise
    except (TypeError, ValueError) as err:  # pydantic rejects a config field or value
        raise BuildError(f"config rejected by tokamax ({type(err).__name__})",
                         f"line {row.line}: {str(err).splitlines()[0]}") from err


def sds(spec: tuple[tuple[int, ...], str]) -> Any:
    """A `jax.ShapeDtypeStruct` of a `problem_arrays` entry."""
    import jax

    return jax.ShapeDtypeStruct(spec[0], np.dtype(spec[1]) if spec[1] != "bfloat16"
                                else jax.numpy.bfloat16)


def need(arrays: dict[str, Any], *names: str) -> list[Any]:
    """The named arrays, or a BuildError naming the missing ones."""
    missing = [n for n in names if n not in arrays]
    if missing:
        raise BuildError("problem text incomplete", f"no array {', '.join(missing)}")
    return [arrays[n] for n in names]


_DIM_NUMS = {"[[[1], [1]], [[], []]]": "DEFAULT_RAGGED_DOT_DIM_NUMS",
             "[[[1], [2]], [[], []]]": "TRANS_RHS_RAGGED_DOT_DIM_NUMS",
             "[[[0], [0]], [[], []]]": "RAGGED_CONTRACTING_DOT_DIM_NUMS"}


def ragged_dot_dims(problem: str) -> Any:
    """tokamax's ragged dot dimension numbers of a row's `dot_dims=` (no activation)."""
    m = re.search(r"dot_dims=(\[\[\[.*?\]\], \[\[.*?\]\]\])", problem)
    dims_name = _DIM_NUMS.get(m.group(1) if m else "")
    if dims_name is None:
        raise BuildError("dot dimensions not supported", f"{problem[:120]!r}")
    if field(problem, "activation") not in (None, "None"):
        raise BuildError("activation not supported", f"{problem[:120]!r}")
    from tokamax._src.ops.ragged_dot import base as rd_base  # the dimension-number constants

    return getattr(rd_base, dims_name)


def _ragged_dot(row: Row, cfg: dict[str, Any]) -> Built:
    import jax.numpy as jnp
    from tokamax.ops import tpu

    lhs, rhs = need(problem_arrays(row.problem), "lhs", "rhs")
    dims = ragged_dot_dims(row.problem)
    op = tpu.RaggedDot(config=tpu.RaggedDotConfig(**cfg), bypass_device_check=True)
    residuals = flag(row.problem, "return_residuals")

    def fn(a: Any, b: Any, gs: Any) -> Any:
        return op(a, b, group_sizes=gs, ragged_dot_dimension_numbers=dims,
                  return_residuals=residuals)

    return Built(fn, (sds(lhs), sds(rhs), jnp.asarray(group_sizes(row.problem))))


def _attention_op(cfg: dict[str, Any]) -> Any:
    from tokamax.ops import tpu

    return tpu.FlashAttention(config=tpu.FlashAttentionConfig(**cfg), bypass_device_check=True)


def _flash_attention(row: Row, cfg: dict[str, Any]) -> Built:
    q, k, v = need(problem_arrays(row.problem), "q", "k", "v")
    for name in ("bool_mask", "q_start", "k_start", "bias", "softcap", "paging"):
        if field(row.problem, name) not in (None, "None"):
            raise BuildError(f"{name} not supported", f"{row.problem[:120]!r}")
    causal = flag(row.problem, "causal")
    residuals = flag(row.problem, "return_residuals")
    op = _attention_op(cfg)

    def fn(q: Any, k: Any, v: Any) -> Any:
        return op(q, k, v, is_causal=causal, return_residuals=residuals)

    return Built(fn, (sds(q), sds(k), sds(v)))


def _flash_attention_vjp(row: Row, cfg: dict[str, Any]) -> Built:
    from tokamax._src.ops.attention import pallas_mosaic_tpu_vjp as vjp_mod

    return attention_vjp(row, vjp_mod.PallasMosaicTpuFlashAttentionVjp(
        config=vjp_mod.Config(**cfg), bypass_device_check=True))


def residual_shapes(row: Row) -> list[tuple[tuple[int, ...], str]]:
    """A VJP row's two f32 residuals, as (shape, dtype): `residuals=["f32[..]", "f32[..]"]`."""
    res = re.search(r'residuals=\["f32\[([\d,]+)\]", "f32\[([\d,]+)\]"\]', row.problem)
    if res is None:
        raise BuildError("problem text incomplete", "no residuals=[...]")
    return [(tuple(int(d) for d in g.split(",")), "float32") for g in res.groups()]


def attention_vjp(row: Row, op: Any, *, bias_and_mask: bool = False) -> Built:
    """The call of a tokamax attention VJP op (TPU or GPU) on a `flash_attention_vjp` row;
    with `bias_and_mask`, the row's bias and boolean mask passed as arrays (else left out)."""
    from tokamax._src.ops.attention import base as attn_base

    arrays = problem_arrays(row.problem)
    out, dout, q, k, v = need(arrays, "out", "dout", "q", "k", "v")
    res_shapes = residual_shapes(row)
    causal = flag(row.problem, "is_causal")
    scale = float(field(row.problem, "logits_scale") or 1.0 / math.sqrt(q[0][-1]))
    mask = re.search(r'"bool_mask": "bool\[([\d,]+)\]"', row.problem)
    extra = {n: a for n, a in (("bias", arrays.get("bias")), ("bool_mask", mask and (
        tuple(int(d) for d in mask.group(1).split(",")), "bool"))) if a and bias_and_mask}

    def fn(r0: Any, r1: Any, out: Any, dout: Any, q: Any, k: Any, v: Any, *rest: Any) -> Any:
        named = dict(zip(extra, rest, strict=True))
        return op(
            (r0, r1), out, dout, q, k, v,
            precision=(_default_precision(), _default_precision()),
            logits_dtype=np.dtype(np.float32), logits_scale=scale, bias=named.get("bias"),
            logits_soft_cap=None, dropout_mask=None,
            mask=attn_base.Mask(named.get("bool_mask"), is_causal=causal),
            dropout_rate=0.0, paging_info=None, q_indices=None, k_indices=None,
            normalize_output=True)

    return Built(fn, tuple(sds(s) for s in (*res_shapes, out, dout, q, k, v, *extra.values())))


def _default_precision() -> Any:
    import jax

    return jax.lax.DotAlgorithmPreset.DEFAULT


def _lsce_op(cfg: dict[str, Any]) -> Any:
    from tokamax.ops import tpu

    return tpu.LinearSoftmaxCrossEntropyLoss(
        config=tpu.LinearSoftmaxCrossEntropyLossConfig(**cfg), bypass_device_check=True)


def _lsce(row: Row, cfg: dict[str, Any]) -> Built:
    x, labels, w = need(problem_arrays(row.problem), "x", "labels", "w")
    reduction = field(row.problem, "reduction") or "sum"
    op = _lsce_op(cfg)

    def fn(x: Any, labels: Any, w: Any) -> Any:
        return op(x, labels, w, reduction=reduction)

    return Built(fn, (sds(x), sds(labels), sds(w)))


def _lsce_vjp(row: Row, cfg: dict[str, Any]) -> Built:
    import jax

    x, labels, w = need(problem_arrays(row.problem), "x", "labels", "w")
    reduction = field(row.problem, "reduction") or "sum"
    op = _lsce_op(cfg)

    def fn(x: Any, labels: Any, w: Any) -> Any:  # the backward kernel(s) after the forward
        return jax.grad(lambda x, w: op(x, labels, w, reduction=reduction),
                        argnums=(0, 1))(x, w)

    return Built(fn, (sds(x), sds(labels), sds(w)))


_BUILDERS: dict[str, Callable[[Row, dict[str, Any]], Built]] = {
    "ragged_dot": _ragged_dot,
    "flash_attention": _flash_attention,
    "flash_attention_vjp": _flash_attention_vjp,
    "lsce": _lsce,
    "lsce_vjp": _lsce_vjp,
}


# --- capture and predict ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Prediction:
    row: Row
    predicted_s: float
    kernels: tuple[str, ...]  # the kernels whose times were summed
    methods: tuple[str, ...]  # per kernel: "pipeline", "groups" (ragged dot) or "roofline"

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.row.median_s


def predict(row: Row) -> Prediction:
    """Build the row's call, capture it for its chip and sum the modelled kernel times.

    Attention rows are captured for one batch element with concrete zeros (so the mask's
    block-sparse grid is evaluated; the batch is an outer parallel grid dimension repeating the
    same work) and their time multiplied by the batch size.
    """
    from pallaslab.model import capture

    built = build(row)
    args, batch = batch_of_one(row, built.args)
    try:
        import tokamax

        with tokamax.config.cross_compile(True):  # trace TPU kernels on this CPU host
            cap = capture(built.fn, *args, chip=row.chip)
    except PallasLabError as err:
        raise BuildError(f"capture failed ({type(err).__name__})", str(err)) from err
    except NotImplementedError as err:
        raise BuildError("tokamax: not implemented", str(err).splitlines()[0]) from err
    kernels = _timed_kernels(row, cap.kernels)
    times, methods = zip(*(_kernel_time(row, k) for k in kernels), strict=True)
    return Prediction(row=row, predicted_s=float(sum(times)) * batch,
                      kernels=tuple(k.name for k in kernels), methods=tuple(methods))


def batch_of_one(row: Row, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], int]:
    """An attention row's arguments for one batch element, as concrete zeros (so the mask's
    block-sparse grid is evaluated), and the batch size; other rows' as they are, and 1."""
    if row.op not in ("flash_attention", "flash_attention_vjp"):
        return args, 1
    import jax.numpy as jnp

    batch = int(args[-1].shape[0])  # v: [batch, seq, heads, dim]
    ones = []
    for a in args:
        lead = 1 if a.shape and a.shape[0] == batch else a.shape[0]
        ones.append(jnp.zeros((lead, *a.shape[1:]), a.dtype))
    return tuple(ones), batch


def _kernel_time(row: Row, kernel: Any) -> tuple[float, str]:
    from pallaslab.analysis.pipeline import pipeline, roofline_time
    from pallaslab.analysis.tiling import tiling_unavailable_reason

    chip = row.chip or "v5e"
    if row.op == "ragged_dot" and kernel.pipelines:  # the work is in its nested pipeline
        from pallaslab.analysis.ragged import grouped_pipeline_time

        t = grouped_pipeline_time(kernel, chip, group_sizes(row.problem))
        if t is not None:
            return t, "groups"
    if tiling_unavailable_reason(kernel) is None and not kernel.pipelines:
        return pipeline(kernel, chip).summary.predicted_time, "pipeline"
    return roofline_time(kernel, chip), "roofline"


def _timed_kernels(row: Row, kernels: tuple[Any, ...]) -> tuple[Any, ...]:
    """The kernels the row's timing covers: for a backward row, those after the forward."""
    if row.op == "lsce_vjp":
        bwd = tuple(k for k in kernels if "bwd" in k.name or "backward" in k.name)
        return bwd or kernels[1:]
    return tuple(kernels)


# --- lookup for the views --------------------------------------------------------------------

# Kernel-name prefixes of each op's TPU kernels (tokamax's own names).
_KERNEL_OPS = (("pallas_tpu_ragged_dot", "ragged_dot"), ("splash_mha_fwd", "flash_attention"),
               ("splash_mha_dkv", "flash_attention_vjp"), ("splash_mha_dq", "flash_attention_vjp"),
               ("lce_fwd", "lsce"), ("lce_bwd", "lsce_vjp"))
_MAIN_ARRAYS = {"ragged_dot": ("lhs", "rhs"), "flash_attention": ("q", "k", "v"),
                "flash_attention_vjp": ("q", "k", "v"), "lsce": ("x", "w"),
                "lsce_vjp": ("x", "w")}


def kernel_op(name: str) -> str | None:
    """The published op a kernel belongs to, from its name, or None."""
    return next((op for prefix, op in _KERNEL_OPS if name.startswith(prefix)), None)


def rows_for_kernel(kernel: Any, rows: tuple[Row, ...]) -> tuple[Row, ...]:
    """The published rows of the kernel's op whose main arrays (lhs/rhs, q/k/v, x/w) all have
    the element count of one of the kernel's operands (a layout may permute their axes)."""
    op = kernel_op(kernel.name)
    if op is None:
        return ()
    sizes = {math.prod(o.shape) for o in kernel.operands if o.role in ("input", "output")}
    out = []
    for row in rows:
        if row.op != op:
            continue
        arrays = problem_arrays(row.problem)
        main = [arrays[n][0] for n in _MAIN_ARRAYS[op] if n in arrays]
        if main and all(math.prod(shape) in sizes for shape in main):
            out.append(row)
    return tuple(out)


@functools.cache
def _rows_cached(path: str, mtime: float) -> tuple[Row, ...]:
    return tuple(tpu_rows(read_rows(path)))


def rows_at(path: str) -> tuple[Row, ...]:
    """The TPU rows of the table at `path` (read again when the file changes)."""
    return _rows_cached(path, Path(path).stat().st_mtime)


def published_lines(kernel: Any, chip: str | None = None) -> list[str]:
    """One line per published timing of the kernel's op and shapes ($PALLASLAB_PUBLISHED_TIMINGS;
    none when it is unset), the given chip's first."""
    from pallaslab import settings

    path = settings.published_timings()
    if path is None:
        return []
    rows = sorted(rows_for_kernel(kernel, rows_at(path)), key=lambda r: (r.chip != chip, r.line))
    return [f"published on {r.hardware}: {r.median_s * 1e3:.3f} ms (tokamax autotune, "
            f"config {r.config}; {r.problem[:60]}...)" for r in rows[:8]]
