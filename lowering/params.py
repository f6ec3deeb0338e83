"""Which compiler params a kernel is lowered with for a target, and what we say about it.

A kernel carries the compiler params of the backend its author wrote it for. To lower it for
another backend we swap them: TPU params have no meaning for Triton (and vice versa), so the
other backend's defaults are used and a `params-adapted` note lists what was dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pallaslab.lowering.result import Diagnostic
from pallaslab.lowering.targets import Target
from pallaslab.model import Kernel

TPU_KEYS = ("mosaic_tpu", "tpu", "mosaic")
TRITON_KEYS = ("triton",)
MOSAIC_GPU_KEYS = ("mosaic_gpu", "gpu")


def lowering_backend(kernel: Kernel, target: Target) -> str:
    """"mosaic-tpu", "triton" or "mosaic-gpu": the Pallas backend that lowers this kernel."""
    if target.platform == "tpu":
        return "mosaic-tpu"
    if kernel.kind == "mesh" or kernel.backend == "mosaic_gpu":
        return "mosaic-gpu"
    return "triton"


def wrong_backend(kernel: Kernel, target: Target) -> Diagnostic | None:
    """A kernel written for one platform's mesh cannot be lowered for the other platform; a
    pallas_call with Mosaic GPU params cannot be lowered for a GPU at all."""
    if target.platform == "gpu" and (diag := unlowerable(kernel)) is not None:
        return diag
    if kernel.kind != "mesh":
        return None
    if target.platform == "tpu" and kernel.backend == "mosaic_gpu":
        return Diagnostic(
            "error", "wrong-backend",
            f"kernel {kernel.name!r} is a Mosaic GPU kernel (plgpu.kernel): it lowers only for "
            f"GPU targets (gpu-h100, gpu-b200), not for {target.name}.")
    if target.platform == "gpu" and kernel.backend == "tpu":
        return Diagnostic(
            "error", "wrong-backend",
            f"kernel {kernel.name!r} is a TPU mesh kernel (pl.kernel on a TPU mesh): it lowers "
            f"only for TPU targets, not for {target.name}.")
    return None


def compiler_params_for(
    kernel: Kernel, target: Target, vmem_limit_bytes: int | None = None
) -> tuple[Any, tuple[Diagnostic, ...]]:
    """The CompilerParams object to bind the kernel with for `target` (None: keep its own)."""
    if kernel.kind == "mesh":
        return None, ()
    own = kernel.compiler_params
    if target.platform == "tpu":
        from jax.experimental.pallas import tpu as pltpu

        fields = _fields(own, TPU_KEYS)
        notes = _dropped(kernel, own, TRITON_KEYS + MOSAIC_GPU_KEYS, "Mosaic TPU")
        if vmem_limit_bytes is not None:
            fields = {**fields, "vmem_limit_bytes": int(vmem_limit_bytes)}
        if not fields and not notes:
            return None, ()
        return _build(pltpu.CompilerParams, fields), notes
    from jax.experimental.pallas import triton as pltr

    fields = _fields(own, TRITON_KEYS)
    notes = _dropped(kernel, own, TPU_KEYS + MOSAIC_GPU_KEYS, "Triton")
    return _build(pltr.CompilerParams, fields), notes


def unlowerable(kernel: Kernel) -> Diagnostic | None:
    """A kernel that no target of the platform its compiler params name can lower: a
    pallas_call with Mosaic GPU params. JAX 0.12 picks a pallas_call's GPU lowering by its
    CompilerParams type and registers only Triton's (jax/_src/pallas/pallas_call.py
    `gpu_lowering`; with Mosaic GPU's params it asserts). Say what to write instead."""
    if kernel.kind != "pallas_call" or kernel.backend != "mosaic_gpu":
        return None
    own = kernel.compiler_params
    key = next((k for k in MOSAIC_GPU_KEYS if k in own), None)
    set_fields = _non_default(key, own[key]) if key else {}
    shown = ", ".join(f"{k}={v!r}" for k, v in set_fields.items()) or "all defaults"
    return Diagnostic(
        "error", "mosaic-gpu-pallas-call",
        f"kernel {kernel.name!r} is a pallas_call with Mosaic GPU compiler params "
        f"(plgpu.CompilerParams, {shown}), which JAX 0.12 cannot lower for any GPU: "
        "pallas_call chooses its GPU lowering by the CompilerParams type and only Triton's "
        "is registered (with Mosaic GPU's, JAX's lowering asserts). Write the kernel with "
        "plgpu.kernel(...) to use Mosaic GPU, or pass "
        "compiler_params=pallas.triton.CompilerParams(...) to lower it with Triton.")


def triton_launch(kernel: Kernel) -> tuple[int, int]:
    """(num_warps, num_stages) Pallas's Triton lowering uses for this kernel."""
    fields = _fields(kernel.compiler_params, TRITON_KEYS)
    return int(fields.get("num_warps") or 4), int(fields.get("num_stages") or 3)


def _fields(own: Mapping[str, Mapping[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    for key in keys:
        if key in own:
            return dict(own[key])
    return {}


def _build(cls: Any, fields: Mapping[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    return cls(**{k: v for k, v in fields.items() if k in names})


def _dropped(kernel: Kernel, own: Mapping[str, Mapping[str, Any]], keys: tuple[str, ...],
             backend: str) -> tuple[Diagnostic, ...]:
    notes = []
    for key in keys:
        if key not in own:
            continue
        set_fields = _non_default(key, own[key])
        shown = ", ".join(f"{k}={v!r}" for k, v in set_fields.items()) or "defaults"
        notes.append(Diagnostic(
            "info", "params-adapted",
            f"kernel {kernel.name!r} carries {key} compiler params ({shown}); they do not apply "
            f"to {backend}, so it was lowered with {backend}'s default params."))
    return tuple(notes)


def _non_default(key: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a user set: those differing from their CompilerParams class's defaults."""
    cls: Any = None
    if key in TPU_KEYS:
        from jax.experimental.pallas import tpu as pltpu

        cls = pltpu.CompilerParams
    elif key in TRITON_KEYS:
        from jax.experimental.pallas import triton as pltr

        cls = pltr.CompilerParams
    elif key in MOSAIC_GPU_KEYS:
        from jax.experimental.pallas import mosaic_gpu as plgpu

        cls = plgpu.CompilerParams
    if cls is None:
        return {k: v for k, v in fields.items() if v not in (None, (), {}, False)}
    default = cls()
    return {k: v for k, v in fields.items() if getattr(default, k, None) != v}
