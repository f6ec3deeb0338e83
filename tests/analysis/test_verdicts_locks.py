"""Stores guarded by a spin lock are not a GPU write conflict (issue 24). JAX's Triton test
`test_atomic_counter` takes a lock with a loop spinning on `atomic_cas`, increments a shared
counter with plain loads and stores, and releases the lock with `atomic_xchg`: the programs
store in turn, so `check --target gpu-h100` passes and an info finding `lock-guarded-store`
names the lock and the lines it assumed. A store or load outside the critical section (after
the release, before the acquire, or with no acquire at all) is still a conflict."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

import pallaslab
from pallaslab.analysis.finding import Finding
from pallaslab.analysis.inspection import inspect_capture
from pallaslab.cli import main

PEER = Path(__file__).parents[1] / "peer" / "gpu_triton.py"
TRITON = plt.CompilerParams()
SCALAR = jax.ShapeDtypeStruct((), jnp.int32)


def _acquire(lock_ref):
    lax.while_loop(lambda _: plt.atomic_cas(lock_ref, 0, 1) != 0, lambda spin: spin, 0)


def _release(lock_ref):
    plt.atomic_xchg(lock_ref, (), 0)


def _locked_counter(lock_in, count_in, lock_ref, count_ref):
    del lock_in, count_in  # aliased with lock_ref and count_ref
    _acquire(lock_ref)
    count_ref[...] += 1
    _release(lock_ref)


def _store_after_release(lock_in, count_in, lock_ref, count_ref):
    del lock_in, count_in
    _acquire(lock_ref)
    _release(lock_ref)
    count_ref[...] += 1  # wrong: the lock is no longer held


def _store_before_acquire(lock_in, count_in, lock_ref, count_ref):
    del lock_in, count_in
    count_ref[...] += 1  # wrong: the lock is not yet held
    _acquire(lock_ref)
    _release(lock_ref)


def _no_acquire(lock_in, count_in, lock_ref, count_ref):
    del lock_in, count_in
    count_ref[...] += 1  # wrong: released, never taken
    _release(lock_ref)


def _load_outside_lock(lock_in, count_in, lock_ref, count_ref):
    del lock_in, count_in
    seen = count_ref[...]  # wrong: read before the lock, a lost update
    _acquire(lock_ref)
    count_ref[...] = seen + 1
    _release(lock_ref)


def _locked_by_a_body_spin(lock_in, count_in, lock_ref, count_ref):
    """The acquire as JAX's tests also write it: the loop's body retries the atomic_cas."""
    del lock_in, count_in
    lax.while_loop(lambda held: held != 0, lambda _: plt.atomic_cas(lock_ref, 0, 1),
                   jnp.int32(1))
    count_ref[...] += 1
    _release(lock_ref)


def _locked_under_when(lock_in, count_in, lock_ref, count_ref):
    """The critical section inside a `pl.when`, the store inside another one."""
    del lock_in, count_in

    @pl.when(pl.program_id(0) % 2 == 0)
    def _():
        _acquire(lock_ref)

        @pl.when(count_ref[...] < 100)
        def _():
            count_ref[...] += 1

        _release(lock_ref)


def _counter_call(kernel, grid=(4,)):
    def fn(lock, count):
        return pl.pallas_call(kernel, out_shape=(SCALAR, SCALAR), grid=grid,
                              input_output_aliases={0: 0, 1: 1},
                              compiler_params=TRITON)(lock, count)

    return fn, (jnp.int32(0), jnp.int32(0))


def locked_counter():
    """A case (`pallaslab check tests/analysis/test_verdicts_locks.py:locked_counter`)."""
    return _counter_call(_locked_counter)


def counter_stored_after_release():
    """A case: the wrong variant, its store after the release."""
    return _counter_call(_store_after_release)


def _findings(fn, args) -> tuple[Finding, ...]:
    (insp,) = inspect_capture(pallaslab.capture(fn, *args))
    return insp.findings


def _codes(findings: tuple[Finding, ...]) -> list[str]:
    return [f.code for f in findings if f.code in ("parallel-write-conflict",
                                                   "lock-guarded-store")]


def test_the_peer_spin_lock_counter_passes_check(capsys):
    assert main(["check", f"{PEER}:triton_spin_lock_counter", "--target", "gpu-h100"]) == 0, \
        capsys.readouterr().out


def test_a_lock_guarded_store_is_an_info_naming_the_lock_and_the_lines():
    findings = _findings(*_counter_call(_locked_counter))
    assert _codes(findings) == ["lock-guarded-store"]
    (info,) = [f for f in findings if f.code == "lock-guarded-store"]
    assert info.severity == "info"
    assert info.operand == "outputs[1]"
    message = " ".join(info.message.split())
    assert message.startswith("outputs[1] (count_ref): programs (0,) and (3,) both store "
                              "element ()")
    assert "the spin lock outputs[0] (lock_ref)" in message
    here = Path(__file__).name
    lines = {name: _line_of(text) for name, text in (
        ("acquire", "lax.while_loop(lambda _: plt.atomic_cas"),
        ("store", "count_ref[...] += 1\n    _release"),
        ("release", "plt.atomic_xchg(lock_ref, (), 0)"))}
    assert f"atomic_cas at {here}:{lines['acquire']}" in message
    assert f"(at {here}:{lines['store']})" in message
    assert f"atomic_xchg at {here}:{lines['release']}" in message


def test_a_lock_whose_loop_body_retries_the_cas_guards_too():
    assert _codes(_findings(*_counter_call(_locked_by_a_body_spin))) == ["lock-guarded-store"]


def test_a_lock_taken_inside_a_when_guards_a_store_inside_another():
    assert _codes(_findings(*_counter_call(_locked_under_when))) == ["lock-guarded-store"]


def test_a_store_after_the_release_is_still_a_conflict():
    findings = _findings(*_counter_call(_store_after_release))
    assert _codes(findings) == ["parallel-write-conflict"]
    (error,) = [f for f in findings if f.code == "parallel-write-conflict"]
    assert error.severity == "error"
    assert "programs (0,) and (3,) both store element ()" in error.message


def test_a_store_before_the_acquire_is_still_a_conflict():
    assert _codes(_findings(*_counter_call(_store_before_acquire))) == [
        "parallel-write-conflict"]


def test_a_release_without_an_acquire_guards_nothing():
    assert _codes(_findings(*_counter_call(_no_acquire))) == ["parallel-write-conflict"]


def test_a_load_outside_the_lock_is_still_a_conflict():
    assert _codes(_findings(*_counter_call(_load_outside_lock))) == ["parallel-write-conflict"]


def test_a_store_with_no_lock_fails_check_and_the_locked_one_passes(capsys):
    """The CLI's exit status on this file's cases (the wrong variant: after release)."""
    cases = Path(__file__)
    assert main(["check", f"{cases}:locked_counter", "--target", "gpu-h100"]) == 0, \
        capsys.readouterr().out
    assert main(["check", f"{cases}:counter_stored_after_release",
                 "--target", "gpu-h100"]) == 1
    assert "parallel-write-conflict" in capsys.readouterr().out


def _blocked_kernel(locked: bool):
    """Programs i and i + 2 share output block i % 2 (BlockSpec windows, not whole arrays)."""

    def kernel(lock_in, lock_ref, o_ref):
        del lock_in
        if locked:
            _acquire(lock_ref)
        o_ref[...] += 1.0
        if locked:
            _release(lock_ref)

    return kernel


def _blocked_call(locked: bool):
    def fn(lock):
        return pl.pallas_call(
            _blocked_kernel(locked), grid=(4,),
            out_shape=(SCALAR, jax.ShapeDtypeStruct((16,), jnp.float32)),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=(pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec((8,), lambda i: (i % 2,))),
            input_output_aliases={0: 0}, compiler_params=TRITON)(lock)

    return fn, (jnp.int32(0),)


def test_blocked_outputs_under_a_lock_are_guarded_too():
    findings = _findings(*_blocked_call(locked=True))
    assert _codes(findings) == ["lock-guarded-store"]
    (info,) = [f for f in findings if f.code == "lock-guarded-store"]
    assert "all write output block (0,)" in info.message
    assert _codes(_findings(*_blocked_call(locked=False))) == ["parallel-write-conflict"]


def _line_of(text: str) -> int:
    source = Path(__file__).read_text()
    return source[:source.index(text)].count("\n") + 1
