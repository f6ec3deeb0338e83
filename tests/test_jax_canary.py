"""The canary's decisions (tools/jax_canary.py, `make test-jax-latest`): which libtpu and CUDA
plugin it installs beside the newest JAX, what it pins, and the lines it prints."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("jax_canary", ROOT / "tools" / "jax_canary.py")
assert _spec is not None and _spec.loader is not None
canary = importlib.util.module_from_spec(_spec)
sys.modules["jax_canary"] = canary  # dataclasses look their module up
_spec.loader.exec_module(canary)

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.model.test_capture" name="test_a[x]" time="0.1"/>
<testcase classname="tests.model.test_capture" name="test_b" time="0.1">
  <failure message="AttributeError: 'BlockMapping' object has no attribute 'x'&#10;more">tb
  </failure></testcase>
<testcase classname="tests.lowering.test_lowering" name="test_c" time="0.1">
  <skipped message="no libtpu"/></testcase>
<testcase classname="tests.lowering.test_lowering" name="test_d" time="0.1">
  <error message="fixture failed">tb</error></testcase>
</testsuite></testsuites>"""


def test_failures_become_one_line_each_and_a_summary():
    result = canary.tally(JUNIT, 61.2)
    assert (result.passed, result.skipped) == (1, 1)
    assert [o.line() for o in result.not_passed] == [
        "canary: FAILED tests/model/test_capture.py::test_b: "
        "AttributeError: 'BlockMapping' object has no attribute 'x'",
        "canary: ERROR tests/lowering/test_lowering.py::test_d: fixture failed"]
    installed = canary.Installed("0.12.2", "0.12.2", "0.0.52",
                                 "; jax[tpu] asks for 0.0.54, not on the registry", None,
                                 "; no jax-cuda13-pjrt==0.12.2 on the registry")
    assert result.summary(installed, "0.12.1") == (
        "canary FAIL: JAX 0.12.2 (jaxlib 0.12.2, libtpu 0.0.52; jax[tpu] asks for 0.0.54, not "
        "on the registry, CUDA plugin none; no jax-cuda13-pjrt==0.12.2 on the registry), "
        "newer than the development pin 0.12.1: 1 passed, 1 failed, 1 errors, 1 skipped in 61 s")


def test_a_clean_run_on_the_pinned_jax_says_so():
    clean = JUNIT.replace("<failure", "<skipped").replace("</failure>", "</skipped>") \
        .replace("<error", "<skipped").replace("</error>", "</skipped>")
    result = canary.tally(clean, 3)
    installed = canary.Installed("0.12.1", "0.12.1", "0.0.52", "", "jax-cuda13 0.12.1", "")
    assert result.summary(installed, "0.12.1").startswith(
        "canary PASS: JAX 0.12.1 (jaxlib 0.12.1, libtpu 0.0.52, CUDA plugin jax-cuda13 "
        "0.12.1), the development pin: 1 passed, 0 failed, 0 errors, 3 skipped")


def test_the_libtpu_jax_asks_for_is_read_from_its_metadata():
    requires = ["jaxlib<=0.12.1,>=0.12.1", 'libtpu==0.0.53.*; extra == "tpu"',
                'requests; extra == "tpu"']
    assert canary.libtpu_asked(requires) == "0.0.53"
    assert canary.libtpu_asked(['libtpu==0.0.50.1; extra == "tpu"']) == "0.0.50.1"
    assert canary.libtpu_asked(["jaxlib==0.12.1"]) is None


def test_the_cuda_plugins_the_registry_lacks_are_named():
    both = {13: ["0.12.1", "0.12.0.1"], 12: ["0.12.0.1"]}
    assert canary.missing_cuda_plugins("0.12.1", both) == \
        "; no jax-cuda12-pjrt==0.12.1 on the registry"
    assert canary.missing_cuda_plugins("0.12.0.1", both) == ""
    assert canary.missing_cuda_plugins("0.13.0", both) == (
        "; no jax-cuda13-pjrt==0.13.0 on the registry; no jax-cuda12-pjrt==0.13.0 on the "
        "registry")


def test_the_installed_plugin_is_read_from_pallaslabs_own_install():
    printed = ("+ python -m pip install --quiet --no-deps --upgrade --target d "
               "jax-cuda13-pjrt==0.12.1 jax-cuda13-plugin==0.12.1\n")
    assert canary.installed_plugin(printed) == "jax-cuda13 0.12.1"
    assert canary.installed_plugin("nothing") is None


def test_the_canary_keeps_every_pin_but_jaxs_own():
    text = ("# c\njax==0.12.1\njaxlib==0.12.1\nlibtpu==0.0.52\ntriton==3.9.0\n"
            "jax-cuda13-pjrt==0.12.1\n")
    assert canary.constraints_without_jax(text) == "# c\ntriton==3.9.0\njax-cuda13-pjrt==0.12.1\n"


def test_refreshing_the_pins_keeps_the_header_and_replaces_the_frozen_set():
    text = ("# head\n# also-tested: jax==0.11.2 jaxlib==0.11.2 libtpu==0.0.48.1\n"
            "jax-cuda13-pjrt==0.12.1\n"
            f"{canary.FROZEN_MARKER} ...\" installs:\njax==0.12.0\nold==1\n")
    frozen = "jax==0.12.1\n-e git+x#egg=y\npallaslab @ file:///w\nnew==2\n"
    assert canary.refreshed_pins(text, frozen) == (
        "# head\n# also-tested: jax==0.11.2 jaxlib==0.11.2 libtpu==0.0.48.1\n"
        "jax-cuda13-pjrt==0.12.1\n"
        f"{canary.FROZEN_MARKER} ...\" installs:\njax==0.12.1\nnew==2\n")


def test_the_pin_file_has_the_marker_the_refresh_needs():
    assert canary.FROZEN_MARKER in (ROOT / "pins.txt").read_text()
