"""Keep JAX quiet on hosts without an accelerator.

With the libtpu wheel installed (`pallaslab[tpu]`, for compiling for TPU on a CPU host),
JAX tries to start a TPU backend on every host, and on a machine without a TPU libtpu prints
screens of warnings about worker hostnames. On a host with no accelerator device at all, the
CPU is the only backend JAX could use anyway, so we say so up front. Users who set
JAX_PLATFORMS themselves, or hosts with a TPU or GPU device, are left alone.
"""

from __future__ import annotations

import glob
import os
import sys

ACCELERATOR_DEVICES = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*", "/dev/dri/card*")


def has_accelerator_device() -> bool:
    return any(glob.glob(pattern) for pattern in ACCELERATOR_DEVICES)


def prefer_cpu_on_accelerator_free_host() -> bool:
    """Set jax_platforms to "cpu" when nothing else could run; returns whether it did."""
    if "JAX_PLATFORMS" in os.environ or has_accelerator_device():
        return False
    if "jax" not in sys.modules:  # JAX reads the variable when imported: no need to import it
        os.environ["JAX_PLATFORMS"] = "cpu"  # (nor its ~1 s start: `pallaslab --help` stays quick)
        return True
    import jax

    if jax.config.jax_platforms:  # the user configured it already
        return False
    jax.config.update("jax_platforms", "cpu")
    return True
