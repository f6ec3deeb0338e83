"""JAX's persistent compilation cache, in a folder of pallaslab's cache directory.

Enabled only in pallaslab's own processes (the executor worker, the CLI), never in a user's
notebook process, whose JAX options are the user's. The folder is named after the versions
that decide whether an entry can be read back (`jax-<jax>-<jaxlib>-pallaslab-<version>`);
the files inside are JAX's own. Thresholds are zero, so a small kernel's compile is kept too.

A leaf helper: `pallaslab.lowering.cache` (which checks $PALLASLAB_CACHE_DIR and reports a bad
one) and the executor worker (which may not import the lowering layer) both find the folder
here.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from pathlib import Path

from pallaslab.util import private_dir

CACHE_DIR_ENV = "PALLASLAB_CACHE_DIR"
PREFIX = "jax-"


@functools.cache
def installed_version(dist: str) -> str:
    """The installed version of a distribution ("absent" when it is not installed)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def folder_name() -> str:
    jax, jaxlib = installed_version("jax"), installed_version("jaxlib")
    return f"{PREFIX}{jax}-{jaxlib}-pallaslab-{installed_version('pallaslab')}"


def default_root() -> Path | None:
    """pallaslab's cache directory as the environment names it; None when
    $PALLASLAB_CACHE_DIR is not an absolute path (`pallaslab cache` reports that)."""
    text = os.environ.get(CACHE_DIR_ENV)
    if text:
        return Path(text) if os.path.isabs(text) else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pallaslab"


def enable(root: Path | None = None) -> Path | None:
    """Point this process's JAX at the persistent cache folder under `root` (default: the
    environment's), created private and never through a link; returns the folder, or None
    when it cannot be made (the process then compiles as before: only speed is lost)."""
    import jax

    root = root if root is not None else default_root()
    if root is None:
        return None
    folder = root / folder_name()
    try:
        root.parent.mkdir(mode=private_dir.PRIVATE_MODE, parents=True, exist_ok=True)
        os.close(private_dir.open_dir(root, create=True))
        os.close(private_dir.open_dir(folder, create=True))
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # no size threshold
    return folder
