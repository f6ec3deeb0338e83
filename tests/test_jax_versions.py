"""The tested JAX releases (0.11.2, 0.12.0.1, 0.12.1): the version gate, what pyproject says,
and the interpreters' parameters built the same way on each
(`pallaslab.model._jax.interpret_params`). What an untested JAX gets: tests/test_untested_jax.py.

`make test` runs this file on the development JAX and on each other tested release
(`make test-jax-releases`); the pins and the Makefile are checked in `tests/test_pins.py`.
"""

import logging
from pathlib import Path

import pytest

from pallaslab.model import _jax
from pallaslab.model._jax import interpret_params, versions

ROOT = Path(__file__).resolve().parent.parent


def test_this_jax_is_tested_and_imports_without_a_warning():
    # (pyproject's filterwarnings make the import-time UntestedJaxWarning an error here)
    assert versions.jax_tested(), versions.untested_jax()
    assert versions.untested_jax() is None and versions.untested_jax_warning() is None
    assert versions.JAX_VERSION_TEXT in versions.TESTED_JAX
    assert versions.TESTED_JAX == ("0.11.2", "0.12.0.1", "0.12.1")
    assert _jax.JAX_VERSION[:2] in _jax.SUPPORTED_JAX
    assert _jax.SUPPORTED_JAX == ((0, 11), (0, 12))  # derived from TESTED_JAX


@pytest.mark.parametrize(("text", "parsed"), [
    ("0.12.0.1", (0, 12, 0)), ("0.11.2", (0, 11, 2)), ("0.11.2.dev20260101", (0, 11, 2)),
    ("0.13", (0, 13, 0)), ("0.12.1rc1", (0, 12, 1)),
])
def test_version_parsing(text, parsed):
    assert versions._parse(text) == parsed


def test_interpret_params_accept_on_race_warn_on_every_jax():
    tpu = interpret_params.tpu_interpret_params(detect_races=True, on_race="warn",
                                                 num_cores_or_threads=2)
    gpu = interpret_params.gpu_interpret_params(detect_races=True, on_race="warn")
    assert tpu.detect_races and gpu.detect_races
    if interpret_params.HAS_ON_RACE:
        assert tpu.on_race == "warn" and gpu.on_race == "warn"
    else:
        assert not hasattr(tpu, "on_race") and not hasattr(gpu, "on_race")
        with pytest.raises(ValueError, match="only reports races"):
            interpret_params.tpu_interpret_params(on_race="raise")


@pytest.mark.skipif(interpret_params.HAS_ON_RACE, reason="JAX >= 0.12 logs races itself")
def test_jax011_race_reports_reach_the_race_logger(capsys):
    from jax._src.pallas.mosaic.interpret import race_detection_state as tpu_races

    interpret_params.races_to_logging()
    interpret_params.races_to_logging()  # idempotent
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(_jax.RACE_LOGGER)
    logger.addHandler(handler)
    try:
        tpu_races.print("RACE DETECTED\n  read of x")  # type: ignore[attr-defined]
        tpu_races.print("something else")  # type: ignore[attr-defined]
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == ["RACE DETECTED\n  read of x"]
    assert capsys.readouterr().out == "something else\n"


def test_a_racy_kernel_is_a_data_race_finding_on_every_jax():
    """TPU interpret mode's race detector reaches the executors' race log on both JAX
    versions (0.12: logged with on_race="warn"; 0.11: printed, routed to the logger)."""
    from kernels import CATALOG

    from pallaslab.execute import run

    fn, args = CATALOG["racy_parallel_accumulate"].case()
    result = run(fn, *args, executor="tpu-interpret")
    assert "data-race" in [f.code for f in result.findings], (result.error, result.findings)
