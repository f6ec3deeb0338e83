"""The line a value bug is on: compare names the mask or running sum above the final store."""

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mutants"))

import body_mutants
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from mutant_registry import MUTANTS, caught_and_explained, line_of

import pallaslab
from pallaslab.execute.causes.body_lines import _accumulators
from pallaslab.model import _jax
from pallaslab.model._jax.body_values import BodyNotEvaluated
from pallaslab.model._jax.traced_control_flow import MAX_TRIPS


def _compared(name):
    m = MUTANTS[name]
    fn, args = m.case()
    return m, pallaslab.compare(fn, *args, executors=",".join(m.executors),
                                reference=m.reference)


def _line_cause(result):
    (cause,) = [c for o in result.outputs for c in o.causes if c.kind == "line"]
    return cause


def test_off_by_one_vocabulary_mask_names_the_mask_line():
    m, result = _compared("masked_logits_off_by_one")
    caught, explained, said = caught_and_explained(m, result)
    assert caught and explained, said
    cause = _line_cause(result)
    assert cause.through[0].role == "mask"
    assert cause.through[0].text.startswith("valid = (col < VOCAB - 9)")
    assert ("(a mask: with its other value at the wrong elements, 16 of 16 take the "
            "reference's values)") in cause.message


def test_a_causal_mask_wrong_only_on_the_diagonal_is_named_by_its_flip():
    # The mask is False at every right element above the diagonal too: only flipping it at
    # the wrong elements tells it apart; the select it feeds is not named beside it.
    m, result = _compared("causal_scores_strict_mask")
    caught, explained, said = caught_and_explained(m, result)
    assert caught and explained, said
    cause = _line_cause(result)
    assert [b.line for b in cause.through] == [line_of(body_mutants.__file__, "(col < row)")]
    assert cause.through[0].score == 1.0
    assert "256 of 256 take the reference's values" in cause.message


def test_a_running_sum_never_rescaled_is_a_suspicion_where_the_max_moved():
    m, result = _compared("online_softmax_no_rescale")
    caught, explained, said = caught_and_explained(m, result)
    assert caught and explained, said
    cause = _line_cause(result)
    (line,) = cause.through
    assert (line.line, line.role) == (line_of(body_mutants.__file__, "l_ref[...] + p"),
                                      "accumulator")
    assert (f"suspected: the running sum at {line.line} `l_ref[...] = l_ref[...] + p` adds "
            "terms scaled by the new maximum but its carried value is never rescaled (2,048 "
            "of 2,048 wrong elements lie where the running maximum moved after its first "
            "step)") in cause.message


def _spinning_body(x_ref, o_ref):
    def spin(c):
        return c[0] + 1, c[1] + x_ref[0, 0]

    # ends only once x[0, 0] is positive: on zeros it never does, and must not hang here
    _, total = jax.lax.while_loop(lambda c: c[1] < 1.0, spin, (0, jnp.float32(0.0)))
    o_ref[...] = x_ref[...] + total


def test_a_while_loop_that_never_ends_is_stopped_and_said():
    x = jnp.zeros((8, 128), jnp.float32)
    call = pl.pallas_call(_spinning_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))
    (kernel,) = pallaslab.capture(call, x).kernels
    ev = _jax.BodyEvaluator(kernel.handle.eqn)
    with pytest.raises(BodyNotEvaluated, match=f"ran {MAX_TRIPS:,} iterations without ending"):
        ev.run((), [np.zeros((8, 128), np.float32), np.zeros((8, 128), np.float32)])


@pytest.mark.parametrize("rescale", [True, False])
def test_only_a_running_sum_never_rescaled_is_suspected(rescale):
    (x,) = body_mutants._softmax_args()
    fn = functools.partial(body_mutants._online_softmax, rescale=rescale)
    (kernel,) = pallaslab.capture(fn, x).kernels
    ev = _jax.BodyEvaluator(kernel.handle.eqn)
    block, row = np.ones((8, 128), np.float32), np.zeros((8, 1), np.float32)
    values = ev.run((0, 0, 1), [block, block, row, row])
    found = [ev.sites[s].line for s, _, _ in _accumulators(ev, [(0, values)])]
    n = line_of(body_mutants.__file__, "l_ref[...] + p").rpartition(":")[2]
    assert found == ([] if rescale else [f"{body_mutants.__file__}:{n}"])
