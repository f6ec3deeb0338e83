"""Both supported JAX versions (0.11, 0.12): the version gate, what pyproject says, and the
interpreters' parameters built the same way on each (`pallaslab.model._jax.interpret_params`).

`make test` runs this file on the development JAX and, in `.venv-jax011`, on JAX 0.11.
"""

import logging
import re
import tomllib
from pathlib import Path

import pytest

from pallaslab.model import _jax
from pallaslab.model._jax import interpret_params, versions

ROOT = Path(__file__).resolve().parent.parent


def test_this_jax_is_supported_and_imports_without_a_warning():
    assert versions.jax_supported()
    assert _jax.JAX_VERSION[:2] in _jax.SUPPORTED_JAX
    assert _jax.SUPPORTED_JAX == ((0, 11), (0, 12))


@pytest.mark.parametrize(("text", "parsed"), [
    ("0.12.0.1", (0, 12, 0)), ("0.11.2", (0, 11, 2)), ("0.11.2.dev20260101", (0, 11, 2)),
    ("0.13", (0, 13, 0)), ("0.12.1rc1", (0, 12, 1)),
])
def test_version_parsing(text, parsed):
    assert versions._parse(text) == parsed


def test_pyproject_range_is_the_supported_versions():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for name in ("jax", "jaxlib"):
        spec = next(d for d in deps if re.match(rf"{name}[<>=]", d))
        assert spec == f"{name}>=0.11,<0.13", spec
    lowest, highest = min(_jax.SUPPORTED_JAX), max(_jax.SUPPORTED_JAX)
    assert lowest == (0, 11) and highest == (0, 12)


def test_makefile_tests_the_other_jax():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test:.*\btest-jax011\b", makefile, re.M)
    assert re.search(r"^JAX011 := 0\.11\.\d+$", makefile, re.M)


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
