"""Tracing a function, walking its jaxpr for kernels, and evaluating it equation by equation."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
from jax._src import core as jax_core

from pallaslab.errors import ChipNeededError, IndexMapError, X64Error
from pallaslab.model._jax.base import (
    CALL_ONCE,
    CONTEXT_NAMES,
    KERNEL_PRIMITIVES,
    PALLAS_CALL,
    CaptureHandle,
    Jaxpr,
)
from pallaslab.model._jax.consumers import selected_after
from pallaslab.model._jax.device_kind import reported_device_kind
from pallaslab.model.source_names import short_source

# --------------------------------------------------------------------------------------------
# Tracing


_INDEX_MAP_ARITY = re.compile(
    r"Index map function (?P<fn>.+?) for (?P<origin>\S+) must return (?P<want>\d+) values "
    r"to match block_shape=(?P<bs>\(.*?\))\. Currently returning (?P<got>\d+) values"
)
_INDEX_MAP_DTYPE = re.compile(
    r"Index map function (?P<fn>.+?) for (?P<origin>\S+) must return integer scalars\. "
    r"Output\[(?P<i>\d+)\] has type (?P<type>\S+?)\.?$"
)


def trace(
    fn: Callable, args: Sequence[Any], kwargs: Mapping[str, Any], *, chip: str | None = None,
    force_chip: bool = False,
) -> CaptureHandle:
    """Trace `fn(*args, **kwargs)` to a jaxpr without running it.

    Traced as is first. When that fails because tracing asked the TPU (emit_pipeline, run_scoped
    DMAs, default core counts, SparseCore meshes) and no TPU is attached, it is traced again
    under the abstract TPU of `chip` (v5e by default), or of a chip with SparseCores when the
    kernel needs them. `force_chip` traces under `chip` straight away (per-target re-traces).

    Pallas's own BlockSpec validation errors become `IndexMapError`s; any other exception
    (the user's own) propagates unchanged.
    """
    args, kwargs = tuple(args), dict(kwargs)
    because = None
    if chip is not None:
        abstract_tpu_name(chip)  # an unknown chip is an error now, not only if tracing asks
    if force_chip:
        used: str | None = abstract_tpu_name(chip or DEFAULT_TRACE_CHIP)
        closed = _make_jaxpr(fn, args, kwargs, used, False)
    else:
        closed, used, because = _trace_as_is(fn, args, kwargs, chip)
    flat_args = tuple(jax.tree.leaves((args, kwargs)))
    structure = None
    if any(_uses_emit_pipeline(f.eqn) for f in find_kernels(closed)):
        try:
            structure = _make_jaxpr(fn, args, kwargs, used, True)
        except Exception:  # the structure is extra: the kernels stay captured without it
            structure = None
    return CaptureHandle(closed, flat_args, fn=fn, args=args, kwargs=kwargs,
                         traced_for_chip=used, structure_jaxpr=structure,
                         traced_for_chip_because=because)


def _make_jaxpr(fn: Callable, args: tuple[Any, ...], kwargs: dict[str, Any],
                chip: str | None, pipeline_primitive: bool) -> Any:
    from jax._src import config as jax_config

    try:
        with abstract_tpu(chip), jax_config.use_emit_pipeline_primitive(pipeline_primitive):
            return jax.make_jaxpr(_uncached(fn))(*args, **kwargs)
    except ValueError as err:
        translated = _translate_index_map_error(str(err)) or _x64_error(str(err))
        if translated is None:
            raise
        raise translated from err
    except TypeError as err:
        arity = _index_map_parameter_error(err)
        if arity is None:
            raise
        raise arity from None


def _trace_as_is(fn: Callable, args: tuple[Any, ...], kwargs: dict[str, Any],
                 chip: str | None) -> tuple[Any, str | None, str | None]:
    """Trace as is, then for a chip where the TPU was asked and none is attached: JAX's own
    questions (the abstract TPU answers them), or the kernel's own read of the device kind,
    which `chip` answers (without one, `ChipNeededError` says to pass it)."""
    failure: Exception | None = None
    with reported_device_kind(None) as asked:
        try:
            closed = _make_jaxpr(fn, args, kwargs, None, False)
        except Exception as err:
            failure = err
    jax_asked = failure is not None and asks_tpu(failure)
    if _tpu_attached() or not (jax_asked or asked.asked_kind):
        if failure is not None:
            raise failure
        return closed, None, None
    if jax_asked:
        assert failure is not None
        return (*_trace_for_chip(fn, args, kwargs, chip, failure), None)
    if chip is None:
        if failure is None:
            return closed, None, None  # it chose by "cpu" and traced: kept, as it runs here
        raise ChipNeededError(_chip_needed_text(fn, asked.kinds_read[0], failure)) from failure
    used = abstract_tpu_name(chip)
    return _make_jaxpr(fn, args, kwargs, used, False), used, ASKED_DEVICE_KIND


ASKED_DEVICE_KIND = "the kernel asked for the device kind"


def _uncached(fn: Callable) -> Callable:
    """`fn` as a new function each trace: JAX's trace cache, keyed by the function, would
    otherwise answer a second trace without running it, and so without its device questions."""
    @functools.wraps(fn)
    def traced(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)
    return traced


def _chip_needed_text(fn: Callable, kind: str, err: Exception) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    first = (str(err).strip().splitlines() or [""])[0].rstrip(".")
    return (f"{name}(...) asked for the device kind while tracing and was told {kind!r} (this "
            f"host has no TPU), then failed: {type(err).__name__}: {first}. Pass the TPU chip "
            "to trace it as on that chip: --chip v5e (command line, %%pallas) or chip=\"v5e\" "
            "(pallaslab.capture, pallaslab.inspect).")


def _trace_for_chip(fn: Callable, args: tuple[Any, ...], kwargs: dict[str, Any],
                    chip: str | None, first: Exception) -> tuple[Any, str]:
    """Trace under the chosen chip's abstract TPU, then under one with SparseCores if the
    kernel needs them. A failure that is again the TPU's question re-raises the first error;
    any other is the user's own, raised as is."""
    chosen = abstract_tpu_name(chip or DEFAULT_TRACE_CHIP)
    try:
        return _make_jaxpr(fn, args, kwargs, chosen, False), chosen
    except Exception as err:
        if not _needs_sparse_cores(err):
            if asks_tpu(err):
                raise first from None
            raise
        sparse = sparse_core_chip(chosen)
    try:
        return _make_jaxpr(fn, args, kwargs, sparse, False), sparse
    except Exception as err:
        if asks_tpu(err) or _needs_sparse_cores(err):
            raise first from None
        raise


# Chip name -> (device_kind, TensorCores per JAX device) of its abstract TPU: the device kinds
# JAX's `tpu_info.chip_version_from_device_kind` knows, and the per-device core counts of
# libtpu's topologies (2 on v5p's megacore, 1 where each core is a device of its own).
_ABSTRACT_TPUS: dict[str, tuple[str, int]] = {
    "v4": ("TPU v4", 1),
    "v5e": ("TPU v5 lite", 1),
    "v5p": ("TPU v5", 2),
    "v6e": ("TPU v6 lite", 1),
    "7x": ("TPU7x", 1),
}
_CHIP_ALIASES = {"v7x": "7x", "tpu7x": "7x", "v5litepod": "v5e", "v6litepod": "v6e"}
DEFAULT_TRACE_CHIP = "v5e"
# Where the chosen chip has no SparseCores, SparseCore kernels are traced for this one (the
# generation SparseCore kernels are written for; tpu_info gives it 2 SparseCores per chip).
DEFAULT_SPARSE_CORE_CHIP = "7x"


def abstract_tpu_name(chip: str) -> str:
    """'tpu-v5e', 'v5e', 'TPU v5 lite' -> 'v5e' (a chip with an abstract TPU to trace under)."""
    text = chip.strip()
    for name, (kind, _) in _ABSTRACT_TPUS.items():
        if text == kind:
            return name
    text = text.lower().removeprefix("tpu-")
    text = _CHIP_ALIASES.get(text, text)
    if text not in _ABSTRACT_TPUS:
        raise ValueError(f"unknown TPU chip {chip!r} to trace under: known chips are "
                         f"{', '.join(_ABSTRACT_TPUS)}")
    return text


def sparse_core_chip(chip: str) -> str:
    """`chip` when JAX's chip facts give it SparseCores, else `DEFAULT_SPARSE_CORE_CHIP`."""
    from jax._src import tpu_info

    info = tpu_info.get_tpu_info_for_chip(tpu_info.ChipVersion(chip), 1)
    return chip if info.sparse_core is not None else DEFAULT_SPARSE_CORE_CHIP


@contextlib.contextmanager
def abstract_tpu(chip: str | None) -> Iterator[None]:
    """Trace under `chip`'s abstract TPU. Auto axes: with Explicit ones the captured jaxpr
    could not be evaluated outside the mesh (executors re-run it on the CPU)."""
    if chip is None:
        yield
        return
    from jax.sharding import AbstractDevice, AbstractMesh, AxisType

    kind, cores = _ABSTRACT_TPUS[chip]
    device = AbstractDevice(device_kind=kind, num_cores=cores, platform="tpu")
    mesh = AbstractMesh((1,), ("x",), (AxisType.Auto,), abstract_device=device)
    # `jax.devices()[0].device_kind`, read by kernels that choose by it, says the chip too.
    with jax.sharding.use_abstract_mesh(mesh), reported_device_kind(kind):
        yield


# Functions of JAX that ask the attached device about the TPU while tracing.
_TPU_QUERIES = frozenset({"_get_default_num_cores", "get_num_device_cores", "get_device_kind",
                          "get_tpu_info"})


def asks_tpu(err: BaseException) -> bool:
    """Did tracing fail because it asked the TPU (and the host has none)?"""
    if isinstance(err, ValueError) and "Unsupported TPU device kind" in str(err):
        return True
    if isinstance(err, AttributeError):
        tb = err.__traceback__
        last = None
        while tb is not None:
            last = tb.tb_frame.f_code.co_name
            tb = tb.tb_next
        return last in _TPU_QUERIES
    return _needs_sparse_cores(err)


def _needs_sparse_cores(err: BaseException) -> bool:
    return isinstance(err, RuntimeError) and "does not have SparseCores" in str(err)


def _tpu_attached() -> bool:
    try:
        return jax.default_backend() == "tpu"
    except RuntimeError:  # pragma: no cover -- no backend at all
        return False


def _uses_emit_pipeline(eqn: Any) -> bool:
    """May a kernel body hold an inlined `emit_pipeline`? Its scopes name every step; with
    `trace_scopes=False` there are none, but it still starts DMAs (so does a hand-written
    DMA: the structure trace then finds no pipeline, at the cost of one more trace)."""
    for sub in all_sub_jaxprs(eqn.params):
        for e in sub.eqns:
            if _EP_SCOPE.search(str(e.source_info.name_stack)) or \
                    e.primitive.name == "dma_start" or _uses_emit_pipeline(e):
                return True
    return False


_EP_SCOPE = re.compile(r"(^|/)ep_")


def all_sub_jaxprs(params: Mapping[str, Any]) -> Iterator[Jaxpr]:
    """Every sub-jaxpr of an equation (cond branches, loop bodies, calls)."""
    return _sub_jaxprs(params)


def _translate_index_map_error(message: str) -> IndexMapError | None:
    first = message.splitlines()[0] if message else ""
    if m := _INDEX_MAP_ARITY.search(first):
        return IndexMapError(
            f"{m['origin']}: the index map {m['fn']} returns {m['got']} block indices, but "
            f"its block_shape {_short_block_shape(m['bs'])} has {m['want']} dimensions. "
            "Rule: an index map returns exactly one block index per block dimension "
            "(including squeezed `None` dimensions)."
        )
    if m := _INDEX_MAP_DTYPE.search(first):
        return IndexMapError(
            f"{m['origin']}: the index map {m['fn']} returns a non-integer block index: "
            f"output {m['i']} has type {m['type']}. Rule: block indices must be integer "
            "scalars (use `//` or `jnp.int32(...)`, not `/`)."
        )
    return None


_WIDE = re.compile(r"\b(float64|int64|uint64|complex128)\b")


def _x64_error(message: str) -> X64Error | None:
    """A 64-bit dtype refused because JAX's 64-bit mode is off: say how to turn it on."""
    if jax.config.jax_enable_x64 or not (m := _WIDE.search(message)):
        return None
    first = message.strip().splitlines()[0]
    return X64Error(
        f"a kernel uses {m[1]}, but JAX's 64-bit types are off (jax_enable_x64 is False), so "
        f"JAX computes in 32 bits and the kernel's refs and values disagree: {first} Enable "
        "them with jax.config.update('jax_enable_x64', True) before creating arrays, or use "
        "32-bit dtypes.")


def _index_map_parameter_error(err: TypeError) -> IndexMapError | None:
    """An index map called with the wrong number of arguments, told as the rule it breaks
    (Pallas calls it while converting a BlockSpec; its frame knows the operand and grid)."""
    if "positional argument" not in str(err):
        return None
    tb = err.__traceback__
    frame_locals = None
    while tb is not None:
        frame_code = tb.tb_frame.f_code
        if frame_code.co_name == "to_block_mapping" and "pallas" in frame_code.co_filename:
            frame_locals = tb.tb_frame.f_locals
        tb = tb.tb_next
    if frame_locals is None or "index_map_func" not in frame_locals:
        return None
    spec = frame_locals.get("self")
    func = getattr(spec, "index_map", None) or frame_locals["index_map_func"]
    func = inspect.unwrap(func)  # Pallas wraps it (twice) for equality checks
    grid = tuple(frame_locals.get("grid") or ())
    given = len(frame_locals.get("index_map_avals") or ())
    code = getattr(func, "__code__", None)
    where = (f" ({short_source(f'{code.co_filename}:{code.co_firstlineno}')})"
             if code is not None else "")
    takes = code.co_argcount if code is not None else "a different number of"
    prefetch = given - len(grid)
    return IndexMapError(
        f"{frame_locals.get('origin', 'an operand')}: the index map "
        f"{getattr(func, '__name__', 'function')}{where} takes {takes} parameter(s), but "
        f"Pallas calls it with {given}: one per grid dimension (grid {grid}) plus one per "
        f"scalar-prefetch operand ({prefetch}). Rule: an index map takes the program ids, "
        f"then the scalar-prefetch refs. ({err})")


def _short_block_shape(text: str) -> str:
    """'(Blocked(block_size=8), Squeezed())' -> '(8, None)'."""
    parts = re.findall(r"Blocked\(block_size=(\d+)\)|(Squeezed\(\))|Element\((\d+)", text)
    if not parts:
        return text
    dims = [b or e or "None" for b, sq, e in parts]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


# --------------------------------------------------------------------------------------------
# Walking the jaxpr


@dataclasses.dataclass(frozen=True)
class FoundKernel:
    eqn: Any
    context: tuple[str, ...]
    # The innermost enclosing shard_map's mesh axes (name, size), as traced; None outside one.
    device_mesh: tuple[tuple[str, int], ...] | None = None
    # Per output: where a select every use of it goes through is made (`consumers`).
    selected_after: tuple[str | None, ...] = ()


def find_kernels(closed_jaxpr: Jaxpr) -> list[FoundKernel]:
    """Every kernel equation in launch order, descending into every sub-jaxpr."""
    return list(_walk(closed_jaxpr, (), None))


def _walk(jaxpr: Jaxpr, context: tuple[str, ...],
          mesh: tuple[tuple[str, int], ...] | None) -> Iterator[FoundKernel]:
    for eqn in jaxpr.eqns:
        if eqn.primitive in KERNEL_PRIMITIVES:
            yield FoundKernel(eqn, context, mesh, selected_after(jaxpr, eqn.outvars))
            continue
        inner = _shard_map_axes(eqn) if eqn.primitive.name == "shard_map" else mesh
        subs = list(_sub_jaxprs(eqn.params))
        for i, sub in enumerate(subs):
            label = _context_label(eqn, i, len(subs))
            yield from _walk(sub, (*context, label) if label else context, inner)


def _shard_map_axes(eqn: Any) -> tuple[tuple[str, int], ...] | None:
    shape = getattr(eqn.params.get("mesh"), "shape", None)
    return tuple((str(k), int(v)) for k, v in shape.items()) if shape else None


def _sub_jaxprs(params: Mapping[str, Any]) -> Iterator[Jaxpr]:
    for value in params.values():
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, Jaxpr):
                yield v


def _context_label(eqn: Any, i: int, n: int) -> str:
    name = eqn.primitive.name
    label = CONTEXT_NAMES.get(name, name)
    if name == "scan":
        return f"scan[length={eqn.params.get('length')}]"
    if name == "cond":
        return f"cond[branch {i}]"
    if name == "while":
        return "while[cond]" if i == 0 and n > 1 else "while"
    return label


def interpret_jaxpr(
    jaxpr: Jaxpr, args: Sequence[Any], eval_eqn: Callable[[Any, list[Any]], list[Any]]
) -> list[Any]:
    """Evaluate a closed jaxpr equation by equation, descending into calls made exactly once
    (jit, custom_vjp, ...) and handing every other equation to `eval_eqn(eqn, inputs)`."""
    env: dict[Any, Any] = dict(zip(jaxpr.constvars, jaxpr.consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))

    def read(a: Any) -> Any:
        return a.val if isinstance(a, jax_core.Literal) else env[a]

    for eqn in jaxpr.eqns:
        ins = [read(a) for a in eqn.invars]
        sub = single_sub_jaxpr(eqn.params) if eqn.primitive.name in CALL_ONCE else None
        outs = interpret_jaxpr(sub, ins, eval_eqn) if sub is not None else eval_eqn(eqn, ins)
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(a) for a in jaxpr.outvars]


def is_literal(a: Any) -> bool:
    return isinstance(a, jax_core.Literal)


def bind_eqn(eqn: Any, ins: list[Any], params: Mapping[str, Any]) -> list[Any]:
    ans = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(params))
    return list(ans) if eqn.primitive.multiple_results else [ans]


def single_sub_jaxpr(params: Mapping[str, Any]) -> Jaxpr | None:
    subs = list(_sub_jaxprs(params))
    return subs[0] if len(subs) == 1 else None


def contains_kernel(params: Mapping[str, Any]) -> bool:
    return any(find_kernels(sub) for sub in _sub_jaxprs(params))


def leading_operand_count(eqn: Any) -> int:
    """How many leading operands (dynamic grid bounds, scalar prefetch) a kernel equation has."""
    if eqn.primitive is not PALLAS_CALL:
        return 0
    gm = eqn.params["grid_mapping"]
    return gm.num_dynamic_grid_bounds + gm.num_index_operands


def needs_concrete_values(eqn: Any) -> bool:
    return leading_operand_count(eqn) > 0
