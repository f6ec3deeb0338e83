"""Test configuration: CPU only, and a cold lowering cache for every run."""

import atexit
import os
import shutil
import tempfile

# Before jax is imported anywhere: this machine has no accelerator.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Every run starts from an empty compile cache, so no test passes thanks to an old result.
_CACHE = tempfile.mkdtemp(prefix="pallaslab-test-cache-")
os.environ["PALLASLAB_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
