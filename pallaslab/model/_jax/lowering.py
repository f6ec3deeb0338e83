"""What the top-level `lowering` package needs: Mosaic modules, topologies, AOT compiles."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from pallaslab.model._jax.versions import JAX_VERSION
from pallaslab.model.kernel import (
    Kernel,
)

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
        if JAX_VERSION < (0, 12) and not debug_locations:
            debug_locations = _inline_locations(module)
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


def _inline_locations(module: Any) -> bytes:
    """JAX 0.11 keeps the Mosaic module's locations inline (0.12 moves them to the config's
    `debug_locations`, as a `tpu.locs` list in pre-order) and leaves the module unnamed (0.12
    names it after the kernel). Both made as 0.12 has them: the same text, the same source
    map, on either version."""
    op = module.operation
    if "sym_name" not in op.attributes:
        funcs = [o for o in module.body.operations if o.operation.name == "func.func"]
        kernel = next((f for f in funcs if "dimension_semantics" in f.attributes), None)
        if kernel is not None or funcs:
            op.attributes["sym_name"] = (kernel or funcs[0]).attributes["sym_name"]
    locations = [str(item.location) for item in _preorder(op)]
    lines = [f"#loc{i} = {loc}" for i, loc in enumerate(locations)]
    refs = ", ".join(f"#loc{i}" for i in range(len(locations)))
    lines.append(f"module attributes {{tpu.locs = [{refs}]}} {{\n}}")
    return "\n".join(lines).encode()


def triton_module_texts(stablehlo: Any) -> list[str]:
    """The Triton modules of a lowered computation (`Lowered.compiler_ir("stablehlo")`), from
    the bytecode its `__gpu$xla.gpu.triton` custom calls carry, printed as valid MLIR with
    their locations (the compiler parses them; `debug=True`'s pretty print is not MLIR)."""
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.triton import dialect as tt_dialect

    texts = []
    for op in _preorder(stablehlo.operation):
        if isinstance(op, ir.BlockArgument) or op.name != "stablehlo.custom_call" or \
                ir.StringAttr(op.attributes["call_target_name"]).value != "__gpu$xla.gpu.triton":
            continue
        # custom calls of API version 4 carry their config as `mhlo.backend_config`
        config = ir.DictAttr(op.attributes["mhlo.backend_config"])
        body = ir.StringAttr(config["ir"]).value_bytes
        ctx = jax_mlir.make_ir_context()
        tt_dialect.register_dialect(ctx)
        ctx.load_all_available_dialects()
        with ctx:
            texts.append(str(ir.Module.parse(body).operation.get_asm(enable_debug_info=True)))
    return texts


def _preorder(op: Any) -> Iterator[Any]:
    yield op
    for region in op.regions:
        for block in region.blocks:
            yield from block.arguments
            for inner in block.operations:
                yield from _preorder(inner.operation)



def tpu_topology_device(topology: str) -> Any:
    """The first device of a libtpu topology ("v5e:1x1"), to AOT-compile for without a TPU."""
    return tpu_topology_devices(topology)[0]


def tpu_topology_devices(topology: str) -> tuple[Any, ...]:
    """Every device of a libtpu topology ("v5e:2x2"), in the topology's order."""
    from jax.experimental import topologies

    try:
        return tuple(topologies.get_topology_desc(topology, "tpu").devices)
    except Exception as err:
        # JAX 0.11's libtpu (0.0.48) splits slices into hosts of 2x2x1 chips by default and
        # refuses smaller slices ("v5e:1x1"); 0.12's (0.0.52) takes them as one host. On
        # 0.11 a slice that does not divide is described as one host of its own size.
        bounds = _one_host_bounds(topology)
        if JAX_VERSION >= (0, 12) or bounds is None or "chips_per_host_bounds" not in str(err):
            raise
    return tuple(topologies.get_topology_desc(
        topology, "tpu", chips_per_host_bounds=bounds).devices)


def _one_host_bounds(topology: str) -> list[int] | None:
    """"v5e:1x2" -> [1, 2, 1]: the slice's chips as one host (None: not a "chip:AxB" name)."""
    m = re.fullmatch(r"[^:]+:(\d+(?:x\d+){0,2})", topology)
    if m is None:
        return None
    dims = [int(d) for d in m.group(1).split("x")]
    return dims + [1] * (3 - len(dims))


def aot_compile_stablehlo(hlo_text: str, device: Any, *, partitions: Sequence[Any] = ()
                          ) -> Any:
    """Compile a lowered StableHLO module for a (topology) device, or as one SPMD program over
    `partitions` (the module's `mhlo.num_partitions` devices, e.g. a shard_map's); raises the
    compiler's error. Returns the unloaded executable."""
    from jax._src import compiler
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import xla_client
    from jax._src.lib.mlir import ir

    devices = tuple(partitions) or (device,)
    options = compiler.get_compile_options(
        num_replicas=1, num_partitions=len(devices), device_assignment=np.array([devices]))
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(hlo_text)
        return devices[0].client.compile(module, xla_client.DeviceList(devices), options)


def kernel_jaxpr_with_source_info(kernel: Kernel) -> str:
    """The kernel body's jaxpr, each equation followed by `# file.py:LINE:COL (function)`."""
    params = kernel.handle.eqn.params
    jaxprs = [params["jaxpr"]] if "jaxpr" in params else list(params.get("jaxprs", ()))
    return "\n".join(str(j.pretty_print(source_info=True, name_stack=False)) for j in jaxprs)


# --------------------------------------------------------------------------------------------
# The target's device context. Every jaxpr equation records the abstract mesh in effect when
# it was traced (`_context_mesh`), and lowering re-enters that context
# equation by equation: Pallas's Mosaic rules that ask the chip (`run_scoped`, DMAs,
# `core_map`, `emit_pipeline` -> `tpu_info.get_tpu_info()`) therefore see the device of the
# *capture* (none on a CPU host: "Unsupported TPU device kind: cpu"; or the chip the user
# traced under), not the target's. So the kernel body is re-stamped with the target's
# abstract device: every equation's context and, so that values and the context still agree
# (Mosaic's `swap` rule compares them), every value's sharding mesh.


def kernel_callable_for_device(kernel: Kernel, device: Any, **param_overrides: Any
                               ) -> Callable[..., list[Any]]:
    """`kernel_callable`, with the kernel's body (and every jaxpr nested in it) re-stamped as
    traced under `device` (a `jax.sharding.AbstractDevice`)."""
    from pallaslab.model._jax.rerun import kernel_callable

    eqn = kernel.handle.eqn
    restamp = _Restamp(device)
    new_params = {k: restamp.value(v) for k, v in eqn.params.items()}
    changed = {k: v for k, v in new_params.items() if v is not eqn.params[k]}
    return kernel_callable(kernel, **changed, **param_overrides)


def _context_mesh(ctx: Any) -> Any:
    """The abstract mesh an equation was traced under: a field of its context before JAX
    0.12.1, one of the configs its context manager enters from 0.12.1 on."""
    if JAX_VERSION < (0, 12, 1):
        return ctx.cur_abstract_mesh
    from jax.sharding import get_abstract_mesh

    with ctx.manager:
        return get_abstract_mesh()


class _Restamp:
    """Copies jaxprs, avals and Pallas's param dataclasses onto another abstract device."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.keep: list[Any] = []  # originals, so the ids memoised below stay theirs
        self.contexts: dict[int, Any] = {}
        self.jaxprs: dict[int, Any] = {}

    def value(self, value: Any) -> Any:
        from jax._src import core as jax_core

        if isinstance(value, jax_core.Jaxpr):
            return self.jaxpr(value)
        if isinstance(value, jax_core.AbstractValue):
            return self.aval(value)
        if isinstance(value, (tuple, list)) and value:
            new = [self.value(v) for v in value]
            if all(a is b for a, b in zip(new, value, strict=True)):
                return value
            return type(value)(new)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self._dataclass(value)
        return value

    def _dataclass(self, value: Any) -> Any:
        changes = {}
        for field in dataclasses.fields(value):
            if field.init:
                old = getattr(value, field.name)
                if (new := self.value(old)) is not old:
                    changes[field.name] = new
        return dataclasses.replace(value, **changes) if changes else value

    def mesh(self, mesh: Any) -> Any:
        return mesh.update(abstract_device=self.device)

    def aval(self, aval: Any) -> Any:
        from jax.sharding import AbstractMesh

        inner = getattr(aval, "inner_aval", None)
        if inner is not None:  # a Ref
            new_inner = self.aval(inner)
            return aval if new_inner is inner else aval.update(inner_aval=new_inner)
        sharding: Any = getattr(aval, "sharding", None)
        mesh = getattr(sharding, "mesh", None)
        if not isinstance(mesh, AbstractMesh) or mesh.abstract_device == self.device:
            return aval
        return aval.update(sharding=sharding.update(mesh=self.mesh(mesh)))

    def jaxpr(self, jaxpr: Any) -> Any:
        from jax._src import core as jax_core

        if id(jaxpr) in self.jaxprs:
            return self.jaxprs[id(jaxpr)]
        new_vars: dict[Any, Any] = {}

        def var(v: Any) -> Any:
            if isinstance(v, jax_core.Literal):
                return jax_core.Literal(v.val, self.aval(v.aval))
            if v not in new_vars:
                new_vars[v] = type(v)(self.aval(v.aval))
            return new_vars[v]

        def effects(effs: Any) -> Any:  # Ref effects name the Var they read or write
            return type(effs)(
                e.replace(input=new_vars[e.input])
                if isinstance(getattr(e, "input", None), jax_core.Var) and e.input in new_vars
                else e for e in effs)

        constvars = [var(v) for v in jaxpr.constvars]
        invars = [var(v) for v in jaxpr.invars]
        eqns = []
        for eqn in jaxpr.eqns:
            eqn_in = [var(v) for v in eqn.invars]
            eqns.append(eqn.replace(
                invars=eqn_in, outvars=[var(v) for v in eqn.outvars],
                params={k: self.value(v) for k, v in eqn.params.items()},
                effects=effects(eqn.effects), ctx=self.context(eqn.ctx)))
        new = jaxpr.replace(constvars=constvars, invars=invars,
                            outvars=[var(v) for v in jaxpr.outvars], eqns=eqns,
                            effects=effects(jaxpr.effects), consts=jaxpr.consts,
                            debug_info=jaxpr.debug_info)
        self.keep.append(jaxpr)
        self.jaxprs[id(jaxpr)] = new
        return new

    def context(self, ctx: Any) -> Any:
        from jax._src import core as jax_core
        from jax.sharding import use_abstract_mesh

        if id(ctx) not in self.contexts:
            with ctx.manager, use_abstract_mesh(self.mesh(_context_mesh(ctx))):
                self.keep.append(ctx)
                self.contexts[id(ctx)] = jax_core.JaxprEqnContext()
        return self.contexts[id(ctx)]
