"""The heatmap's grid: the fastest config per cell of two parameters, cells holding only
configs that are out marked; drawn as SVG per chip."""

from __future__ import annotations

import math

import pytest
from tuning.matmul_case import arguments, matmul

import pallaslab
from pallaslab.tuning.heatmap import any_crossed, axes, grid, heatmap_part, heatmap_svg


@pytest.fixture(scope="module")
def result():
    space = {"bm": [256, 384, 512], "bn": [256], "bk": [512, 1024]}
    return pallaslab.tune(matmul, space, *arguments(), chip=["v5e", "v6e"], compile_top=0)


def test_the_axes_are_the_first_two_parameters_that_vary(result):
    assert axes(result) == ("bm", "bk")


def test_cells_hold_the_fastest_and_mark_the_configs_out(result):
    xs, ys, times, out = grid(result, "v5e", "bm", "bk")
    assert xs == [256, 384, 512] and ys == [512, 1024]
    column = xs.index(384)
    assert all(out[i][column] and math.isnan(times[i][column]) for i in range(len(ys)))
    best = result.best
    i, j = ys.index(best.config["bk"]), xs.index(best.config["bm"])
    assert times[i][j] == best.time("v5e") and not out[i][j]


def test_the_cross_is_explained_only_where_a_cell_has_one(result):
    assert heatmap_part(result).text == ("heatmap of predicted time over bm and bk "
                                         "(x: every candidate there is out)")
    assert any_crossed(result, "bm", "bk") and not any_crossed(result, "bk", "bn")


def test_one_panel_per_chip_as_svg(result):
    svg = heatmap_svg(result)
    assert svg.startswith("<svg") and svg.count("v5e") >= 1 and svg.count("v6e") >= 1


def test_a_bad_chip_or_target_is_an_error_naming_it():
    with pytest.raises(ValueError, match="unknown TPU chip 'v9z': known chips are"):
        pallaslab.tune(matmul, {"bm": [256]}, *arguments(), chip="v9z")
    with pytest.raises(pallaslab.PallasLabError, match="unknown target 'tpu-v9'"):
        pallaslab.tune(matmul, {"bm": [256]}, *arguments(), target="tpu-v9")
