"""What every view is built from: one captured kernel, its inspection and the user's options."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from pallaslab.analysis.findings import Finding
from pallaslab.analysis.inspection import KernelInspection, inspect_kernel
from pallaslab.analysis.tiling import Tiling
from pallaslab.model import Capture, Kernel


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

    @property
    def backend(self) -> str | None:
        """Whose rules the findings follow: the first target's, else the kernel's own."""
        for t in self.targets:
            return "tpu" if t.startswith("tpu") else "triton"
        return None

    @functools.cached_property
    def inspection(self) -> KernelInspection:
        return inspect_kernel(self.kernel, backend=self.backend)

    @property
    def tiling(self) -> Tiling | None:
        return self.inspection.tiling

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.inspection.findings
