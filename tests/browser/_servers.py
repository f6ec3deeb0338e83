"""Jupyter servers for the browser tests and the widget benchmark: `jupyter lab` or
`jupyter notebook` (Notebook 7) from this environment on 127.0.0.1, a free port, a token,
private config/settings/workspaces/runtime directories, no news toast; stopped on exit."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

# Lab's own network features, off: the tests block every request that leaves the server.
LAB_QUIET = ("--LabApp.news_url=",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
             "--LabApp.extension_manager=readonly")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path: Path, cells: Sequence[str]) -> None:
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
                     "outputs": [], "source": src} for i, src in enumerate(cells)],
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                      "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))


@contextlib.contextmanager
def jupyter_server(root: Path, app: str = "lab", extra: Sequence[str] = ()) -> Iterator[dict]:
    """Start `jupyter <app>` serving `root`; yields {"base", "token", "root"}."""
    news = root / ".settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True, exist_ok=True)  # no "official Jupyter news?" toast
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "JUPYTER_CONFIG_DIR": str(root / ".config"),
           "JUPYTERLAB_SETTINGS_DIR": str(root / ".settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(root / ".workspaces"),
           "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
    jupyter = Path(sys.executable).with_name("jupyter")
    log_path = root / f"{app}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(jupyter), app, "--no-browser", "--allow-root", f"--port={port}",
             "--ip=127.0.0.1", f"--IdentityProvider.token={token}",
             f"--ServerApp.root_dir={root}", *extra],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_until_up(proc, f"{base}/api/status?token={token}", app, log_path)
            yield {"base": base, "token": token, "root": root}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_until_up(proc: subprocess.Popen, status_url: str, app: str, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(status_url, timeout=2)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"jupyter {app} did not start:\n" + log_path.read_text()) \
                    from None
            time.sleep(0.5)
