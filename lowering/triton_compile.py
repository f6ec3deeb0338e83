"""Triton: TTIR -> TTGIR -> LLIR -> PTX -> cubin (-> SASS) with the triton wheel, no GPU.

The wheel bundles ptxas (registers and spills come from `ptxas -v`), and nvdisasm for SASS.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any

from pallaslab.errors import missing
from pallaslab.lowering import diagnostics
from pallaslab.lowering.result import Diagnostic, Resources, Stage
from pallaslab.lowering.targets import Target

_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclasses.dataclass(frozen=True)
class TritonCompiled:
    ok: bool
    stages: tuple[Stage, ...]
    diagnostics: tuple[Diagnostic, ...]
    resources: Resources


def _triton() -> Any:
    try:
        import triton
        from triton.backends.compiler import GPUTarget
    except ImportError:
        raise missing("Compiling for GPU (compile=True / --compile)", "triton", "gpu") from None
    return triton, GPUTarget


def compile_triton(kernel_name: str, target: Target, ttir: str, num_warps: int,
                   num_stages: int) -> TritonCompiled:
    triton, gpu_target = _triton()
    assert target.compute_capability is not None
    major, minor = target.compute_capability
    capability = major * 10 + minor
    with tempfile.TemporaryDirectory(prefix="pallaslab-triton-") as tmp:
        src = Path(tmp) / "kernel.ttir"
        src.write_text(ttir)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # triton 3.9's FP-fusion default notice
                compiled = triton.compile(
                    str(src), target=gpu_target("cuda", capability, 32),
                    options={"num_warps": num_warps, "num_stages": num_stages})
        except Exception as err:  # triton's verdict (parse, layout or ptxas errors)
            diag = diagnostics.from_compile_error(f"{type(err).__name__}: {err}", kernel_name,
                                                  target.name, compiler="triton")
            return TritonCompiled(False, (), (diag,), Resources())
        stages = [Stage(name, compiled.asm[name])
                  for name in ("ttgir", "llir", "ptx") if name in compiled.asm]
        diags: list[Diagnostic] = []
        registers = spills = None
        ptxas_log = _ptxas_verbose(compiled.asm["ptx"], capability, Path(tmp))
        if ptxas_log is not None:
            if m := _REGISTERS.search(ptxas_log):
                registers = int(m[1])
            if m := _SPILLS.search(ptxas_log):
                spills = int(m[1]) + int(m[2])
        sass = _sass(compiled.asm.get("cubin"), Path(tmp))
        if sass is not None:
            stages.append(Stage("sass", sass))
        else:
            diags.append(Diagnostic("info", "missing-tool",
                                    "no SASS: the triton wheel on this machine ships no "
                                    "nvdisasm/cuobjdump to disassemble the cubin"))
        resources = Resources(smem_bytes=int(compiled.metadata.shared), registers=registers,
                              spills=spills)
    return TritonCompiled(True, tuple(stages), tuple(diags), resources)


def _tool(name: str) -> str | None:
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    return str(bundled) if bundled.exists() else shutil.which(name)


def _ptxas_verbose(ptx: str, capability: int, tmp: Path) -> str | None:
    """`ptxas -v` output (registers, spills, shared memory) for the kernel's PTX."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    path = tmp / "kernel.ptx"
    path.write_text(ptx)
    cmd = [get_ptxas(capability).path, "-v", f"--gpu-name={sm_arch_from_capability(capability)}",
           str(path), "-o", str(tmp / "kernel.o")]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return done.stderr + done.stdout if done.returncode == 0 else None


def _sass(cubin: bytes | None, tmp: Path) -> str | None:
    if not cubin:
        return None
    path = tmp / "kernel.cubin"
    path.write_bytes(cubin)
    for tool, args in (("nvdisasm", ["-c", "-hex"]), ("cuobjdump", ["-sass"])):
        exe = _tool(tool)
        if exe is None:
            continue
        done = subprocess.run([exe, *args[:1], str(path)], capture_output=True, text=True,
                              check=False)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout
    return None
