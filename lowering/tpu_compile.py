"""Real TPU compilation with libtpu on a CPU host, in a worker process we control.

One worker serves the whole Python session (started on first use, ~1 s; each compile then
costs what the compiler costs). See `_tpu_worker.py` for why it is a separate process.
"""

from __future__ import annotations

import atexit
import dataclasses
import math
import os
import re
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pallaslab.errors import missing
from pallaslab.lowering import diagnostics, irtext
from pallaslab.lowering.compiler_worker import CompilerWorker, WorkerDied
from pallaslab.lowering.result import Diagnostic, Stage
from pallaslab.lowering.slices import Slice
from pallaslab.lowering.targets import Target
from pallaslab.util.tempdir import session_tmpdir


def require_libtpu() -> None:
    try:
        import libtpu  # noqa: F401
    except ImportError:
        raise missing("Compiling for TPU (compile=True / --compile)", "libtpu", "tpu") from None


class TpuWorker(CompilerWorker):
    """A libtpu compiler process; `compile` sends one StableHLO module and waits."""

    def __init__(self) -> None:
        # Under the session's temporary directory, removed at exit even if close() never runs.
        directory = Path(tempfile.mkdtemp(prefix="tpu-worker-", dir=session_tmpdir()))
        dump = directory / "mosaic"
        env = dict(os.environ)
        # libtpu's own logs (tpu_driver.INFO ...) go here too, not to /tmp/tpu_logs.
        env["TPU_LOG_DIR"] = str(directory / "libtpu-logs")
        # Mosaic's module after every pass, with locations (so each maps back to Python).
        flags = f"--xla_mosaic_dump_to={dump} --xla_mosaic_enable_dump_debug_info=true"
        env["LIBTPU_INIT_ARGS"] = f"{env.get('LIBTPU_INIT_ARGS', '')} {flags}".strip()
        env["JAX_PLATFORMS"] = "cpu"  # the worker compiles for topology devices only
        env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"  # other processes may hold libtpu's lockfile
        env["PALLASLAB_MOSAIC_DUMP"] = str(dump)
        super().__init__("pallaslab.lowering._tpu_worker", env, directory,
                         "the TPU compiler worker (libtpu)")

    def compile(self, topology: str, hlo: str, dumps: bool = True, partitions: int = 1
                ) -> dict[str, Any]:
        return self.request({"topology": topology, "hlo": hlo, "dumps": dumps,
                             "partitions": partitions})


_worker: TpuWorker | None = None
_worker_lock = threading.Lock()


def worker() -> TpuWorker:
    """The session's TPU compiler worker (restarted if it died)."""
    global _worker
    require_libtpu()
    with _worker_lock:
        if _worker is None or not _worker.alive():
            _worker = TpuWorker()
        return _worker


@atexit.register
def shutdown_worker() -> None:
    global _worker
    with _worker_lock:
        if _worker is not None:
            _worker.close()
            _worker = None


@dataclasses.dataclass(frozen=True)
class TpuCompiled:
    ok: bool
    stages: tuple[Stage, ...]  # Mosaic after every compiler pass: "mosaic:<pass>"
    diagnostics: tuple[Diagnostic, ...]
    seconds: float


def compile_tpu(kernel_name: str, target: Target, hlo: str, dumps: bool = True,
                where: Slice | None = None) -> TpuCompiled:
    """Compile for one device of the target's topology, or over the devices of `where` (a
    shard_map kernel's slice: `hlo` has its number of partitions)."""
    topology, partitions = (target.topology, 1) if where is None else \
        (where.topology, where.partitions)
    assert topology is not None
    try:
        response = worker().compile(topology, hlo, dumps, partitions)
    except WorkerDied as died:  # libtpu aborted (a failed CHECK): the next compile restarts it
        return TpuCompiled(False, (), (compiler_crash(str(died), kernel_name, target.name),),
                           0.0)
    stages = _stages(response["passes"])
    diags: list[Diagnostic] = []
    if not response["ok"]:
        where_text = target.name if partitions == 1 else \
            f"{target.name} ({partitions} devices of {topology})"
        diags.append(diagnostics.from_compile_error(response["error"], kernel_name, where_text))
        if response["log"]:
            diags.append(Diagnostic("info", "compiler-log", "libtpu printed: "
                                    + " | ".join(response["log"][:10])))
    return TpuCompiled(response["ok"], stages, tuple(diags), response["seconds"])


def compile_tpu_group(kernel_names: tuple[str, ...], target: Target, hlo: str,
                      dumps: bool = True) -> tuple[TpuCompiled, ...]:
    """Compile one program holding several kernels (`hlo`: they run in the order of
    `kernel_names`) for one device of the target's topology; per kernel, the program's verdict
    and that kernel's own pass pipeline. The verdict is the program's: an error or a crash is
    told to every kernel, each with its own name."""
    joined = ", ".join(repr(n) for n in kernel_names)
    assert target.topology is not None
    try:
        response = worker().compile(target.topology, hlo, dumps)
    except WorkerDied as died:
        return tuple(TpuCompiled(False, (), (compiler_crash(str(died), joined, target.name),),
                                 0.0) for _ in kernel_names)
    diags: tuple[Diagnostic, ...] = ()
    if not response["ok"]:
        diags = (diagnostics.from_compile_error(response["error"], joined, target.name),)
        if response["log"]:
            diags += (Diagnostic("info", "compiler-log", "libtpu printed: "
                                 + " | ".join(response["log"][:10])),)
    pipelines = _pipelines_per_kernel(kernel_names, response.get("pipelines", []))
    return tuple(TpuCompiled(response["ok"], _stages(passes), diags, response["seconds"])
                 for passes in pipelines)


def _pipelines_per_kernel(kernel_names: tuple[str, ...], pipelines: list[list[Any]]
                          ) -> list[list[list[str]]]:
    """Each kernel's pass pipeline: the next one compiled under its name. XLA compiles
    identical kernels once, so a kernel whose name has no pipeline left gets the last one."""
    by_name: dict[str, list[list[list[str]]]] = {}
    for name, passes in pipelines:
        by_name.setdefault(name, []).append(passes)
    taken: dict[str, int] = {}
    out = []
    for name in kernel_names:
        own = by_name.get(name, [])
        i = taken.get(name, 0)
        taken[name] = i + 1
        out.append(own[min(i, len(own) - 1)] if own else [])
    return out


def _stages(passes: list[list[str]]) -> tuple[Stage, ...]:
    stages = []
    for name, text in passes:
        clean, sources = irtext.pretty_ir_with_sources(text)
        stages.append(Stage(f"mosaic:{name}", clean, sources))
    return tuple(stages)


@dataclasses.dataclass(frozen=True)
class VmemNeed:
    bytes: int | None  # smallest vmem_limit_bytes the compiler accepts (KiB resolution)
    compiles: int  # how many compiles the search took
    diagnostics: tuple[Diagnostic, ...]


def find_vmem_need(kernel_name: str, target: Target, capacity: int,
                   hlo_with_limit: Callable[[int], str], where: Slice | None = None
                   ) -> VmemNeed:
    """Bisect `vmem_limit_bytes` (in KiB) for the smallest limit the real compiler accepts.

    The compiler's VMEM OOM message states the size it needed (rounded to 0.01 of its unit);
    one probe at 1 KiB reads it, which narrows the bisection to a few compiles.
    """
    count = 0

    def compiles(kib: int) -> tuple[bool, Diagnostic | None]:
        nonlocal count
        count += 1
        out = compile_tpu(kernel_name, target, hlo_with_limit(kib * 1024), dumps=False,
                          where=where)
        return out.ok, (out.diagnostics[0] if out.diagnostics else None)

    lo, hi = 0, capacity // 1024
    ok, diag = compiles(hi)
    if not ok:
        return VmemNeed(None, count, (diag,) if diag else ())
    probe = 1
    while hi - lo > 1:
        ok, diag = compiles(probe)
        if ok:
            hi = probe
        else:
            lo = probe
            # The OOM message's size is an allocation the kernel needs, so a lower bound.
            needed = diag.get("needed_bytes") if diag and diag.code == "vmem-oom" else None
            if needed and needed * 0.995 / 1024 - 1 > lo:
                lo = min(hi - 1, math.floor(needed * 0.995 / 1024) - 1)
                guess = math.ceil(needed * 1.005 / 1024) + 1
                if lo < guess < hi:
                    probe = guess
                    continue
        probe = (lo + hi) // 2
    return VmemNeed(hi * 1024, count, ())


def _placed_by_xla(signature: str, at: int) -> bool:
    """An ANY-memory-space operand the compiler placed in VMEM itself (7x does so for small
    ones): outside the kernel's scoped VMEM, which vmem_exact's bisection confirms."""
    return "unspecified_memory_space" in signature[at: signature.find("}", at)]


# `%x_ref: i32 {llo.type = memref<128x128xbf16, #xir.tiled<(8,128)(2,1),[1,1]>,
#  #xir.memory_space<vmem, tc>>}` in the compiled module's main function signature (libtpu
#  0.0.48, JAX 0.11's, writes `#tpu.` where 0.0.52 writes `#xir.`).
_BUFFER = re.compile(r"llo\.type = memref<(?:(?P<shape>\d+(?:x\d+)*)x)?"
                     r"(?P<dtype>[a-z]+)(?P<bits>\d+)"
                     r"(?:, #(?:xir|tpu)\.tiled<\((?P<tile>[\d,]+)\)[^>]*>)?"
                     r", #(?:xir|tpu)\.memory_space<(?P<space>\w+)")
_ATTR = r"\b{}\s*=\s*(\d+)"
_ALLOCA_VMEM = re.compile(r"llo\.alloca_vmem (\d+)")
# `llo.alloca_vmem N` counts 512-byte units (one 128-lane row of 32-bit words): a 128x128
# f32 run_scoped buffer (64 KiB) is `alloca_vmem 128` on v4, v5e, v6e and 7x alike.
_VMEM_ALLOCA_UNIT = 512


@dataclasses.dataclass(frozen=True)
class Buffers:
    """The kernel's VMEM/SMEM buffers as the compiled module declares them (bytes, in the
    compiler's tiled layout): pipelined blocks twice (double-buffered), scratch and scalar
    prefetch once. Not the compiler's need, which `vmem_exact` measures: the compiler's own
    scratch is not declared (the need can be more), and windows libtpu shares or drops are
    (narrow or aliased windows: the need can be less, 128 KiB where 192 KiB are declared)."""

    vmem_bytes: int | None
    smem_bytes: int | None


def module_buffers(text: str) -> Buffers:
    """VMEM and SMEM bytes from the main function's signature of a compiled Mosaic module
    (the `post-finalize-llo` dump); None where the module does not say."""
    start = text.find("func.func")
    while start >= 0:
        end = text.find("{\n", start)
        sig = text[start: end if end > 0 else len(text)]
        if "window_params" in sig or "xir.main" in sig or "tpu.main" in sig:
            break
        start = text.find("func.func", start + 1)
    else:
        return Buffers(None, None)
    head = sig.split(" attributes ", 1)
    attrs = head[1] if len(head) > 1 else ""
    prefetch = _int_attr(attrs, "scalar_prefetch")
    scratch = _int_attr(attrs, "scratch_operands")
    # no window_params: no grid, so no operand is pipelined (all stay in HBM/ANY or whole)
    windows = attrs.count("transform_indices") if "window_params" in attrs else 0
    buffers = list(_BUFFER.finditer(head[0]))
    if not buffers:
        return Buffers(None, None)
    params = attrs.split("window_params", 1)[-1]
    synchronous = [m.group(0) for m in re.finditer(r"\{[^{}]*\}", params)]
    vmem = smem = 0
    n = len(buffers)
    for i, m in enumerate(buffers):
        dims = [int(d) for d in m["shape"].split("x")] if m["shape"] else []
        if m["tile"]:
            tile = [int(t) for t in m["tile"].split(",") if t]
            for j, t in enumerate(tile, start=len(dims) - len(tile)):
                if 0 <= j < len(dims) and t > 0:
                    dims[j] = -(-dims[j] // t) * t
        size = math.prod(dims) * max(1, int(m["bits"]) // 8)
        w = i - prefetch
        copies = 1
        if prefetch <= i < n - scratch and 0 <= w < windows:
            copies = 1 if w < len(synchronous) and "synchronous" in synchronous[w] else 2
        if m["space"] == "vmem" and not _placed_by_xla(head[0], m.end()):
            vmem += copies * size
        elif m["space"] == "smem":
            smem += copies * size
    # Buffers the body allocates itself (run_scoped, emit_pipeline's double buffers).
    vmem += sum(int(n) for n in _ALLOCA_VMEM.findall(text)) * _VMEM_ALLOCA_UNIT
    return Buffers(vmem, smem)


def _int_attr(attrs: str, name: str) -> int:
    m = re.search(_ATTR.format(name), attrs)
    return int(m.group(1)) if m else 0


# libtpu's fatal log line: "F1127 17:12:52.840129   17691 file.cc:2714] Check failed: ..."
_FATAL = re.compile(r"^F\d{4} [\d:.]+\s+\d+ (?P<at>[\w.]+:\d+)\] (?P<what>.*)$", re.M)
_SEMAPHORE_SPACE = "memory space: sflag"


def compiler_crash(message: str, kernel_name: str, target: str) -> Diagnostic:
    """The diagnostic for a compile that killed libtpu (a failed CHECK aborts the process):
    the compiler's own fatal line, and what it means where we know."""
    m = _FATAL.search(message)
    what = f"{m['what'].strip()} (at {m['at']})" if m else diagnostics.headline(message)
    text = (f"libtpu aborted while compiling kernel {kernel_name!r} for {target} (ahead of "
            f"time, on this CPU host): {what}")
    if _SEMAPHORE_SPACE in message:
        text += (". XLA's TPU backend was asked to copy a buffer out of semaphore memory "
                 "(\"sflag\"): a semaphore returned by one pallas_call and passed to another "
                 "(JAX's async-copy pattern) is copied between the calls by this compile. "
                 "Whether the compile on a TPU host accepts it is not checked here")
    return Diagnostic("error", "compiler-crash", text)
