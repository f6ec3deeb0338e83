"""What lowering a kernel produces: frozen, JSON-ready data a view or the CLI can render."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
LoweringBackend = Literal["mosaic-tpu", "mosaic-gpu", "triton"]


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    """A verdict of the lowering or the compiler, with a stable code.

    Codes: `vmem-oom` (data: needed/limit bytes), `tpu-block-shape` (a block shape Mosaic
    rejects), `tpu-buffer-count` (`pl.Buffered(n > 2)`), `tpu-mixed-element` (`pl.Element`
    mixed with blocked dimensions), `unsupported-target` (e.g. a SparseCore kernel for a chip
    without SparseCores), `unsupported-op`, `mosaic-layout` (a vector layout or type Mosaic
    TPU cannot compile), `shared-memory-oom` (Triton; data: needed/limit bytes),
    `lowering-error`, `compile-error` (libtpu's code and name as data), `mosaic-alignment`
    (E2003),
    `mosaic-gpu-pallas-call`, `compiler-crash` (the compiler process aborted; its fatal
    line), `semaphore-group` (info: kernels joined by a DMA semaphore compiled as one program),
    `wrong-backend`, `params-adapted`, `missing-tool`, `no-compiler`.
    """

    severity: Severity
    code: str
    message: str
    operand: str | None = None  # the operand's origin when the verdict is about one
    data: tuple[tuple[str, Any], ...] = ()  # code-specific numbers, e.g. (("needed", n),)

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.data).get(key, default)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"severity": self.severity, "code": self.code,
                               "message": self.message}
        if self.operand is not None:
            out["operand"] = self.operand
        out.update(dict(self.data))
        return out


@dataclasses.dataclass(frozen=True)
class Stage:
    """One intermediate representation: its text and where its lines come from.

    `source_lines` maps 1-based IR line numbers to "file.py:LINE" of the kernel's Python
    source, for the lines whose IR operation carries a location.
    """

    name: str  # "jaxpr", "mosaic", "mosaic:post-apply-vector-layout", "ttir", "ptx", ...
    text: str
    source_lines: tuple[tuple[int, str], ...] = ()

    def ir_lines_for(self, source: str) -> tuple[int, ...]:
        """IR lines that came from one Python line ("kernels.py:72" or its full path)."""
        return tuple(n for n, s in self.source_lines if s == source or s.endswith("/" + source))

    def source_for(self, ir_line: int) -> str | None:
        """The Python "file.py:LINE" an IR line came from (None when it carries no location)."""
        return dict(self.source_lines).get(ir_line)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "text": self.text,
                "source_lines": [[n, s] for n, s in self.source_lines]}


@dataclasses.dataclass(frozen=True)
class Resources:
    # TPU scoped VMEM: the compiler's need with --vmem-exact (or from its OOM error), else the
    # buffers the compiled module declares (`tpu_compile.Buffers`: not the need)
    vmem_bytes: int | None = None
    smem_bytes: int | None = None  # shared memory per block (GPU)
    registers: int | None = None  # registers per thread (GPU, ptxas)
    spills: int | None = None  # spill stores + loads in bytes (GPU, ptxas)

    def to_json(self) -> dict[str, int | None]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class KernelLowering:
    name: str
    index: int  # the kernel's launch index in the capture
    backend: LoweringBackend
    ok: bool
    stages: tuple[Stage, ...]
    diagnostics: tuple[Diagnostic, ...]
    resources: Resources
    compiled: bool = False  # did the real compiler run (and accept it, when ok)?
    cached: bool = False  # did this result come from the disk cache?

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"kernel {self.name!r} has no stage {name!r}; it has: "
                       f"{', '.join(s.name for s in self.stages) or 'none'}")

    @property
    def stage_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.stages)

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "index": self.index, "backend": self.backend, "ok": self.ok,
                "compiled": self.compiled, "cached": self.cached,
                "stages": [s.to_json() for s in self.stages],
                "diagnostics": [d.to_json() for d in self.diagnostics],
                "resources": self.resources.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelLowering:
        return cls(
            name=data["name"], index=data["index"], backend=data["backend"], ok=data["ok"],
            compiled=data.get("compiled", False), cached=data.get("cached", False),
            stages=tuple(Stage(s["name"], s["text"], tuple((int(n), str(p))
                                                           for n, p in s["source_lines"]))
                         for s in data["stages"]),
            diagnostics=tuple(_diagnostic_from_json(d) for d in data["diagnostics"]),
            resources=Resources(**data["resources"]),
        )


def _diagnostic_from_json(d: dict[str, Any]) -> Diagnostic:
    base = {"severity", "code", "message", "operand"}
    return Diagnostic(d["severity"], d["code"], d["message"], d.get("operand"),
                      tuple((k, v) for k, v in d.items() if k not in base))


@dataclasses.dataclass(frozen=True)
class LoweringResult:
    """Every kernel of a capture lowered (and maybe compiled) for one target."""

    target: str
    kernels: tuple[KernelLowering, ...]

    @property
    def ok(self) -> bool:
        return all(k.ok for k in self.kernels)

    def __getitem__(self, i: int) -> KernelLowering:
        return self.kernels[i]

    def __len__(self) -> int:
        return len(self.kernels)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "kernels": [k.to_json() for k in self.kernels]}
