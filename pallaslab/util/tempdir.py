"""One temporary directory per pallaslab process, removed when the process ends.

Profiles, worker logs, executor workers' scratch and libtpu's own log directory all live
under it, so nothing pallaslab writes outlives the session (`$TMPDIR/pallaslab-XXXX/`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

_lock = threading.Lock()
_root: Path | None = None
_owner_pid: int | None = None


def session_tmpdir() -> Path:
    """This process's pallaslab temporary directory (created on first use)."""
    global _root, _owner_pid
    with _lock:
        if _root is None or _owner_pid != os.getpid() or not _root.exists():
            _root = Path(tempfile.mkdtemp(prefix="pallaslab-"))
            _owner_pid = os.getpid()
            atexit.register(_remove, _root, _owner_pid)
        return _root


def session_subdir(name: str) -> Path:
    """A named directory under `session_tmpdir()` (created on first use)."""
    path = session_tmpdir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def remove_session_tmpdir() -> None:
    """Remove this process's directory now (a signal is ending the process: atexit may not
    run). A later `session_tmpdir()` creates a fresh one."""
    global _root
    with _lock:
        root, pid, _root = _root, _owner_pid, None
    if root is not None and pid is not None:
        _remove(root, pid)


def _remove(root: Path, pid: int) -> None:
    if os.getpid() == pid:  # a forked child must not remove its parent's directory
        shutil.rmtree(root, ignore_errors=True)
