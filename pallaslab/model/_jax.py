"""The one module of pallaslab that touches `jax._src`.

Everything version-specific about how Pallas represents a kernel in a jaxpr lives here:
finding `pallas_call` / `mpmd_map` equations, reading their GridMapping and BlockMappings,
evaluating index maps, and re-binding a captured kernel with other parameters (for executors
and lowering). Checked against jax 0.12; other versions get a warning at import.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax._src import source_info_util
from jax._src.pallas import core as pallas_core
from jax._src.pallas import mpmd as pallas_mpmd
from jax._src.pallas import pallas_call as pallas_call_mod
from jax._src.state import discharge as state_discharge

from pallaslab.errors import IndexMapError
from pallaslab.model.kernel import (
    BlockDim,
    CostEstimate,
    Kernel,
    MeshInfo,
    Operand,
)

SUPPORTED_JAX = (0, 12)
if tuple(int(p) for p in jax.__version__.split(".")[:2]) != SUPPORTED_JAX:  # pragma: no cover
    warnings.warn(
        f"pallaslab was built against jax {SUPPORTED_JAX[0]}.{SUPPORTED_JAX[1]}.x; "
        f"found jax {jax.__version__}. Capture may fail or miss kernels.",
        stacklevel=2,
    )

Jaxpr = jax_core.Jaxpr
PALLAS_CALL = pallas_call_mod.pallas_call_p
MPMD_MAP = pallas_mpmd.mpmd_map_p
KERNEL_PRIMITIVES = (PALLAS_CALL, MPMD_MAP)
# Primitives that call their sub-jaxpr exactly once with the same operands: values flow through.
_CALL_ONCE = {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
              "custom_vmap_call", "remat", "checkpoint", "custom_lin"}
_CONTEXT_NAMES = {"pjit": "jit", "closed_call": "call", "custom_jvp_call": "custom_jvp",
                  "custom_vjp_call": "custom_vjp", "checkpoint": "remat",
                  # plgpu.kernel wraps every launch in custom_vmap: not the user's doing.
                  "custom_vmap_call": ""}


@dataclasses.dataclass(frozen=True)
class KernelHandle:
    """What executors and lowering need to re-run a captured kernel: the equation itself."""

    eqn: Any
    index_map_evaluator: Callable[[np.ndarray, Sequence[np.ndarray]], list[np.ndarray]] | None
    num_dynamic_grid: int
    prefetch_concrete: bool

    @property
    def primitive(self) -> str:
        return self.eqn.primitive.name


@dataclasses.dataclass(frozen=True)
class CaptureHandle:
    closed_jaxpr: Any
    flat_args: tuple[Any, ...]


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


def trace(fn: Callable, args: Sequence[Any], kwargs: Mapping[str, Any]) -> CaptureHandle:
    """Trace `fn(*args, **kwargs)` to a jaxpr without running it.

    Pallas's own BlockSpec validation errors become `IndexMapError`s; any other exception
    (the user's own) propagates unchanged.
    """
    try:
        closed = jax.make_jaxpr(fn)(*args, **kwargs)
    except ValueError as err:
        translated = _translate_index_map_error(str(err))
        if translated is None:
            raise
        raise translated from err
    flat_args = tuple(jax.tree.leaves((tuple(args), dict(kwargs))))
    return CaptureHandle(closed, flat_args)


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


def find_kernels(closed_jaxpr: Jaxpr) -> list[FoundKernel]:
    """Every kernel equation in launch order, descending into every sub-jaxpr."""
    return list(_walk(closed_jaxpr, ()))


def _walk(jaxpr: Jaxpr, context: tuple[str, ...]) -> Iterator[FoundKernel]:
    for eqn in jaxpr.eqns:
        if eqn.primitive in KERNEL_PRIMITIVES:
            yield FoundKernel(eqn, context)
            continue
        subs = list(_sub_jaxprs(eqn.params))
        for i, sub in enumerate(subs):
            label = _context_label(eqn, i, len(subs))
            yield from _walk(sub, (*context, label) if label else context)


def _sub_jaxprs(params: Mapping[str, Any]) -> Iterator[Jaxpr]:
    for value in params.values():
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, Jaxpr):
                yield v


def _context_label(eqn: Any, i: int, n: int) -> str:
    name = eqn.primitive.name
    label = _CONTEXT_NAMES.get(name, name)
    if name == "scan":
        return f"scan[length={eqn.params.get('length')}]"
    if name == "cond":
        return f"cond[branch {i}]"
    if name == "while":
        return "while[cond]" if i == 0 and n > 1 else "while"
    return label


# --------------------------------------------------------------------------------------------
# Concrete values of dynamic grid bounds and scalar-prefetch operands


def concrete_kernel_operands(
    closed_jaxpr: Jaxpr, flat_args: Sequence[Any], wanted: set[int]
) -> dict[int, list[np.ndarray]]:
    """Evaluate, with concrete arguments, the leading operands of the wanted kernel equations.

    Kernels are not run: their outputs are replaced by zeros, so a kernel whose grid or
    scalar-prefetch values depend on an earlier kernel's output gets no values (it stays
    dynamic). Kernels inside loops or conditionals are not evaluated either.
    """
    found: dict[int, list[np.ndarray]] = {}
    tainted: dict[int, Any] = {}  # id -> value derived from a kernel output (kept alive)

    def eval_eqn(eqn: Any, ins: list[Any]) -> list[Any]:
        is_tainted = any(id(x) in tainted for x in ins)
        if eqn.primitive in KERNEL_PRIMITIVES or _contains_kernel(eqn.params):
            if id(eqn) in wanted and not is_tainted:
                found[id(eqn)] = [np.asarray(x) for x in ins[: _leading_operand_count(eqn)]]
            outs, is_tainted = _zeros_like_outputs(eqn), True
        else:
            outs = _bind(eqn, ins, eqn.params)
        if is_tainted:
            tainted.update((id(x), x) for x in outs)
        return outs

    with jax.default_device(jax.devices("cpu")[0]):
        interpret_jaxpr(closed_jaxpr, flat_args, eval_eqn)
    return found


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
        sub = _single_sub(eqn.params) if eqn.primitive.name in _CALL_ONCE else None
        outs = interpret_jaxpr(sub, ins, eval_eqn) if sub is not None else eval_eqn(eqn, ins)
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(a) for a in jaxpr.outvars]


def _is_literal(a: Any) -> bool:
    return isinstance(a, jax_core.Literal)


def _bind(eqn: Any, ins: list[Any], params: Mapping[str, Any]) -> list[Any]:
    ans = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(params))
    return list(ans) if eqn.primitive.multiple_results else [ans]


def _zeros_like_outputs(eqn: Any) -> list[Any]:
    """Stand-ins for outputs we do not compute (kernels are never run during capture)."""
    avals: list[Any] = [v.aval for v in eqn.outvars]
    return [jnp.zeros(a.shape, a.dtype) for a in avals]


def _single_sub(params: Mapping[str, Any]) -> Jaxpr | None:
    subs = list(_sub_jaxprs(params))
    return subs[0] if len(subs) == 1 else None


def _contains_kernel(params: Mapping[str, Any]) -> bool:
    return any(find_kernels(sub) for sub in _sub_jaxprs(params))


def _leading_operand_count(eqn: Any) -> int:
    if eqn.primitive is not PALLAS_CALL:
        return 0
    gm = eqn.params["grid_mapping"]
    return gm.num_dynamic_grid_bounds + gm.num_index_operands


def needs_concrete_values(eqn: Any) -> bool:
    return _leading_operand_count(eqn) > 0


# --------------------------------------------------------------------------------------------
# Equation -> Kernel


def kernel_from_eqn(
    found: FoundKernel, index: int, leading_values: list[np.ndarray] | None
) -> Kernel:
    if found.eqn.primitive is PALLAS_CALL:
        return _pallas_call_kernel(found, index, leading_values)
    return _mesh_kernel(found, index)


def _pallas_call_kernel(
    found: FoundKernel, index: int, leading: list[np.ndarray] | None
) -> Kernel:
    eqn = found.eqn
    params = eqn.params
    gm = params["grid_mapping"]
    n_dyn = gm.num_dynamic_grid_bounds
    dyn_values = leading[:n_dyn] if leading is not None else None
    prefetch_values = leading[n_dyn:] if leading is not None else None

    dynamic_dims = tuple(i for i, g in enumerate(gm.grid) if pallas_core.is_dynamic_dim(g))
    grid: list[int | None] = []
    dyn_iter = iter(dyn_values) if dyn_values is not None else None
    for g in gm.grid:
        if pallas_core.is_dynamic_dim(g):
            grid.append(int(next(dyn_iter)) if dyn_iter is not None else None)
        else:
            grid.append(int(g))

    kernel_jaxpr = params["jaxpr"]
    fn_name, source = _func_src(kernel_jaxpr)
    name = params.get("name") or fn_name or "kernel"
    compiler_params = _compiler_params(params.get("compiler_params"))
    backend = _backend_of(compiler_params)
    aliases = tuple((int(i), int(o)) for i, o in params.get("input_output_aliases", ()))
    operands = _pallas_call_operands(gm, aliases)
    tpu = next((v for key, v in compiler_params.items() if key in _TPU_PARAM_KEYS), {})
    semantics = tpu.get("dimension_semantics")
    handle = KernelHandle(
        eqn=eqn,
        index_map_evaluator=_index_map_evaluator(gm),
        num_dynamic_grid=n_dyn,
        prefetch_concrete=prefetch_values is not None,
    )
    return Kernel(
        index=index,
        name=str(name),
        kind="pallas_call",
        source=source,
        call_site=_call_site(eqn),
        context=found.context,
        grid=tuple(grid),
        grid_names=tuple(str(n) for n in gm.grid_names) if gm.grid_names else None,
        dynamic_grid_dims=dynamic_dims,
        vmapped_dims=tuple(int(d) for d in gm.vmapped_dims),
        dimension_semantics=_full_semantics(semantics, len(grid), tuple(gm.vmapped_dims)),
        operands=operands,
        input_output_aliases=aliases,
        compiler_params=compiler_params,
        backend=backend,
        cost_estimate=_cost(params.get("cost_estimate")),
        kernel_jaxpr=str(kernel_jaxpr),
        prefetch_values=tuple(prefetch_values) if prefetch_values is not None else (),
        handle=handle,
    )


def _pallas_call_operands(gm: Any, aliases: tuple[tuple[int, int], ...]) -> tuple[Operand, ...]:
    # Pallas numbers `args[i]` over the user's call: scalar-prefetch operands come first.
    n_prefetch = gm.num_index_operands
    operands: list[Operand] = []
    prefetch_avals = gm.index_map_avals[len(gm.grid):]
    prefetch_origins = _prefetch_origins(gm)
    for origin, aval in zip(prefetch_origins, prefetch_avals, strict=True):
        inner = getattr(aval, "inner_aval", aval)
        operands.append(Operand(
            origin=origin, role="input", shape=tuple(inner.shape),
            dtype=np.dtype(inner.dtype), memory_space="smem", scalar_prefetch=True,
        ))
    # input_output_aliases index the pallas_call operands (prefetch included) and outputs.
    alias_in = {i: o for i, o in aliases}
    alias_out = {o: i for i, o in aliases}
    origins = [bm.origin for bm in gm.block_mappings]
    in_origins = prefetch_origins + origins[: gm.num_inputs]
    for k, bm in enumerate(gm.block_mappings):
        is_input = k < gm.num_inputs
        role = "input" if is_input else "output"
        aliased = None
        if is_input and (n_prefetch + k) in alias_in:
            aliased = origins[gm.num_inputs + alias_in[n_prefetch + k]]
        elif not is_input and (k - gm.num_inputs) in alias_out:
            aliased = in_origins[alias_out[k - gm.num_inputs]]
        operands.append(_block_operand(bm, role, aliased))
    for j, aval in enumerate(gm.scratch_avals):
        inner = getattr(aval, "inner_aval", aval)
        shape = tuple(getattr(inner, "shape", ()))
        dtype = getattr(inner, "dtype", None)
        operands.append(Operand(
            origin=f"scratch[{j}]", role="scratch", shape=shape,
            dtype=np.dtype(dtype) if _is_numpy_dtype(dtype) else np.dtype("int32"),
            memory_space=_memory_space(aval),
        ))
    return tuple(operands)


def _prefetch_origins(gm: Any) -> list[str]:
    """Pallas-style origins ("args[0]", "args[0][1]") of the scalar-prefetch leaves.

    The index maps are called with (*program_ids, *prefetch_args); the prefetch arguments are
    the first positional arguments of the user's call, possibly pytrees.
    """
    n = len(gm.index_map_avals)
    args, _ = gm.index_map_tree.unflatten(list(range(n)))
    prefetch_args = tuple(args[len(gm.grid):])
    leaves = jax.tree_util.tree_flatten_with_path(prefetch_args)[0]
    return ["args" + jax.tree_util.keystr(path) for path, _ in leaves]


def _is_numpy_dtype(dtype: Any) -> bool:
    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return dtype is not None


def _block_operand(bm: Any, role: str, aliased: str | None) -> Operand:
    block_dims = tuple(_block_dim(d) for d in bm.block_shape)
    memory_space = _memory_space(bm.transformed_block_aval)
    buffer_count: int | None = None
    if memory_space not in ("any", "hbm", "smem", "semaphore"):
        mode = bm.pipeline_mode
        count = getattr(mode, "buffer_count", 2) if mode is not None else 2
        buffer_count = int(count[0] if isinstance(count, tuple) else count)
    _, index_src = _func_src(bm.index_map_jaxpr)
    return Operand(
        origin=str(bm.origin),
        role=role,  # type: ignore[arg-type]
        shape=tuple(int(s) for s in bm.array_aval.shape),
        dtype=np.dtype(bm.array_aval.dtype),
        memory_space=memory_space,
        block_dims=block_dims,
        index_map_jaxpr=str(bm.index_map_jaxpr),
        index_map_source=index_src,
        buffer_count=buffer_count,
        aliased_with=aliased,
    )


def _block_dim(d: Any) -> BlockDim:
    match d:
        case pallas_core.Squeezed():
            return BlockDim("squeezed", 1)
        case pallas_core.Blocked(block_size=size):
            return BlockDim("blocked", int(size))
        case pallas_core.Element(block_size=size, padding=padding):
            return BlockDim("element", int(size), (int(padding[0]), int(padding[1])))
        case pallas_core.BoundedSlice(block_size=size):
            return BlockDim("bounded", int(size))
        case pallas_core.Indirect(block_size=size):
            return BlockDim("indirect", int(size))
    raise TypeError(f"unknown Pallas block dimension {d!r}")  # pragma: no cover


def _memory_space(aval: Any) -> str:
    space = getattr(aval, "memory_space", None)
    if space is None:
        return "default"
    value = getattr(space, "value", None)
    text = str(value if isinstance(value, str) else space)
    return text.rsplit(".", 1)[-1].lower()


def _full_semantics(
    semantics: Sequence[Any] | None, rank: int, vmapped: tuple[int, ...]
) -> tuple[str, ...] | None:
    """The user's dimension semantics over the whole grid: as Mosaic does, dims added by vmap
    are "parallel" (the user's semantics cover only their own grid)."""
    if semantics is None:
        return None
    user = iter(_semantics_name(s) for s in semantics)
    return tuple("parallel" if i in vmapped else next(user, "arbitrary") for i in range(rank))


def _semantics_name(s: Any) -> str:
    value = getattr(s, "value", s)
    return str(value).rsplit(".", 1)[-1].lower()


def _compiler_params(params: Any) -> dict[str, dict[str, Any]]:
    """Normalise compiler params to {backend: {field: value}}."""
    if params is None:
        return {}
    items = params.items() if isinstance(params, Mapping) else [(None, params)]
    out: dict[str, dict[str, Any]] = {}
    for key, value in items:
        backend = key or _params_backend(value)
        if dataclasses.is_dataclass(value):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        else:
            fields = dict(value) if isinstance(value, Mapping) else {"value": value}
        out[str(backend)] = fields
    return out


def _params_backend(value: Any) -> str:
    backend = getattr(value, "BACKEND", None)
    if backend:
        return str(backend).lower()
    module = type(value).__module__
    if "mosaic_gpu" in module:
        return "mosaic_gpu"
    if "triton" in module:
        return "triton"
    if "mosaic" in module:
        return "mosaic_tpu"
    return type(value).__name__


_TPU_PARAM_KEYS = frozenset({"mosaic_tpu", "tpu", "mosaic"})


def _backend_of(compiler_params: Mapping[str, Any]) -> Any:
    keys = set(compiler_params)
    if keys & _TPU_PARAM_KEYS:
        return "tpu"
    if "triton" in keys:
        return "triton"
    if keys & {"mosaic_gpu", "gpu"}:
        return "mosaic_gpu"
    return None


def _cost(cost: Any) -> CostEstimate | None:
    if cost is None:
        return None
    return CostEstimate(int(cost.flops), int(cost.transcendentals), int(cost.bytes_accessed))


_FUNC_SRC = re.compile(r"^(?P<name>.*?) at (?P<file>.+):(?P<line>\d+)$")


def _func_src(jaxpr: Any) -> tuple[str | None, str | None]:
    info = getattr(jaxpr, "debug_info", None)
    text = getattr(info, "func_src_info", None) if info is not None else None
    if not text:
        return None, None
    m = _FUNC_SRC.match(text)
    if m is None:
        return text, None
    return m["name"], f"{m['file']}:{m['line']}"


def _call_site(eqn: Any) -> str | None:
    frame = source_info_util.user_frame(eqn.source_info.traceback)
    if frame is None:
        return None
    return f"{frame.file_name}:{frame.start_line}"


def _mesh_kernel(found: FoundKernel, index: int) -> Kernel:
    eqn = found.eqn
    params = eqn.params
    meshes = params["meshes"]
    jaxprs = params["jaxprs"]
    mesh = meshes[0]
    axes = tuple((str(k), int(v)) for k, v in mesh.shape.items())
    fn_name, source = _func_src(jaxprs[0])
    name = params.get("name") or fn_name or "kernel"
    compiler_params = _compiler_params(params.get("compiler_params"))
    body_avals = [v.aval for v in jaxprs[0].invars]
    n_in = len(eqn.invars)
    operands: list[Operand] = []
    for i, v in enumerate(eqn.invars):
        space = _memory_space(body_avals[i]) if i < len(body_avals) else "any"
        operands.append(Operand(origin=f"args[{i}]", role="input", shape=tuple(v.aval.shape),
                                dtype=np.dtype(v.aval.dtype), memory_space=space))
    outs = params["out_avals"]
    for j, aval in enumerate(outs):
        k = n_in + j
        space = _memory_space(body_avals[k]) if k < len(body_avals) else "any"
        origin = "outputs" if len(outs) == 1 else f"outputs[{j}]"
        operands.append(Operand(origin=origin, role="output", shape=tuple(aval.shape),
                                dtype=np.dtype(aval.dtype), memory_space=space))
    backend = _backend_of(compiler_params) or _mesh_backend(mesh)
    return Kernel(
        index=index, name=str(name), kind="mesh", source=source, call_site=_call_site(eqn),
        context=found.context, grid=tuple(v for _, v in axes),
        grid_names=tuple(n for n, _ in axes), dynamic_grid_dims=(), vmapped_dims=(),
        dimension_semantics=None, operands=tuple(operands), input_output_aliases=(),
        compiler_params=compiler_params, backend=backend,
        cost_estimate=_cost(params.get("cost_estimate")),
        kernel_jaxpr="\n".join(str(j) for j in jaxprs),
        mesh=MeshInfo(type(mesh).__name__, axes),
        handle=KernelHandle(eqn=eqn, index_map_evaluator=None, num_dynamic_grid=0,
                            prefetch_concrete=False),
    )


def _mesh_backend(mesh: Any) -> Any:
    module = type(mesh).__module__
    if "mosaic_gpu" in module:
        return "mosaic_gpu"
    if "mosaic" in module:
        return "tpu"
    return None


# --------------------------------------------------------------------------------------------
# Vectorized index maps


def _index_map_evaluator(
    gm: Any,
) -> Callable[[np.ndarray, Sequence[np.ndarray]], list[np.ndarray]] | None:
    """One jitted, vmapped function computing every operand's block indices for many programs.

    Called with `program_ids` of shape (grid_rank, P) in execution order and the concrete
    scalar-prefetch arrays; returns one (P, ndim) int array per block mapping.
    """
    mappings = list(gm.block_mappings)
    if not mappings:
        return None
    n_grid = len(gm.grid)
    pure = [_pure_index_map(bm) for bm in mappings]

    def all_maps(ids: jax.Array, prefetch: tuple[jax.Array, ...]) -> list[jax.Array]:
        scalars = [ids[d] for d in range(n_grid)]
        outs = []
        for fn, bm in zip(pure, mappings, strict=True):
            vals = fn(*scalars, *prefetch)[: len(bm.block_shape)]
            outs.append(jnp.stack([jnp.asarray(v, jnp.int32) for v in vals]) if vals
                        else jnp.zeros((0,), jnp.int32))
        return outs

    batched = jax.jit(jax.vmap(all_maps, in_axes=(1, None)))

    def evaluate(program_ids: np.ndarray, prefetch: Sequence[np.ndarray]) -> list[np.ndarray]:
        ids = np.ascontiguousarray(program_ids, dtype=np.int32)
        with jax.default_device(jax.devices("cpu")[0]):
            outs = batched(ids, tuple(np.asarray(p) for p in prefetch))
        return [np.asarray(o) for o in outs]

    return evaluate


def _pure_index_map(bm: Any) -> Callable[..., list[Any]]:
    jaxpr = state_discharge.discharge_state(bm.index_map_jaxpr, strip_memory_space=True)
    return jax_core.jaxpr_as_fun(jaxpr)


def eval_index_map_once(kernel: Kernel, origin: str, program: Sequence[int]) -> tuple[int, ...]:
    """Evaluate one operand's index map for one program, the slow way (benchmarks, tests)."""
    gm = kernel.handle.eqn.params["grid_mapping"]
    for bm in gm.block_mappings:
        if bm.origin == origin:
            fn = _pure_index_map(bm)
            out = fn(*[jnp.int32(p) for p in program], *kernel.prefetch_values)
            return tuple(int(v) for v in out[: len(bm.block_shape)])
    raise KeyError(origin)


# --------------------------------------------------------------------------------------------
# Re-running and re-lowering captured kernels (for executors and lowering)


def kernel_call_avals(kernel: Kernel) -> list[jax.ShapeDtypeStruct]:
    """Abstract values of the operands a kernel equation is bound with.

    For `pallas_call`: dynamic grid bounds, scalar-prefetch arrays, then inputs.
    For mesh kernels: the inputs.
    """
    return [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in kernel.handle.eqn.invars]


def kernel_callable(kernel: Kernel, **param_overrides: Any) -> Callable[..., list[Any]]:
    """A function binding the captured kernel alone, with some equation params replaced.

    Useful overrides: `interpret=True` or a `pltpu.InterpretParams(...)`, `debug=True`,
    `compiler_params=...`. Call it with operands matching `kernel_call_avals(kernel)`;
    it returns the list of outputs.
    """
    eqn = kernel.handle.eqn
    params = _override_params(eqn, param_overrides)

    def call(*operands: Any) -> list[Any]:
        return list(eqn.primitive.bind(*operands, **params))

    return call


def _override_params(eqn: Any, overrides: Mapping[str, Any]) -> dict[str, Any]:
    params = dict(eqn.params)
    unknown = set(overrides) - set(params)
    if unknown:
        raise TypeError(f"{eqn.primitive.name} has no parameter(s) {sorted(unknown)}")
    params.update(overrides)
    return params


def rewrite_kernels(
    closed_jaxpr: Jaxpr, overrides: Callable[[Any], Mapping[str, Any] | None]
) -> Jaxpr:
    """A copy of the jaxpr where every kernel equation's params are updated by `overrides(eqn)`.

    Descends into every sub-jaxpr (jit, scan, cond, custom_vjp, shard_map, ...), so a whole
    traced function can be re-run with, e.g., every kernel interpreted. The effects the new
    params bring (interpret mode's ordered host callbacks) are added to every enclosing
    equation and jaxpr, so kernels inside `cond`, `scan`, `custom_vjp`, ... still lower.
    """
    return _rewrite(closed_jaxpr, overrides)[0]


def _rewrite(jaxpr: Any, overrides: Callable[[Any], Mapping[str, Any] | None]
             ) -> tuple[Any, set[Any]]:
    added: set[Any] = set()
    new_eqns = []
    changed = False
    for eqn in jaxpr.eqns:
        extra: set[Any] = set()
        if eqn.primitive in KERNEL_PRIMITIVES:
            update = overrides(eqn)
            if update:
                params = _override_params(eqn, update)
                extra = set(pallas_core.get_interpret_effects(params.get("interpret")))
                eqn = eqn.replace(params=params, effects=eqn.effects | extra)
                changed = True
        else:
            new_params = {}
            for key, value in eqn.params.items():
                new_value, effs = _rewrite_value(value, overrides)
                if new_value is not value:
                    new_params[key] = new_value
                    extra |= effs
            if new_params:
                eqn = eqn.replace(params={**eqn.params, **new_params},
                                  effects=eqn.effects | extra)
                changed = True
        added |= extra
        new_eqns.append(eqn)
    if not changed:
        return jaxpr, set()
    return jaxpr.replace(eqns=new_eqns, effects=jaxpr.effects | added), added


def _rewrite_value(value: Any, overrides: Callable[[Any], Mapping[str, Any] | None]
                   ) -> tuple[Any, set[Any]]:
    if isinstance(value, Jaxpr):
        return _rewrite(value, overrides)
    if isinstance(value, tuple) and any(isinstance(v, Jaxpr) for v in value):
        pairs = [_rewrite(v, overrides) if isinstance(v, Jaxpr) else (v, set()) for v in value]
        new = tuple(p[0] for p in pairs)
        if all(a is b for a, b in zip(new, value, strict=True)):
            return value, set()
        return new, set().union(*(p[1] for p in pairs))
    return value, set()


def jaxpr_callable(closed_jaxpr: Jaxpr) -> Callable[..., list[Any]]:
    """Evaluate a closed jaxpr on flat arguments (wrap in `jax.jit` to compile it once)."""
    return jax_core.jaxpr_as_fun(closed_jaxpr)


def is_kernel_eqn_of(eqn: Any, kernel: Kernel) -> bool:
    return eqn is kernel.handle.eqn


# --------------------------------------------------------------------------------------------
# Chip facts (TPU generations) -- memory analysis appends below this line.


def tpu_chip_versions() -> tuple[str, ...]:
    """The TPU generations `jax._src.tpu_info` knows, by their `ChipVersion` value ("v5e")."""
    from jax._src import tpu_info

    return tuple(v.value for v in tpu_info.ChipVersion)


def tpu_chip_facts(version: str) -> dict[str, Any]:
    """Per-TensorCore facts of one TPU generation from `jax._src.tpu_info`, as plain data.

    Includes the sublane tiling JAX expects for 32-, 16-, 8- and 4-bit types (its heuristic for
    XLA's default second-minor tiling flags), which decides how Mosaic pads VMEM buffers.
    """
    from jax._src import tpu_info

    chip = tpu_info.ChipVersion(version)
    info = tpu_info.get_tpu_info_for_chip(chip, 1)
    facts: dict[str, Any] = {
        f.name: getattr(info, f.name)
        for f in dataclasses.fields(info)
        if f.name not in ("chip_version", "sparse_core")
    }
    facts["version"] = chip.value
    facts["physical_cores"] = chip.num_physical_tensor_cores_per_chip
    facts["megacore"] = chip.supports_megacore
    facts["sublane_tiling"] = {
        bits: info.get_sublane_tiling(dtype)
        for bits, dtype in ((32, np.float32), (16, jnp.bfloat16), (8, np.int8), (4, jnp.int4))
    }
    return facts


# --------------------------------------------------------------------------------------------
# Lowering support (used by the top-level `lowering` package; owned by its helper).
# The Mosaic TPU module travels inside the `tpu_custom_call` backend config as versioned MLIR
# bytecode, with its debug locations split off into a second bytecode blob ("tpu.locs", one
# location per operation and block argument in pre-order). Reading it there, instead of from
# `debug=True` prints, keeps the user's stdout clean and gives us source locations back.

MOSAIC_LOC_TAG = "@pl"  # name-location prefix marking item i of the pre-order walk


def mosaic_tpu_module(body: bytes, debug_locations: bytes | None) -> tuple[str, str | None]:
    """Deserialize a Mosaic TPU module from its custom-call bytecode and print it.

    Returns the module text, where every operation and block argument carries the name
    location `"@pl<i>"` (i = its position in the pre-order walk that `tpu.locs` follows),
    and the printed debug-locations module (None when the config had none).
    """
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import tpu
    from jax._src.lib.mlir import ir, passmanager

    ctx = jax_mlir.make_ir_context()
    tpu.register_dialect(ctx)
    with ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(body)
        passmanager.PassManager.parse("builtin.module(mosaic-serde{serialize=false})").run(
            module.operation
        )
        for i, item in enumerate(_preorder(module.operation)):
            loc = ir.Location.name(f"{MOSAIC_LOC_TAG}{i}")
            if isinstance(item, ir.BlockArgument):
                item.set_location(loc)
            else:
                item.location = loc
        text = str(module.operation.get_asm(enable_debug_info=True, pretty_debug_info=True))
        locs = None
        if debug_locations:
            parsed = ir.Module.parse(debug_locations)
            locs = str(parsed.operation.get_asm(enable_debug_info=True))
    return text, locs


def _preorder(op: Any) -> Iterator[Any]:
    yield op
    for region in op.regions:
        for block in region.blocks:
            yield from block.arguments
            for inner in block.operations:
                yield from _preorder(inner.operation)


# ============================================================================================
# Executors and the program stepper (pallaslab.execute; owned by its helper). Begin.


@dataclasses.dataclass(frozen=True)
class ProgramRunner:
    """A captured `pallas_call` split into one jitted function per program, as JAX's HLO
    interpreter (`interpret=True`) runs it: the discharged kernel body, called with the program
    ids, the scalar-prefetch values, each operand's block and the scratch values.

    `run(program_ids, scalars, blocks, scratch) -> (blocks, scratch)`; blocks are squeezed like
    the kernel sees them. The caller keeps the (padded) arrays and slices blocks itself.
    """

    run: Callable[..., tuple[list[Any], list[Any]]]
    grid: tuple[int, ...]
    block_shapes: tuple[tuple[int, ...], ...]  # per input/output (squeezed dims = 1)
    squeezed: tuple[tuple[bool, ...], ...]
    blocked: tuple[tuple[bool, ...], ...]  # dims whose start is block index * block size
    element_padding: tuple[tuple[tuple[int, int], ...], ...]
    num_inputs: int
    num_outputs: int
    scratch_init: tuple[np.ndarray, ...]
    discharged: Any  # ClosedJaxpr of the discharged kernel body
    vmapped_dims: tuple[int, ...]
    aliases: tuple[tuple[int, int], ...]  # (input position among inputs, output position)


def program_runner(kernel: Kernel) -> ProgramRunner:
    from jax._src.pallas import hlo_interpreter

    eqn = kernel.handle.eqn
    gm = eqn.params["grid_mapping"]
    discharged, _, scratch_avals = hlo_interpreter.kernel_to_hlo_jaxpr(
        eqn.params["jaxpr"], (), gm)
    grid = tuple(int(g) for g in kernel.grid)  # type: ignore[arg-type]
    n_index = gm.num_index_operands
    n_inout = gm.num_inputs + gm.num_outputs
    vmapped = tuple(int(d) for d in gm.vmapped_dims)

    def one_program(ids: jax.Array, scalars: tuple, blocks: tuple, scratch: tuple):
        env = _local_grid_env(gm, ids, grid)
        with pallas_core.grid_env(env):
            outs = jax_core.eval_jaxpr(discharged.jaxpr, discharged.consts,
                                       *scalars, *blocks, *scratch)
        return list(outs[n_index:n_index + n_inout]), list(outs[n_index + n_inout:])

    dims = [tuple(bm.block_shape) for bm in gm.block_mappings]
    return ProgramRunner(
        run=jax.jit(one_program),
        grid=grid,
        block_shapes=tuple(tuple(pallas_core._get_block_shape(d)) for d in dims),
        squeezed=tuple(tuple(isinstance(b, pallas_core.Squeezed) for b in d) for d in dims),
        blocked=tuple(tuple(isinstance(b, pallas_core.Blocked) for b in d) for d in dims),
        element_padding=tuple(
            tuple(b.padding if isinstance(b, pallas_core.Element) else (0, 0) for b in d)
            for d in dims),
        num_inputs=gm.num_inputs,
        num_outputs=gm.num_outputs,
        scratch_init=tuple(uninitialized(a.shape, a.dtype) for a in scratch_avals),
        discharged=discharged,
        vmapped_dims=vmapped,
        aliases=tuple((int(i) - n_index, int(o))
                      for i, o in eqn.params.get("input_output_aliases", ())),
    )


def _local_grid_env(gm: Any, ids: Any, grid: tuple[int, ...]) -> tuple[Any, ...]:
    if gm.local_grid_env is not None:
        return gm.local_grid_env(tuple(ids[d] for d in range(len(grid))), grid)
    return tuple(pallas_core.GridAxis(ids[d], b) for d, b in enumerate(grid)
                 if d not in gm.vmapped_dims)


def uninitialized(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """What Pallas's HLO interpreter fills unwritten memory with: NaN, int min, False."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating) or dtype.name in ("bfloat16",) or "float" in dtype.name:
        return np.full(tuple(shape), np.nan, dtype)
    if np.issubdtype(dtype, np.integer):
        return np.full(tuple(shape), np.iinfo(dtype).min, dtype)
    if dtype == np.bool_:
        return np.zeros(tuple(shape), dtype)
    return np.zeros(tuple(shape), dtype)


@dataclasses.dataclass(frozen=True)
class EquationValue:
    """One top-level equation of a program's (discharged) kernel body, as evaluated."""

    index: int
    primitive: str
    text: str  # the equation, pretty-printed (first line)
    source: str | None  # "file.py:LINE" of the user's code that produced it
    outputs: tuple[np.ndarray, ...]


def program_equations(runner: ProgramRunner, ids: Sequence[int], scalars: Sequence[Any],
                      blocks: Sequence[Any], scratch: Sequence[Any]) -> list[EquationValue]:
    """Evaluate one program's kernel body equation by equation, keeping every value."""
    jaxpr = runner.discharged.jaxpr
    env: dict[Any, Any] = {}
    for v, x in zip(jaxpr.constvars, runner.discharged.consts, strict=True):
        env[v] = x
    for v, x in zip(jaxpr.invars, [*scalars, *blocks, *scratch], strict=True):
        env[v] = jnp.asarray(x)

    def read(a: Any) -> Any:
        return a.val if isinstance(a, jax_core.Literal) else env[a]

    context = jax_core.JaxprPpContext()
    settings = jax_core.JaxprPpSettings()
    out: list[EquationValue] = []
    grid_ids = [jnp.int32(i) for i in ids]
    with pallas_core.grid_env(_local_grid_env_static(runner, grid_ids)):
        for k, eqn in enumerate(jaxpr.eqns):
            params = eqn.primitive.get_bind_params(eqn.params)
            with source_info_util.user_context(eqn.source_info.traceback,
                                               name_stack=eqn.source_info.name_stack), \
                    eqn.ctx.manager:
                ans = eqn.primitive.bind(*[read(a) for a in eqn.invars], **params)
            values = list(ans) if eqn.primitive.multiple_results else [ans]
            for v, x in zip(eqn.outvars, values, strict=True):
                env[v] = x
            text = jax_core.pp_eqn(eqn, context, settings).format()
            out.append(EquationValue(
                index=k, primitive=eqn.primitive.name, text=_one_line(text, eqn, context),
                source=_call_site(eqn),
                outputs=tuple(np.asarray(x) for x in values),
            ))
    return out


def _one_line(text: str, eqn: Any, context: Any) -> str:
    """An equation on one line: sub-jaxprs (a `cond`'s branches) elided."""
    lines = text.splitlines()
    if len(lines) == 1:
        return text
    head = lines[0].rstrip().rstrip("[").rstrip()
    args = " ".join(str(a.val) if isinstance(a, jax_core.Literal) else
                    jax_core.pp_var(a, context).format() for a in eqn.invars)
    return f"{head}[...] {args}"


def _local_grid_env_static(runner: ProgramRunner, ids: list[Any]) -> tuple[Any, ...]:
    return tuple(pallas_core.GridAxis(ids[d], b) for d, b in enumerate(runner.grid)
                 if d not in runner.vmapped_dims)


def instrument_program_entry(eqn: Any, on_entry: Callable[[], None]) -> dict[str, Any] | None:
    """Param overrides making a `pallas_call` call `on_entry()` (a host callback) at the start
    of every program, before its body runs. Used to attribute `pl.debug_print` output to
    programs. None for kernels that cannot be instrumented (mesh kernels)."""
    if eqn.primitive is not PALLAS_CALL:
        return None
    from jax._src import linear_util as lu
    from jax._src.interpreters import partial_eval as pe

    jaxpr = eqn.params["jaxpr"]
    gm = eqn.params["grid_mapping"]

    def wrapped(*refs: Any) -> Any:
        jax.debug.callback(on_entry)
        return jax_core.eval_jaxpr(jaxpr, (), *refs)

    with pallas_core.tracing_grid_env(gm.grid, gm.vmapped_dims):
        new, _, consts = pe.trace_to_jaxpr_dynamic(
            lu.wrap_init(wrapped, debug_info=jaxpr.debug_info), [v.aval for v in jaxpr.invars])
    if consts:  # pragma: no cover - the callback closes over nothing traced
        return None
    return {"jaxpr": new}


def kernel_arg_names(kernel: Kernel) -> dict[str, str]:
    """The kernel body's parameter names (e.g. "x_ref") -> operand origins.

    TPU interpret mode names operands by these in its error messages.
    """
    eqn = kernel.handle.eqn
    if eqn.primitive is not PALLAS_CALL:
        return {}
    names = eqn.params["jaxpr"].debug_info.arg_names
    if names is None:
        return {}
    gm = eqn.params["grid_mapping"]
    body_ops = [op for op in kernel.operands if not op.scalar_prefetch]
    return {str(n): op.origin for n, op in
            zip(names[gm.num_index_operands:], body_ops, strict=False)}


def tpu_interpret_buffers(kernel: Kernel) -> dict[tuple[str, int], str]:
    """(memory space, buffer id) -> operand origin, for TPU interpret mode's messages.

    TPU interpret mode numbers buffers from 100 in allocation order (per kernel launch): HBM
    copies of the inputs, HBM outputs (aliased ones reuse their input's), SMEM scalar
    prefetch, then one buffer per kernel parameter that is not in HBM (input/output blocks,
    scratch). Mirrors `interpret_pallas_call`; ids it does not explain map to nothing.
    """
    eqn = kernel.handle.eqn
    if eqn.primitive is not PALLAS_CALL:
        return {}
    gm = eqn.params["grid_mapping"]
    aliased_outputs = {int(o) for _, o in eqn.params.get("input_output_aliases", ())}
    prefetch = [op for op in kernel.operands if op.scalar_prefetch]
    inputs = [op for op in kernel.inputs if not op.scalar_prefetch]
    body_ops = [op for op in kernel.operands if not op.scalar_prefetch]
    found: dict[tuple[str, int], str] = {}
    next_id = 100
    for op in inputs:
        found[("hbm", next_id)] = op.origin
        next_id += 1
    for j, op in enumerate(kernel.outputs):
        if j not in aliased_outputs:
            found[("hbm", next_id)] = op.origin
            next_id += 1
    for op in prefetch:
        found[("smem", next_id)] = op.origin
        next_id += 1
    n_blocks = gm.num_inputs + gm.num_outputs
    for i, op in enumerate(body_ops):
        space = (_memory_space(gm.block_mappings[i].transformed_block_aval)
                 if i < n_blocks else op.memory_space)
        if space in ("any", "hbm"):
            continue
        if space == "semaphore":
            continue  # semaphores have their own ids
        found[(space if space != "default" else "vmem", next_id)] = op.origin
        next_id += 1
    return found


def kernel_operands(closed_jaxpr: Any, flat_args: Sequence[Any], kernel: Kernel,
                    interpret: Any = True) -> list[Any] | None:
    """The concrete operands the kernel equation is bound with when the traced function runs
    on `flat_args` (every kernel interpreted). Inside `scan` / `while` / `cond` these are the
    operands of its first launch (first iteration, taken branch). None when it is not launched
    for these arguments (a branch not taken, a loop that runs zero times) or sits in a mapped
    region such as `shard_map`."""
    target = kernel.handle.eqn

    class _Found(Exception):
        def __init__(self, values: list[Any]):
            self.values = values

    class _NotLaunched(Exception):
        pass

    def interpreted(e: Any) -> dict[str, Any]:
        return {"interpret": interpret}

    def eval_eqn(eqn: Any, ins: list[Any]) -> list[Any]:
        if eqn is target:
            raise _Found(ins)
        if _first_launch(eqn, ins, target, eval_eqn):
            raise _NotLaunched  # entered the loop / branch holding the kernel: it never ran
        if eqn.primitive in KERNEL_PRIMITIVES:
            return _bind(eqn, ins, _override_params(eqn, interpreted(eqn)))
        params = {k: _rewrite_value(v, interpreted)[0] for k, v in eqn.params.items()}
        return _bind(eqn, ins, params)

    try:
        interpret_jaxpr(closed_jaxpr, flat_args, eval_eqn)
    except _Found as found:
        return found.values
    except _NotLaunched:
        return None
    return None


def _first_launch(eqn: Any, ins: list[Any], target: Any,
                  eval_eqn: Callable[[Any, list[Any]], list[Any]]) -> bool:
    """Interpret the first iteration (scan, while) or the taken branch (cond) of an equation
    that holds `target`; False when `target` is not inside such an equation."""
    name, p = eqn.primitive.name, eqn.params
    if name == "scan" and _holds(p["jaxpr"], target):
        if p["length"] > 0:
            consts, carry, xs = _scan_operand_groups(p, ins)
            first = [x[-1] if p.get("reverse") else x[0] for x in xs]
            interpret_jaxpr(p["jaxpr"], [*consts, *carry, *first], eval_eqn)
        return True
    if name == "while" and _holds(p["body_jaxpr"], target):
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        carry = ins[cn + bn:]
        if bool(np.asarray(interpret_jaxpr(p["cond_jaxpr"], [*ins[:cn], *carry], eval_eqn)[0])):
            interpret_jaxpr(p["body_jaxpr"], [*ins[cn:cn + bn], *carry], eval_eqn)
        return True
    if name == "cond" and any(_holds(b, target) for b in p["branches"]):
        taken = min(max(int(np.asarray(ins[0])), 0), len(p["branches"]) - 1)
        if _holds(p["branches"][taken], target):
            interpret_jaxpr(p["branches"][taken], ins[1:], eval_eqn)
        return True
    return False


def _scan_operand_groups(params: Mapping[str, Any], ins: list[Any]) -> list[list[Any]]:
    """A scan's operands as [consts, carry, scanned-over]."""
    if "num_consts" in params:  # jax < 0.12
        nc, nk = int(params["num_consts"]), int(params["num_carry"])
        return [ins[:nc], ins[nc:nc + nk], ins[nc + nk:]]
    return [list(g) for g in params["ft_in"].update(list(ins)).unpack()]


def _holds(jaxpr: Jaxpr, target: Any) -> bool:
    return any(f.eqn is target for f in find_kernels(jaxpr))


def is_pallas_call(eqn: Any) -> bool:
    return eqn.primitive is PALLAS_CALL


def kernel_leading_invars(kernel: Kernel) -> list[Any]:
    """The variables a kernel equation is bound with (dynamic grid, prefetch, inputs)."""
    return list(kernel.handle.eqn.invars)


def output_sources(closed_jaxpr: Any, kernels: Sequence[Kernel]
                   ) -> list[tuple[int, int] | None]:
    """For each output of the traced function: (kernel index, output position) when it is
    a kernel's output unchanged (through jit-like calls), else None."""
    index = {id(k.handle.eqn): k.index for k in kernels}

    def sources(jaxpr: Jaxpr) -> list[tuple[int, int] | None]:
        made: dict[Any, tuple[int, int] | None] = {}
        for eqn in jaxpr.eqns:
            if id(eqn) in index:
                for j, v in enumerate(eqn.outvars):
                    made[v] = (index[id(eqn)], j)
            elif eqn.primitive.name in _CALL_ONCE and (sub := _single_sub(eqn.params)) is not None:
                inner = sources(sub)
                for v, s in zip(eqn.outvars, inner, strict=False):
                    made[v] = s
        return [None if isinstance(v, jax_core.Literal) else made.get(v) for v in jaxpr.outvars]

    return sources(closed_jaxpr.jaxpr)


def full_dimension_semantics_params(kernel: Kernel) -> dict[str, Any] | None:
    """Compiler params whose TPU dimension semantics cover the whole grid (vmap adds grid
    dimensions but not their semantics; Mosaic treats them as parallel, TPU interpret mode
    rejects the mismatch)."""
    params = kernel.handle.eqn.params.get("compiler_params")
    if not kernel.vmapped_dims or params is None or kernel.dimension_semantics is None:
        return None
    semantics = getattr(params, "dimension_semantics", None)
    if semantics is None or len(semantics) == len(kernel.grid):
        return None
    return {"compiler_params": dataclasses.replace(
        params, dimension_semantics=tuple(kernel.dimension_semantics))}


# Executors and the program stepper. End.
# ============================================================================================


def constant_index_maps(kernel: Kernel) -> dict[str, bool]:
    """Per BlockSpec operand: does its index map return the same block for every program?

    Decided statically, as Mosaic does, from the index-map jaxpr: no output depends on the grid
    indices or on scalar-prefetch operands. Mosaic gives such a window a single VMEM buffer.
    """
    if kernel.kind != "pallas_call":
        return {}
    gm = kernel.handle.eqn.params["grid_mapping"]
    return {str(bm.origin): _outputs_constant(bm.index_map_jaxpr.jaxpr)
            for bm in gm.block_mappings}


def _outputs_constant(jaxpr: Jaxpr) -> bool:
    dependent = set(jaxpr.invars)
    for eqn in jaxpr.eqns:
        if any(not _is_literal(v) and v in dependent for v in eqn.invars):
            dependent.update(eqn.outvars)
    return not any(not _is_literal(v) and v in dependent for v in jaxpr.outvars)


def tpu_topology_device(topology: str) -> Any:
    """The first device of a libtpu topology ("v5e:1x1"), to AOT-compile for without a TPU."""
    from jax.experimental import topologies

    return topologies.get_topology_desc(topology, "tpu").devices[0]


def aot_compile_stablehlo(hlo_text: str, device: Any) -> Any:
    """Compile a lowered single-device StableHLO module for a (topology) device; raises the
    compiler's error. Returns the unloaded executable."""
    from jax._src import compiler
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import xla_client
    from jax._src.lib.mlir import ir

    options = compiler.get_compile_options(
        num_replicas=1, num_partitions=1, device_assignment=np.array([[device]]))
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(hlo_text)
        return device.client.compile(module, xla_client.DeviceList((device,)), options)


def kernel_body_values(kernel: Kernel) -> list[tuple[tuple[int, ...], np.dtype, str]]:
    """(shape, dtype, primitive) of every array value the kernel body computes (not refs),
    descending into `pl.when` / loop bodies. Used to flag values the compiler may spill."""
    eqn = kernel.handle.eqn if kernel.handle is not None else None
    if eqn is None:
        return []
    jaxprs = [eqn.params["jaxpr"]] if "jaxpr" in eqn.params else list(eqn.params.get("jaxprs", ()))
    out: list[tuple[tuple[int, ...], np.dtype, str]] = []
    for jaxpr in jaxprs:
        _collect_values(getattr(jaxpr, "jaxpr", jaxpr), out)
    return out


def _collect_values(jaxpr: Jaxpr, out: list[tuple[tuple[int, ...], np.dtype, str]]) -> None:
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            aval = v.aval
            shape = getattr(aval, "shape", None)
            dtype = getattr(aval, "dtype", None)
            if shape and dtype is not None and type(aval).__name__ == "ShapedArray":
                out.append((tuple(int(s) for s in shape), np.dtype(dtype), eqn.primitive.name))
        for value in eqn.params.values():
            for v in value if isinstance(value, tuple) else (value,):
                inner = v if isinstance(v, Jaxpr) else getattr(v, "jaxpr", None)
                if isinstance(inner, Jaxpr):
                    _collect_values(inner, out)


def kernel_body_cost(kernel: Kernel) -> tuple[int, int]:
    """(flops, transcendentals) of one kernel-body invocation, from Pallas's own cost rules
    (`jax._src.pallas.cost_estimate`). `pl.when`/`cond` branches count as taken (the costliest
    branch), `scan`/`fori_loop` bodies times their trip count; a `while` body once."""
    eqn = kernel.handle.eqn if kernel.handle is not None else None
    if eqn is None or "jaxpr" not in eqn.params:
        return 0, 0
    jaxpr = eqn.params["jaxpr"]
    return _body_cost(getattr(jaxpr, "jaxpr", jaxpr))


def _body_cost(jaxpr: Jaxpr) -> tuple[int, int]:
    from jax._src.pallas import cost_estimate

    flops = trans = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        rule = cost_estimate._cost_rules.get(eqn.primitive)
        if rule is not None:
            ctx = cost_estimate.Context(avals_in=[v.aval for v in eqn.invars],
                                        avals_out=[v.aval for v in eqn.outvars])
            cost = rule(ctx, **eqn.params)
            flops, trans = flops + int(cost.flops), trans + int(cost.transcendentals)
            continue
        subs = [s for value in eqn.params.values()
                for v in (value if isinstance(value, tuple) else (value,))
                if isinstance(s := getattr(v, "jaxpr", v), Jaxpr)]
        if not subs:
            continue
        costs = [_body_cost(s) for s in subs]
        if name == "cond":
            f, t = max(costs)
        else:
            f, t = sum(c[0] for c in costs), sum(c[1] for c in costs)
        times = int(eqn.params.get("length", 1)) if name == "scan" else 1
        flops, trans = flops + f * times, trans + t * times
    return flops, trans


def kernel_jaxpr_with_source_info(kernel: Kernel) -> str:
    """The kernel body's jaxpr, each equation followed by `# file.py:LINE:COL (function)`."""
    params = kernel.handle.eqn.params
    jaxprs = [params["jaxpr"]] if "jaxpr" in params else list(params.get("jaxprs", ()))
    return "\n".join(str(j.pretty_print(source_info=True, name_stack=False)) for j in jaxprs)
