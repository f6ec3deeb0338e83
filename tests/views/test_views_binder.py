"""binder/: a working repo2docker configuration (Python 3.12, pallaslab from this repo)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import tomllib
from pathlib import Path

import nbformat
from binder_env import binder_env_dir, binder_kernel
from nbclient import NotebookClient
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
        if not line.startswith((".", "-c ")):  # the pins: tests/test_pins.py
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


def test_the_binder_environment_runs_this_repos_pallaslab_installed_not_the_source_tree():
    """The tutorials (tests/test_notebooks.py) and the course run in a kernel of the environment
    built from binder/ alone: pallaslab there is the copy pip installed from this repository,
    with the compilers the tutorials use."""
    kernel = binder_kernel()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import sys, os, jax, libtpu, triton, pallaslab\n"
        "print(sys.prefix); print(pallaslab.__file__); print(os.environ['JAX_PLATFORMS'])\n"
        "print(jax.devices()[0].platform)")])
    NotebookClient(nb, timeout=300, kernel_name=kernel,
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    prefix, module, platforms, platform = nb.cells[0].outputs[0]["text"].split()
    venv = binder_env_dir() / "venv"
    assert Path(prefix) == venv
    assert Path(module).is_relative_to(venv / "lib") and not Path(module).is_relative_to(ROOT)
    assert platforms == platform == "cpu"


PINNED_IN_BINDER = ("jax", "jaxlib", "libtpu", "triton", "jupyterlab", "anywidget", "ipywidgets",
                    "numpy")


def test_binder_installs_the_pinned_set():
    """A Binder launch gets exactly the versions the suite passes with (pins.txt), not whatever
    the registry serves that day."""
    pins = {m.group(1).lower(): m.group(2) for m in re.finditer(
        r"^([A-Za-z0-9_.\-]+)==(\S+)$", (ROOT / "pins.txt").read_text(), re.M)}
    python = binder_env_dir() / "venv" / "bin" / "python"
    binder_kernel()  # builds the environment on first use
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, sys; "
         "print(' '.join(m.version(n) for n in sys.argv[1:]))", *PINNED_IN_BINDER],
        capture_output=True, text=True, check=True).stdout.split()
    assert dict(zip(PINNED_IN_BINDER, out, strict=True)) == \
        {name: pins[name] for name in PINNED_IN_BINDER}
