"""Test configuration: CPU only, and a cold lowering cache for every run."""

import atexit
import os
import shutil
import tempfile
import uuid

import pytest

# Before jax is imported anywhere: this machine has no accelerator.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Test modules in tests/<package>/ import the shared helpers and catalogs of tests/ (pytest
# puts this folder on sys.path); a test that loads one of them as a case in a subprocess
# (`python -m pallaslab inspect tests/execute/test_x.py:case`) needs it there too.
_TESTS = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_TESTS, os.environ.get("PYTHONPATH", "")) if p)
# Every run starts from an empty compile cache, so no test passes thanks to an old result.
_CACHE = tempfile.mkdtemp(prefix="pallaslab-test-cache-")
os.environ["PALLASLAB_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

import binder_env  # noqa: E402  (tests/ is on sys.path: pytest's rootdir conftest)


def pytest_configure(config):
    # One id per run, which the pytest-xdist workers inherit: they share one binder
    # environment (tests/binder_env.py), which the controller removes at the end.
    if "PYTEST_XDIST_WORKER" not in os.environ:
        os.environ.setdefault(binder_env.RUN_VARIABLE, uuid.uuid4().hex)


def pytest_unconfigure(config):
    if "PYTEST_XDIST_WORKER" not in os.environ:
        binder_env.remove_binder_env()


@pytest.fixture(scope="module")
def private_lowering_cache(tmp_path_factory):
    """A lowering cache of the test module's own, so its cold/warm assertions hold whatever ran
    before it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PALLASLAB_CACHE_DIR", str(tmp_path_factory.mktemp("lowering-cache")))
        yield


@pytest.fixture
def shown(monkeypatch):
    """What the magic displays (the Workbench object itself), for the magic's tests."""
    from ipython_shell import record_displays

    return record_displays(monkeypatch)
