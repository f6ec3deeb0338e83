"""One real IPython InteractiveShell for the magic's test modules, and how they run cells."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output


def ipython_shell(setup: str) -> Iterator[InteractiveShell]:
    """A shell with pallaslab loaded and `setup` run (use as a module fixture's body)."""
    sh = InteractiveShell.instance()
    sh.run_cell("%load_ext pallaslab", store_history=False)
    result = sh.run_cell(setup, store_history=False)
    assert result.success, result.error_in_exec
    yield sh
    InteractiveShell.clear_instance()


def run(sh: InteractiveShell, cell: str) -> tuple[Any, Any]:
    """Run a cell as the user would: (ExecutionResult, captured output)."""
    with capture_output() as out:
        result = sh.run_cell(cell, store_history=True)
    return result, out


def record_displays(monkeypatch: Any) -> list:
    """Every object the magic displays (the Workbench itself), still displayed as usual; not
    the raw MIME bundles an object's own `_ipython_display_` publishes for it."""
    import IPython.display

    objects: list = []
    real = IPython.display.display

    def recording(obj: Any, **kw: Any) -> Any:
        if not kw.get("raw"):
            objects.append(obj)
        return real(obj, **kw)

    monkeypatch.setattr(IPython.display, "display", recording)
    return objects


def plain_text(out: Any) -> str:
    """What the user reads of a cell's captured output: stdout and stderr, no colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)


def same(a, b):
    """Same pytree structure, same leaf types, bit-identical values."""
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb, (ta, tb)
    for u, v in zip(la, lb, strict=True):
        assert type(u) is type(v), (type(u), type(v))
        if isinstance(u, (jax.Array, np.ndarray)):
            assert u.dtype == v.dtype and u.shape == v.shape
            np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
        else:
            assert u == v
