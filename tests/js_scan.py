"""The widgets' ES modules as data: functions with their line spans and JSDoc @typedefs with
their keys, read by TypeScript's own parser (`extension/scan.mjs`, run by Node)."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "pallaslab" / "views" / "static"
SCANNER = ROOT / "extension" / "scan.mjs"
TYPESCRIPT = ROOT / "extension" / "node_modules" / "typescript"


@functools.cache
def scan_static() -> dict[str, Any]:
    """{file name: {"functions": [...], "typedefs": {...}}} for every module in static/."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the JS structure is read by TypeScript's parser")
    if not TYPESCRIPT.is_dir():
        pytest.fail(f"TypeScript is not installed in {TYPESCRIPT.parent}: run `make browser-deps`")
    files = sorted(str(p) for p in STATIC.glob("*.js"))
    done = subprocess.run([node, str(SCANNER), *files], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, f"{SCANNER.name} failed: {done.stderr}"
    return {f["file"]: f for f in json.loads(done.stdout)["files"]}
