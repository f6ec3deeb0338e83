"""Mosaic GPU: the kernel's StableHLO -> Mosaic's pipeline -> PTX -> ptxas -> cubin (-> SASS),
on a CPU host with no GPU.

XLA's CUDA PJRT plugin compiles ahead of time for a compile-only device described by a
`GpuTargetConfigProto` (no GPU, no libcuda); its `mosaic_gpu_v2` custom call runs Mosaic GPU's
whole pipeline and ptxas, and `MOSAIC_GPU_DUMP_*` write the PTX, `ptxas -v` output and SASS.
The plugin (jax-cudaN-pjrt + jax-cudaN-plugin, ~400 MB, N the CUDA major the installed jaxlib
has wheels for: `cuda_major()`) lives in a directory of its own, `<venv>/mosaic-gpu-compiler`
(or $PALLASLAB_MOSAIC_GPU_COMPILER), never in site-packages, where JAX would load it in every
process; only the compiler worker (`_mosaic_gpu_worker.py`) puts it on its path. ptxas,
nvdisasm and libdevice are the triton wheel's (a ptxas of the plugin's CUDA major; else
nvidia-cuda-nvcc's), linked where the plugin looks for a CUDA toolkit: `<dir>/nvidia/cuda_nvcc`
for CUDA 12, `<dir>/nvidia/cu13` for CUDA 13 (`toolkit_dir()`).

`python -m pallaslab.lowering.mosaic_gpu_compile --install DIR [--constraints FILE]` does the
whole installation (pip, then the tools); `--install-tools DIR` only links the tools.
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
import shlex
import shutil
import subprocess
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
CUDA_ENV_VAR = "PALLASLAB_MOSAIC_GPU_CUDA"  # "12" or "13": overrides `cuda_major()`
MAKE_TARGET = "make mosaic-gpu-compiler"
TOOLS = ("ptxas", "nvdisasm", "cuobjdump")
CUDA_MAJORS = (12, 13)

# JAX's CUDA plugin wheels per jaxlib: CUDA 12 (jax-cuda12-*) up to and including 0.12.0.1,
# CUDA 13 only (jax-cuda13-*) from 0.12.1 on. CUDA 12 is preferred wherever it exists.
_FIRST_CUDA13_ONLY = (0, 12, 1)

_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_DYNAMIC_SMEM = re.compile(r"dynamic_shared_memory_size %c(\d+)_i32")
_RELEASE = re.compile(r"release (\d+)\.(\d+)")

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


def _release(version: str) -> tuple[int, ...] | None:
    """The release numbers of a version ("0.12.0.1" -> (0, 12, 0, 1); "0.12.1.dev2024" ->
    (0, 12, 1)); None when it has none."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    return tuple(int(p) for p in m[1].split(".")) if m else None


def cuda_major(jaxlib_version: str | None = None) -> int:
    """The CUDA major of the plugin to use with `jaxlib_version` (default: the installed
    jaxlib's): 12 where JAX published jax-cuda12-* for it (up to 0.12.0.1), else 13.
    $PALLASLAB_MOSAIC_GPU_CUDA ("12" or "13") overrides it."""
    if (forced := os.environ.get(CUDA_ENV_VAR, "").strip()):
        if not forced.isdigit() or int(forced) not in CUDA_MAJORS:
            raise ValueError(f"${CUDA_ENV_VAR} must be one of "
                             f"{', '.join(map(str, CUDA_MAJORS))}, not {forced!r}")
        return int(forced)
    release = _release(jaxlib_version if jaxlib_version is not None else _jaxlib_version())
    if release is None:  # no jaxlib: the newest
        return CUDA_MAJORS[-1]
    return 13 if release >= _FIRST_CUDA13_ONLY else 12


def plugin_packages(major: int, version: str) -> tuple[str, str]:
    """The pip requirements of XLA's CUDA plugin of CUDA `major` for jaxlib `version`."""
    return (f"jax-cuda{major}-pjrt=={version}", f"jax-cuda{major}-plugin=={version}")


def plugin_dirs(directory: Path, major: int) -> tuple[Path, Path]:
    """The two packages the plugin installs into `directory`: the PJRT plugin that JAX
    discovers (jax_plugins/xla_cudaN) and its extensions (jax_cudaN_plugin)."""
    return (directory / "jax_plugins" / f"xla_cuda{major}",
            directory / f"jax_cuda{major}_plugin")


def toolkit_dir(directory: Path, major: int) -> Path:
    """Where the plugin of CUDA `major` (and JAX's `lib.cuda_path`) looks for a CUDA toolkit
    (bin/ptxas, nvvm/libdevice) next to it: nvidia-cuda-nvcc-cu12's layout for CUDA 12, the
    CUDA 13 wheels' `nvidia/cu13` for CUDA 13."""
    return directory / "nvidia" / ("cuda_nvcc" if major == 12 else f"cu{major}")


def install_command(directory: Path | None = None, constraints: Path | str | None = None) -> str:
    """The one command that installs the compiler into `directory` (see `install`)."""
    directory = directory or compiler_dir()
    extra = f" --constraints {shlex.quote(str(constraints))}" if constraints else ""
    return (f"python -m pallaslab.lowering.mosaic_gpu_compile --install "
            f"{shlex.quote(str(directory))}{extra}")


def _installed_version(directory: Path, distribution: str) -> str | None:
    """The version of `distribution` pip installed into `directory` (its .dist-info), if any."""
    stem = distribution.replace("-", "_").lower()
    for info in directory.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].rpartition("-")
        if name.replace("-", "_").replace(".", "_").lower() == stem:
            return version
    return None


def missing_compiler() -> str | None:
    """None when the compiler directory is complete, else one line saying what is missing and
    the command that installs it."""
    directory = compiler_dir()
    try:
        major = cuda_major()
    except ValueError as err:
        return f"Compiling Mosaic GPU kernels: {err}."
    version = _jaxlib_version()
    pjrt, plugin = plugin_dirs(directory, major)
    tools = toolkit_dir(directory, major)
    missing = [str(p) for p in (pjrt, plugin) if not p.exists()]
    if not missing:
        for dist in (f"jax-cuda{major}-pjrt", f"jax-cuda{major}-plugin"):
            have = _installed_version(directory, dist)
            if have is not None and have != version:
                missing.append(f"{dist}=={version} (it has {have})")
    missing += [str(p) for p in (tools / "bin" / "ptxas",
                                 tools / "nvvm" / "libdevice" / "libdevice.10.bc")
                if not p.exists()]
    if not missing:
        return None
    return (f"Compiling Mosaic GPU kernels needs XLA's CUDA {major} compiler (compile-only, no "
            f"GPU; jax-cuda{major}-pjrt and jax-cuda{major}-plugin {version}) in {directory}, "
            f"which lacks {', '.join(missing)}: run `{MAKE_TARGET}` (or "
            f"`{install_command(directory)}`).")


def _ptxas_release(path: Path) -> tuple[int, int] | None:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = _RELEASE.search(out)
    return (int(m[1]), int(m[2])) if m else None


def _triton_nvidia() -> Path | None:
    try:
        import triton
    except ImportError:
        return None
    return Path(triton.__file__).parent / "backends" / "nvidia"


def triton_ptxas(major: int) -> Path | None:
    """The triton wheel's ptxas of CUDA `major` (triton 3.9 ships a CUDA 12.9 `ptxas` and a
    CUDA 13 `ptxas-blackwell`), preferring plain `ptxas`; None when it has none."""
    nv = _triton_nvidia()
    if nv is None:
        return None
    candidates = sorted((nv / "bin").glob("ptxas*"), key=lambda p: (p.name != "ptxas", p.name))
    for path in candidates:
        release = _ptxas_release(path)
        if release is not None and release[0] == major:
            return path
    return None


def install_tools(directory: Path, major: int | None = None) -> None:
    """Link a ptxas of CUDA `major` (default `cuda_major()`) and the triton wheel's nvdisasm,
    cuobjdump and libdevice into `toolkit_dir(directory, major)`, the CUDA toolkit layout the
    plugin searches. The ptxas is triton's when it has one of that major; else the one the
    nvidia-cuda-nvcc wheel put there (`install` adds that wheel then), which is kept. Idempotent.
    Raises RuntimeError when no ptxas of that major is to be had."""
    major = major or cuda_major()
    root = toolkit_dir(directory, major)
    nv = _triton_nvidia()
    links: dict[Path, Path] = {}
    if nv is not None:
        links = {root / "bin" / tool: nv / "bin" / tool for tool in TOOLS if tool != "ptxas"}
        links[root / "nvvm" / "libdevice" / "libdevice.10.bc"] = nv / "lib" / "libdevice.10.bc"
    ptxas = root / "bin" / "ptxas"
    if (source := triton_ptxas(major)) is not None:
        links[ptxas] = source
    elif not (ptxas.exists() and not ptxas.is_symlink()
              and (_ptxas_release(ptxas) or (0,))[0] == major):
        raise RuntimeError(
            f"no ptxas of CUDA {major}: the triton wheel has none; run `"
            f"{install_command(directory)}`, which adds nvidia-cuda-nvcc {major}.x")
    for link, source in links.items():
        if not source.exists():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source)


def pip_command(directory: Path, major: int | None = None, version: str | None = None,
                constraints: Path | str | None = None, quiet: bool = False) -> list[str]:
    """The pip command `install` runs: the plugin of CUDA `major` for jaxlib `version` (default:
    the installed jaxlib's), --no-deps (no cuDNN/cuBLAS/cudart: compile-only), into `directory`;
    plus nvidia-cuda-nvcc of that major where the triton wheel has no ptxas of it."""
    major = major or cuda_major(version)
    version = version or _jaxlib_version()
    cmd = [sys.executable, "-m", "pip", "install", *(["--quiet"] if quiet else []), "--no-deps",
           "--upgrade", "--target", str(directory)]
    if constraints:
        cmd += ["--constraint", str(constraints)]
    cmd += plugin_packages(major, version)
    if triton_ptxas(major) is None:
        cmd.append(f"nvidia-cuda-nvcc>={major},<{major + 1}")
    return cmd


def install(directory: Path, constraints: Path | str | None = None,
            major: int | None = None, quiet: bool = False) -> None:
    """Install the compiler into `directory`: drop a plugin of another CUDA major left there
    (JAX would load both), pip-install the plugin of the installed jaxlib (printing the
    command), then `install_tools`."""
    major = major or cuda_major()
    directory.mkdir(parents=True, exist_ok=True)
    for other in CUDA_MAJORS:
        if other == major:
            continue
        for stale in (*plugin_dirs(directory, other), *directory.glob(f"jax_cuda{other}_*")):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale)
    cmd = pip_command(directory, major, constraints=constraints, quiet=quiet)
    print(shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    install_tools(directory, major)


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
        tools = toolkit_dir(directory, cuda_major())
        env["PATH"] = os.pathsep.join(
            p for p in (str(tools / "bin"), env.get("PATH", "")) if p)
        # JAX's `lib.cuda_path` (Mosaic GPU's MOSAIC_GPU_CUDA_ROOT: ptxas, nvdisasm) and the
        # plugin's toolkit: ours, not whatever $CUDA_ROOT the user's shell has.
        env["CUDA_ROOT"] = str(tools)
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
                                f"{toolkit_dir(compiler_dir(), cuda_major()) / 'bin'}"))
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
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m pallaslab.lowering.mosaic_gpu_compile",
        description="Install or check XLA's CUDA plugin (compile-only) for Mosaic GPU compiles: "
                    "CUDA 12 or 13 as the installed jaxlib has wheels for (override with "
                    f"${CUDA_ENV_VAR}=12|13).")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--install", metavar="DIR", type=Path,
                        help="pip-install the plugin into DIR, then link ptxas/nvdisasm/libdevice")
    action.add_argument("--install-tools", metavar="DIR", type=Path,
                        help="only link ptxas/nvdisasm/libdevice into DIR's CUDA toolkit layout")
    action.add_argument("--check", action="store_true",
                        help="say whether the compiler is complete (exit status 1 when not)")
    parser.add_argument("-c", "--constraints", "--constraint", metavar="FILE",
                        help="with --install: a pip constraints file (e.g. pins.txt)")
    parser.add_argument("-q", "--quiet", action="store_true", help="with --install: pip -q")
    args = parser.parse_args(argv)
    try:
        if args.install is not None:
            install(args.install, constraints=args.constraints, quiet=args.quiet)
        elif args.install_tools is not None:
            install_tools(args.install_tools)
        else:
            why = missing_compiler()
            print(why or f"complete: {compiler_dir()} (CUDA {cuda_major()})")
            return 0 if why is None else 1
    except (RuntimeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as err:
        print(f"error: pip failed (exit status {err.returncode})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
