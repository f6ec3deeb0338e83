"""Every course notebook runs headless with its solutions, in the environment Binder builds from
binder/ alone (`binder_env`): each solution cell's verdict is "correct", each stub cell
answers (unfinished, not a pass), each picture is pallaslab's grid view with its static HTML;
and the notebooks are the ones `make_course.py` writes today."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import nbformat
import pytest
from binder_env import binder_kernel
from nbclient import NotebookClient

from pallaslab.exercises import exercises

pytestmark = pytest.mark.slow  # six notebook kernels, each starting a worker process

COURSE = Path(__file__).resolve().parents[2] / "notebooks" / "course"
NOTEBOOKS = sorted(COURSE.glob("*.ipynb"))


@functools.cache
def executed(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name=binder_kernel(),
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def _text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", ""))
        parts.append(out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def _tagged(nb: nbformat.NotebookNode, tag: str) -> list:
    return [c for c in nb.cells if tag in c.metadata.get("tags", [])]


def test_six_notebooks_hold_every_exercise_and_the_index_links_them():
    assert len(NOTEBOOKS) == 6
    held = {line.split()[2] for p in NOTEBOOKS for c in nbformat.read(p, as_version=4).cells
            if c.cell_type == "code" and (line := c.source.splitlines()[0] if c.source else "")
            .startswith("%%pallas --exercise")}
    assert held == set(exercises()) and len(held) >= 24
    assert "course/README.md" in (COURSE.parent / "README.md").read_text()


def test_the_notebooks_are_what_make_course_writes():
    spec = importlib.util.spec_from_file_location("make_course", COURSE / "make_course.py")
    assert spec is not None and spec.loader is not None
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    for n, stem in make.FILES.items():
        on_disk = nbformat.read(COURSE / f"{stem}.ipynb", as_version=4)
        assert [c.source for c in on_disk.cells] == [c.source for c in make.notebook(n).cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_its_solutions_are_correct(path):
    nb = executed(path)
    solutions, stubs = _tagged(nb, "solution"), _tagged(nb, "exercise")
    assert len(solutions) == len(stubs) >= 4
    for cell in solutions:
        name = cell.source.splitlines()[0].split()[2]
        assert f"{name}: ✅ correct" in _text(cell), _text(cell)
    for cell in stubs:
        assert "❌" in _text(cell) and "✅" not in _text(cell), _text(cell)
    pictures = [c for c in nb.cells if ".grid()" in c.source]
    for cell in pictures:
        bundles = [o.get("data", {}) for o in cell.outputs
                   if o.output_type in ("execute_result", "display_data")]
        assert bundles and "text/html" in bundles[0], cell.outputs
