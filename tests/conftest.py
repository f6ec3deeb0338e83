"""Test configuration: CPU only, the kernel catalog importable as `kernels`."""

import os

# Before jax is imported anywhere: this machine has no accelerator.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest


@pytest.fixture(scope="session")
def catalog():
    from kernels import CATALOG

    return CATALOG
