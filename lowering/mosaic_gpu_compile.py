"""Mosaic GPU: the kernel's StableHLO -> Mosaic's pipeline -> PTX -> ptxas -> cubin (-> SASS),
on a CPU host with no GPU.

XLA's CUDA PJRT plugin compiles ahead of time for a compile-only device described by a
`GpuTargetConfigProto` (no GPU, no libcuda); its `mosaic_gpu_v2` custom call runs Mosaic GPU's
whole pipeline and ptxas, and `MOSAIC_GPU_DUMP_*` write the PTX, `ptxas -v` output and SASS.
The plugin (jax-cuda12-pjrt + jax-cuda12-plugin, ~500 MB) lives in a directory of its own,
`<venv>/mosaic-gpu-compiler` (or $PALLASLAB_MOSAIC_GPU_COMPILER), never in site-packages, where
JAX would load it in every process; only the compiler worker (`_mosaic_gpu_worker.py`) puts it
on its path. ptxas, nvdisasm and libdevice are the triton wheel's, linked into
`<dir>/nvidia/cuda_nvcc` where the plugin looks for a CUDA toolkit.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import importlib.metadata
import io
import os
import re
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

from pallaslab.lowering import diagnostics
from pallaslab.lowering.compiler_worker import CompilerWorker, WorkerDied
from pallaslab.lowering.result import Diagnostic, Resources, Stage
from pallaslab.lowering.targets import Target

ENV_VAR = "PALLASLAB_MOSAIC_GPU_COMPILER"
MAKE_TARGET = "make mosaic-gpu-compiler"
TOOLS = ("ptxas", "nvdisasm", "cuobjdump")

_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_DYNAMIC_SMEM = re.compile(r"dynamic_shared_memory_size %c(\d+)_i32")

# GpuTargetConfigProto (text format) per compute capability; the figures of XLA's
# xla/backends/gpu/target_config/specs/*.txtpb. Mosaic GPU needs sm_90 or newer.
_DEVICE_INFO = {
    (9, 0): dict(shared_memory_per_block_optin=232448, shared_memory_per_core=233472,
                 core_count=132, memory_bandwidth=3352320000000, l2_cache_size=52428800,
                 clock_rate_ghz=1.98, device_memory_size=84942979072),
    (10, 0): dict(shared_memory_per_block_optin=232448, shared_memory_per_core=233472,
                  core_count=148, memory_bandwidth=7680000000000, l2_cache_size=133169152,
                  clock_rate_ghz=1.965, device_memory_size=191475023872),
}


def compiler_dir() -> Path:
    """Where the CUDA compiler plugin is installed: $PALLASLAB_MOSAIC_GPU_COMPILER, else
    `<sys.prefix>/mosaic-gpu-compiler` (the venv's)."""
    return Path(os.environ.get(ENV_VAR) or Path(sys.prefix) / "mosaic-gpu-compiler")


def install_command(directory: Path | None = None) -> str:
    directory = directory or compiler_dir()
    version = _jaxlib_version()
    return (f"pip install --no-deps --target {directory} jax-cuda12-pjrt=={version} "
            f"jax-cuda12-plugin=={version} && python -m pallaslab.lowering.mosaic_gpu_compile "
            f"--install-tools {directory}")


def missing_compiler() -> str | None:
    """None when the compiler directory is complete, else one line saying what to install."""
    directory = compiler_dir()
    needed = (directory / "jax_plugins" / "xla_cuda12", directory / "jax_cuda12_plugin",
              directory / "nvidia" / "cuda_nvcc" / "bin" / "ptxas",
              directory / "nvidia" / "cuda_nvcc" / "nvvm" / "libdevice" / "libdevice.10.bc")
    if all(p.exists() for p in needed):
        return None
    return (f"Compiling Mosaic GPU kernels needs XLA's CUDA compiler (compile-only, no GPU) in "
            f"{directory}, which is missing: run `{MAKE_TARGET}` (or `{install_command()}`).")


def install_tools(directory: Path) -> None:
    """Link the triton wheel's ptxas/nvdisasm/cuobjdump and libdevice into
    `<directory>/nvidia/cuda_nvcc` (the CUDA toolkit layout the plugin searches). Idempotent."""
    import triton

    nv = Path(triton.__file__).parent / "backends" / "nvidia"
    root = directory / "nvidia" / "cuda_nvcc"
    links = {root / "bin" / tool: nv / "bin" / tool for tool in TOOLS}
    links[root / "nvvm" / "libdevice" / "libdevice.10.bc"] = nv / "lib" / "libdevice.10.bc"
    for link, source in links.items():
        if not source.exists():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source)


def target_config(target: Target) -> str:
    """The GpuTargetConfigProto text of a GPU target (sm_90 and newer)."""
    assert target.compute_capability is not None
    info = _DEVICE_INFO[target.compute_capability]
    major, minor = target.compute_capability
    return (
        "gpu_device_info {\n"
        "  threads_per_block_limit: 1024 threads_per_warp: 32\n"
        f"  shared_memory_per_block: 49152 shared_memory_per_core: "
        f"{info['shared_memory_per_core']}\n"
        f"  shared_memory_per_block_optin: {info['shared_memory_per_block_optin']}\n"
        f"  threads_per_core_limit: 2048 core_count: {info['core_count']} fpus_per_core: 128\n"
        "  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535\n"
        f"  memory_bandwidth: {info['memory_bandwidth']} l2_cache_size: {info['l2_cache_size']}\n"
        f"  clock_rate_ghz: {info['clock_rate_ghz']}\n"
        f"  device_memory_size: {info['device_memory_size']}\n"
        f"  cuda_compute_capability {{ major: {major} minor: {minor} }}\n"
        "  registers_per_core_limit: 65536 registers_per_block_limit: 65536\n"
        "}\n"
        'platform_name: "CUDA"\n'
        "dnn_version_info { major: 9 minor: 10 patch: 0 }\n"
        f'device_description_str: "{target.device_kind}"\n')


def supported(target: Target) -> bool:
    return target.compute_capability in _DEVICE_INFO


def stablehlo(kernel: Any, target: Target) -> str:
    """The kernel alone lowered for CUDA under the target's abstract device, as StableHLO text
    (its `mosaic_gpu_v2` custom call carries the Mosaic GPU module): what the plugin compiles."""
    import jax

    from pallaslab.lowering import cross
    from pallaslab.model import _jax
    from pallaslab.model._jax import lowering as _jax_lowering

    overrides = cross._supported(kernel, {"debug": False, "interpret": False})
    call = _jax_lowering.kernel_callable_for_device(kernel, cross.abstract_device(target),
                                                    **overrides)
    avals = _jax.kernel_call_avals(kernel)
    with (contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(),
          jax.sharding.use_abstract_mesh(cross.abstract_mesh(target))):
        warnings.simplefilter("ignore")
        lowered = jax.jit(call).trace(*avals).lower(lowering_platforms=("cuda",))
        return str(lowered.as_text())


class MosaicGpuWorker(CompilerWorker):
    """A process with XLA's CUDA plugin on its path; `compile` sends one StableHLO module."""

    def __init__(self, directory: Path) -> None:
        from pallaslab.util.tempdir import session_tmpdir

        workdir = Path(tempfile.mkdtemp(prefix="mosaic-gpu-worker-", dir=session_tmpdir()))
        dump = workdir / "dump"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(directory), env.get("PYTHONPATH", "")) if p)
        env["PATH"] = os.pathsep.join(
            p for p in (str(directory / "nvidia" / "cuda_nvcc" / "bin"), env.get("PATH", ""))
            if p)
        env["JAX_PLATFORMS"] = "cpu"  # the worker compiles for compile-only devices only
        env["MOSAIC_GPU_DUMP_TO"] = str(dump)
        for flag in ("MOSAIC_GPU_DUMP_PTX", "MOSAIC_GPU_DUMP_PTXAS", "MOSAIC_GPU_DUMP_SASS"):
            env[flag] = "1"
        env["PALLASLAB_MOSAIC_GPU_DUMP"] = str(dump)
        super().__init__("pallaslab.lowering._mosaic_gpu_worker", env, workdir,
                         "the Mosaic GPU compiler worker",
                         cwd=str(Path(__file__).resolve().parent.parent))

    def compile(self, config: str, hlo: str) -> dict[str, Any]:
        return self.request({"target_config": config, "hlo": hlo})


# One worker per (compiler directory, target): within a process the plugin's Mosaic GPU
# compiles kernels of later targets with ptxas set up for an earlier one ("Program with .target
# 'sm_90a' cannot be compiled to future architecture").
_workers: dict[tuple[Path, str], MosaicGpuWorker] = {}
_worker_lock = threading.Lock()
# Mosaic GPU keeps compiled kernels per kernel hash within a process and dumps a kernel only
# when it first compiles it: responses are kept per module, and a worker that compiled a kernel
# already (same kernel, other module) is replaced for a fresh dump.
_responses: dict[str, dict[str, Any]] = {}


def _compile_in_worker(config: str, hlo: str) -> dict[str, Any]:
    key = hashlib.sha256((config + "\x00" + hlo).encode()).hexdigest()
    if key in _responses:
        return _responses[key]
    slot = (compiler_dir(), config)
    response: dict[str, Any] = {}
    for _attempt in range(2):
        with _worker_lock:
            worker = _workers.get(slot)
            if worker is None or not worker.alive():
                if worker is not None:
                    worker.close()
                worker = _workers[slot] = MosaicGpuWorker(slot[0])
        response = worker.compile(config, hlo)
        if not (response["ok"] and not response["files"]):
            break
        with _worker_lock:  # compiled before in this worker: no dump; start a fresh one
            worker.close()
            if _workers.get(slot) is worker:
                del _workers[slot]
    _responses[key] = response
    return response


@atexit.register
def shutdown_worker() -> None:
    with _worker_lock:
        for worker in _workers.values():
            worker.close()
        _workers.clear()


@dataclasses.dataclass(frozen=True)
class MosaicGpuCompiled:
    ok: bool
    compiled: bool  # did the compiler run (False: not installed)
    stages: tuple[Stage, ...]  # "ptx", "ptxas", "sass"
    diagnostics: tuple[Diagnostic, ...]
    resources: Resources
    seconds: float = 0.0


def compile_mosaic_gpu(kernel_name: str, target: Target, hlo: str,
                       mosaic_module: str = "") -> MosaicGpuCompiled:
    """Compile the kernel's StableHLO (`stablehlo(kernel, target)`) for `target` with XLA's
    CUDA plugin in the worker: PTX, ptxas' registers/spills, SASS. Shared memory is the
    launch's `dynamic_shared_memory_size` in the Mosaic GPU module (`mosaic_module`, the
    cross-lowered text; the module in the custom call is the one compiled)."""
    if (why := missing_compiler()) is not None:
        return MosaicGpuCompiled(False, False, (), (Diagnostic("info", "no-compiler", why),),
                                 Resources())
    if not supported(target):
        return MosaicGpuCompiled(False, False, (), (Diagnostic(
            "info", "no-compiler",
            f"Mosaic GPU compiles for sm_90 and newer; {target.name} is not one."),), Resources())
    try:
        response = _compile_in_worker(target_config(target), hlo)
    except (WorkerDied, OSError) as err:
        return MosaicGpuCompiled(False, True, (), (Diagnostic(
            "error", "compile-error",
            f"the {target.name} compiler failed on kernel {kernel_name!r}: {err}"),), Resources())
    files: dict[str, str] = response["files"]
    stages: list[Stage] = []
    diags: list[Diagnostic] = []
    ptx = _one(files, ".ptx")
    ptxas = _one(files, ".ptxas")
    sass = _one(files, ".sass_ctrl") or _one(files, ".sass")
    if ptx is not None:
        stages.append(Stage("ptx", ptx))
    if ptxas is not None:
        stages.append(Stage("ptxas", ptxas.strip() + "\n"))
    if sass is not None:
        stages.append(Stage("sass", sass))
    if not response["ok"]:
        diags.append(diagnostics.from_compile_error(response["error"], kernel_name, target.name))
        return MosaicGpuCompiled(False, True, tuple(stages), tuple(diags), Resources(),
                                 response["seconds"])
    registers = spills = smem = None
    if ptxas is not None:
        if m := _REGISTERS.search(ptxas):
            registers = int(m[1])
        if m := _SPILLS.search(ptxas):
            spills = int(m[1]) + int(m[2])
    for text in (mosaic_module, *files.values()):
        if m := _DYNAMIC_SMEM.search(text):
            smem = int(m[1])  # Mosaic GPU allocates all shared memory dynamically
            break
    if sass is None:
        diags.append(Diagnostic("info", "missing-tool",
                                "no SASS: nvdisasm was not found next to ptxas in "
                                f"{compiler_dir() / 'nvidia' / 'cuda_nvcc' / 'bin'}"))
    return MosaicGpuCompiled(True, True, tuple(stages), tuple(diags),
                             Resources(smem_bytes=smem, registers=registers, spills=spills),
                             response["seconds"])


def _one(files: dict[str, str], suffix: str) -> str | None:
    names = sorted(n for n in files if n.endswith(suffix))
    return "\n".join(files[n] for n in names) if names else None


def _jaxlib_version() -> str:
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return "<jaxlib version>"


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--install-tools":
        install_tools(Path(argv[1]))
        return 0
    print("usage: python -m pallaslab.lowering.mosaic_gpu_compile --install-tools DIR",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
