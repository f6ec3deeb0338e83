"""The program stepper: one program at a time, undo, and the kernel body equation by equation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import line_of
from kernels import CATALOG, shifted_block_reference

import pallaslab
from pallaslab.errors import UnavailableError
from pallaslab.execute import run


def bits(arrays):
    return [np.asarray(a).tobytes() for a in arrays]


@pytest.mark.parametrize("name", ["matmul_f32", "matmul_bf16", "partial_blocks",
                                  "scalar_prefetch_gather", "squeezed_dims", "vmapped_kernel",
                                  "reduction_revisited_output", "layer_norm"])
def test_final_outputs_equal_the_interpret_executor_bit_for_bit(name):
    fn, args = CATALOG[name].case()
    st = pallaslab.step(fn, *args)
    assert st.step(st.programs) == st.tiling.program_at(st.programs - 1) and st.done
    assert bits(st.outputs()) == bits(run(fn, *args, executor="interpret").outputs)


def test_a_new_stepper_has_run_nothing_and_back_restores_state():
    fn, args = CATALOG["matmul_f32"].case()  # grid (4, 3, 2)
    st = pallaslab.step(fn, *args)
    assert st.program is None and st.position == 0
    assert np.isnan(st.outputs()[0]).all()
    with pytest.raises(IndexError, match="no program has run yet"):
        st.blocks()
    snapshots = []
    for _ in range(6):
        st.step()
        snapshots.append((st.program, bits(st.outputs()), bits(st.scratch())))
    assert [s[0] for s in snapshots] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (0, 2, 0),
                                          (0, 2, 1)]
    for k in range(5, 0, -1):
        assert st.back() == snapshots[k - 1][0]
        assert (st.program, bits(st.outputs()), bits(st.scratch())) == snapshots[k - 1]
    st.back()
    assert st.program is None and np.isnan(st.outputs()[0]).all()
    assert st.history_nbytes() == 0


def test_goto_blocks_and_outputs():
    fn, args = CATALOG["matmul_f32"].case()
    x, y = (np.asarray(a) for a in args)
    st = pallaslab.step(fn, *args)
    assert st.goto((1, 2, 1)) == (1, 2, 1) and st.position == 1 * 6 + 2 * 2 + 2
    blocks = st.blocks()
    assert blocks["args[0]"].block_index == (1, 1) and blocks["args[1]"].block_index == (1, 2)
    np.testing.assert_array_equal(blocks["args[0]"].read, x[128:256, 128:256])
    out = blocks["outputs"]
    assert out.block_index == (1, 2) and out.changed and np.isnan(out.read).all()
    np.testing.assert_allclose(out.written, x[128:256] @ y[:, 256:384], rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(st.outputs()[0][128:256, 256:384], out.written)
    assert st.goto((0, 1, 0)) == (0, 1, 0) and st.position == 3
    assert st.blocks()["outputs"].block_index == (0, 1)  # recomputed after going back


def test_run_to_stops_at_the_program_writing_a_mismatched_block():
    fn, args = CATALOG["shifted_block_wrong"].case()
    cmp = pallaslab.compare(fn, *args, reference=shifted_block_reference)
    bad = set(cmp.mismatched_programs())
    st = pallaslab.step(fn, *args)
    assert st.run_to(lambda s: s.program in bad) == (2,)
    assert st.blocks()["args[0]"].block_index == (3, 0)
    assert st.run_to(lambda s: s.program in bad) is None and st.done


def test_equations_of_one_program_with_values_and_source_lines():
    fn, args = CATALOG["matmul_f32"].case()
    x, y = (np.asarray(a) for a in args)
    st = pallaslab.step(fn, *args)
    st.goto((0, 0, 1))
    eqs = st.equations()
    names = [e.primitive for e in eqs]
    assert "dot_general" in names and names.count("cond") == 2
    dot = eqs[names.index("dot_general")]
    assert dot.source.endswith(f"kernels.py:{line_of('acc_ref[...] += jnp.dot(')}")
    np.testing.assert_allclose(dot.outputs[0], x[:128, 128:256] @ y[128:256, :128],
                               rtol=1e-4, atol=1e-3)
    assert dot.text.startswith(tuple("abcdefghijklmnopqrstuvwxyz")) and "dot_general" in dot.text
    pid = eqs[0]
    assert pid.primitive == "program_id" and int(pid.outputs[0]) == 1  # axis 2 of (0, 0, 1)


def test_history_keeps_only_the_blocks_a_step_changed():
    fn, args = CATALOG["elementwise_1d"].case()  # 8 programs, 1024-element f32 blocks
    st = pallaslab.step(fn, *args)
    st.step(8)
    assert st.history_nbytes() == 8 * 1024 * 4  # one output block each, no scratch


def test_kernels_that_cannot_be_stepped_say_why():
    fn, args = CATALOG["kernel_in_shard_map"].case()
    with pytest.raises(UnavailableError, match=r"runs inside shard_map > custom_vjp and is not "
                       r"launched once with these arguments"):
        pallaslab.step(fn, *args)
    fn, args = CATALOG["kernel_in_cond"].case()
    with pytest.raises(UnavailableError, match=r"a cond branch not taken"):
        pallaslab.step(fn, jnp.bool_(False), args[1])  # the kernel's branch is not taken


@pytest.mark.parametrize("name", ["kernel_in_scan", "kernel_in_cond"])
def test_kernels_in_loops_and_branches_step_their_first_launch(name):
    fn, args = CATALOG[name].case()
    st = pallaslab.step(fn, *args)
    st.step(st.programs)
    (out,) = st.outputs()
    np.testing.assert_array_equal(np.asarray(out), 2.0 * np.asarray(args[-1]))


def test_kernel_in_a_while_loop_steps_its_first_iteration():
    from kernels import pallas_double, rand

    def fn(x, n):
        return jax.lax.while_loop(lambda c: c[1] < n,
                                  lambda c: (pallas_double(c[0]), c[1] + 1), (x, 0))[0]

    x = rand((128, 128))
    st = pallaslab.step(fn, x, 3)
    st.step(st.programs)
    (out,) = st.outputs()
    np.testing.assert_array_equal(np.asarray(out), 2.0 * np.asarray(x))
    with pytest.raises(UnavailableError, match="a loop that runs zero times"):
        pallaslab.step(fn, x, 0)


def test_second_kernel_of_a_function():
    fn, args = CATALOG["two_kernels"].case()
    st = pallaslab.step(fn, *args, kernel=1)
    assert st.kernel.name == "softmax_kernel"
    st.step(st.programs)
    assert bits(st.outputs()) == bits(run(fn, *args, executor="interpret").outputs)
