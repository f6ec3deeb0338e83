"""The environment repo2docker builds from binder/ alone, in which the tutorials and the course
run: a fresh virtual environment of runtime.txt's Python, then `pip install -r
binder/requirements.txt` from the repository root (no postBuild), JAX kept on the CPU as
binder/start keeps it. Built once per test run and shared by the pytest-xdist workers (a file
lock); the run's controller removes it at the end (`remove_binder_env`)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
KERNEL_NAME = "pallaslab-binder"
RUN_VARIABLE = "PALLASLAB_TEST_RUN"  # set by conftest before the workers start


def binder_env_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"pallaslab-binder-{os.environ[RUN_VARIABLE]}"


def binder_kernel() -> str:
    """The name of a Jupyter kernel running in the binder environment (built on first use);
    its spec is found through JUPYTER_PATH, which this sets."""
    env_dir = binder_env_dir()
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{env_dir}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (env_dir / ".built").exists():
            shutil.rmtree(env_dir, ignore_errors=True)
            _build(env_dir)
    share = str(env_dir / "share" / "jupyter")
    paths = os.environ.get("JUPYTER_PATH", "").split(os.pathsep)
    if share not in paths:
        os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in [share, *paths] if p)
    return KERNEL_NAME


def _build(env_dir: Path) -> None:
    assert not (BINDER / "postBuild").exists()  # else run it as repo2docker would
    assert (BINDER / "runtime.txt").read_text().strip() == \
        f"python-{sys.version_info.major}.{sys.version_info.minor}"
    venv = env_dir / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r",
         "binder/requirements.txt"], cwd=ROOT, env=clean_env(), capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    spec = env_dir / "share" / "jupyter" / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(venv / "bin" / "python"), "-m", "ipykernel_launcher", "-f",
                 "{connection_file}"],
        "display_name": "Python 3 (binder/ alone)", "language": "python",
        # binder/start keeps JAX on the CPU; the test run's own module path stays out
        "env": {"JAX_PLATFORMS": "cpu", "PYTHONPATH": "", "VIRTUAL_ENV": str(venv)}}))
    (env_dir / ".built").touch()


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("VIRTUAL_ENV", "PYTHONPATH", "JAX_PLATFORMS", "XLA_FLAGS")}


def remove_binder_env() -> None:
    if RUN_VARIABLE in os.environ:
        shutil.rmtree(binder_env_dir(), ignore_errors=True)
        Path(f"{binder_env_dir()}.lock").unlink(missing_ok=True)
