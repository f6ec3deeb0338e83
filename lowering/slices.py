"""Which TPU slice a kernel inside `shard_map` is lowered and compiled for.

A kernel that talks to other devices (remote DMAs, device semaphores) is lowered inside a
shard_map over an abstract mesh of N devices (StableHLO with N partitions; no device, and no
libtpu, in this process) and compiled by libtpu over N devices of a topology of the target's
chip. N is the caller's `devices=`, else the size of the mesh the kernel was captured in.
Topologies are listed by their number of JAX devices (one per TensorCore on v4 and 7x, whose
chips have two; one per chip elsewhere), as libtpu 0.0.52 builds them on a CPU host.
"""

from __future__ import annotations

import dataclasses
import math

from pallaslab.errors import PallasLabError
from pallaslab.lowering.result import Diagnostic, Severity
from pallaslab.lowering.targets import Target
from pallaslab.model import Kernel

# chip -> ((JAX devices, libtpu topology), ...), smallest first.
TOPOLOGIES: dict[str, tuple[tuple[int, str], ...]] = {
    "v5e": ((1, "v5e:1x1"), (2, "v5e:1x2"), (4, "v5e:2x2"), (8, "v5e:2x4"), (16, "v5e:4x4"),
            (32, "v5e:4x8"), (64, "v5e:8x8"), (128, "v5e:8x16"), (256, "v5e:16x16")),
    "v6e": ((1, "v6e:1x1"), (2, "v6e:1x2"), (4, "v6e:2x2"), (8, "v6e:2x4"), (16, "v6e:4x4"),
            (32, "v6e:4x8"), (64, "v6e:8x8"), (256, "v6e:16x16")),
    "v4": ((2, "v4:1x1x1"), (8, "v4:2x2x1"), (16, "v4:2x2x2"), (32, "v4:2x2x4"),
           (128, "v4:4x4x4")),
    "v5p": ((1, "v5p:1x1x1"), (4, "v5p:2x2x1"), (8, "v5p:2x2x2"), (16, "v5p:2x2x4"),
            (64, "v5p:4x4x4")),
    "7x": ((2, "tpu7x:1x1x1"), (4, "tpu7x:1x1x2"), (8, "tpu7x:2x2x1"), (16, "tpu7x:2x2x2"),
           (32, "tpu7x:2x2x4")),
}


class DevicesValueError(PallasLabError, ValueError):
    """`devices=` that is not a positive number of devices."""


@dataclasses.dataclass(frozen=True)
class Slice:
    """What a shard_map kernel is lowered and compiled over."""

    axes: tuple[tuple[str, int], ...]  # the mesh it is lowered in (its sizes: the partitions)
    topology: str  # the libtpu topology compiled for
    topology_devices: int  # how many devices that topology has (>= partitions)
    captured: tuple[tuple[str, int], ...]  # the mesh the kernel was traced in
    fallback: str | None = None  # why it is one device per axis, though more were meant

    @property
    def partitions(self) -> int:
        return math.prod(size for _, size in self.axes)


def check_devices(devices: int | None) -> None:
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int)
                                or devices < 1):
        raise DevicesValueError(f"devices={devices!r}: the number of TPU devices to compile a "
                                "shard_map kernel over is a positive int")


def plan(kernel: Kernel, target: Target, devices: int | None = None) -> Slice | None:
    """The slice for a kernel captured inside shard_map, lowered for a TPU (None otherwise)."""
    if kernel.device_mesh is None or target.platform != "tpu":
        return None
    assert target.topology is not None
    captured = tuple(kernel.device_mesh.axes)
    axes, why = _axes(captured, devices)
    one_chip = tuple((name, 1) for name, _ in captured)
    wanted = math.prod(size for _, size in axes)
    if wanted == 1:
        return Slice(one_chip, target.topology, 1, captured, why)
    fits = [(n, t) for n, t in TOPOLOGIES.get(target.chip or "", ()) if n >= wanted]
    if not fits:
        known = ", ".join(t for _, t in TOPOLOGIES.get(target.chip or "", ())) or "none"
        return Slice(one_chip, target.topology, 1, captured,
                     f"no libtpu topology of {target.name} has {wanted} devices (known: "
                     f"{known})")
    count, topology = fits[0]
    return Slice(axes, topology, count, captured, why)


def _axes(captured: tuple[tuple[str, int], ...], devices: int | None
          ) -> tuple[tuple[tuple[str, int], ...], str | None]:
    """The mesh to lower in: the captured one, or `devices` along its one axis."""
    if devices is None or devices == math.prod(s for _, s in captured):
        return captured, None
    if len(captured) == 1:
        return ((captured[0][0], devices),), None
    return captured, (f"devices={devices} was not applied: the mesh has {len(captured)} axes "
                      "(which of them would grow is ambiguous)")


def _mesh_text(axes: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{name}={size}" for name, size in axes)


_VERBS = {"lowered": "lowered", "compiled": "compiled by libtpu",
          "rejected": "compiled by libtpu (which rejects it, see below)"}


def note(kernel: Kernel, target: Target, where: Slice, outcome: str = "lowered"
         ) -> Diagnostic:
    """The `shard-map-mesh` note: what was lowered, and compiled, for which chips
    (`outcome`: "lowered", "compiled" or "rejected" by the compiler)."""
    head = (f"kernel {kernel.name!r} runs inside shard_map (mesh {_mesh_text(where.captured)} "
            "as captured): ")
    n = where.partitions
    verb = _VERBS[outcome]
    if n == 1:
        body = (f"it is {verb} inside shard_map again over one device per axis (one device "
                f"of {target.topology}), so its remote DMAs and device semaphores lower as on "
                "one chip of a slice")
        body += f" ({where.fallback})" if where.fallback else (
            "; pass devices=N to compile it over N chips")
    else:
        over = (f"all {n}" if n == where.topology_devices
                else f"the first {n} of the {where.topology_devices}")
        body = (f"it is {verb} inside shard_map over mesh {_mesh_text(where.axes)}: one SPMD "
                f"program of {n} partitions, for {over} devices of the libtpu topology "
                f"{where.topology}, in the topology's device order")
        if where.axes != where.captured:
            body += (f". Its body is the one traced in mesh {_mesh_text(where.captured)}: axis "
                     "sizes read while tracing (jax.lax.axis_size, shapes) keep that value; "
                     f"capture it on {n} devices for the kernel {n} chips would run")
        elif where.fallback:
            body += f" ({where.fallback})"
    # A request for more devices that could not be met is a warning, not a fact to note.
    severity: Severity = "warning" if where.fallback else "info"
    return Diagnostic(severity, "shard-map-mesh",
                      f"{head}{body}; its operands are the per-device blocks it was captured "
                      "with.", data=(("topology", where.topology), ("devices", n),
                                     ("mesh", _mesh_text(where.axes))))
