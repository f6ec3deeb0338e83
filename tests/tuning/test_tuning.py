"""`pallaslab.tuning` keeps to its row of the layer table (docs/architecture.md): it may use
the model, the analyses, the lowering layer, the views' parts and base (the live widget and
its saved copy), errors and util; never the
executors, the workbench or the shells; matplotlib only inside the function that draws."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_architecture import imports, module_name, under

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted((ROOT / "pallaslab" / "tuning").glob("*.py"))
ALLOWED = ("pallaslab.tuning", "pallaslab.model", "pallaslab.analysis", "pallaslab.lowering",
           "pallaslab.views.parts", "pallaslab.views._html", "pallaslab.views.base",
           "pallaslab.errors", "pallaslab.util")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_the_package_imports_only_what_its_row_allows(path):
    ours = {d for d in imports(path) if under(d, "pallaslab")}
    assert all(under(d, *ALLOWED) for d in ours), (module_name(path), ours)
    assert not any(under(d, "matplotlib", "plotly") for d in imports(path, top_level_only=True))


def test_the_api_name_is_the_function_even_after_the_package_loads():
    import pallaslab.tuning.search  # a subpackage named `tune` would shadow the function

    assert callable(pallaslab.tune) and pallaslab.tune.__module__ == "pallaslab.tuning.search"
