"""Which executor runs a capture when none is named (`auto`: the fastest that applies),
and which two a comparison runs by default, with the reason in words.

Names only, read from the registry's declarations (`ExecutorSpec.mode`, `cpu_preferred`,
`second_rank`, `takes_reference`): no executor is named here. Nothing here runs an
executor (see `pallaslab.execute.runs.run` and `pallaslab.execute.executors.auto.evaluate`),
so the executors themselves may ask it (`vectorized` falls back to `interpreter_for`'s
choice).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from pallaslab.execute.executors import capabilities
from pallaslab.execute.protocol import ExecutorError
from pallaslab.execute.registry import (
    executor_of_mode,
    executor_spec,
    reference_executor,
    second_choices,
)
from pallaslab.model import Kernel
from pallaslab.model.source_names import short_source


def interpreter_for(cap: Sequence[Kernel], devices: int | None = None) -> str:
    """The executor that can run every kernel of the capture interpreted: the HLO
    interpreter (the fastest) unless it cannot (TPU mesh kernels, kernels that talk between
    devices, shard_map kernels run on several devices: TPU interpret mode)."""
    return executor_of_mode(_mode_for(cap, devices))


def _mode_for(cap: Sequence[Kernel], devices: int | None) -> str:
    if _on_devices(cap, devices):
        return "hlo" if _tpu_refusal_on_devices(cap, devices) else "tpu"
    mesh = [k for k in cap if k.kind == "mesh"]
    if mesh and all(k.backend == "mosaic_gpu" for k in mesh):
        return "gpu"
    return "tpu" if capabilities.hlo_interpreter_refusal(cap) is not None else "hlo"


def _on_devices(cap: Sequence[Kernel], devices: int | None) -> bool:
    """Kernels inside shard_map run on several simulated devices: whether they talk to each
    other depends on the device count, which this process's capture may not have."""
    return devices is not None and devices > 1 and any(k.device_mesh for k in cap)


def _tpu_refusal_on_devices(cap: Sequence[Kernel], devices: int | None) -> str | None:
    """Why TPU interpret mode cannot run kernels on several devices that it would otherwise
    run (a semaphore passed between calls) when the HLO interpreter can: then it runs them,
    and if they do talk on those devices it says so as it fails."""
    if not _on_devices(cap, devices):
        return None
    refused = executor_spec(executor_of_mode("tpu")).refusal(cap)
    if refused is None or executor_spec(executor_of_mode("hlo")).refusal(cap) is not None:
        return None
    return refused


def default_executor_for(cap: Sequence[Kernel], devices: int | None = None) -> str:
    """`interpreter_for`, with the `vectorized` executor (interpret mode's results, programs
    batched where provably equivalent, else interpreted) in place of the HLO interpreter on a
    CPU host: the fast everyday default."""
    return executor_of_mode(_mode_for(cap, devices), cpu=jax.default_backend() == "cpu")


def _interprets_hlo(name: str) -> bool:
    return executor_spec(name).mode == "hlo"


def interpreter_choice(cap: Sequence[Kernel], devices: int | None = None) -> str | None:
    """Why `interpreter_for` did not choose the HLO interpreter (None when it did)."""
    mode = _mode_for(cap, devices)
    if refused := _tpu_refusal_on_devices(cap, devices):
        return (f"kernels inside shard_map on {devices} devices may talk to each other, but "
                f"{executor_of_mode('tpu')} cannot run them ({refused.split(': ')[0]}): "
                f"{executor_of_mode('hlo')} runs them")
    if mode == "hlo":
        return None
    if why := capabilities.hlo_interpreter_refusal(cap):
        return why
    if _on_devices(cap, devices):
        return (f"kernels inside shard_map on {devices} devices may talk to each other "
                f"(remote DMAs, semaphores): {executor_of_mode('tpu')} runs them")
    return f"Mosaic GPU kernels: {executor_of_mode(mode)}"


def needs_tpu_semantics(cap: Sequence[Kernel]) -> str | None:
    """Why a TPU kernel must run where DMAs take time and waits block (TPU interpret mode),
    or None. Interpret mode completes a DMA when it starts and lets every semaphore wait
    pass, so a missing signal, or a missing or misplaced wait, would pass unseen."""
    for k in cap:
        if k.backend not in (None, "tpu"):
            continue
        for op in k.semaphore_ops:
            if op.kind in ("wait", "dma_wait"):
                return (f"kernel {k.name} waits on semaphore {op.semaphore}{_at(op.source)}: "
                        "interpret mode does not block on semaphore waits, so a missing "
                        "signal would pass unseen; TPU interpret mode models them")
        for dma in k.dmas:
            if dma.kind in ("async", "remote"):
                return (f"kernel {k.name} starts a DMA into {dma.dst}{_at(dma.source)}: "
                        "interpret mode completes a DMA as it starts, so a missing wait would "
                        "pass unseen; TPU interpret mode models DMAs in flight")
    return None


def _at(source: str | None) -> str:
    return f" at {short_source(source)}" if source else ""


def run_executor_for(cap: Sequence[Kernel], devices: int | None = None
                     ) -> tuple[str, str | None]:
    """(the executor a single run uses, why when not interpret mode): `default_executor_for`,
    except that kernels with DMAs or semaphore waits run under TPU interpret mode, which
    keeps a DMA in flight until it is waited on and blocks on a wait as the chip does (and
    reports a deadlock) where interpret mode passes both by."""
    name = default_executor_for(cap, devices)
    if _interprets_hlo(name) and (why := needs_tpu_semantics(cap)) is not None:
        tpu = executor_of_mode("tpu")
        if (refused := executor_spec(tpu).refusal(cap)) is None \
                or executor_spec(name).refusal(cap) is not None:
            return tpu, why
        return name, refused  # TPU interpret mode cannot run them: the one that can
    return name, interpreter_choice(cap, devices)


def default_executors(kernels: Sequence[Kernel], reference: Callable[..., Any] | None,
                      devices: int | None = None) -> tuple[tuple[str, str], str]:
    """The executors a comparison runs when none are named, and a note saying which: the
    executor that can run the kernels (`default_executor_for`: `vectorized` on a CPU host,
    the HLO interpreter elsewhere, unless another interpreter must) against the reference
    when one is given, else against TPU interpret mode, or, where it refuses the kernels,
    the other of interpret mode's executors."""
    first = default_executor_for(kernels, devices)
    why = interpreter_choice(kernels, devices)
    if reference is not None and not any(op.kind == "read" for k in kernels
                                         for op in k.semaphore_ops):
        # against a reference alone, a kernel with DMAs or semaphore waits runs where they
        # take effect (TPU interpret mode lacks pl.semaphore_read: those stay in interpret mode)
        first, why = run_executor_for(kernels, devices)
    second = reference_executor() if reference is not None else (
        _second_interpreter(first, kernels) if _interprets_hlo(first) else None)
    if second is None:
        raise ExecutorError(
            f"only {first} can run these kernels here ({why}), so there is nothing to compare "
            f"it with: pass reference=my_ref (a pure-JAX function with the kernel function's "
            f"signature), or name the executors")
    because = f" ({why})" if why else ""
    return (first, second), f"executors chosen by default: {first}, {second}{because}"


def _second_interpreter(first: str, kernels: Sequence[Kernel]) -> str | None:
    """The first of `second_choices()` (TPU interpret mode: a memory model, races; else the
    other of interpret mode's executors) other than `first` that does not refuse the kernels
    (a Triton kernel has no TPU compiler params for TPU interpret mode); None when only
    `first` runs them; the best when none does (both then say why not)."""
    def runs(name: str) -> bool:
        return executor_spec(name).refusal(kernels) is None

    choices = second_choices()
    accepted = [name for name in choices if name != first and runs(name)]
    if accepted:
        return accepted[0]
    return None if runs(first) else choices[0]


def fallback_note(unavailable: str, executor: str) -> str:
    """Why a run that needed TPU interpret mode's semaphores ran under another executor."""
    short = unavailable.split(", used by")[0]
    return (f"{executor_of_mode('tpu')} could not run it: {short}; ran under {executor}, which "
            "does not block on semaphore waits: a missing signal would not be seen")
