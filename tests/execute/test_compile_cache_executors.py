"""Executors keep what they compile, keyed by what it computes (issue 28, the warm loop): a
re-run of an unchanged function hits and gives the same outputs; a changed kernel body, block
shape or closed-over constant misses and gives the new result. JAX's persistent compilation
cache lives under pallaslab's cache directory, for pallaslab's own processes only."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from jax.experimental import pallas as pl
from kernels import matmul, rand

import pallaslab
from pallaslab.cli import main
from pallaslab.execute import compile_cache_stats, get_executor
from pallaslab.execute.prepared import prepare
from pallaslab.execute.worker.running import execute_here
from pallaslab.lowering import cache
from pallaslab.model._jax.compiled import CacheStats
from pallaslab.util import jax_cache

EXECUTORS = ("vectorized", "interpret", "tpu-interpret")
ROWS = 256


def _scale_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _shift_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 2.0


def _factor_kernel(factor):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * factor
    return kernel


def blocked(kernel, block=64):
    def fn(x):
        spec = pl.BlockSpec((block, 128), lambda i: (i, 0))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[0] // block,), in_specs=[spec], out_specs=spec)(x)
    return fn


def plus_constant(constant):
    """A kernel's output plus an array the function closes over (a constant of its jaxpr)."""
    def fn(x):
        return blocked(_scale_kernel)(x) + constant
    return fn


def _run(name, fn, *args):
    result = execute_here(get_executor(name), prepare(fn, args), math.inf)
    assert result.outputs is not None, result.error or result.unavailable
    return result


def _delta(before: CacheStats, after: CacheStats) -> tuple[int, int]:
    return after.hits - before.hits, after.misses - before.misses


def _runs_with_delta(name, fn, *args):
    before = compile_cache_stats()
    result = _run(name, fn, *args)
    return result, _delta(before, compile_cache_stats())


@pytest.fixture
def x():
    return rand((ROWS, 128))


@pytest.mark.parametrize("name", EXECUTORS)
def test_a_repeated_run_hits_and_gives_the_same_outputs(name, x):
    fn = plus_constant(np.full((ROWS, 128), 0.5, np.float32))
    first, (hits, misses) = _runs_with_delta(name, fn, x)
    assert (hits, misses) == (0, 1)
    again, (hits, misses) = _runs_with_delta(name, fn, x)  # a new capture, the same computation
    assert (hits, misses) == (1, 0)
    assert again.compile_time == 0.0 and first.compile_time > 0.0
    np.testing.assert_array_equal(again.outputs[0], first.outputs[0])
    np.testing.assert_allclose(again.outputs[0], np.asarray(x) * 2 + 0.5, rtol=1e-6)


@pytest.mark.parametrize("name", EXECUTORS)
def test_a_changed_body_block_shape_or_constant_misses_and_gives_the_new_result(name, x):
    data = np.asarray(x)
    _run(name, blocked(_scale_kernel), x)
    changes = [
        (blocked(_shift_kernel), data + 2.0),                          # the kernel body
        (blocked(_scale_kernel, block=32), data * 2.0),                # the block shape
        (blocked(_factor_kernel(3.0)), data * 3.0),                    # a closed-over scalar
        (blocked(_factor_kernel(4.0)), data * 4.0),
        (plus_constant(np.full((ROWS, 128), 1.0, np.float32)), data * 2.0 + 1.0),  # an array
        (plus_constant(np.full((ROWS, 128), 7.0, np.float32)), data * 2.0 + 7.0),
    ]
    for fn, want in changes:
        result, (hits, misses) = _runs_with_delta(name, fn, x)
        assert (hits, misses) == (0, 1), f"{name}: a changed computation must miss"
        np.testing.assert_allclose(result.outputs[0], want, rtol=1e-6)


def test_other_input_shapes_miss():
    fn = blocked(_scale_kernel)
    _run("vectorized", fn, rand((ROWS, 128)))
    result, (hits, misses) = _runs_with_delta("vectorized", fn, rand((2 * ROWS, 128), seed=3))
    assert (hits, misses) == (0, 1)
    assert result.outputs[0].shape == (2 * ROWS, 128)


@pytest.mark.parametrize("name", ["interpret", "tpu-interpret"])
def test_a_cached_interpreter_run_reports_to_its_own_monitor(name, x):
    """The callbacks compiled into the cached computation reach each run's monitor: a run
    whose time limit has passed stops at its first program, though another run compiled it."""
    fn = blocked(_scale_kernel)
    _run(name, fn, x)
    before = compile_cache_stats()
    result = get_executor(name).execute(prepare(fn, (x,)), time.monotonic() - 1.0)
    assert _delta(before, compile_cache_stats()) == (1, 0)
    assert result.timed_out is not None and result.timed_out.startswith(
        f"{name} stopped by its time limit"), result


def test_the_worker_keeps_what_it_compiles(x):
    fn = plus_constant(np.asarray(rand((ROWS, 128), seed=11)))  # new to this worker
    before = compile_cache_stats("worker")
    first = pallaslab.run(fn, x, executor="vectorized")
    again = pallaslab.run(fn, x, executor="vectorized")
    assert _delta(before, compile_cache_stats("worker")) == (1, 1)
    np.testing.assert_array_equal(again.outputs[0], first.outputs[0])
    assert again.compile_time == 0.0


def test_the_notebook_process_keeps_its_jax_options(x):
    pallaslab.run(blocked(_scale_kernel), x, executor="vectorized")
    assert jax.config.jax_compilation_cache_dir is None


def test_compile_cache_stats_names_the_bad_place():
    with pytest.raises(ValueError, match=r"compile_cache_stats\(where='there'\): where is "
                                         r"'here' or 'worker'"):
        compile_cache_stats("there")  # type: ignore[arg-type]


def test_matmul_hits_in_process():
    x, y = rand((256, 256)), rand((256, 256), seed=1)
    first = _run("vectorized", matmul, x, y)
    again, (hits, misses) = _runs_with_delta("vectorized", matmul, x, y)
    assert (hits, misses) == (1, 0)
    np.testing.assert_array_equal(again.outputs[0], first.outputs[0])


# --- JAX's persistent compilation cache ----------------------------------------------------


def _compile_in_a_pallaslab_process(root):
    code = ("from pallaslab.util import jax_cache; import jax, jax.numpy as jnp; "
            "print(jax_cache.enable()); jax.jit(lambda v: v * 3 + 1)(jnp.ones(8))")
    env = {**os.environ, "PALLASLAB_CACHE_DIR": str(root), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_jax_persistent_cache_is_shown_and_cleared(tmp_path, monkeypatch, capsys):
    root = tmp_path / "cache"
    folder = _compile_in_a_pallaslab_process(root)
    monkeypatch.setenv("PALLASLAB_CACHE_DIR", str(root))
    assert folder == str(cache.jax_cache_dir()) == str(root / jax_cache.folder_name())
    assert jax_cache.folder_name().startswith(f"jax-{jax.__version__}-")
    outside = tmp_path / "outside-cache"
    outside.write_text("not the cache's")
    (root / jax_cache.folder_name() / "planted-cache").symlink_to(outside)
    assert main(["cache", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["jax_cache"]
    assert shown["directory"] == folder and shown["entries"] >= 1 and shown["bytes"] > 0
    assert main(["cache"]) == 0
    assert f"JAX compilation cache: {folder}\n{shown['entries']} entr" in \
        capsys.readouterr().out
    assert main(["cache", "clear", "--json"]) == 0
    removed = json.loads(capsys.readouterr().out)["jax_cache"]
    assert (removed["entries"], removed["bytes"]) == (shown["entries"], shown["bytes"])
    assert cache.jax_info().entries == 0
    assert outside.read_text() == "not the cache's"  # the link was neither followed nor counted
    assert (root / jax_cache.folder_name() / "planted-cache").is_symlink()


def test_a_relative_cache_dir_leaves_jax_uncached(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLASLAB_CACHE_DIR", "relative/cache")
    assert jax_cache.default_root() is None
    assert jax_cache.enable() is None
    assert jax.config.jax_compilation_cache_dir is None



def test_a_key_that_cannot_be_made_runs_uncached(x, monkeypatch):
    import pallaslab.execute.executors.vectorized as vectorized

    def broken(*args):
        raise TypeError("no key today")

    monkeypatch.setattr(vectorized, "computation_key", broken)
    before = compile_cache_stats()
    result = _run("vectorized", blocked(_scale_kernel), x)
    after = compile_cache_stats()
    assert (after.uncacheable - before.uncacheable, *_delta(before, after)) == (1, 0, 0)
    np.testing.assert_allclose(result.outputs[0], np.asarray(x) * 2.0, rtol=1e-6)
    assert result.fallback is None  # the run itself was not pallaslab's failure
