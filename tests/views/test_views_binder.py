"""binder/: a working repo2docker configuration (Python 3.12, pallaslab from this repo)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).parents[2]
BINDER = ROOT / "binder"


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_runtime_is_python_312():
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert runtime == "python-3.12"
    assert pyproject()["project"]["requires-python"] == ">=3.12"


def requirement_lines():
    return [line.strip() for line in (BINDER / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def test_requirements_install_this_repo_with_the_tutorials_extras():
    lines = requirement_lines()
    local = [line for line in lines if line.startswith(".")]
    assert local == [".[notebook,tpu,gpu]"]  # libtpu and triton: the tutorials compile
    extras = re.findall(r"\[(.*)\]", local[0])[0].split(",")
    assert set(extras) <= set(pyproject()["project"]["optional-dependencies"])
    for line in lines:
        if not line.startswith("."):
            Requirement(line)  # every other line is a valid requirement


def test_the_named_set_is_installable_here():
    """This environment is a witness: every requirement of pallaslab[notebook,tpu,gpu] is
    installed at a version that satisfies it."""
    project = pyproject()["project"]
    extras = project["optional-dependencies"]
    needed = project["dependencies"] + extras["notebook"] + extras["tpu"] + extras["gpu"]
    for text in needed:
        req = Requirement(text)
        version = importlib.metadata.version(req.name)
        assert req.specifier.contains(version, prereleases=True), (text, version)


def test_start_script_is_executable_bash():
    start = BINDER / "start"
    assert os.access(start, os.X_OK)
    assert start.read_text().startswith("#!/bin/bash")
    subprocess.run(["bash", "-n", str(start)], check=True)
    assert 'exec "$@"' in start.read_text()


def test_tutorials_exist_for_binder_to_open():
    assert (ROOT / "notebooks" / "01_grids_and_blockspecs.ipynb").is_file()


@pytest.mark.slow
def test_a_binder_environment_built_from_binder_alone_runs_every_tutorial(tmp_path):
    """As repo2docker builds it: a fresh virtual environment of runtime.txt's Python, then
    `pip install -r binder/requirements.txt` from the repository root (no postBuild here),
    then every notebook executed through binder/start (which keeps JAX on the CPU)."""
    assert not (BINDER / "postBuild").exists()  # else run it as repo2docker would
    python = Path(sys._base_executable)  # this venv's base interpreter: Python 3.12
    assert (BINDER / "runtime.txt").read_text().strip() == \
        f"python-{sys.version_info.major}.{sys.version_info.minor}"
    env = tmp_path / "binder-env"
    subprocess.run([str(python), "-m", "venv", str(env)], check=True)
    clean = {k: v for k, v in os.environ.items()
             if k not in ("VIRTUAL_ENV", "PYTHONPATH", "JAX_PLATFORMS", "XLA_FLAGS")}
    install = subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r",
         "binder/requirements.txt"], cwd=ROOT, env=clean, capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    out = tmp_path / "executed"
    notebooks = sorted(str(p) for p in (ROOT / "notebooks").glob("*.ipynb"))
    run = subprocess.run(
        [str(BINDER / "start"), str(env / "bin" / "jupyter"), "nbconvert", "--to", "notebook",
         "--execute", "--ExecutePreprocessor.timeout=900", "--output-dir", str(out),
         *notebooks], cwd=tmp_path,
        env={**clean, "PATH": f"{env / 'bin'}:{clean.get('PATH', '')}"},
        capture_output=True, text=True, timeout=3600)
    assert run.returncode == 0, run.stderr[-5000:]
    for path in sorted(out.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        errors = [o for c in nb["cells"] if c["cell_type"] == "code"
                  for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, (path.name, errors)
    assert len(list(out.glob("*.ipynb"))) == len(notebooks)
