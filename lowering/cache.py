"""Disk cache of lowering results, so re-lowering an unchanged kernel is instant.

Key: (cache schema, jax/jaxlib versions, the compiler's version (libtpu or triton), target,
options, kernel content hash). The kernel hash covers what decides the lowered code: the
kernel jaxpr, every operand's shape/dtype/block/index map/memory space, grid, semantics,
compiler params, and the kernel's source location (stages map IR lines to it).
Location: $PALLASLAB_CACHE_DIR (an absolute path to a directory one can write to, else
`CacheDirError`), else $XDG_CACHE_HOME/pallaslab, else ~/.cache/pallaslab.

The entries live in its `lowering/` directory, private to the user (0o700), which is never
entered through a symbolic link (`pallaslab.util.private_dir`): a link planted there makes
loads miss, stores skip, and `info()`/`clear()` (which back `pallaslab cache`) refuse with
`CacheError`. `clear()` removes only regular files named as pallaslab names its own.

An entry that cannot be read or has the wrong structure (truncated, not an object, missing
keys, wrong types) is a miss; the next store rewrites it. A store that fails (a full disk) leaves
no temporary file behind.

Beside `lowering/`, JAX's persistent compilation cache of pallaslab's own processes (the
executor worker, the CLI; never a notebook's) lives in `jax-<jax>-<jaxlib>-pallaslab-<version>/`
(`pallaslab.util.jax_cache`): `jax_info()` measures it and `jax_clear()` removes its entries
(the regular files JAX names `<key>-cache` and `<key>-atime`, in every such folder, nothing
through a link).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from pallaslab.errors import PallasLabError
from pallaslab.lowering.result import Diagnostic, KernelLowering, LoweringBackend, Resources, Stage
from pallaslab.model import Kernel
from pallaslab.util import jax_cache, private_dir

SCHEMA = 8  # 2: lowered under the target's own abstract device; 3: VMEM of body allocations;
# 4: Triton compiles the module bytecode of the custom call (multi-line loc aliases);
# 5: a pallas_call with Mosaic GPU params says why it is shown lowered with Triton
# 6: Mosaic GPU kernels compile (PTX, ptxas, SASS) with XLA's CUDA plugin
# 7: kernels captured inside shard_map lower inside one (remote DMAs, device semaphores)
# 8: ... and compile over a multi-chip topology (options gain "devices")


class CacheError(PallasLabError, OSError):
    """The cache cannot be read or cleared (e.g. its directory is read-only, or a link)."""


class CacheDirError(PallasLabError, ValueError):
    """$PALLASLAB_CACHE_DIR names no directory the cache can live in."""


CACHE_DIR_ENV = "PALLASLAB_CACHE_DIR"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# What pallaslab writes in the cache: entries, and temporary files of stores cut short by a
# crash (`tmp*.tmp`, as `private_dir.write_atomically` and older pallaslab name them).
_OUR_FILES = re.compile(r"[0-9a-f]{40}\.json|tmp[a-z0-9_]+\.tmp")
# JAX's persistent cache: an entry `<key>-cache` and its access time `<key>-atime`.
_JAX_FILES = re.compile(r"[^/.][^/]*-(cache|atime)")
_JAX_FOLDERS = re.compile(re.escape(jax_cache.PREFIX) + r".+-pallaslab-.+")


def cache_dir() -> Path:
    """The directory of the entries. Raises CacheDirError when $PALLASLAB_CACHE_DIR is set to
    a relative path, to something not a directory, or to a place one cannot write to."""
    text = os.environ.get(CACHE_DIR_ENV)
    if text:
        return _checked_cache_root(text) / "lowering"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pallaslab" / "lowering"


def _checked_cache_root(text: str) -> Path:
    root = Path(text)
    setting = f"{CACHE_DIR_ENV}={text!r}"
    if not root.is_absolute():
        raise CacheDirError(f"{setting} is not an absolute path "
                            f"(e.g. {CACHE_DIR_ENV}={os.path.abspath(text)})")
    existing = next(p for p in (root, *root.parents) if os.path.lexists(p))
    where = setting if existing == root else \
        f"{setting} cannot be created: {str(existing)!r}"
    if not existing.is_dir():
        raise CacheDirError(f"{where} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CacheDirError(f"{where} is not a directory you can write to")
    return root


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


def cache_key(kernel: Kernel, target: str, options: dict[str, Any]) -> str:
    compiler = "libtpu" if target.startswith("tpu") else "triton"
    version = jax_cache.installed_version
    payload = {"schema": SCHEMA, "jax": version("jax"), "jaxlib": version("jaxlib"),
               compiler: version(compiler), "target": target, "options": options,
               "kernel": kernel_fingerprint(kernel)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:40]


def load(key: str) -> KernelLowering | None:
    """The cached lowering for `key`, or None: absent, unreadable or malformed entries are
    misses (never errors), so a damaged cache costs one re-lowering."""
    directory = cache_dir()
    try:
        fd = private_dir.open_dir(directory)
        try:
            text = private_dir.read_text(fd, f"{key}.json")
        finally:
            os.close(fd)
        result = KernelLowering.from_json(json.loads(text))
    except Exception:  # absent, a link, truncated, not JSON, a list, missing keys, ...
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
        # Only the last directory of a new path gets the mode: the cache root, then `lowering`.
        directory.parent.mkdir(mode=private_dir.PRIVATE_MODE, parents=True, exist_ok=True)
        fd = private_dir.open_dir(directory, create=True)
        try:
            private_dir.write_atomically(fd, f"{key}.json",
                                         lambda f: json.dump(result.to_json(), f))
        finally:
            os.close(fd)
    except OSError:
        pass  # a read-only or full disk, or a link in the cache's place, only costs speed


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    directory: Path
    entries: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "entries": self.entries, "bytes": self.bytes}


def _open_existing(directory: Path) -> int | None:
    """The cache directory opened to list it, None when it does not exist yet."""
    try:
        return private_dir.open_dir(directory)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise CacheError(_cannot_open(directory, err)) from err


def _cannot_open(directory: Path, err: OSError) -> str:
    name = repr(str(directory))
    # O_NOFOLLOW | O_DIRECTORY on a link to a directory fails with ENOTDIR on Linux, not ELOOP.
    if err.errno == errno.ELOOP or os.path.islink(directory):
        return (f"the cache directory {name} is a symbolic link; pallaslab never follows one "
                "(it could lead outside the cache): remove the link")
    if err.errno == errno.ENOTDIR:
        return f"the cache directory {name} is not a directory: remove it"
    return f"cannot open the cache directory {name}: {err.strerror or err}"


def _is_entry(f: private_dir.FileEntry) -> bool:
    return f.name.endswith(".json")


def info() -> CacheInfo:
    """Where the cache is, how many entries it holds and their total size."""
    return _info(cache_dir(), _OUR_FILES, _is_entry)


def _info(directory: Path, files_of_ours: re.Pattern[str],
          is_entry: Callable[[private_dir.FileEntry], bool]) -> CacheInfo:
    """A cache folder's entries and total size (only its regular files that match
    `files_of_ours`, never through a link)."""
    fd = _open_existing(directory)
    if fd is None:
        return CacheInfo(directory, 0, 0)
    try:
        files = private_dir.regular_files(fd, files_of_ours)
    finally:
        os.close(fd)
    return CacheInfo(directory, sum(map(is_entry, files)), sum(f.size for f in files))


def clear() -> CacheInfo:
    """Remove every entry (the regular files pallaslab wrote, nothing else and nothing through
    a link); returns what was removed (entries and bytes freed)."""
    return _remove_files(cache_dir(), _OUR_FILES, _is_entry)

def jax_cache_dir() -> Path:
    """The folder of JAX's persistent compilation cache for this jax, jaxlib and pallaslab
    (beside `cache_dir()`; the same checks of $PALLASLAB_CACHE_DIR)."""
    return cache_dir().parent / jax_cache.folder_name()


def _is_jax_entry(f: private_dir.FileEntry) -> bool:
    return f.name.endswith("-cache")


def jax_info() -> CacheInfo:
    """JAX's persistent cache of this version: its folder, entries and total size."""
    return _info(jax_cache_dir(), _JAX_FILES, _is_jax_entry)


def jax_clear() -> CacheInfo:
    """Remove the entries of JAX's persistent cache, in the folders of every version (older
    versions' entries can never be read again); returns this version's folder with what was
    removed from all of them."""
    root = cache_dir().parent
    fd = _open_existing(root)
    if fd is None:
        return CacheInfo(jax_cache_dir(), 0, 0)
    try:
        with os.scandir(fd) as found:
            folders = sorted(e.name for e in found if _JAX_FOLDERS.fullmatch(e.name)
                             and e.is_dir(follow_symlinks=False))
    finally:
        os.close(fd)
    entries = freed = 0
    for name in folders:
        removed = _remove_files(root / name, _JAX_FILES, _is_jax_entry)
        entries, freed = entries + removed.entries, freed + removed.bytes
    return CacheInfo(jax_cache_dir(), entries, freed)


def _remove_files(directory: Path, names: re.Pattern[str],
                  is_entry: Any) -> CacheInfo:
    """Remove the regular files of `directory` named by `names` (never through a link)."""
    fd = _open_existing(directory)
    if fd is None:
        return CacheInfo(directory, 0, 0)
    entries = freed = 0
    try:
        for file in private_dir.regular_files(fd, names):
            try:
                os.unlink(file.name, dir_fd=fd)
            except FileNotFoundError:
                continue  # removed meanwhile by another process
            except OSError as err:
                raise CacheError(f"cannot remove the cache entry {str(directory / file.name)!r}: "
                                 f"{err.strerror or err}") from err
            freed += file.size
            entries += is_entry(file)
    finally:
        os.close(fd)
    return CacheInfo(directory, entries, freed)
