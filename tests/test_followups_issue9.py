"""Follow-ups to issue 9 (an honest answer on every input): the workbench's repr and its
per-tab reasons, `inspect` on a grid with no programs, `check` on a kernel with warnings only."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl

import pallaslab
from pallaslab.cli import main

HERE = __file__
LIMIT_ENV = "PALLASLAB_MAX_PROGRAMS"


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _launch(grid, name="add_one"):
    def add_one(x):
        spec = pl.BlockSpec((8, 128), lambda *ids: (0, 0))
        return pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=grid, in_specs=[spec], out_specs=spec, name=name)(x)

    return add_one, (jax.ShapeDtypeStruct((8, 128), jnp.float32),)


def empty_grid_case():
    return _launch((0,))


def sixty_four_programs_case():
    """Every program writes the same block: fine on TPU (consecutive revisits, "arbitrary")."""
    return _launch((64,))


# --- Workbench.__repr__ and the reason a tab is not available -------------------------------


def test_workbench_repr_shows_control_and_bidi_characters_visibly():
    evil = "k\u202eevil\x1b[31mred\x07"
    fn, args = _launch((2,), name=evil)
    wb = pallaslab.inspect(fn, *args)
    text = repr(wb)
    assert "\u202e" not in text and "\x1b" not in text and "\x07" not in text
    assert "k<U+202E>evilred<U+0007>" in text  # ANSI colour removed, the rest made visible
    assert text.startswith("<Workbench add_one: 1 kernel(s) [")


def test_each_unavailable_tab_gives_its_own_reason(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "16")
    fn, args = sixty_four_programs_case()
    wb = pallaslab.inspect(fn, *args)
    assert "grid" not in [t.name for t in wb.tabs()]
    with pytest.raises(pallaslab.PallasLabError) as grid_err:
        wb.grid()
    assert "Grid view is not available" in str(grid_err.value)
    assert "64 programs" in str(grid_err.value) and LIMIT_ENV in str(grid_err.value)
    with pytest.raises(pallaslab.PallasLabError) as cmp_err:
        wb.compare()
    message = str(cmp_err.value)
    assert "Compare view is not available for kernel 'add_one': no comparison has been run" \
        in message
    assert "wb.compare(executors=" in message
    assert LIMIT_ENV not in message and "64 programs" not in message


def test_a_mesh_kernel_gets_a_reason_per_tab():
    from kernels import CATALOG

    from pallaslab.views.registry import tab
    from pallaslab.workbench import unavailable_reason

    fn, args = CATALOG["gpu_mesh_kernel"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    ctx = wb.context(0)
    assert "mesh kernels" in unavailable_reason(ctx, tab("grid"))
    assert "no comparison" in unavailable_reason(ctx, tab("compare"))


# --- the CLI ---------------------------------------------------------------------------------


def test_inspect_counts_zero_programs_as_zero(capsys):
    assert main(["inspect", f"{HERE}:empty_grid_case"]) == 0
    out = capsys.readouterr().out
    assert "grid 0 = 0 programs" in out and "? programs" not in out


def test_check_says_ok_with_warnings_and_names_them(capsys, monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "16")
    spec = f"{HERE}:sixty_four_programs_case"
    assert main(["check", spec]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("ok (1 warning(s))  ") and "add_one" in lines[0]
    assert lines[1].strip() == "warnings: tiling-unavailable (--warnings shows them)"
    assert main(["check", spec, "--warnings"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok (1 warning(s))  ")
    assert "tiling-unavailable: add_one: grid (64,)" in out
    assert "--warnings shows them" not in out
    assert main(["check", spec, "--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert k["ok"] and k["warnings"] == ["tiling-unavailable"]


def test_check_without_warnings_is_plain_ok(capsys):
    assert main(["check", f"{HERE}:sixty_four_programs_case"]) == 0
    assert capsys.readouterr().out.startswith("ok  ")
