"""One pin file (pins.txt) names the set the suite passes with; the Makefile, binder/ and
pyproject.toml agree with it and with the tested JAX releases pallaslab names.

`make test` runs this file on the development JAX and on each other tested release.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
import tomllib
from pathlib import Path

import jax
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from pallaslab.model._jax import versions

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "pins.txt"


def pins_text() -> str:
    return PINS.read_text()


def pinned() -> dict[str, str]:
    return {m.group(1).lower(): m.group(2)
            for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==(\S+)$", pins_text(), re.M)}


def also_tested() -> dict[str, dict[str, str]]:
    """jax version -> the packages its `also-tested:` line names."""
    found = {}
    for line in re.findall(r"^# also-tested: (.*)$", pins_text(), re.M):
        specs = dict(spec.split("==") for spec in line.split())
        found[specs["jax"]] = specs
    return found


def test_every_pin_line_is_an_exact_requirement():
    lines = [line for line in pins_text().splitlines() if line and not line.startswith("#")]
    assert len(lines) > 100  # the whole frozen set, not a hand-picked few
    for line in lines:
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", line


@pytest.mark.parametrize("name", ["jax", "jaxlib", "libtpu", "triton", "tokamax", "jupyterlab",
                                  "notebook", "anywidget", "ipywidgets"])
def test_the_pin_file_names_the_development_set(name):
    assert name in pinned(), f"pins.txt does not pin {name}"


def test_the_cuda_plugin_is_pinned_at_the_development_jaxlib():
    pins = pinned()
    plugins = {n: v for n, v in pins.items() if re.fullmatch(r"jax-cuda\d+-(pjrt|plugin)", n)}
    assert len(plugins) == 2, plugins
    assert set(plugins.values()) == {pins["jaxlib"]}


def test_the_tested_releases_are_the_pin_files():
    """pallaslab's tested list (the import warning, the error on an untested JAX) is exactly
    the development pin and the also-tested lines."""
    pins = pinned()
    assert pins["jax"] == pins["jaxlib"]
    others = also_tested()
    assert len(others) >= 2
    for version, specs in others.items():
        assert set(specs) == {"jax", "jaxlib", "libtpu"} and specs["jaxlib"] == version
    assert set(versions.TESTED_JAX) == {pins["jax"], *others}


def test_pyproject_ranges_span_the_tested_releases():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    tested = sorted(versions.TESTED_JAX, key=Version)
    for name in ("jax", "jaxlib"):
        req = Requirement(next(d for d in deps if re.match(rf"{name}[<>=]", d)))
        assert str(req.specifier) == f"<={tested[-1]},>={tested[0]}", req
        for version in tested:
            assert req.specifier.contains(version)


def test_this_environment_is_a_pinned_one():
    """The suite runs on exactly a pinned set: the development one, or an also-tested line."""
    installed = {n: importlib.metadata.version(n) for n in ("jax", "jaxlib", "libtpu")}
    expected = also_tested().get(jax.__version__) or {n: pinned()[n] for n in installed}
    assert installed == expected
    for name in ("triton", "tokamax", "jupyterlab", "notebook", "numpy"):
        # what this environment has of the rest (a release's has no notebook stack)
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            assert importlib.metadata.version(name) == pinned()[name], name


def test_every_install_in_the_makefile_goes_through_the_pins():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PINS := pins\.txt$", makefile, re.M)
    installs = re.findall(r"pip install[^\n]*(?:\\\n[^\n]*)*", makefile)
    assert installs
    for command in installs:
        if "--upgrade pip" in command:
            continue
        assert re.search(r"-c \S*(\$\(PINS\)|constraints\.txt)", command), command
    assert "--constraints $(PINS)" in makefile  # the Mosaic GPU compiler's install


def test_make_test_runs_the_other_releases_and_not_the_canary():
    makefile = (ROOT / "Makefile").read_text()
    test_deps = re.search(r"^test:(.*)$", makefile, re.M).group(1).split()
    assert "test-jax-releases" in test_deps and "test-jax-latest" not in test_deps
    assert re.search(r"^OTHER_JAX := .*also-tested.*\$\(PINS\)", makefile, re.M)
    assert re.search(r"^test-jax-latest:", makefile, re.M)


def test_binder_installs_through_the_pin_file():
    lines = [line.strip() for line in (ROOT / "binder" / "requirements.txt").read_text()
             .splitlines() if line.strip() and not line.startswith("#")]
    constraints = [line.split(maxsplit=1)[1] for line in lines if line.startswith("-c ")]
    # pip reads a nested constraints path relative to the requirements file
    assert [(ROOT / "binder" / c).resolve() for c in constraints] == [PINS]


def test_the_readme_documents_the_canary():
    readme = (ROOT / "README.md").read_text()
    assert "make test-jax-latest" in readme and "pins.txt" in readme
