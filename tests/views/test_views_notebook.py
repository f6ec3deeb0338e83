"""The tutorial notebook runs top to bottom on the CPU (nbclient), and shows its views."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).parents[2] / "notebooks" / "01_grids_and_blockspecs.ipynb"
WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def executed():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    return nb


def test_tutorial_runs_without_errors(executed):
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors, [(e.ename, e.evalue) for e in errors]


def test_pallas_cells_show_the_workbench_and_keep_their_value(executed):
    magic_cells = [c for c in executed.cells
                   if c.cell_type == "code" and c.source.startswith("%%pallas")]
    assert len(magic_cells) >= 3
    for cell in magic_cells:
        shown = [o for o in cell.outputs if o.output_type == "display_data"]
        assert shown and WIDGET in shown[0].data and "text/html" in shown[0].data
        assert "Grid of kernel" in shown[0].data["text/plain"]
        results = [o for o in cell.outputs if o.output_type == "execute_result"]
        assert results and "Array(" in results[0].data["text/plain"]


def test_teaching_text_matches_what_the_code_prints(executed):
    text = "\n".join(o.get("text", "") for c in executed.cells if c.cell_type == "code"
                     for o in c.outputs if o.output_type == "stream")
    assert "outputs  fetches  12" in text and "args[0]  fetches  24" in text
    assert "output-revisit" in text and "uncovered-output" in text
