"""Every `PALLASLAB_*` setting is checked like the flag it stands for (pallaslab/settings.py):
a bad value is a `SettingError` naming the variable, the rule and the value, and in the CLI a
usage error (exit 2) before the command starts."""

import json
import math

import pytest

from pallaslab import settings
from pallaslab.analysis.tiling import max_programs
from pallaslab.cli import main
from pallaslab.errors import SettingError
from pallaslab.execute.prepared import check_devices
from pallaslab.execute.protocol import ExecutorError
from pallaslab.execute.worker.isolation import DEFAULT_TIMEOUT, time_limit

CASES = "tests/kernels.py"
VARIABLES = (settings.TIMEOUT, settings.MAX_PROGRAMS, settings.MAX_DEVICES,
             settings.MEMORY_BUDGET)


@pytest.fixture(autouse=True)
def no_settings(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def programs_rule(text):
    return f"PALLASLAB_MAX_PROGRAMS: must be a whole number of programs >= 1, got {text!r}"


@pytest.mark.parametrize("text", ["-5", "0", "abc", "1.5"])
def test_a_bad_max_programs_is_a_usage_error_not_an_ok(monkeypatch, capsys, text):
    # uncovered_output fails `check` (exit 1); the bad limit used to skip the whole-grid
    # rules and print "ok".
    assert main(["check", f"{CASES}:uncovered_output"]) == 1
    capsys.readouterr()
    monkeypatch.setenv(settings.MAX_PROGRAMS, text)
    assert main(["check", f"{CASES}:uncovered_output"]) == 2
    captured = capsys.readouterr()
    assert "ok" not in captured.out
    assert f"pallaslab: error: {programs_rule(text)}" in captured.err


def test_a_bad_setting_with_json_is_one_usage_object(monkeypatch, capsys):
    monkeypatch.setenv(settings.MAX_PROGRAMS, "0")
    assert main(["check", f"{CASES}:matmul_f32", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error == {"type": "usage", "message": f"pallaslab: error: {programs_rule('0')}"}


def test_the_timeout_variable_says_what_the_timeout_flag_says(monkeypatch, capsys):
    assert main(["compare", f"{CASES}:matmul_f32", "--timeout", "0"]) == 2
    flag = capsys.readouterr().err.strip().splitlines()[-1]
    assert flag.endswith("argument --timeout: must be a finite number of seconds > 0, got '0'")
    monkeypatch.setenv(settings.TIMEOUT, "0")
    assert main(["inspect", f"{CASES}:matmul_f32"]) == 2
    variable = capsys.readouterr().err.strip().splitlines()[-1]
    assert variable == "pallaslab: error: PALLASLAB_TIMEOUT: must be a finite number of " \
                       "seconds > 0, got '0'"
    assert variable.split("PALLASLAB_TIMEOUT")[1] == flag.split("argument --timeout")[1]


@pytest.mark.parametrize("text", ["0", "-1", "soon", "nan", "inf"])
def test_the_api_checks_the_timeout_variable(monkeypatch, text):
    monkeypatch.setenv(settings.TIMEOUT, text)
    with pytest.raises(SettingError) as err:
        time_limit(None)
    assert str(err.value) == f"PALLASLAB_TIMEOUT: must be a finite number of seconds > 0, " \
                             f"got {text!r}"
    assert time_limit(math.inf) == math.inf  # an explicit argument does not read it


def test_good_values_are_read(monkeypatch):
    assert time_limit(None) == DEFAULT_TIMEOUT and settings.timeout() is None
    monkeypatch.setenv(settings.TIMEOUT, "2.5")
    assert time_limit(None) == 2.5
    monkeypatch.setenv(settings.MAX_PROGRAMS, "1_000")
    assert max_programs() == 1000
    monkeypatch.setenv(settings.MAX_DEVICES, "8")
    assert settings.max_devices() == 8
    monkeypatch.setenv(settings.MEMORY_BUDGET, "0.25")
    monkeypatch.setattr(settings, "available_memory", lambda: 16 * 2**30)
    assert settings.memory_budget() == settings.MemoryBudget(
        4 * 2**30, "25% of the 16.00 GiB available; PALLASLAB_MEMORY_BUDGET=0.25")
    monkeypatch.setenv(settings.MEMORY_BUDGET, "1000000")
    assert settings.memory_budget() == settings.MemoryBudget(
        1_000_000, "PALLASLAB_MEMORY_BUDGET=1000000")


def test_the_analysis_refuses_a_bad_max_programs(monkeypatch):
    monkeypatch.setenv(settings.MAX_PROGRAMS, "0")
    with pytest.raises(SettingError, match=r"^PALLASLAB_MAX_PROGRAMS: must be a whole number"):
        max_programs()


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "0.0", "lots"])
def test_a_bad_memory_budget_is_named(monkeypatch, text):
    monkeypatch.setenv(settings.MEMORY_BUDGET, text)
    with pytest.raises(SettingError) as err:
        settings.memory_budget()
    assert str(err.value) == (
        "PALLASLAB_MEMORY_BUDGET: must be a number of bytes >= 1 or a fraction of the memory "
        f"available in (0, 1] (e.g. 0.5 or 8000000000), got {text!r}")


def test_available_memory_is_known_here():
    available = settings.available_memory()
    assert available is not None and available > 2**20


# --- devices -----------------------------------------------------------------------------


def devices_refusal(n, limit, source):
    return (f"must be at most {limit:,} simulated CPU devices (the limit on this machine, "
            f"{source}: JAX starts threads for every device, and far more abort in XLA; raise "
            f"it with PALLASLAB_MAX_DEVICES={n})")


def test_too_many_devices_is_a_usage_error_at_once(capsys):
    # Refused while parsing the options: no case is loaded, no JAX device is made.
    assert main(["inspect", "no/such/case.py:f", "--devices", "10000"]) == 2
    limit = settings.DEFAULT_MAX_DEVICES
    refusal = devices_refusal(10000, limit, f"PALLASLAB_MAX_DEVICES={limit} by default")
    assert f"argument --devices: {refusal}, got '10000'" in capsys.readouterr().err


def test_the_api_bounds_devices_by_the_setting(monkeypatch):
    monkeypatch.setenv(settings.MAX_DEVICES, "8")
    check_devices(8)
    with pytest.raises(ExecutorError) as err:
        check_devices(9)
    assert str(err.value) == f"devices=9: {devices_refusal(9, 8, 'PALLASLAB_MAX_DEVICES=8')}"


def test_a_bad_max_devices_is_named(monkeypatch, capsys):
    monkeypatch.setenv(settings.MAX_DEVICES, "none")
    assert main(["inspect", f"{CASES}:matmul_f32"]) == 2
    assert "PALLASLAB_MAX_DEVICES: must be a whole number of simulated CPU devices >= 1, got " \
           "'none'" in capsys.readouterr().err


def test_the_devices_flag_keeps_its_lower_bound(capsys):
    assert main(["inspect", f"{CASES}:matmul_f32", "--devices", "0"]) == 2
    assert "argument --devices: must be a whole number of simulated CPU devices >= 1, got " \
           "'0'" in capsys.readouterr().err


def test_the_magic_refuses_too_many_devices_at_once():
    from IPython.core.error import UsageError

    from pallaslab.magic.options import devices_option

    limit = settings.DEFAULT_MAX_DEVICES
    with pytest.raises(UsageError) as err:
        devices_option("10000")
    refusal = devices_refusal(10000, limit, f"PALLASLAB_MAX_DEVICES={limit} by default")
    assert str(err.value) == f"%%pallas: --devices 10000: {refusal}"
    assert devices_option(str(limit)) == limit
