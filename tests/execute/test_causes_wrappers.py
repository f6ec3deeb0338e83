"""Causes through a wrapper (issue 38): a kernel's output transposed, sliced, reshaped,
squeezed or cast before the function returns it is traced back element by element to the
programs that wrote it; a reduction after the kernel says in one line that it cannot be; and
a wrong *output* index map is blamed on the output's map, not on the correct input map."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

import pallaslab
from pallaslab.exercises.solutions.grids import scale_2d_out_transposed

ROWS, COLS, BLOCK = 32, 128, 8


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def _blocked(x, x_map, o_map):
    return pl.pallas_call(
        _double, grid=(ROWS // BLOCK,),
        in_specs=[pl.BlockSpec((BLOCK, COLS), x_map)],
        out_specs=pl.BlockSpec((BLOCK, COLS), o_map),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


def _wrong_input(x):
    return _blocked(x,
                    lambda i: (3 - i, 0),
                    lambda i: (i, 0))


def _wrong_output(x):
    return _blocked(x,
                    lambda i: (i, 0),
                    lambda i: (3 - i, 0))


WRAPPERS = {
    "transpose": lambda o: o.T,
    "slice": lambda o: o[:, : COLS // 2],
    "reshape": lambda o: o.reshape(4, BLOCK, COLS),
    "squeeze": lambda o: jax.lax.squeeze(jnp.expand_dims(o, 0), (0,)),
    "cast": lambda o: o.astype(jnp.bfloat16),
    "pad-concatenate": lambda o: jnp.concatenate([jnp.pad(o, ((1, 0), (0, 0))), o[:2]]),
}


def _x():
    return jnp.asarray(np.random.default_rng(0).standard_normal((ROWS, COLS)), jnp.float32)


def _compare(kernel, wrap, x=None):
    return pallaslab.compare(lambda x: wrap(kernel(x)), _x() if x is None else x,
                             executors="vectorized,reference",
                             reference=lambda x: wrap(2 * x))


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_a_wrapped_output_is_traced_back_to_the_programs_and_the_input_map(name):
    result = _compare(_wrong_input, WRAPPERS[name])
    out = result.outputs[0]
    bad = next(p for p in out.pairs if not p.allclose)
    # every program wrote a wrong block: program i read x block 3 - i
    assert set(bad.programs) == {(0,), (1,), (2,), (3,)}
    index_map = next(c for c in out.causes if c.kind == "index-map")
    assert index_map.operand == "args[0] (x_ref)"
    assert "lambda i: (3 - i, 0)" in index_map.message
    line = next(c for c in out.causes if c.kind == "line")
    assert line.line == _store_line()
    assert out.provenance is not None and out.provenance.program_of.shape == out.shape


def test_a_reduction_after_the_kernel_says_in_one_line_why_there_are_no_programs():
    result = _compare(_wrong_input, lambda o: o.sum(axis=1))
    lines = [line for line in result.cause_lines() if line.startswith(result.outputs[0].origin)]
    assert len(lines) == 1
    assert "reduce_sum" in lines[0] and "cannot be traced back" in lines[0]


def test_a_wrong_output_map_is_blamed_on_the_output_not_the_correct_input():
    result = _compare(_wrong_output, lambda o: o)
    first = next(c for c in result.outputs[0].causes if c.kind == "index-map")
    assert first.operand == "outputs (o_ref)"
    assert "lambda i: (3 - i, 0)" in first.message
    assert "args[0]" in first.message and "right" in first.message


def test_a_wrong_output_map_is_blamed_through_a_wrapper_too():
    result = _compare(_wrong_output, lambda o: o.T)
    first = next(c for c in result.outputs[0].causes if c.kind == "index-map")
    assert first.operand == "outputs (o_ref)"


def test_the_course_s_transposed_output_map_is_blamed_on_the_output():
    x = jnp.asarray(np.random.default_rng(1).standard_normal((16, 256)), jnp.float32)
    result = pallaslab.compare(scale_2d_out_transposed, x, executors="vectorized,reference",
                               reference=lambda x: 2 * x + 1)
    first = next(c for c in result.outputs[0].causes if c.kind == "index-map")
    assert first.operand.startswith("outputs")
    assert "lambda i, j: (j, i)" in first.message and "looks transposed" in first.message


def test_a_direct_input_map_mutant_still_blames_the_input():
    result = _compare(_wrong_input, lambda o: o)
    first = next(c for c in result.outputs[0].causes if c.kind == "index-map")
    assert first.operand == "args[0] (x_ref)"


def _store_line() -> str:
    lines = Path(__file__).read_text().splitlines()
    return f"{Path(__file__).name}:" + str(next(
        n for n, text in enumerate(lines, 1) if "o_ref[...] = x_ref[...] * 2" in text))


# -- inputs a wrapper made before the kernel --------------------------------------------------

# Each makes the kernel's (ROWS, COLS) input from the function's argument; `shape`: that
# argument's shape.
BEFORE = {
    "transpose": ((COLS, ROWS), lambda a: a.T),
    "reshape": ((4, BLOCK, COLS), lambda a: a.reshape(ROWS, COLS)),
    "squeeze-cast": ((1, ROWS, COLS), lambda a: jnp.squeeze(a, 0).astype(jnp.float32) * 0.5),
    "slice-pad": ((ROWS, COLS + 4), lambda a: jnp.pad(a[:, 4:], ((0, 0), (0, 0)))),
    "concatenate": ((ROWS // 2, COLS), lambda a: jnp.concatenate([a, jnp.ones_like(a)])),
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_an_input_a_wrapper_made_is_judged_through_the_argument_elements_it_holds(name):
    shape, before = BEFORE[name]
    a = jnp.asarray(np.random.default_rng(2).standard_normal(shape), jnp.float32)
    result = pallaslab.compare(lambda a: _wrong_input(before(a)), a,
                               executors="vectorized,reference",
                               reference=lambda a: 2 * before(a))
    first = next(c for c in result.outputs[0].causes if c.kind == "index-map")
    assert first.operand == "args[0] (x_ref)"
    assert "the reference needs args[0] blocks (0, 0); the programs that wrote it read " \
           "args[0] blocks (3, 0)" in first.message


def test_a_vmapped_kernel_is_judged_through_the_batched_argument():
    a = jnp.asarray(np.random.default_rng(3).standard_normal((2, ROWS, COLS)), jnp.float32)
    result = pallaslab.compare(jax.vmap(_wrong_input), a, executors="vectorized,reference",
                               reference=lambda a: 2 * a)
    first = next(c for c in result.outputs[0].causes if c.kind == "index-map")
    assert first.operand == "args[0] (x_ref)"
    assert "lambda i: (3 - i, 0)" in first.message


def test_a_right_input_map_behind_a_wrapper_is_not_blamed():
    a = jnp.asarray(np.random.default_rng(4).standard_normal((COLS, ROWS)), jnp.float32)
    result = pallaslab.compare(lambda a: _wrong_output(a.T), a,
                               executors="vectorized,reference", reference=lambda a: 2 * a.T)
    causes = [c for c in result.outputs[0].causes if c.kind == "index-map"]
    assert causes and all(c.operand == "outputs (o_ref)" for c in causes)


def _add_row(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def test_a_reversed_output_map_is_blamed_when_only_one_of_two_inputs_disagrees():
    # y is read whole by every program, so only x disagrees with the reference: x's map
    # walks its blocks in order, the output's goes back, so the output's is blamed.
    x = _x()
    y = jnp.asarray(np.random.default_rng(5).standard_normal((1, COLS)), jnp.float32)
    kernel = pl.pallas_call(
        _add_row, grid=(ROWS // BLOCK,),
        in_specs=[pl.BlockSpec((BLOCK, COLS), lambda i: (i, 0)),
                  pl.BlockSpec((1, COLS), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((BLOCK, COLS), lambda i: (3 - i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)
    result = pallaslab.compare(kernel, x, y, executors="vectorized,reference",
                               reference=lambda x, y: x + y)
    first = next(c for c in result.outputs[0].causes if c.kind == "index-map")
    assert first.operand == "outputs (o_ref)"
    assert "args[0]'s index map `lambda i: (i, 0)`" in first.message
    assert "is right: it follows the grid's order and the output's does not" in first.message
