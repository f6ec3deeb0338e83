"""What starting pallaslab imports (issue 16: keep start-up lean; issue 28: `pallaslab --help`
and usage errors never import JAX). The static rule (heavy
optional dependencies imported inside functions) is in test_architecture.py; this checks what
a fresh process really has loaded. Times are in benchmarks/bench_startup.py, never here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("triton", "IPython", "anywidget", "ipywidgets", "matplotlib", "plotly",
         "pallaslab.views", "pallaslab.workbench", "pallaslab.magic")


def _loaded(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, env={"JAX_PLATFORMS": "cpu", "PATH": ""})
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize("code", [
    "import pallaslab",
    "from pallaslab.cli import build_parser; build_parser()",  # what `pallaslab --help` runs
])
def test_start_up_leaves_the_heavy_parts_unloaded(code):
    loaded = _loaded(code)
    assert not [m for m in HEAVY if m in loaded]


def test_the_workbench_loads_when_first_used():
    loaded = _loaded("import pallaslab\npallaslab.Workbench")
    assert "pallaslab.views" in loaded and "IPython" not in loaded


def _loaded_by_command(argv: list[str], env: dict[str, str]) -> tuple[int, set[str]]:
    """Run `python -m pallaslab ARGV` in a fresh process; its exit status and its modules."""
    probe = ("import json, runpy, sys\n"
             f"sys.argv = ['pallaslab', *{argv!r}]\n"
             "try:\n"
             "    runpy.run_module('pallaslab', run_name='__main__', alter_sys=True)\n"
             "except SystemExit as done:\n"
             "    status = done.code\n"
             "print(json.dumps([status, sorted(sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, env=env)
    status, modules = json.loads(done.stdout.splitlines()[-1])
    return status, set(modules)


@pytest.mark.parametrize("env", [{"JAX_PLATFORMS": "cpu", "PATH": ""}, {"PATH": ""}],
                         ids=["JAX_PLATFORMS=cpu", "JAX_PLATFORMS unset"])
@pytest.mark.parametrize("argv, status", [
    (["--help"], 0),
    (["compare", "--help"], 0),  # (lists the executors: the registry loads then, JAX too)
    (["compare", "tests/kernels.py:vector_add", "--bogus"], 2),
    (["compare", "--json"], 2),
    (["lower", "tests/kernels.py:vector_add", "--stage", "nope"], 2),
    (["inspect"], 2),
])
def test_help_and_usage_errors_do_not_import_jax(argv, status, env):
    got, loaded = _loaded_by_command(argv, env)
    assert got == status
    heavy = {"jax", "jaxlib", "numpy", *HEAVY} & loaded
    assert heavy == ({"jax", "jaxlib", "numpy"} & heavy if argv == ["compare", "--help"]
                     else set())
