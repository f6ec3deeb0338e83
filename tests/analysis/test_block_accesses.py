"""What each program touches inside its blocks (issue 27 item 4), recorded by evaluating the
real kernel bodies: slices, `pl.ds` windows with starts from program ids and loop indices,
strides, masks and `pl.when` branches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt
from kernels import CATALOG

import pallaslab
from pallaslab.analysis import block_accesses as ba
from pallaslab.analysis.tiling import tile
from pallaslab.model.capture import capture


def strided_masked_body(x_ref, o_ref):
    i = pl.program_id(0)
    v = x_ref[pl.ds(0, 8), pl.ds(0, 64, stride=2)]  # every 2nd column
    rows = jnp.arange(8)[:, None]
    plt.store(o_ref.at[pl.ds(0, 8), pl.ds(0, 64)], v,
              mask=(rows < 4 + i) & (jnp.arange(64)[None] >= 0))  # rows 0..3+i


def strided_masked(x):
    return pl.pallas_call(
        strided_masked_body, grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), interpret=True)(x)


def windows_in_a_loop_body(x_ref, o_ref):
    def step(k, carry):  # row k of the block, a window starting at 16 * program id
        start = pl.program_id(0) * 16
        o_ref[pl.ds(k, 1), pl.ds(start, 16)] = x_ref[pl.ds(k, 1), pl.ds(start, 16)]
        return carry
    jax.lax.fori_loop(0, 4, step, 0)


def windows_in_a_loop(x):
    return pl.pallas_call(
        windows_in_a_loop_body, grid=(3,),
        in_specs=[pl.BlockSpec((8, 64), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((8, 64), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((8, 64), jnp.float32), interpret=True)(x)


@pytest.fixture(scope="module")
def strided():
    k = capture(strided_masked, jnp.ones((16, 128), jnp.float32))[0]
    t = tile(k)
    return k, t, ba.block_accesses(k, t)


@pytest.fixture(scope="module")
def matmul():
    fn, args = CATALOG["matmul_f32"].case()[:2]
    k = capture(fn, *args)[0]
    t = tile(k)
    return k, t, ba.block_accesses(k, t)


def test_strided_loads_and_masked_stores_are_recorded_element_by_element(strided):
    _, _, acc = strided
    assert acc.reason is None and acc.steps == (0, 1) and not acc.capped
    x, o = acc.operands
    assert (x.origin, x.shape) == ("args[0]", (8, 128))
    expected_read = np.zeros((8, 128), bool)
    expected_read[:, 0:127:2] = True
    np.testing.assert_array_equal((x.flags[0] & ba.READ) > 0, expected_read)
    for k, rows in enumerate((4, 5)):  # program i stores rows 0 .. 3 + i; the rest masked off
        written = (o.flags[k] & ba.WRITE) > 0
        masked = ((o.flags[k] & ba.WRITE_MASKED) > 0) & ~written
        assert written[:rows, :64].all() and not written[rows:].any()
        assert not written[:, 64:].any()
        assert masked[rows:, :64].all() and masked.sum() == (8 - rows) * 64
    assert o.lines and o.lines[0].endswith("test_block_accesses.py:25")  # the plt.store call


def test_each_program_is_said_in_the_arrays_coordinates(strided):
    _, t, acc = strided
    said = ba.describe_program(acc, 1, t)
    assert said == ("program (1,) reads x_ref[8:16, 0:127] (512 of the 1,016 elements there, "
                    "every 2nd along dim 1); writes o_ref[8:13, 0:64] where mask "
                    "(192 masked off)")


def test_windows_with_starts_from_program_ids_inside_loops():
    k = capture(windows_in_a_loop, jnp.ones((8, 64), jnp.float32))[0]
    t = tile(k)
    acc = ba.block_accesses(k, t)
    o = acc.operands[1]
    for p in range(3):
        written = (o.flags[p] & ba.WRITE) > 0
        expected = np.zeros((8, 64), bool)
        expected[0:4, 16 * p:16 * p + 16] = True
        np.testing.assert_array_equal(written, expected)
    assert ba.describe_program(acc, 2, t).endswith("writes o_ref[0:4, 32:48]")


def test_a_branch_taken_in_some_programs_only(matmul):
    k, t, acc = matmul
    out = next(op for op in acc.operands if op.origin == "outputs")
    for j, step in enumerate(acc.steps):
        last_k = t.program_at(step)[2] == k.grid[2] - 1  # o_ref written under pl.when
        assert bool((out.flags[j] & ba.WRITE).any()) == last_k
        assert ((out.flags[j] & ba.READ) == 0).all()
    assert ba.describe_program(acc, 0, t) == (
        "program (0, 0, 0) reads x_ref[0:128, 0:128] (all of its block); reads y_ref[0:128, "
        "0:128] (all of its block); reads acc_ref[0:128, 0:128] (all of its block); writes "
        "acc_ref[0:128, 0:128] (all of its block)")


def test_programs_are_capped_and_the_cap_is_said(monkeypatch, matmul):
    k, t, _ = matmul
    monkeypatch.setattr(ba, "MAX_PROGRAMS", 5)
    monkeypatch.setattr(ba, "_CACHE", {})
    acc = ba.block_accesses(k, t)
    assert acc.steps == tuple(range(5)) and acc.capped
    assert acc.note() == f"accesses inside blocks recorded for the first 5 of {t.programs} programs"
    assert ba.describe(acc, t, limit=2)[-1] == acc.note()


def test_a_kernel_that_is_not_a_pallas_call_says_why():
    fn, args = CATALOG["gpu_mesh_kernel"].case()[:2]
    k = capture(fn, *args)[0]
    acc = ba.block_accesses(k, None)
    assert not acc.steps and acc.note() == (
        "accesses inside blocks not recorded: only pallas_call bodies are recorded")


def test_the_grid_view_says_the_same_in_text_and_html(strided):
    wb = pallaslab.inspect(strided_masked, jnp.ones((16, 128), jnp.float32))
    view = wb.grid()
    line = ("program (0,) reads x_ref[0:8, 0:127] (512 of the 1,016 elements there, every 2nd "
            "along dim 1); writes o_ref[0:4, 0:64] where mask (256 masked off)")
    assert line in view.to_text()
    assert line in view.to_html()
    acc = view.payload()["accesses"]
    assert acc["steps"] == [0, 1] and acc["text"][0] == line
    out = acc["operands"][1]
    flags = np.frombuffer(acc["tables"][out["flags"]], np.uint8).reshape(-1, 8, 128)
    assert flags.shape == (2, 8, 128) and sorted(out["rows"]) == [0, 1]  # two patterns
    recorded = ba.block_accesses(wb.kernels[0], tile(wb.kernels[0])).operands[1].flags
    np.testing.assert_array_equal(flags[out["rows"]], recorded)


def test_programs_sharing_an_access_pattern_share_its_bytes_on_the_wire(matmul):
    fn, args = CATALOG["matmul_f32"].case()[:2]
    acc = pallaslab.inspect(fn, *args).grid().payload()["accesses"]
    x = acc["operands"][0]
    assert len(acc["steps"]) == 24 and set(x["rows"]) == {0}  # x: all of its block, always
    assert sum(t.nbytes for t in acc["tables"]) < 24 * 4 * 128 * 128 // 4


def _recorded(name):
    fn, args = CATALOG[name].case()[:2]
    kernels = capture(fn, *args)
    k = kernels[len(kernels) - 1]
    t = tile(k)
    return k, t, ba.block_accesses(k, t)


def test_a_triton_kernels_masked_loads_inside_its_whole_array_window():
    _, t, acc = _recorded("masked_row_softmax")  # (16, 64): 50 real columns a row
    x = acc.operands[0]
    read = (x.flags[3] & ba.READ) > 0
    assert read[3, :50].all() and read.sum() == 50  # program 3 reads row 3, 50 columns
    assert ((x.flags[3][3, 50:] & ba.READ_MASKED) > 0).all()
    assert ba.describe_program(acc, 3, t) == (
        "program (3,) reads x_ref[3:4, 0:50] where mask (14 masked off); writes o_ref[3:4, "
        "0:64]")  # two complementary masked stores write the whole row


def test_manual_copies_and_dynamic_grids():
    _, _, acc = _recorded("manual_dma_double_buffer")
    assert acc.note() == (
        "accesses inside blocks not recorded: the body holds semaphores or barriers (manual "
        "copies): only BlockSpec blocks loaded and stored by the body are recorded")
    _, t, acc = _recorded("grid_from_earlier_kernel")  # its grid comes from an earlier kernel
    assert acc.reason is None and len(acc.steps) == t.programs
