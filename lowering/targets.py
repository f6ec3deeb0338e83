"""Hardware targets a kernel can be lowered and compiled for: the one list of them.

A TPU target names a libtpu topology (for AOT compilation) and the device kind JAX's Pallas
lowering sees through an abstract device; a GPU target names a CUDA compute capability (for
the triton wheel and Mosaic GPU) and the device kind of that GPU.

`TARGETS` is the only list of target names: the workbench (`pallaslab.workbench`), the magic's
`--target`, the CLI and the Lowering view read it (the backend layer owns its targets; views
and shells may import `lowering`, `pallaslab.analysis` and `pallaslab.model` may not).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from pallaslab.errors import PallasLabError

Platform = Literal["tpu", "gpu"]


class UnknownTargetError(PallasLabError, ValueError):
    """A target name that is not one of `TARGETS`."""


@dataclasses.dataclass(frozen=True)
class Target:
    name: str  # "tpu-v5e", "gpu-h100"
    platform: Platform
    device_kind: str  # what `jax.Device.device_kind` says on that hardware
    topology: str | None = None  # libtpu topology for AOT compilation ("v5e:1x1")
    chip: str | None = None  # JAX's TPU chip version name ("v5e")
    compute_capability: tuple[int, int] | None = None  # CUDA (major, minor)
    # TensorCores per JAX device of `topology` (its devices' `num_cores`): what the kernel is
    # lowered for must be what it is compiled for (2 on v5p's megacore, 1 where each core is
    # a device of its own, as on v4's and 7x's libtpu topologies).
    cores: int = 1

    @property
    def lowering_platform(self) -> str:
        """The platform name `Lowered.lower(lowering_platforms=...)` expects."""
        return "tpu" if self.platform == "tpu" else "cuda"


TPU_TARGETS = (
    Target("tpu-v4", "tpu", "TPU v4", "v4:2x2x1", "v4"),
    Target("tpu-v5e", "tpu", "TPU v5 lite", "v5e:1x1", "v5e"),
    Target("tpu-v5p", "tpu", "TPU v5", "v5p:2x2x1", "v5p", cores=2),
    Target("tpu-v6e", "tpu", "TPU v6 lite", "v6e:1x1", "v6e"),
    # Newer generations libtpu 0.0.52 knows (checked with get_topology_desc on a CPU host).
    Target("tpu-7x", "tpu", "TPU7x", "tpu7x:1x1x1", "7x"),
)
GPU_TARGETS = (
    Target("gpu-a100", "gpu", "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),
    Target("gpu-h100", "gpu", "NVIDIA H100 80GB HBM3", compute_capability=(9, 0)),
    Target("gpu-b200", "gpu", "NVIDIA B200", compute_capability=(10, 0)),
)
TARGETS: dict[str, Target] = {t.name: t for t in (*TPU_TARGETS, *GPU_TARGETS)}


def get_target(target: str | Target) -> Target:
    if isinstance(target, Target):
        return target
    if not isinstance(target, str):
        raise UnknownTargetError(
            f"target={target!r}: a target is one of {', '.join(TARGETS)} (a name such as "
            "\"tpu-v5e\" or \"gpu-h100\"), to say which hardware to lower for")
    text = target.strip().lower()  # "TPU-V5E" as the magic and the CLI accept it
    name = text if text.startswith(("tpu-", "gpu-")) else _guess_prefix(text)
    if name in TARGETS:
        return TARGETS[name]
    raise UnknownTargetError(
        f"unknown target {target!r}; known targets: {', '.join(TARGETS)}"
    )


def _guess_prefix(target: str) -> str:
    """Accept the chip alone ("v5e", "h100") as users often write it."""
    return f"gpu-{target}" if f"gpu-{target}" in TARGETS else f"tpu-{target}"
