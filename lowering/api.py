"""`lower(...)`: every kernel of a function, capture or kernel, lowered for one target."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pallaslab.lowering import cache, params, slices
from pallaslab.lowering.cross import CrossLowered, cross_lower
from pallaslab.lowering.diagnostics import headline
from pallaslab.lowering.result import Diagnostic, KernelLowering, LoweringResult, Resources, Stage
from pallaslab.lowering.targets import Target, get_target
from pallaslab.model import Capture, Kernel, capture


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
    them, else as many as its mesh had when captured (`lowering.slices`).

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
    return LoweringResult(tgt.name, tuple(
        _noted(lower_kernel(k, tgt, compile=compile, vmem_exact=vmem_exact,
                            use_cache=use_cache, devices=devices), notes)
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
    slices.check_devices(devices)
    # `devices` changes only what a kernel inside shard_map is compiled over
    options = {"compile": compile, "vmem_exact": vmem_exact,
               "devices": devices if kernel.device_mesh is not None else None}
    key = cache.cache_key(kernel, target.name, options) if use_cache else None
    if key is not None and (hit := cache.load(key)) is not None and not _stale(hit):
        return dataclasses.replace(hit, index=kernel.index, cached=True)
    result = _lower_uncached(kernel, target, compile, vmem_exact, devices)
    if key is not None:
        cache.store(key, result)
    return result


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


def _lower_uncached(kernel: Kernel, target: Target, compile: bool,
                    vmem_exact: bool, devices: int | None = None) -> KernelLowering:
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
                                                   diags)
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
                 stages: list[Stage], diags: list[Diagnostic]) -> tuple[bool, bool, Resources]:
    from pallaslab.lowering import tpu_compile

    assert cross.hlo is not None
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
        vmem = _vmem_exact(kernel, target, diags, cross) or vmem
    elif not out.ok:
        vmem = next((d.get("needed_bytes") for d in out.diagnostics if d.code == "vmem-oom"),
                    None)
    return out.ok, True, Resources(vmem_bytes=vmem, smem_bytes=smem)


def _vmem_exact(kernel: Kernel, target: Target, diags: list[Diagnostic],
                cross: CrossLowered) -> int | None:
    from pallaslab.lowering import tpu_compile
    from pallaslab.model import _jax

    if kernel.kind == "mesh":
        diags.append(Diagnostic("info", "no-compiler", "vmem_exact needs a pallas_call kernel "
                                "(its vmem_limit_bytes is set through CompilerParams)."))
        return None
    assert target.chip is not None
    capacity = int(_jax.tpu_chip_facts(target.chip)["vmem_capacity_bytes"])

    def hlo_with_limit(limit: int) -> str:
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
