"""Disk cache of lowering results, so re-lowering an unchanged kernel is instant.

Key: (cache schema, jax/jaxlib versions, the compiler's version (libtpu or triton), target,
options, kernel content hash). The kernel hash covers what decides the lowered code: the
kernel jaxpr, every operand's shape/dtype/block/index map/memory space, grid, semantics,
compiler params, and the kernel's source location (stages map IR lines to it).
Location: $PALLASLAB_CACHE_DIR, else $XDG_CACHE_HOME/pallaslab, else ~/.cache/pallaslab.

An entry that cannot be read or has the wrong structure (truncated, not an object, missing
keys, wrong types) is a miss; the next store rewrites it. `info()` and `clear()` back
`pallaslab cache`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, get_args

from lowering.result import Diagnostic, KernelLowering, LoweringBackend, Resources, Stage
from pallaslab.errors import PallasLabError
from pallaslab.model import Kernel

SCHEMA = 8  # 2: lowered under the target's own abstract device; 3: VMEM of body allocations;
# 4: Triton compiles the module bytecode of the custom call (multi-line loc aliases);
# 5: a pallas_call with Mosaic GPU params says why it is shown lowered with Triton
# 6: Mosaic GPU kernels compile (PTX, ptxas, SASS) with XLA's CUDA plugin
# 7: kernels captured inside shard_map lower inside one (remote DMAs, device semaphores)
# 8: ... and compile over a multi-chip topology (options gain "devices")


class CacheError(PallasLabError, OSError):
    """The cache cannot be cleared (e.g. its directory is read-only)."""

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def cache_dir() -> Path:
    root = os.environ.get("PALLASLAB_CACHE_DIR")
    if root:
        return Path(root) / "lowering"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pallaslab" / "lowering"


def kernel_fingerprint(kernel: Kernel) -> str:
    parts = [
        kernel.kind, kernel.name, str(kernel.source), kernel.kernel_jaxpr, repr(kernel.grid),
        repr(kernel.grid_names), repr(kernel.dimension_semantics), repr(kernel.vmapped_dims),
        repr(kernel.operands), repr(kernel.input_output_aliases),
        repr(sorted((k, sorted(v.items())) for k, v in kernel.compiler_params.items())),
        repr(kernel.cost_estimate), repr(kernel.mesh), repr(kernel.traced_for_chip),
    ]
    text = _ADDRESS.sub("", "\x00".join(parts))
    return hashlib.sha256(text.encode()).hexdigest()


@functools.cache
def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def cache_key(kernel: Kernel, target: str, options: dict[str, Any]) -> str:
    compiler = "libtpu" if target.startswith("tpu") else "triton"
    payload = {"schema": SCHEMA, "jax": _version("jax"), "jaxlib": _version("jaxlib"),
               compiler: _version(compiler), "target": target, "options": options,
               "kernel": kernel_fingerprint(kernel)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:40]


def load(key: str) -> KernelLowering | None:
    """The cached lowering for `key`, or None: absent, unreadable or malformed entries are
    misses (never errors), so a damaged cache costs one re-lowering."""
    path = cache_dir() / f"{key}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        result = KernelLowering.from_json(data)
    except Exception:  # truncated, not JSON, a list, missing keys, ...
        return None
    return result if _well_formed(result) else None


def _well_formed(k: KernelLowering) -> bool:
    """`from_json` builds dataclasses from whatever it is given; check the field types."""
    return (isinstance(k.name, str) and _is_int(k.index) and k.backend in get_args(LoweringBackend)
            and isinstance(k.ok, bool) and isinstance(k.compiled, bool)
            and all(_stage_ok(s) for s in k.stages)
            and all(_diagnostic_ok(d) for d in k.diagnostics)
            and _resources_ok(k.resources))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _stage_ok(s: Stage) -> bool:
    return isinstance(s.name, str) and isinstance(s.text, str)


def _diagnostic_ok(d: Diagnostic) -> bool:
    return all(isinstance(v, str) for v in (d.severity, d.code, d.message)) and (
        d.operand is None or isinstance(d.operand, str))


def _resources_ok(r: Resources) -> bool:
    return all(v is None or _is_int(v) for v in dataclasses.astuple(r))


def store(key: str, result: KernelLowering) -> None:
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(result.to_json(), f)
        os.replace(tmp, directory / f"{key}.json")  # atomic: readers never see half a file
    except OSError:
        pass  # a read-only or full disk only costs speed


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    directory: Path
    entries: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "entries": self.entries, "bytes": self.bytes}


def _entry_files(directory: Path) -> list[Path]:
    """The cache's own files: entries and interrupted stores (never anything else there)."""
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir()
            if p.is_file() and p.suffix in (".json", ".tmp")]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def info() -> CacheInfo:
    """Where the cache is, how many entries it holds and their total size."""
    directory = cache_dir()
    files = _entry_files(directory)
    return CacheInfo(directory, sum(p.suffix == ".json" for p in files),
                     sum(_size(p) for p in files))


def clear() -> CacheInfo:
    """Remove every entry; returns what was removed (entries and bytes freed)."""
    directory = cache_dir()
    entries = freed = 0
    for path in _entry_files(directory):
        size = _size(path)
        try:
            path.unlink()
        except FileNotFoundError:
            continue  # removed meanwhile by another process
        except OSError as err:
            raise CacheError(f"cannot remove the cache entry {str(path)!r}: "
                             f"{err.strerror or err}") from err
        freed += size
        entries += path.suffix == ".json"
    return CacheInfo(directory, entries, freed)
