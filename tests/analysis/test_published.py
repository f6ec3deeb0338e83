"""The builder of published tokamax timings: rows become real tokamax kernels, captured for
their chip and modelled (no timing asserted: `benchmarks/bench_published.py` compares)."""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokamax")

from pallaslab.analysis import published as pub
from pallaslab.errors import SettingError
from pallaslab.model import capture
from pallaslab.settings import PUBLISHED_TIMINGS, published_timings

TABLE = Path(__file__).resolve().parents[3] / "shared/published/tokamax_autotune_pallas.csv"
HEADER = "hardware,op_file,data_commit,problem,config,median_ms,times_ms,flops_nominal,tflops\n"
# Small problems in the table's own format, so the builder is tested without the table.
FIXTURE = HEADER + "\n".join([
    'TPU v5e,pallas_mosaic_tpu_ragged_dot,x,"lhs=bf16[512,256] rhs=bf16[4,256,256] '
    'dot_dims=[[[1], [1]], [[], []]] group_sizes=uniform-multinomial(num_groups=4;total=512;'
    'numpy seed0) return_residuals=False activation=None","{""tile_m"":128,""tile_k"":256,'
    '""tile_n"":256,""input_buffer_count"":2,""combine_scopes"":false}",0.01,0.01 0.01,,',
    'TPU v6e,pallas_mosaic_tpu_flash_attention,x,"q=bf16[2,512,4,128] k=bf16[2,512,4,128] '
    'v=bf16[2,512,4,128] causal=True bool_mask=None q_start=None k_start=None bias=None '
    'softcap=None dropout=0.0 paging=None return_residuals=False","{""block_q"":256,'
    '""block_kv"":256,""block_kv_compute"":128,""q_layout"":1,""k_layout"":1,""v_layout"":1,'
    '""use_experimental_scheduler"":true,""use_base2_exp"":true}",0.02,0.02 0.02,,',
    'TPU v5e,pallas_mosaic_tpu_ragged_dot,x,"lhs=bf16[512,256] rhs=bf16[4,256,256] '
    'dot_dims=[[[1], [1]], [[], []]] group_sizes=uniform-multinomial(num_groups=4;total=512;'
    'numpy seed0) return_residuals=False activation=None","{""tile_m"":-128}",0.01,0.01,,',
    'H100 80GB HBM3,pallas_triton_ragged_dot,x,"lhs=bf16[512,256]","{}",0.01,0.01,,',
]) + "\n"


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[pub.Row]:
    path = tmp_path_factory.mktemp("published") / "table.csv"
    path.write_text(FIXTURE)
    return pub.read_rows(path)


def test_rows_are_read_with_chip_and_seconds(rows: list[pub.Row]) -> None:
    assert [r.chip for r in rows] == ["v5e", "v6e", "v5e", None]
    assert rows[0].median_s == pytest.approx(1e-5)
    assert rows[0].times_s == pytest.approx((1e-5, 1e-5))
    assert len(list(pub.tpu_rows(rows))) == 3


def test_group_sizes_reproduce_tokamax_draw(rows: list[pub.Row]) -> None:
    sizes = pub.group_sizes(rows[0].problem)
    assert sizes.sum() == 512 and len(sizes) == 4
    even = pub.group_sizes("group_sizes=explicit list len=4 sum=10 nonzero=3")
    assert even.tolist() == [4, 3, 3, 0]


@pytest.mark.parametrize("index", [0, 1])
def test_fixture_rows_build_capture_and_model(rows: list[pub.Row], index: int) -> None:
    p = pub.predict(rows[index])
    assert p.kernels and all(m in ("pipeline", "groups", "roofline") for m in p.methods)
    assert math.isfinite(p.predicted_s) and p.predicted_s > 0


def test_ragged_dot_uses_its_group_structure(rows: list[pub.Row]) -> None:
    assert pub.predict(rows[0]).methods == ("groups",)


def test_bad_config_is_tallied_with_its_reason(rows: list[pub.Row]) -> None:
    with pytest.raises(pub.BuildError, match=r"config rejected by tokamax") as err:
        pub.build(rows[2])
    assert err.value.reason.startswith("config rejected by tokamax")
    assert "line 4" in str(err.value)


def test_gpu_row_is_not_built(rows: list[pub.Row]) -> None:
    with pytest.raises(pub.BuildError, match=r"not a TPU row: hardware 'H100 80GB HBM3'"):
        pub.build(rows[3])


def test_lookup_matches_kernel_by_op_and_shapes(rows: list[pub.Row]) -> None:
    built = pub.build(rows[0])
    (kernel,) = capture(built.fn, *built.args, chip="v5e").kernels
    assert pub.rows_for_kernel(kernel, tuple(rows)) == (rows[0], rows[2])
    assert pub.rows_for_kernel(kernel, (rows[1],)) == ()


def test_setting_names_variable_rule_and_value(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.delenv(PUBLISHED_TIMINGS, raising=False)
    assert published_timings() is None  # off by default
    monkeypatch.setenv(PUBLISHED_TIMINGS, str(tmp_path / "missing.csv"))
    with pytest.raises(SettingError, match=r"PALLASLAB_PUBLISHED_TIMINGS: must be the path of "
                                           r"an existing file, got '.*missing.csv'"):
        published_timings()


@pytest.mark.skipif(not TABLE.is_file(), reason=f"the published table is not at {TABLE} "
                    "(it is kept beside the repository, not in it)")
def test_first_row_of_each_published_op_builds() -> None:
    firsts: dict[str, pub.Row] = {}
    for row in pub.tpu_rows(pub.read_rows(TABLE)):
        firsts.setdefault(row.op or row.op_file, row)
    assert set(firsts) == {"ragged_dot", "flash_attention", "flash_attention_vjp", "lsce",
                           "lsce_vjp"}
    for op in ("ragged_dot", "lsce"):  # the cheapest to capture at full size
        p = pub.predict(firsts[op])
        assert math.isfinite(p.predicted_s) and p.predicted_s > 0, op


def test_table_header_is_what_the_reader_expects() -> None:
    assert next(csv.reader(io.StringIO(FIXTURE))) == HEADER.strip().split(",")
    assert os.environ.get("JAX_PLATFORMS", "cpu") == "cpu"


def test_pipeline_view_shows_the_published_time(rows: list[pub.Row], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import pallaslab

    table = tmp_path / "table.csv"
    table.write_text(FIXTURE)
    built = pub.build(rows[0])
    view = pallaslab.inspect(built.fn, *built.args).pipeline(chip="v5e")
    monkeypatch.delenv(PUBLISHED_TIMINGS, raising=False)
    assert "published" not in view.to_text()  # off unless the table is set
    monkeypatch.setenv(PUBLISHED_TIMINGS, str(table))
    line = "published on TPU v5e: 0.010 ms (tokamax autotune, config"
    assert line in view.to_text()
    assert "published <b>on TPU v5e: 0.010 ms" in view.to_html()
    assert any(line in p for p in view._payload(live=False)["published"])


def test_group_tiles_visit_a_shared_row_tile_once_per_group() -> None:
    from pallaslab.analysis.ragged import group_tiles

    tiles, groups = group_tiles(np.array([3, 0, 5]), 4)  # rows 0-2, none, rows 3-7
    assert tiles.tolist() == [0, 0, 1] and groups.tolist() == [0, 2, 2]
