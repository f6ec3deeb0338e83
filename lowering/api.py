"""`lower(...)`: every kernel of a function, capture or kernel, lowered for one target."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pallaslab.lowering import cache, params, slices
from pallaslab.lowering.cross import CrossLowered, abstract_device, abstract_mesh, cross_lower
from pallaslab.lowering.diagnostics import headline
from pallaslab.lowering.result import Diagnostic, KernelLowering, LoweringResult, Resources, Stage
from pallaslab.lowering.targets import Target, get_target
from pallaslab.model import Capture, Kernel, capture

if TYPE_CHECKING:
    from pallaslab.lowering.tpu_compile import TpuCompiled


def lower(
    fn_or_capture: Callable[..., Any] | Capture | Kernel,
    *args: Any,
    target: str | Target = "tpu-v5e",
    compile: bool = False,
    vmem_exact: bool = False,
    use_cache: bool = True,
    devices: int | None = None,
    **kwargs: Any,
) -> LoweringResult:
    """Lower every Pallas kernel for `target` ("tpu-v5e", "gpu-h100", ...); no device needed.

    `compile=True` also runs the real compiler (libtpu for TPU, the triton wheel for GPU) and
    adds its per-pass IR, diagnostics and resources. `vmem_exact=True` (TPU) bisects the
    compiler for the kernel's true scoped-VMEM need. Results are cached on disk.

    A kernel captured inside `shard_map` (remote DMAs, device semaphores) is lowered and
    compiled as one program over the devices of a multi-chip TPU topology: `devices=N` of
    them, else as many as its mesh had when captured (`lowering.slices`). Kernels that pass a
    DMA semaphore from one to the next (a DMA started in one and waited in the other) are
    compiled together, as one program (`SemaphoreGroup`); each gets the program's verdict.

    Args:
        fn_or_capture: a function to capture with `args` and `kwargs`, a `Capture`, or one
            captured `Kernel`.
        *args: the function's arguments (arrays or `jax.ShapeDtypeStruct`s).
        target: a target name of `lowering.targets.TARGETS` ("tpu-v5e"; "v5e" is accepted) or
            a `Target`.
        compile: also compile with the target's real compiler.
        vmem_exact: (TPU) measure the smallest `vmem_limit_bytes` that compiles; implies
            `compile`.
        use_cache: read and write the disk cache (`lowering.cache`).
        devices: for a kernel inside `shard_map`, the number of TPU devices to compile for.
        **kwargs: the function's keyword arguments.

    Returns:
        A `LoweringResult`: per kernel its stages, coded diagnostics and resources. A kernel
        that fails to lower or compile is `ok=False` with diagnostics, not an exception.

    Raises:
        UnknownTargetError: `target` names no known target.
        MissingDependencyError: `compile` needs libtpu or triton and it is not installed.
    """
    tgt = get_target(target)
    slices.check_devices(devices)
    kernels, notes = _for_chip(_kernels(fn_or_capture, args, kwargs), tgt)
    compile = compile or vmem_exact
    groups = semaphore_groups(kernels, tgt) if compile else {}
    compiled: dict[tuple[int, ...], tuple[TpuCompiled, ...] | None] = {}
    return LoweringResult(tgt.name, tuple(
        _noted(_lower_cached(k, tgt, compile, vmem_exact, use_cache, devices,
                             _InGroup.of(groups.get(k.index), compiled)), notes)
        for k in kernels))


def _kernels(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
             ) -> Capture | tuple[Kernel, ...]:
    if isinstance(obj, Kernel):
        return (obj,)
    if isinstance(obj, Capture):
        return obj
    return capture(obj, *args, **kwargs)


def _for_chip(kernels: Capture | tuple[Kernel, ...], target: Target
              ) -> tuple[tuple[Kernel, ...], tuple[Diagnostic, ...]]:
    """The kernels as traced for the target's chip: a capture whose tracing asked the chip
    (tiling, default core counts) under another chip's abstract device is traced again for
    this one, so what is lowered is what the target would run. A lone Kernel has no traced
    function to trace again and is lowered as captured. Where the call cannot be traced for
    this chip (e.g. a SparseCore kernel on a chip without SparseCores), the kernels are lowered
    as captured, with a note saying why, and Mosaic gives its verdict."""
    chips = {k.traced_for_chip for k in kernels} - {None, target.chip}
    if target.chip is None or not chips:
        return tuple(kernels), ()
    if not isinstance(kernels, Capture):
        return tuple(kernels), (Diagnostic(
            "warning", "traced-for-other-chip",
            f"kernel traced for {', '.join(sorted(str(c) for c in chips))}, lowered as traced: "
            f"a Kernel alone cannot be traced again for {target.name}'s chip; pass its "
            "Capture (or the function and its arguments) to lower what that chip runs."),)
    from pallaslab.model.capture import recapture

    try:
        return recapture(kernels, target.chip).kernels, ()
    except Exception as err:  # the call's own verdict on this chip
        return kernels.kernels, (Diagnostic(
            "warning", "traced-for-other-chip",
            f"{kernels.function_name}(...) could not be traced for {target.name}'s chip "
            f"({type(err).__name__}: {headline(str(err), max_lines=1)}); its kernels are "
            f"lowered as traced for {', '.join(sorted(str(c) for c in chips))}."),)


def _noted(result: KernelLowering, notes: tuple[Diagnostic, ...]) -> KernelLowering:
    if not notes:
        return result
    return dataclasses.replace(result, diagnostics=(*notes, *result.diagnostics))


def lower_kernel(kernel: Kernel, target: Target, *, compile: bool = False,
                 vmem_exact: bool = False, use_cache: bool = True,
                 devices: int | None = None) -> KernelLowering:
    """One kernel, compiled alone (`lower` compiles semaphore-joined kernels together)."""
    slices.check_devices(devices)
    return _lower_cached(kernel, target, compile, vmem_exact, use_cache, devices, None)


@dataclasses.dataclass(frozen=True)
class SemaphoreGroup:
    """Kernels of one capture joined by DMA semaphores: a semaphore output of one is an input
    of another (JAX's async-copy pattern: a DMA started in one pallas_call, waited in the
    next). libtpu compiles a semaphore, and the buffer its DMA is still writing, only as a
    value inside one program: as a program's output or input it aborts (CopyArrayExplicit,
    IsSflagMemorySpace). So the group is compiled as one program, as `jax.jit` compiles it."""

    kernels: tuple[Kernel, ...]  # launch order

    @property
    def indexes(self) -> tuple[int, ...]:
        return tuple(k.index for k in self.kernels)

    def position(self, kernel: Kernel) -> int:
        return self.indexes.index(kernel.index)

    def wiring(self) -> list[list[list[int] | None]]:
        """Per member, per input: [member, output] of the member that makes it, or None (a
        parameter of the program): with the members' contents, what the program is."""
        made = {id(v): [m, o] for m, k in enumerate(self.kernels)
                for o, v in enumerate(k.handle.eqn.outvars)}
        return [[made.get(id(v)) for v in k.handle.eqn.invars] for k in self.kernels]


def semaphore_groups(kernels: tuple[Kernel, ...] | Capture, target: Target
                     ) -> dict[int, SemaphoreGroup]:
    """Kernel index -> its group, for the kernels joined by semaphores (others: absent).
    Only TPU pallas_calls outside shard_map whose values are those of one jaxpr are joined:
    a semaphore crossing a jit or loop boundary is a different variable there."""
    if target.platform != "tpu":
        return {}
    joinable = [k for k in kernels if _joinable(k, target)]
    root = {k.index: k.index for k in joinable}

    def find(i: int) -> int:
        while root[i] != i:
            i = root[i]
        return i

    producer = {id(var): k.index for k in joinable for var in _semaphore_outputs(k)}
    for k in joinable:
        for var in k.handle.eqn.invars:
            if id(var) in producer:
                root[find(k.index)] = find(producer[id(var)])
    members: dict[int, list[Kernel]] = {}
    for k in joinable:
        members.setdefault(find(k.index), []).append(k)
    groups = [SemaphoreGroup(tuple(m)) for m in members.values() if len(m) > 1]
    return {k.index: g for g in groups for k in g.kernels}


def _joinable(kernel: Kernel, target: Target) -> bool:
    return (kernel.kind == "pallas_call" and kernel.device_mesh is None
            and kernel.handle is not None
            and params.lowering_backend(kernel, target) == "mosaic-tpu"
            and len(kernel.outputs) == len(kernel.handle.eqn.outvars))


def _semaphore_outputs(kernel: Kernel) -> Iterator[Any]:
    for op, var in zip(kernel.outputs, kernel.handle.eqn.outvars, strict=True):
        if op.is_semaphore:
            yield var


@dataclasses.dataclass(frozen=True)
class _InGroup:
    """A kernel's group, and the lower() call's compiles of groups (each compiled once)."""

    group: SemaphoreGroup
    compiled: dict[tuple[int, ...], tuple[TpuCompiled, ...] | None]

    @classmethod
    def of(cls, group: SemaphoreGroup | None,
           compiled: dict[tuple[int, ...], tuple[TpuCompiled, ...] | None]) -> _InGroup | None:
        return None if group is None else cls(group, compiled)

    def compile(self, target: Target) -> tuple[TpuCompiled, ...] | None:
        """Every member's compile (None: the group could not be lowered as one program)."""
        key = self.group.indexes
        if key not in self.compiled:
            self.compiled[key] = _compile_group(self.group, target)
        return self.compiled[key]


def _compile_group(group: SemaphoreGroup, target: Target) -> tuple[TpuCompiled, ...] | None:
    from pallaslab.lowering import tpu_compile

    try:
        hlo = group_hlo(group, target)
    except Exception:  # each kernel lowered alone; the caller compiles them alone then
        return None
    return tpu_compile.compile_tpu_group(tuple(k.name for k in group.kernels), target, hlo)


def group_hlo(group: SemaphoreGroup, target: Target,
              vmem_limits: Mapping[int, int] | None = None) -> str:
    """StableHLO of one program running the group's kernels in launch order, each output of
    one fed to the next as the captured call does; inputs from elsewhere are parameters, and
    the outputs no member consumes (but semaphores) are its results. `vmem_limits`: kernel
    index -> vmem_limit_bytes for that kernel."""
    limits = vmem_limits or {}
    calls = [_kernel_call(k, target, limits.get(k.index)) for k in group.kernels]
    produced = {id(v) for k in group.kernels for v in k.handle.eqn.outvars}
    consumed = {id(v) for k in group.kernels for v in k.handle.eqn.invars}
    semaphores = {id(v) for k in group.kernels for v in _semaphore_outputs(k)}
    external = [v for k in group.kernels for v in k.handle.eqn.invars if id(v) not in produced]
    results = [id(v) for k in group.kernels for v in k.handle.eqn.outvars
               if id(v) not in consumed and id(v) not in semaphores]

    def program(*operands: Any) -> list[Any]:
        values = dict(zip((id(v) for v in external), operands, strict=True))
        for kernel, call in zip(group.kernels, calls, strict=True):
            outs = call(*(values[id(v)] for v in kernel.handle.eqn.invars))
            values.update(zip((id(v) for v in kernel.handle.eqn.outvars), outs, strict=True))
        return [values[i] for i in results]

    import jax

    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in external]
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), \
            jax.sharding.use_abstract_mesh(abstract_mesh(target)):
        warnings.simplefilter("ignore")
        return jax.jit(program).trace(*avals).lower(
            lowering_platforms=(target.lowering_platform,)).as_text()


def _kernel_call(kernel: Kernel, target: Target, vmem_limit: int | None) -> Callable[..., Any]:
    """The kernel bound as `cross_lower` binds it for the target (not interpreted, the
    target's compiler params, its body re-stamped with the target's abstract device)."""
    from pallaslab.model._jax import lowering as _jax_lowering

    compiler_params, _ = params.compiler_params_for(kernel, target, vmem_limit)
    overrides: dict[str, Any] = {"debug": False, "interpret": False}
    if compiler_params is not None:
        overrides["compiler_params"] = compiler_params
    return _jax_lowering.kernel_callable_for_device(kernel, abstract_device(target),
                                                    **overrides)


def _lower_cached(kernel: Kernel, target: Target, compile: bool, vmem_exact: bool,
                  use_cache: bool, devices: int | None, in_group: _InGroup | None
                  ) -> KernelLowering:
    # `devices` changes only what a kernel inside shard_map is compiled over
    options: dict[str, Any] = {"compile": compile, "vmem_exact": vmem_exact,
                               "devices": devices if kernel.device_mesh is not None else None}
    if in_group is not None:  # compiled with its group: the others decide its verdict too
        options["semaphore_group"] = [cache.kernel_fingerprint(k)
                                      for k in in_group.group.kernels]
        options["group_position"] = in_group.group.position(kernel)
        options["group_wiring"] = in_group.group.wiring()
    key = cache.cache_key(kernel, target.name, options) if use_cache else None
    if key is not None and (hit := cache.load(key)) is not None and not _stale(hit):
        result = dataclasses.replace(hit, index=kernel.index, cached=True)
    else:
        result = _lower_uncached(kernel, target, compile, vmem_exact, devices, in_group)
        if key is not None:
            cache.store(key, result)
    if in_group is None or not result.compiled or _ALONE in result.diagnostics:
        return result
    return _noted(result, (_group_note(kernel, in_group.group),))


def _stale(hit: KernelLowering) -> bool:
    """A TPU compile cached before its VMEM/SMEM buffers were read from the module: its last
    pass would give a figure now (modules that give none, e.g. SparseCore's, stay cached).
    A Mosaic GPU kernel cached as "no compiler here" once the compiler has been installed."""
    if hit.backend == "mosaic-gpu" and not hit.compiled and any(
            d.code == "no-compiler" for d in hit.diagnostics):
        from pallaslab.lowering import mosaic_gpu_compile

        return mosaic_gpu_compile.missing_compiler() is None
    if not (hit.compiled and hit.ok and hit.backend == "mosaic-tpu"
            and hit.resources.vmem_bytes is None and hit.stages):
        return False
    from pallaslab.lowering import tpu_compile

    return tpu_compile.module_buffers(hit.stages[-1].text).vmem_bytes is not None


def _lower_uncached(kernel: Kernel, target: Target, compile: bool, vmem_exact: bool,
                    devices: int | None = None, in_group: _InGroup | None = None
                    ) -> KernelLowering:
    cross = cross_lower(kernel, target, devices=devices)
    stages = list(cross.stages)
    diags = list(cross.diagnostics)
    if cross.backend == "mosaic-gpu" and (target.compute_capability or (0, 0)) < (9, 0):
        diags.append(Diagnostic(
            "warning", "unsupported-target",
            f"Mosaic GPU generates code for Hopper (sm_90) and newer; {target.name} is "
            f"sm_{''.join(map(str, target.compute_capability or ()))}, so this kernel would "
            "not run there. Use gpu-h100 or gpu-b200, or write it with pallas_call (Triton)."))
    resources = Resources()
    ok, compiled = cross.ok, False
    if cross.ok and compile:
        if cross.backend == "mosaic-tpu":
            ok, compiled, resources = _compile_tpu(kernel, target, cross, vmem_exact, stages,
                                                   diags, in_group)
        elif cross.backend == "triton":
            ok, compiled, resources = _compile_triton(kernel, target, cross, stages, diags)
        else:
            ok, compiled, resources = _compile_mosaic_gpu(kernel, target, stages, diags)
    if vmem_exact and target.platform != "tpu":
        diags.append(Diagnostic("info", "no-compiler",
                                "vmem_exact applies to TPU targets only (GPU has no VMEM)."))
    return KernelLowering(
        name=kernel.name, index=kernel.index, backend=cross.backend,  # type: ignore[arg-type]
        ok=ok, stages=tuple(stages), diagnostics=tuple(diags), resources=resources,
        compiled=compiled)


def _compile_tpu(kernel: Kernel, target: Target, cross: CrossLowered, vmem_exact: bool,
                 stages: list[Stage], diags: list[Diagnostic],
                 in_group: _InGroup | None = None) -> tuple[bool, bool, Resources]:
    from pallaslab.lowering import tpu_compile

    assert cross.hlo is not None
    together = in_group.compile(target) if in_group is not None else None
    if in_group is not None and together is not None:
        out = together[in_group.group.position(kernel)]
    else:
        if in_group is not None:
            diags.append(_ALONE)
        in_group = None
        out = tpu_compile.compile_tpu(kernel.name, target, cross.hlo, where=cross.slice)
    stages.extend(out.stages)
    if cross.slice is not None:  # the note now says what the compiler compiled
        said = slices.note(kernel, target, cross.slice, "compiled" if out.ok else "rejected")
        diags[:] = [said if d.code == "shard-map-mesh" else d for d in diags]
    diags.extend(out.diagnostics)
    vmem = smem = None
    if out.ok and out.stages:
        # what the compiled module declares (the last pass: the compiler's tiled layouts);
        # without the compiler's internal scratch, so vmem_exact's bisection replaces it
        declared = tpu_compile.module_buffers(out.stages[-1].text)
        vmem, smem = declared.vmem_bytes, declared.smem_bytes
    if vmem_exact and out.ok:
        vmem = _vmem_exact(kernel, target, diags, cross, in_group) or vmem
    elif not out.ok:
        vmem = next((d.get("needed_bytes") for d in out.diagnostics if d.code == "vmem-oom"),
                    None)
    return out.ok, True, Resources(vmem_bytes=vmem, smem_bytes=smem)


def _group_note(kernel: Kernel, group: SemaphoreGroup) -> Diagnostic:
    """Which kernels this one was compiled with: added after the cache (which holds a
    kernel's result by content, not by its place in a capture)."""
    others = ", ".join(f"#{k.index} {k.name!r}" for k in group.kernels if k is not kernel)
    return Diagnostic(
        "info", "semaphore-group",
        f"kernel {kernel.name!r} passes DMA semaphores with kernel(s) {others} (a DMA started "
        "in one kernel and waited in another); libtpu compiles such a semaphore only inside "
        "one program, so they are compiled together (as jax.jit compiles the call): the "
        "verdict is that program's, the passes and buffers this kernel's own.",
        data=(("group", list(group.indexes)),))


_ALONE = Diagnostic(
    "warning", "semaphore-group",
    "this kernel and the kernels it passes DMA semaphores with could not be lowered as one "
    "program, so it was compiled alone: a compiler crash below may be that, not the kernel.")


def _vmem_exact(kernel: Kernel, target: Target, diags: list[Diagnostic],
                cross: CrossLowered, in_group: _InGroup | None = None) -> int | None:
    from pallaslab.lowering import tpu_compile
    from pallaslab.model import _jax

    if kernel.kind == "mesh":
        diags.append(Diagnostic("info", "no-compiler", "vmem_exact needs a pallas_call kernel "
                                "(its vmem_limit_bytes is set through CompilerParams)."))
        return None
    assert target.chip is not None
    capacity = int(_jax.tpu_chip_facts(target.chip)["vmem_capacity_bytes"])

    def hlo_with_limit(limit: int) -> str:
        if in_group is not None:  # the kernel's limit, in its group's program
            return group_hlo(in_group.group, target, {kernel.index: limit})
        devices = cross.slice.partitions if cross.slice is not None else None
        relowered = cross_lower(kernel, target, vmem_limit_bytes=limit, devices=devices)
        assert relowered.hlo is not None
        return relowered.hlo

    need = tpu_compile.find_vmem_need(kernel.name, target, capacity, hlo_with_limit,
                                      where=cross.slice)
    diags.extend(need.diagnostics)
    if need.bytes is not None:
        diags.append(Diagnostic(
            "info", "vmem-exact",
            f"kernel {kernel.name!r} needs {need.bytes // 1024} KiB of scoped VMEM on "
            f"{target.name}: the smallest vmem_limit_bytes the compiler accepts "
            f"({need.compiles} compiles).",
            data=(("vmem_bytes", need.bytes), ("compiles", need.compiles))))
    return need.bytes


def _compile_triton(kernel: Kernel, target: Target, cross: CrossLowered, stages: list[Stage],
                    diags: list[Diagnostic]) -> tuple[bool, bool, Resources]:
    from pallaslab.lowering import triton_compile

    assert cross.ttir is not None
    num_warps, num_stages = params.triton_launch(kernel)
    out = triton_compile.compile_triton(kernel.name, target, cross.ttir, num_warps, num_stages)
    stages.extend(out.stages)
    diags.extend(out.diagnostics)
    return out.ok, True, out.resources


def _compile_mosaic_gpu(kernel: Kernel, target: Target, stages: list[Stage],
                        diags: list[Diagnostic]) -> tuple[bool, bool, Resources]:
    """XLA's CUDA plugin, compile-only, in a worker (when installed: `make mosaic-gpu-compiler`)
    compiles the kernel's StableHLO: PTX, ptxas' registers and spills, SASS."""
    from pallaslab.lowering import mosaic_gpu_compile

    if not mosaic_gpu_compile.supported(target):
        diags.append(Diagnostic("info", "no-compiler",
                                f"Mosaic GPU kernels compile for sm_90 and newer only; "
                                f"{target.name} is not, so it is not compiled."))
        return True, False, Resources()
    if (why := mosaic_gpu_compile.missing_compiler()) is not None:
        diags.append(Diagnostic("info", "no-compiler", why))
        return True, False, Resources()
    module = next((s.text for s in stages if s.name == "mosaic-gpu"), "")
    try:
        hlo = mosaic_gpu_compile.stablehlo(kernel, target)
    except Exception as err:  # lowered once already (for the stages), so not expected
        diags.append(Diagnostic("error", "lowering-error",
                                f"kernel {kernel.name!r} could not be lowered to StableHLO for "
                                f"{target.name}'s compiler: {type(err).__name__}: "
                                f"{headline(str(err))}"))
        return False, False, Resources()
    out = mosaic_gpu_compile.compile_mosaic_gpu(kernel.name, target, hlo, module)
    stages.extend(out.stages)
    diags.extend(out.diagnostics)
    return out.ok, out.compiled, out.resources
