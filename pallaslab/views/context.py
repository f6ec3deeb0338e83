"""What every view is built from: one captured kernel, its inspection and the user's options."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pallaslab.analysis.findings import Finding
from pallaslab.analysis.inspection import KernelInspection, inspect_in_capture, inspect_kernel
from pallaslab.analysis.tiling import Tiling
from pallaslab.analysis.vmem_findings import vmem_findings
from pallaslab.model import Capture, Kernel

if TYPE_CHECKING:
    from pallaslab.views.session import Session


@dataclasses.dataclass(frozen=True)
class KernelContext:
    """One kernel of a capture plus the options the workbench was opened with.

    Later views read what they need from here (`chips` for Memory, `targets` for Lowering);
    expensive analyses are computed once, on first use, and cached on the context.
    """

    kernel: Kernel
    capture: Capture | None = None
    chips: tuple[str, ...] = ()  # TPU chips asked for, e.g. ("v5e", "v6e")
    targets: tuple[str, ...] = ()  # lowering targets asked for, e.g. ("tpu-v5e", "gpu-h100")
    # Anything else a tab needs from the user (`%%pallas` flags added by `register_option`).
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    # A workbench opened with `devices=N`: the kernel as traced on those N simulated devices
    # (in the worker that has them), its inspection made there; `kernel` is then its kernel.
    # None: traced in this process (`devices_trace_error` says why, when a trace was wanted).
    traced_on_devices: KernelInspection | None = dataclasses.field(default=None,
                                                                   compare=False)
    devices_trace_error: str | None = None
    # libtpu's exact scoped-VMEM need per chip, once measured (the Memory view's `measured=`
    # or `vmem_exact=True`): the fact overrules the spill-risk estimate for every view.
    vmem_measured: dict[str, int] = dataclasses.field(default_factory=dict, compare=False)
    # What Compare and Step share (the call to re-run, the comparison): the workbench's, which
    # it passes to every context; a context made alone with a capture gets one of its own.
    session: Session | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.session is None and self.capture is not None:
            from pallaslab.views.session import Session

            object.__setattr__(self, "session", Session(self.capture))

    @property
    def backend(self) -> str | None:
        """Whose rules the findings follow: the first target's, else the kernel's own."""
        for t in self.targets:
            return "tpu" if t.startswith("tpu") else "triton"
        return None

    @functools.cached_property
    def inspection(self) -> KernelInspection:
        if self.traced_on_devices is not None:
            return self.traced_on_devices
        if self.capture is None:
            return inspect_kernel(self.kernel, backend=self.backend)
        return inspect_in_capture(self.capture, self.kernel, backend=self.backend)

    @property
    def devices_traced(self) -> int | None:
        """On how many simulated devices the kernel was traced (None: in this process)."""
        mesh = self.kernel.device_mesh if self.traced_on_devices is not None else None
        return None if mesh is None else math.prod(size for _, size in mesh.axes)

    @property
    def tiling(self) -> Tiling | None:
        return self.inspection.tiling

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The inspection's findings, less the spill risks libtpu's measured need contradicts
        (the header, `wb.findings` and the Memory notices all read them here)."""
        found = self.inspection.findings
        if not self.vmem_measured:
            return found
        chips = tuple(self.vmem_measured)
        contradicted = ({f.message for f in vmem_findings(self.kernel, chips)}
                        - {f.message for f in vmem_findings(self.kernel, chips,
                                                            self.vmem_measured)})
        return tuple(f for f in found
                     if f.code != "vmem-spill-risk" or f.message not in contradicted)
