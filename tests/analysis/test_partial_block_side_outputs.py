"""`partial-block` says what Pallas does with a block that overhangs its array: it pads the
block's reads and drops its writes past the edge. A side output narrower than its
lane-aligned block, or an edge block whose padding reaches only dropped output elements, is a
correct pattern (info); an input whose padded edge feeds output blocks inside their arrays
can leak the padding (warning) (issue 39, item 7)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from kernels import elementwise_2d, rand

import pallaslab


def _partial(fn, *args) -> dict[str, tuple[str, str, tuple]]:
    return {f.operand: (f.severity, f.message, f.programs)
            for f in pallaslab.inspect(fn, *args).findings if f.code == "partial-block"}


def _rows_and_max_kernel(x_ref, o_ref, stat_ref):
    x = x_ref[...]
    o_ref[...] = x * 2
    stat_ref[...] = jnp.broadcast_to(jnp.max(x, axis=1, keepdims=True), stat_ref.shape)


def rows_and_max(x, bm=128):
    """A row statistic as a (M, 1) side output, written through a lane-aligned (bm, 128) block."""
    m, n = x.shape
    return pl.pallas_call(
        _rows_and_max_kernel, grid=(pl.cdiv(m, bm),),
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                   jax.ShapeDtypeStruct((m, 1), jnp.float32)),
        in_specs=[pl.BlockSpec((bm, n), lambda i: (i, 0))],
        out_specs=(pl.BlockSpec((bm, n), lambda i: (i, 0)),
                   pl.BlockSpec((bm, 128), lambda i: (i, 0))),
        interpret=True,
    )(x)


def _matmul_kernel(x_ref, y_ref, o_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...] @ y_ref[...]


def matmul_uneven_k(x, y, b=128):
    """K = 200 in 128-blocks: the last K block's padding is summed into every output block."""
    (m, k), (_, n) = x.shape, y.shape
    return pl.pallas_call(
        _matmul_kernel, grid=(m // b, n // b, pl.cdiv(k, b)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        in_specs=[pl.BlockSpec((b, b), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((b, b), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((b, b), lambda i, j, kk: (i, j)), interpret=True,
    )(x, y)


def test_a_side_output_narrower_than_its_block_is_said_as_what_happens():
    found = _partial(rows_and_max, rand((1024, 256)))
    assert list(found) == ["outputs[1]"]  # 1024 rows in 128-row blocks: x and outputs[0] even
    severity, message, programs = found["outputs[1]"]
    assert severity == "info" and programs[:2] == ((0,), (1,))
    assert message == (
        "outputs[1]: the last block of `outputs[1]` overhangs its (1024, 1) array by 127 "
        "columns (block (128, 128)): Pallas pads its reads and drops its writes there; "
        "8 program(s) get that edge block.")


def test_an_edge_whose_padding_reaches_only_dropped_elements_is_info():
    found = _partial(rows_and_max, rand((1000, 256)))  # the last row block overhangs by 24 rows
    assert {op: f[0] for op, f in found.items()} == {
        "args[0]": "info", "outputs[0]": "info", "outputs[1]": "info"}
    assert found["args[0]"][1] == (
        "args[0]: the last block of `args[0]` overhangs its (1000, 256) array by 24 rows "
        "(block (128, 256)): Pallas pads its reads there, and the programs that read it write "
        "only output blocks that overhang too, whose writes past the edge are dropped; "
        "1 program(s) get that edge block.")
    assert "by 24 rows and 127 columns" in found["outputs[1]"][1]
    # the same holds for an elementwise kernel's edge row of blocks
    even = _partial(elementwise_2d, rand((200, 256)), rand((200, 256), seed=1))
    assert {f[0] for f in even.values()} == {"info"} and len(even) == 3


def test_an_input_whose_padding_feeds_kept_outputs_is_a_warning():
    found = _partial(matmul_uneven_k, rand((256, 200)), rand((200, 256), seed=1))
    assert {op: f[0] for op, f in found.items()} == {"args[0]": "warning", "args[1]": "warning"}
    _, message, programs = found["args[0]"]
    assert programs == ((0, 0, 1), (0, 1, 1), (1, 0, 1), (1, 1, 1))
    assert message == (
        "args[0]: the last block of `args[0]` overhangs its (256, 200) array by 56 columns "
        "(block (128, 128)): Pallas pads its reads there with unspecified values, and 4 "
        "program(s) read that edge block while writing output blocks inside their arrays, "
        "where the padding can leak; e.g. program (0, 0, 1). Mask the edge (e.g. with "
        "pl.program_id and jnp.where) or pad the array.")
