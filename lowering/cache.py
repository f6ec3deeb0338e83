"""Disk cache of lowering results, so re-lowering an unchanged kernel is instant.

Key: (cache schema, jax/jaxlib versions, the compiler's version (libtpu or triton), target,
options, kernel content hash). The kernel hash covers what decides the lowered code: the
kernel jaxpr, every operand's shape/dtype/block/index map/memory space, grid, semantics,
compiler params, and the kernel's source location (stages map IR lines to it).
Location: $PALLASLAB_CACHE_DIR, else $XDG_CACHE_HOME/pallaslab, else ~/.cache/pallaslab.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from lowering.result import KernelLowering
from pallaslab.model import Kernel

SCHEMA = 1
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
        repr(kernel.cost_estimate), repr(kernel.mesh),
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
    path = cache_dir() / f"{key}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return KernelLowering.from_json(data)


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
