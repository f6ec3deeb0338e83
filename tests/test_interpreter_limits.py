"""An interpreter that breaks inside JAX's own code on a production kernel is unavailable, in one
line naming the error and the JAX frame; it never passes for a verdict on the kernel."""

from pallaslab import compare
from pallaslab.cases import load_function


def test_ragged_paged_attention_interpreters_say_they_cannot_run_it():
    fn, args = load_function("tests/cases/shipped.py:tpu_ragged_paged_attention")()
    result = compare(fn, *args, executors="interpret,tpu-interpret")
    assert not result.complete and not result.passed
    tpu = result.statuses["tpu-interpret"]
    assert tpu.status == "unavailable"
    assert tpu.reason.startswith("JAX's TPU interpreter (TPU interpret mode) broke inside its "
                                 "own code (AttributeError: 'ReshapeTransform' object has no "
                                 "attribute 'indices', at jax/_src/pallas/mosaic/interpret/")
    assert "not a verdict on the kernel" in tpu.reason and "\n" not in tpu.reason
    hlo = result.statuses["interpret"]
    assert hlo.status == "unavailable" and "JAX's HLO interpreter" in hlo.reason
