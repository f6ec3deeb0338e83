"""An untested JAX is named, never crashed on (pallaslab.model._jax.versions, pallaslab.errors).

On a JAX release outside `TESTED_JAX`: one warning at import names the tested releases, and an
error pallaslab raises while reading JAX's internals says which JAX it is, in the CLI's error
line, in `%%pallas`, from the API and in an executor's failed result, instead of
"internal error: AttributeError". An untested JAX is simulated by standing another version in
for `versions.JAX_VERSION_TEXT` and a JAX module that lost a class for the one the compat layer
reads (`equation_fields.pallas_core` without `Squeezed`, as a JAX renaming it would have).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types

import pytest

from pallaslab.errors import (
    PallasLabError,
    UntestedJaxError,
    UntestedJaxWarning,
    untested_jax_failure,
)
from pallaslab.model._jax import equation_fields, versions

K = "tests/kernels.py"
TESTED = "(0.11.2, 0.12.0.1, 0.12.1)"
NEWER = f"JAX 0.12.2 is newer than the releases pallaslab is tested with {TESTED}"
MISSING = "AttributeError: module 'jax._src.pallas.core' has no attribute 'Squeezed'"
# The whole sentence, up to the line of the compat layer that read the missing class.
READING = re.escape(f"{NEWER}; this failed reading JAX's internals: {MISSING} (in "
                    "pallaslab/model/_jax/equation_fields.py:") + r"\d+\)"


@pytest.fixture
def renamed(monkeypatch):
    """JAX's `pallas.core` without `Squeezed`, where the compat layer reads block dimensions:
    capturing any BlockSpec kernel fails there with an AttributeError."""
    real = equation_fields.pallas_core
    fake = types.ModuleType(real.__name__)
    fake.__dict__.update({k: v for k, v in vars(real).items() if k != "Squeezed"})
    monkeypatch.setattr(equation_fields, "pallas_core", fake)


@pytest.fixture
def newer(monkeypatch):
    monkeypatch.setattr(versions, "JAX_VERSION_TEXT", "0.12.2")


def _raises_in_compat_layer(name: str, message: str):
    """A function whose frame is pallaslab.model._jax.equation_fields' and that raises an
    AttributeError: pallaslab's own code failing on a changed JAX, outside the capture."""
    source = f"def {name}(*args, **kwargs):\n    raise AttributeError({message!r})\n"
    namespace: dict = {}
    exec(compile(source, equation_fields.__file__, "exec"), namespace)
    return namespace[name]


# --- which JAX is tested, in words -------------------------------------------------------------


def test_the_tested_releases_are_one_list():
    assert versions.TESTED_JAX == ("0.11.2", "0.12.0.1", "0.12.1")
    assert versions.SUPPORTED_JAX == ((0, 11), (0, 12))  # derived from it


@pytest.mark.parametrize(("version", "tested"), [
    ("0.11.2", True), ("0.12.0.1", True), ("0.12.1", True), ("0.12.1.0", True),
    ("0.12.0", False),  # the fourth number counts: 0.12.0.1 is tested, 0.12.0 is not
    ("0.12.2", False), ("0.11.1", False), ("0.13.0", False), ("0.12.1rc1", False),
    ("0.12.1.dev20260101", False), ("0.12.1+cuda12", False), ("0.12", False),
])
def test_a_release_is_tested_only_when_listed_in_full(version, tested):
    assert versions.jax_tested(version) is tested
    assert (versions.untested_jax(version) is None) is tested


@pytest.mark.parametrize(("version", "relation"), [
    ("0.12.2", "is newer than"), ("0.13.0.dev20260101", "is newer than"),
    ("0.11.1", "is older than"), ("0.11.2rc1", "is older than"), ("0.10.7", "is older than"),
    ("0.12.0", "is not one of"), ("0.12.1rc1", "is not one of"), ("0.12.0.2", "is not one of"),
])
def test_an_untested_release_is_placed_against_the_tested_ones(version, relation):
    assert versions.untested_jax(version) == (
        f"JAX {version} {relation} the releases pallaslab is tested with {TESTED}")


def test_the_running_jax_is_read_through_a_name_tests_can_replace(newer):
    assert not versions.jax_tested()
    assert versions.untested_jax() == NEWER


# --- the warning at import ---------------------------------------------------------------------

_IMPORT_PROBE = """
import json, warnings
import jax
jax.__version__ = {version!r}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import pallaslab.model, pallaslab.execute, pallaslab.workbench
    from pallaslab.model._jax import base, versions
    import importlib
    importlib.import_module("pallaslab.model._jax.base")
print(json.dumps([[w.category.__name__, [c.__name__ for c in w.category.__mro__],
                   str(w.message)] for w in caught if "tested with" in str(w.message)]))
"""


def _import_warnings(version: str) -> list:
    done = subprocess.run([sys.executable, "-c", _IMPORT_PROBE.format(version=version)],
                          capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_untested_jax_gets_one_warning_at_import_naming_the_tested_releases():
    caught = _import_warnings("0.12.2")
    assert len(caught) == 1, caught
    name, mro, text = caught[0]
    assert name == "UntestedJaxWarning" and "UserWarning" in mro
    assert text.startswith(f"{NEWER}. pallaslab reads JAX's private internals"), text
    assert "0.11.2, 0.12.0.1, 0.12.1" in text and "0.12.2" in text


def test_the_warning_text_names_the_found_and_the_tested_versions():
    text = versions.untested_jax_warning("0.12.0")
    assert text is not None
    assert text.startswith(f"JAX 0.12.0 is not one of the releases pallaslab is tested with "
                           f"{TESTED}. ")
    assert versions.untested_jax_warning("0.12.1") is None
    assert issubclass(UntestedJaxWarning, UserWarning)


# --- the one wording of a failure --------------------------------------------------------------


def test_on_a_tested_jax_a_failure_is_worded_as_before(renamed):
    from kernels import CATALOG

    import pallaslab

    fn, args = CATALOG["matmul_f32"].case()
    with pytest.raises(AttributeError, match="has no attribute 'Squeezed'"):
        pallaslab.capture(fn, *args)


def test_the_failure_names_the_jax_the_error_and_the_compat_layer_line(newer):
    err = _caught(_raises_in_compat_layer("read", "'BlockMapping' object has no attribute "
                                                  "'transformed_block_aval'"))
    message = untested_jax_failure(err)
    assert message is not None
    assert re.fullmatch(re.escape(
        f"{NEWER}; this failed reading JAX's internals: AttributeError: 'BlockMapping' object "
        "has no attribute 'transformed_block_aval' (in pallaslab/model/_jax/equation_fields.py:")
        + r"\d+\)", message), message
    # the version judged may be given
    assert untested_jax_failure(err, version="0.12.1") is None
    assert untested_jax_failure(err, version="0.11.1").startswith("JAX 0.11.1 is older than")


def test_a_failure_outside_the_compat_layer_names_pallaslabs_line(newer):
    namespace: dict = {}
    import pallaslab.analysis.tiling as somewhere

    exec(compile("def f():\n    raise TypeError('bad')\n", somewhere.__file__, "exec"), namespace)
    message = untested_jax_failure(_caught(namespace["f"]))
    assert message is not None
    assert re.fullmatch(re.escape(f"{NEWER}; pallaslab failed, most likely for that reason: "
                                  "TypeError: bad (in pallaslab/analysis/tiling.py:") + r"\d+\)",
                        message), message


def test_the_users_own_error_and_our_verdicts_are_not_reworded(newer):
    def users(*args):
        raise AttributeError("the user's typo")

    assert untested_jax_failure(_caught(users)) is None
    assert untested_jax_failure(PallasLabError("a verdict")) is None


def _caught(fn) -> BaseException:
    try:
        fn()
    except Exception as err:
        return err
    raise AssertionError("did not raise")


# --- the API -----------------------------------------------------------------------------------


def test_the_api_raises_an_untested_jax_error_from_the_original(renamed, newer):
    from kernels import CATALOG

    import pallaslab

    fn, args = CATALOG["matmul_f32"].case()
    for api in (pallaslab.capture, pallaslab.inspect):
        with pytest.raises(UntestedJaxError) as caught:
            api(fn, *args)
        assert re.fullmatch(READING, str(caught.value)), str(caught.value)
        assert isinstance(caught.value.__cause__, AttributeError)
        assert isinstance(caught.value, PallasLabError)


def test_the_api_lets_the_users_own_error_through_on_an_untested_jax(newer):
    import jax.numpy as jnp

    import pallaslab

    def users(x):
        return x.no_such_attribute

    with pytest.raises(AttributeError, match="no_such_attribute"):
        pallaslab.capture(users, jnp.ones(3))


def test_an_executors_failed_result_says_which_jax(newer, monkeypatch):
    from kernels import CATALOG

    from pallaslab.execute.prepared import prepare
    from pallaslab.execute.registry import get_executor
    from pallaslab.execute.worker.running import execute_here

    fn, args = CATALOG["vector_add"].case()
    prepared = prepare(fn, args)
    executor = get_executor("interpret")
    monkeypatch.setattr(type(executor), "execute",
                        _raises_in_compat_layer("execute", "'X' object has no attribute 'y'"))
    result = execute_here(executor, prepared, 60.0)
    assert result.error is not None and result.unavailable is None
    assert result.error.startswith(f"{NEWER}; this failed reading JAX's internals: "
                                   "AttributeError: 'X' object has no attribute 'y' (in "
                                   "pallaslab/model/_jax/equation_fields.py:"), result.error
    monkeypatch.setattr(versions, "JAX_VERSION_TEXT", "0.12.1")  # tested: as before
    assert execute_here(executor, prepared, 60.0).error == \
        "AttributeError: 'X' object has no attribute 'y'"


# --- the CLI -----------------------------------------------------------------------------------


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0].removeprefix("error: ")


def test_the_cli_error_line_says_which_jax(renamed, newer, capsys):
    from pallaslab.cli import main

    assert main(["inspect", f"{K}:matmul_f32"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(READING, _error_line(err)), err
    assert "internal error" not in err
    assert "Traceback (most recent call last):" in err  # the original's, for a bug report


def test_the_cli_json_error_says_which_jax(renamed, newer, capsys):
    from pallaslab.cli import main

    assert main(["inspect", f"{K}:matmul_f32", "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["error"]["type"] == "UntestedJaxError"
    assert re.match(READING, payload["error"]["message"]), payload


def test_the_cli_words_any_failure_of_ours_so_not_only_the_captures(newer, monkeypatch,
                                                                     capsys):
    import pallaslab.model
    from pallaslab.cli import main

    monkeypatch.setattr(pallaslab.model, "capture", _raises_in_compat_layer(
        "capture", "'BlockMapping' object has no attribute 'transformed_block_aval'"))
    assert main(["inspect", f"{K}:vector_add"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert re.fullmatch(re.escape(
        f"{NEWER}; this failed reading JAX's internals: AttributeError: 'BlockMapping' object "
        "has no attribute 'transformed_block_aval' (in pallaslab/model/_jax/equation_fields.py:")
        + r"\d+\)", line), line


def test_on_a_tested_jax_the_cli_still_says_internal_error(renamed, capsys):
    from pallaslab.cli import main

    assert main(["inspect", f"{K}:matmul_f32"]) == 2
    assert _error_line(capsys.readouterr().err).startswith(
        "internal error: AttributeError: module 'jax._src.pallas.core' has no attribute "
        "'Squeezed'")


# --- %%pallas ----------------------------------------------------------------------------------

SETUP = """
from kernels import matmul, rand
x = rand((256, 256)); y = rand((256, 128), seed=1)
"""


@pytest.fixture(scope="module")
def shell():
    pytest.importorskip("IPython")
    from ipython_shell import ipython_shell

    yield from ipython_shell(SETUP)


def test_the_magic_says_which_jax(shell, renamed, newer):
    from IPython.core.error import UsageError
    from ipython_shell import plain_text, run

    result, out = run(shell, "%%pallas\nmatmul(x, y, interpret=True)\n")
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    message = str(result.error_in_exec)
    assert message.startswith("%%pallas: ")
    assert re.fullmatch(READING, message.removeprefix("%%pallas: ")), message
    assert "internal error" not in plain_text(out)


def test_the_magic_says_which_jax_when_the_workbench_fails(shell, newer, monkeypatch):
    from IPython.core.error import UsageError
    from ipython_shell import run

    import pallaslab.workbench

    monkeypatch.setattr(pallaslab.workbench, "Workbench", _raises_in_compat_layer(
        "Workbench", "'GridMapping' object has no attribute 'vmapped_dims'"))
    result, _ = run(shell, "%%pallas\nmatmul(x, y, interpret=True)\n")
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    assert re.fullmatch(re.escape(
        f"%%pallas: {NEWER}; this failed reading JAX's internals: AttributeError: "
        "'GridMapping' object has no attribute 'vmapped_dims' (in "
        "pallaslab/model/_jax/equation_fields.py:") + r"\d+\)", str(result.error_in_exec))


def test_on_a_tested_jax_the_magic_fails_as_before(shell, renamed):
    from ipython_shell import run

    result, _ = run(shell, "%%pallas\nmatmul(x, y, interpret=True)\n")
    assert isinstance(result.error_in_exec, AttributeError), result.error_in_exec


def test_the_cli_says_which_jax_when_the_compat_layer_cannot_even_import():
    """A JAX without a module the compat layer imports: the tested releases still come from
    `versions` (loaded on its own), and the error line names the import that failed."""
    probe = ("import sys, jax\n"
             "jax.__version__ = '0.13.0'\n"
             "sys.modules['jax._src.pallas.mpmd'] = None  # a module this JAX no longer has\n"
             "from pallaslab.cli import main\n"
             f"sys.exit(main(['inspect', '{K}:matmul_f32']))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr
    line = _error_line(done.stderr)
    assert re.fullmatch(re.escape(
        f"JAX 0.13.0 is newer than the releases pallaslab is tested with {TESTED}; this failed "
        "reading JAX's internals: ModuleNotFoundError: import of jax._src.pallas.mpmd halted; "
        "None in sys.modules (in pallaslab/model/_jax/base.py:") + r"\d+\)", line), line
