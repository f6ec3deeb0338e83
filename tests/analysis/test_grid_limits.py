"""Bounded resources at any grid size: chunked index-map evaluation, the programs limit, and
empty (0 programs) and negative grids through capture, inspect, every view and the CLI."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from kernels import CATALOG

import pallaslab
from pallaslab.analysis import coverage as coverage_module
from pallaslab.analysis import tiling as tiling_module
from pallaslab.analysis.findings import coordinate_key, coverage, find
from pallaslab.analysis.inspection import inspect_kernel, kernel_json
from pallaslab.analysis.tiling import tile, tiling_unavailable_reason
from pallaslab.cli import main
from pallaslab.errors import PallasLabError
from pallaslab.model.capture import GridError, check_grid
from pallaslab.workbench import WorkbenchError

HERE = __file__
LIMIT_ENV = "PALLASLAB_MAX_PROGRAMS"


# --- cases (also loaded by the CLI as `tests/analysis/test_grid_limits.py:NAME`) -------


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _launch(grid, shape=(8, 128)):
    def add_one(x):
        spec = pl.BlockSpec((8, 128), lambda *ids: (0, 0))
        return pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=grid, in_specs=[spec], out_specs=spec, name="add_one")(x)

    return add_one, (jax.ShapeDtypeStruct(shape, jnp.float32),)


def _capture(case):
    fn, args = case
    return pallaslab.capture(fn, *args)


def empty_grid_case():
    return _launch((0,))


def empty_2d_grid_case():
    return _launch((4, 0))


def negative_grid_case():
    return _launch((-3,))


def billion_programs_case():
    return _launch((1000, 1000, 1000))


# --- chunked evaluation gives the tables of one whole-grid call ------------------------------


def _catalog_kernels():
    for name, entry in CATALOG.items():
        fn, args = entry.case()[:2]
        for k in pallaslab.capture(fn, *args):
            if tiling_unavailable_reason(k) is None:
                yield pytest.param(k, id=f"{name}[{k.index}]")


CATALOG_KERNELS = list(_catalog_kernels())


def _one_call_tables(kernel):
    """The tables as the analysis made them before chunking: one evaluator call over
    np.indices of the whole grid."""
    grid = tuple(kernel.grid)
    ids = (np.indices(grid, dtype=np.int32).reshape(len(grid), -1) if grid
           else np.zeros((0, 1), np.int32))
    outs = kernel.handle.index_map_evaluator(ids, kernel.prefetch_values)
    return {op.origin: out.reshape(-1, len(op.shape))
            for op, out in zip(kernel.blocked_operands, outs, strict=True)}


@pytest.mark.parametrize("kernel", CATALOG_KERNELS)
def test_chunked_tables_equal_one_call_tables(kernel):
    expected = _one_call_tables(kernel)
    whole = tile(kernel)
    chunked = tile(kernel, chunk=3)  # several chunks, the last one padded
    assert set(chunked.operands) == set(whole.operands)
    for origin, ot in chunked.operands.items():
        assert ot.block_indices.dtype == np.int32
        np.testing.assert_array_equal(ot.block_indices, expected[origin])
        np.testing.assert_array_equal(ot.fetch_mask, whole.operands[origin].fetch_mask)
        rows = expected[origin]
        assert ot.fetches == (None if not ot.windowed else
                              1 + int(np.any(rows[1:] != rows[:-1], axis=1).sum()))
        assert ot.hbm_bytes == whole.operands[origin].hbm_bytes
    assert find(kernel, chunked) == find(kernel, whole)


@pytest.mark.parametrize("kernel", CATALOG_KERNELS)
def test_findings_scanned_in_small_chunks_equal_one_pass(kernel, monkeypatch):
    t = tile(kernel)
    expected = (find(kernel, t), [(o.fetches, o.hbm_bytes) for o in t.operands.values()])
    monkeypatch.setattr(tiling_module, "SCAN_CHUNK", 2)  # revisits, races, coverage by chunk
    assert (find(kernel, t), [(o.fetches, o.hbm_bytes) for o in t.operands.values()]) == \
        expected


def test_chunks_cover_the_grid_in_execution_order_with_equal_widths():
    grid = (3, 5)
    chunks = list(tiling_module.program_id_chunks(grid, 4))
    assert [start for start, _ in chunks] == [0, 4, 8, 12]
    assert {ids.shape for _, ids in chunks} == {(2, 4)}  # one compile for every chunk
    ids = np.concatenate([ids for _, ids in chunks], axis=1)[:, :15]
    np.testing.assert_array_equal(ids, np.indices(grid).reshape(2, -1))
    np.testing.assert_array_equal(chunks[-1][1][:, -1], [2, 4])  # padded with the last program
    assert list(tiling_module.program_id_chunks((0, 7), 4)) == []


@pytest.mark.parametrize("grid,dims", [((4, 3, 2), [0, 1]), ((4, 3, 2), [0, 1, 2]),
                                       ((5, 7), [1]), ((2, 0), [0]), ((), [])])
def test_coordinate_key_equals_ravelled_program_ids(grid, dims):
    ids = tiling_module.Tiling(grid, {}).program_ids().T  # (rank, P)
    sub = ids[dims]
    expected = (np.ravel_multi_index(tuple(sub), tuple(grid[d] for d in dims)) if dims
                else np.zeros(ids.shape[1], np.int64))
    np.testing.assert_array_equal(coordinate_key(grid, dims), expected)


def test_block_keys_stay_dense_when_indices_are_far_apart():
    (k,) = _capture(_launch((4,)))
    ot = tile(k).operands["args[0]"]
    spread = dataclasses.replace(ot, block_indices=np.array(
        [[0, 0], [2**30, 7], [0, 0], [-(2**30), 2**30]], np.int32))
    keys, nkeys = spread.block_key()
    assert nkeys == 3 and keys.tolist() == [keys[0], keys[1], keys[0], keys[3]]
    assert len(set(keys.tolist())) == 3


@pytest.mark.parametrize("name", ["uncovered_output", "partial_blocks", "matmul_f32",
                                  "squeezed_dims"])
def test_sparse_coverage_equals_dense_coverage(name, monkeypatch):
    fn, args = CATALOG[name].case()[:2]
    k = pallaslab.capture(fn, *args)[0]
    t = tile(k)
    for ot in t.operands.values():
        op = k.operand(ot.origin)
        if any(d.kind == "element" for d in op.block_dims):
            continue
        dense = coverage(ot, op)
        monkeypatch.setattr(coverage_module, "DENSE_BLOCK_GRID", 0)
        sparse = coverage(ot, op)
        monkeypatch.undo()
        assert (sparse.total, sparse.missing, sparse.first_missing, sparse.missing_blocks) == (
            dense.total, dense.missing, dense.first_missing, dense.missing_blocks)


# --- the programs limit ----------------------------------------------------------------------


def _matmul():  # grid (4, 3, 2): 24 programs, three 2-D operands
    fn, args = CATALOG["matmul_f32"].case()[:2]
    return pallaslab.capture(fn, *args)[0]


REFUSAL_24 = ("grid (4, 3, 2) has 24 programs, more than the whole-grid analysis limit of 10; "
              "raise it with PALLASLAB_MAX_PROGRAMS=24 (the tables take ~27 bytes per program, "
              "~0.0 MiB for this grid)")


def test_above_the_limit_tiling_is_refused_with_the_grid_the_limit_and_the_fix(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "10")
    k = _matmul()
    assert tile(k) is None
    assert tiling_unavailable_reason(k) == REFUSAL_24
    (f,) = [f for f in find(k, None) if f.code == "tiling-unavailable"]
    assert f.severity == "warning"  # the whole-grid rules went unchecked
    assert f.message == f"matmul_kernel: {REFUSAL_24}."


def test_the_limit_is_inclusive_and_the_module_constant_is_the_default(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "24")
    assert tile(_matmul()).programs == 24
    monkeypatch.delenv(LIMIT_ENV)
    monkeypatch.setattr(tiling_module, "MAX_PROGRAMS", 10)
    assert tiling_unavailable_reason(_matmul()) == REFUSAL_24
    monkeypatch.setenv(LIMIT_ENV, "1_000")  # the variable wins over the constant
    assert tile(_matmul()) is not None


def test_default_limit_is_2_to_the_24(monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    assert tiling_module.max_programs() == tiling_module.MAX_PROGRAMS == 16_777_216


def test_an_unusable_limit_is_named(monkeypatch):
    from pallaslab.errors import SettingError

    monkeypatch.setenv(LIMIT_ENV, "lots")  # an error, not a silently skipped analysis
    with pytest.raises(SettingError, match=r"^PALLASLAB_MAX_PROGRAMS: must be a whole number "
                                           r"of programs >= 1, got 'lots'$"):
        tile(_matmul())


BILLION = ("grid (1000, 1000, 1000) has 1,000,000,000 programs, more than the whole-grid "
           "analysis limit of 16,777,216; raise it with PALLASLAB_MAX_PROGRAMS=1000000000 (the "
           "tables take ~18 bytes per program, ~16.8 GiB for this grid)")


@pytest.fixture
def billion(monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    (k,) = _capture(billion_programs_case())
    return k


def test_a_billion_program_grid_is_refused_before_any_allocation(billion):
    assert billion.programs == 10**9
    assert tile(billion) is None  # returns at once: nothing of size P is made
    insp = inspect_kernel(billion)
    assert [(f.code, f.severity, f.message) for f in insp.findings] == [
        ("tiling-unavailable", "warning", f"add_one: {BILLION}.")]
    data = kernel_json(insp)
    assert data["programs"] == 10**9
    assert [op["fetches"] for op in data["operands"]] == [None, None]


def test_a_billion_program_grid_renders_every_view_with_the_refusal(billion):
    wb = pallaslab.Workbench(_capture(billion_programs_case()))
    assert [t.name for t in wb.tabs()] == ["overview", "memory", "lowering"]
    overview = wb.overview()
    assert BILLION in overview.to_text()
    assert "1,000,000,000 programs" in overview.to_text()
    assert "PALLASLAB_MAX_PROGRAMS=1000000000" in overview._repr_mimebundle_()["text/html"]
    assert overview.payload()["note"] == BILLION
    assert "fits" in wb.memory()._repr_mimebundle_()["text/plain"]
    for name in ("grid", "pipeline", "step"):
        with pytest.raises(WorkbenchError) as err:
            wb.view(name)
        assert str(err.value).endswith(f"for kernel 'add_one': {BILLION}")
    assert "tiling-unavailable" in wb.report()


def test_inspect_cli_answers_a_billion_program_grid_with_the_refusal(capsys, monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    assert main(["inspect", f"{HERE}:billion_programs_case", "--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert k["programs"] == 10**9
    assert [(f["code"], f["severity"]) for f in k["findings"]] == [
        ("tiling-unavailable", "warning")]
    assert main(["check", f"{HERE}:billion_programs_case"]) == 0  # a warning, not an error


# --- empty grids: no programs ----------------------------------------------------------------


EMPTY = ("add_one: grid (0,) has no programs: the kernel body never runs, no block is fetched "
         "and its outputs are never written.")


@pytest.mark.parametrize("case,grid", [(empty_grid_case, (0,)), (empty_2d_grid_case, (4, 0))])
def test_an_empty_grid_is_an_empty_analysis(case, grid):
    cap = _capture(case())
    cap.check_invariants()
    (k,) = cap
    assert k.grid == grid and k.programs == 0
    t = tile(k)
    assert t.programs == 0 and t.program_ids().shape == (0, len(grid))
    for ot in t.operands.values():
        assert ot.block_indices.shape == (0, 2)
        assert (ot.fetches, ot.hbm_bytes) == (0, 0)
    found = {f.code: f for f in find(k, t)}
    assert set(found) == {"empty-grid", "uncovered-output"}
    assert found["empty-grid"].severity == "info"
    assert found["empty-grid"].message == EMPTY.replace("(0,)", str(grid))
    # The output really is never written: garbage on hardware, an error as for any kernel.
    assert found["uncovered-output"].severity == "error"
    assert found["uncovered-output"].message.startswith(
        "outputs: 1024 of 1024 elements (100.0%) are never written by any program (the grid "
        "has none), starting at element (0, 0)")


def test_an_empty_grid_with_empty_outputs_only_notes_it():
    (k,) = _capture(_launch((0,), shape=(0, 128)))
    assert [(f.code, f.severity) for f in find(k, tile(k))] == [("empty-grid", "info")]


def test_every_view_renders_an_empty_grid():
    wb = pallaslab.Workbench(_capture(empty_grid_case()))
    names = [t.name for t in wb.tabs()]
    assert {"overview", "grid", "memory", "pipeline", "step"} <= set(names)
    for name in names:
        view = wb.view(name)
        bundle = view._repr_mimebundle_()
        assert bundle["text/plain"] and bundle["text/html"]
        json.dumps(view.payload(), default=lambda b: b.nbytes)  # JSON-able, buffers aside
    assert "= 0 programs" in wb.overview().to_text()
    grid = wb.grid().payload()
    assert grid["programs"] == 0 and grid["tables"] == []
    assert all(c["affine"] is not None for o in grid["operands"] for c in o["index"])
    pipe = wb.pipeline()
    assert pipe.model.summary.steps == 0 and len(pipe.model.events) == 0
    assert "0 steps, predicted 0 s" in pipe.to_text()
    step = wb.step()
    assert step.payload()["programs"] == 0
    assert "the grid has no programs: there is nothing to step" in step.to_text()
    assert "nothing to step" in step.to_html()
    text = wb.to_text()
    assert "info empty-grid" in text and "error uncovered-output" in text
    assert "empty-grid" in wb.report()


def test_stepping_an_empty_grid_runs_nothing():
    fn, _ = empty_grid_case()
    st = pallaslab.step(fn, jnp.ones((8, 128), jnp.float32))
    assert st.programs == 0 and st.done
    assert st.step() is None and st.position == 0


def test_cli_on_an_empty_grid(capsys, tmp_path):
    assert main(["inspect", f"{HERE}:empty_grid_case", "--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert (k["grid"], k["programs"]) == ([0], 0)
    assert [op["fetches"] for op in k["operands"]] == [0, 0]
    assert [f["code"] for f in k["findings"]] == ["empty-grid", "uncovered-output"]
    assert main(["check", f"{HERE}:empty_grid_case"]) == 1  # the unwritten output is an error
    out = tmp_path / "report.html"
    assert main(["report", f"{HERE}:empty_grid_case", "-o", str(out)]) == 0
    assert "empty-grid" in out.read_text()


# --- negative grids: rejected at capture -----------------------------------------------------


def test_a_negative_grid_is_rejected_at_capture_naming_kernel_and_grid():
    with pytest.raises(GridError) as err:
        _capture(negative_grid_case())
    assert isinstance(err.value, PallasLabError) and isinstance(err.value, ValueError)
    message = str(err.value)
    assert message.startswith("kernel 'add_one' (")
    assert "test_grid_limits.py:" in message
    assert message.endswith(
        "): grid (-3,) has a negative size (dimension 0 is -3). A grid dimension counts "
        "programs and must be >= 0; Pallas would run no program and leave the outputs "
        "unwritten. Check how the grid is computed.")


def _dynamic_grid(x, n):
    spec = pl.BlockSpec((8, 128), lambda i: (0, 0))
    return pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(n[0],), in_specs=[spec], out_specs=spec, name="dyn")(x)


def test_a_data_dependent_grid_is_checked_once_evaluated():
    x = jnp.ones((8, 128), jnp.float32)
    (k,) = pallaslab.capture(_dynamic_grid, x, jnp.array([0], jnp.int32))
    assert (k.grid, k.dynamic_grid_dims, tile(k).programs) == ((0,), (0,), 0)
    with pytest.raises(GridError, match=r"kernel 'dyn' .*: grid \(-2,\) has a negative size"):
        pallaslab.capture(_dynamic_grid, x, jnp.array([-2], jnp.int32))


def test_every_negative_dimension_is_named():
    (k,) = _capture(_launch((2, 3)))
    bad = dataclasses.replace(k, grid=(-1, 3, -5))
    with pytest.raises(GridError, match=r"grid \(-1, 3, -5\) has a negative size "
                                        r"\(dimension 0 is -1, dimension 2 is -5\)"):
        check_grid(bad)
    assert tiling_unavailable_reason(bad) == "grid (-1, 3, -5) has a negative dimension"


@pytest.mark.parametrize("command", [["inspect", "--json"], ["check"], ["report", "-o", "x"]])
def test_cli_on_a_negative_grid_exits_2_with_the_message(command, capsys, tmp_path,
                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [command[0], f"{HERE}:negative_grid_case", *command[1:]]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "grid (-3,) has a negative size" in captured.out + captured.err
    assert "Traceback" not in captured.out + captured.err
    if "--json" in command:
        error = json.loads(captured.out)["error"]
        assert error["type"] == "GridError"
        assert "kernel 'add_one'" in error["message"]
