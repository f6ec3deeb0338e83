"""What starting pallaslab imports (issue 16: keep start-up lean). The static rule (heavy
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
