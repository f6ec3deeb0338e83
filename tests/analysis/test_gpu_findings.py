"""GPU findings are decided from the elements programs load and store (issue 12): correct masked
and atomic Triton kernels pass `check --target gpu-h100`, a truly overlapping one fails and
names both programs and the elements; atomic_xchg leaves the HLO interpreter unavailable
without ending a comparison. Loads and stores reaching past their array (a missing or
off-by-one mask, which JAX's interpreters clamp) are `out-of-bounds-access` errors, output
elements no program stores are `uncovered-output`, and kernels vmap cannot batch (JAX's
layer_norm backward) are still analysed."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from catalog import rand
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plt
from jax.extend.core import Primitive
from jax.interpreters import mlir
from kernels import CATALOG

import pallaslab
from pallaslab.analysis.inspection import inspect_capture
from pallaslab.cli import main
from pallaslab.model._jax import stores

CASES = Path(__file__).parents[1] / "kernels.py"


@pytest.mark.parametrize("name", ["masked_vector_add", "masked_row_softmax",
                                  "atomic_block_sums", "atomic_exchange"])
def test_correct_masked_and_atomic_kernels_pass_check(capsys, name):
    assert main(["check", f"{CASES}:{name}", "--target", "gpu-h100"]) == 0, \
        capsys.readouterr().out


def test_overlapping_stores_fail_check_naming_programs_and_elements(capsys):
    assert main(["check", f"{CASES}:overlapping_stores", "--target", "gpu-h100"]) != 0
    out = " ".join(capsys.readouterr().out.split())
    assert "parallel-write-conflict" in out
    assert "programs (0,) and (1,) both store element (32,)" in out
    assert "(96 elements of outputs are stored by more than one program)" in out


def test_the_finding_carries_programs_and_elements():
    fn, args = CATALOG["overlapping_stores"].case()
    (insp,) = inspect_capture(pallaslab.capture(fn, *args))
    (finding,) = [f for f in insp.findings if f.code == "parallel-write-conflict"]
    assert finding.severity == "error" and finding.programs == ((0,), (1,))
    assert finding.blocks[:3] == ((32,), (33,), (34,))  # elements, for whole-array refs


def test_atomic_exchange_runs_under_the_hlo_interpreter_and_passes():
    """JAX's interpreter lacks AtomicOpType.XCHG; pallaslab's run applies it in program
    order (tests/execute/test_atomics.py)."""
    fn, args = CATALOG["atomic_exchange"].case()
    cmp = pallaslab.compare(fn, *args, executors=("interpret", "reference"),
                            reference=CATALOG["atomic_exchange"].reference)
    assert cmp.result("interpret").status == "ran"
    assert cmp.complete and cmp.passed


# --- loads and stores outside their arrays, unwritten output, vmap gaps (kernels kept here:
# small, one bug each; each access on a line of its own, found by its marker comment) ---------

THIS = Path(__file__)
TRITON = plt.CompilerParams(num_warps=4)
N, B = 200, 64
EVALUATED = "were evaluated per program on the captured scalar-prefetch values and seeded inputs."


def _line(marker: str) -> str:
    """"test_gpu_findings.py:LINE" of the line carrying `marker`."""
    (n,) = [i for i, text in enumerate(THIS.read_text().splitlines(), 1)
            if text.rstrip().endswith(marker)]
    return f"{THIS.name}:{n}"


def _add_kernel(x_ref, y_ref, o_ref, *, bug):
    start = pl.program_id(0) * B
    idx = start + jnp.arange(B)
    mask = idx <= x_ref.shape[0] if bug == "le" else idx < x_ref.shape[0]
    w = pl.ds(start, B)
    if bug == "nomask":
        x = plt.load(x_ref.at[w])  # LOAD-X-NOMASK
        y = plt.load(y_ref.at[w])  # LOAD-Y-NOMASK
        plt.store(o_ref.at[w], x + y)  # STORE-NOMASK
        return
    x = plt.load(x_ref.at[w], mask=mask, other=0.0)  # LOAD-X
    y = plt.load(y_ref.at[w], mask=mask, other=0.0)  # LOAD-Y
    if bug == "store_nomask":
        plt.store(o_ref.at[w], x + y)  # STORE-ONLY-NOMASK
    else:
        plt.store(o_ref.at[w], x + y, mask=mask)  # STORE-MASKED


def _add_case(bug):
    def fn(x, y):
        return pl.pallas_call(functools.partial(_add_kernel, bug=bug),
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(pl.cdiv(x.shape[0], B),), compiler_params=TRITON)(x, y)

    return fn, (rand((N,)), rand((N,), seed=1))


def add_good():
    return _add_case(None)


def add_nomask():
    return _add_case("nomask")


def add_store_nomask():
    return _add_case("store_nomask")


def add_mask_le():
    return _add_case("le")


def _findings(case, code=None):
    fn, args = case()
    (insp,) = inspect_capture(pallaslab.capture(fn, *args))
    return [f for f in insp.findings if code is None or f.code == code]


def _oob_message(named, access, line, verb, count, span):
    return (f"{named}: the {access} at {line} reaches outside the array ({N},): program (3,) "
            f"{verb} {count} outside it, {span} (1 program in all). JAX's interpreters clamp "
            "or drop such indices, so the outputs can look right on a CPU; on a GPU they are "
            "illegal memory accesses. Rule: every lane a load or store does not mask off must "
            "index inside its array (mask the ragged last block, e.g. mask=idx < n). Loads and "
            "stores " + EVALUATED)


def test_a_missing_mask_on_the_ragged_last_block_fails_check_for_loads_and_the_store(capsys):
    assert main(["check", f"{THIS}:add_nomask", "--target", "gpu-h100"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "out-of-bounds-access: outputs (o_ref): the store at " + _line("# STORE-NOMASK") in out
    found = _findings(add_nomask)
    assert [(f.code, f.severity, f.operand, f.programs, f.blocks) for f in found] == [
        ("out-of-bounds-access", "error", op, ((3,),), ((200,), (255,)))
        for op in ("args[0]", "args[1]", "outputs")]
    span = "from element (200,) to (255,)"
    assert [f.message for f in found] == [
        _oob_message("args[0] (x_ref)", "load", _line("# LOAD-X-NOMASK"), "loads",
                     "56 elements", span),
        _oob_message("args[1] (y_ref)", "load", _line("# LOAD-Y-NOMASK"), "loads",
                     "56 elements", span),
        _oob_message("outputs (o_ref)", "store", _line("# STORE-NOMASK"), "stores",
                     "56 elements", span)]


def test_masked_loads_with_an_unmasked_store_name_only_the_store():
    (found,) = _findings(add_store_nomask)
    assert found.message == _oob_message(
        "outputs (o_ref)", "store", _line("# STORE-ONLY-NOMASK"), "stores", "56 elements",
        "from element (200,) to (255,)")


def test_a_less_or_equal_mask_touches_the_one_element_past_the_end():
    found = _findings(add_mask_le)
    assert [(f.operand, f.blocks) for f in found] == [
        ("args[0]", ((200,),)), ("args[1]", ((200,),)), ("outputs", ((200,),))]
    assert found[2].message == _oob_message(
        "outputs (o_ref)", "store", _line("# STORE-MASKED"), "stores", "1 element",
        "element (200,)")


def test_the_correctly_masked_kernel_has_no_findings(capsys):
    assert _findings(add_good) == []
    assert main(["check", f"{THIS}:add_good", "--target", "gpu-h100", "--warnings"]) == 0, \
        capsys.readouterr().out


def _rows_kernel(x_ref, o_ref, *, past):
    r = pl.program_id(0)
    rows = r * 8 + jnp.arange(8)
    cols = jnp.arange(64) + past  # `past` columns beyond the last one
    tile = plt.load(x_ref.at[rows[:, None], cols[None, :]],  # LOAD-GATHER
                    mask=rows[:, None] < x_ref.shape[0], other=0.0)
    plt.store(o_ref.at[pl.ds(r * 8, 8)], tile[:, :4], mask=(rows < o_ref.shape[0])[:, None])


def _rows_case(past):
    def fn(x):
        return pl.pallas_call(functools.partial(_rows_kernel, past=past),
                              out_shape=jax.ShapeDtypeStruct((x.shape[0], 4), x.dtype),
                              grid=(pl.cdiv(x.shape[0], 8),), compiler_params=TRITON)(x)

    return fn, (rand((36, 64)),)


def test_a_two_dimensional_gather_past_the_last_column_names_the_elements():
    """Integer-array indexers broadcast with Triton's `broadcast_to` (no batching rule): the
    masked rows of the last block are in range, the columns past 63 are not."""
    assert _findings(lambda: _rows_case(0)) == []
    (found,) = _findings(lambda: _rows_case(2))
    assert (found.code, found.operand, found.programs[:2]) == (
        "out-of-bounds-access", "args[0]", ((0,), (1,)))
    assert found.message.startswith(
        f"args[0] (x_ref): the load at {_line('# LOAD-GATHER')} reaches outside the array "
        "(36, 64): program (0,) loads 16 elements outside it, from element (0, 64) to (7, 65) "
        "(5 programs in all).")


def _loop_kernel(x_ref, o_ref, *, reach):
    i = pl.program_id(0)

    @pl.loop(0, 2)
    def _(j):
        w = pl.ds(i * 64 + j * 32, 32)
        o_ref[w] = x_ref[pl.ds(i * 64 + j * 32 + reach, 32)]  # LOAD-IN-LOOP

    @pl.when(i == 0)
    def _():
        o_ref[pl.ds(0, 1)] = x_ref[pl.ds(0, 1)]


def _loop_case(reach):
    def fn(x):
        return pl.pallas_call(functools.partial(_loop_kernel, reach=reach),
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                              compiler_params=TRITON)(x)

    return fn, (rand((256,)),)


def test_stores_and_loads_inside_loops_and_when_count():
    fn, args = _loop_case(0)
    (kernel,) = pallaslab.capture(fn, *args).kernels
    eqn = kernel.handle.eqn
    (stored,) = stores.stored_elements(eqn, stores.sample_operands(eqn, []))
    assert np.bincount(stored.count.ravel()).tolist() == [0, 256]  # each by one program
    assert _findings(lambda: _loop_case(0)) == []
    (found,) = _findings(lambda: _loop_case(8))
    assert found.message.startswith(
        f"args[0] (x_ref): the load at {_line('# LOAD-IN-LOOP')} reaches outside the array "
        "(256,): program (3,) loads 8 elements outside it, from element (256,) to (263,)")


def _short_rows_kernel(x_ref, o_ref):
    r = pl.program_id(0)
    mask = jnp.arange(x_ref.shape[1]) < x_ref.shape[1] - 1  # the last column is never stored
    plt.store(o_ref.at[r, :], x_ref[r, :] * 2.0, mask=mask)  # STORE-SHORT


def rows_mask_short():
    def fn(x):
        return pl.pallas_call(_short_rows_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[0],), compiler_params=TRITON)(x)

    return fn, (rand((16, 64)),)


def test_output_elements_no_program_stores_are_uncovered_output(capsys):
    assert main(["check", f"{THIS}:rows_mask_short", "--target", "gpu-h100"]) == 1
    assert "uncovered-output" in capsys.readouterr().out
    (found,) = _findings(rows_mask_short)
    assert (found.code, found.severity, found.operand) == ("uncovered-output", "error", "outputs")
    assert found.blocks[:2] == ((0, 63), (1, 63))
    assert found.message == (
        "outputs: 16 of 1,024 elements (1.6%) are never written by any program, starting at "
        "element (0, 63); they hold whatever was in memory (garbage on TPU/GPU). Rule: every "
        "output element must be stored by some program (check the masks of the stores at "
        f"{_line('# STORE-SHORT')}). Stores " + EVALUATED)


def _partial_update_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    m = i * 64 + jnp.arange(64) < 100
    w = pl.ds(i * 64, 64)
    plt.store(o_ref.at[w], plt.load(x_ref.at[w], mask=m, other=0.0) + 1.0, mask=m)


def test_an_output_aliased_to_its_input_may_leave_elements_unstored():
    def case():
        def fn(x):
            return pl.pallas_call(_partial_update_kernel,
                                  out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                                  compiler_params=TRITON, input_output_aliases={0: 0})(x)

        return fn, (rand((256,)),)

    assert _findings(case) == []


def _atomic_sum_kernel(x_ref, o_ref):
    x = x_ref[pl.ds(pl.program_id(0) * B, B)]
    plt.atomic_add(o_ref, pl.ds(0, 1), jnp.sum(x, keepdims=True))  # ATOMIC


def test_atomics_into_an_output_nothing_initialises_are_uncovered_output():
    def case():
        def fn(x):
            return pl.pallas_call(_atomic_sum_kernel, out_shape=jax.ShapeDtypeStruct((1,), x.dtype),
                                  grid=(4,), compiler_params=TRITON)(x)

        return fn, (rand((256,)),)

    (found,) = _findings(case)
    assert (found.code, found.severity) == ("uncovered-output", "error")
    assert found.message.startswith(
        "outputs: 1 of 1 elements (100.0%) are never stored by any program, starting at element "
        "(0,); they hold whatever was in memory (garbage on TPU/GPU), and the atomics at "
        f"{_line('# ATOMIC')} add to that. Rule: every output element must be stored by some "
        "program, or the output aliased to an initialised input (input_output_aliases)")


def test_layer_norm_backward_writes_are_proven_disjoint():
    """A Triton layer_norm backward written like JAX's (removed in 0.12.1): its dw/db kernel
    gathers 2-D tiles (Triton's `broadcast_to`, which vmap cannot batch); each program stores
    its own columns."""
    from cases.triton_kernels import gpu_layer_norm_grad

    fn, args = gpu_layer_norm_grad()  # the gradients of sum(layer_norm(x, w, b) ** 2)
    inspections = inspect_capture(pallaslab.capture(fn, *args))
    assert "ln_backward_dw_db" in [i.kernel.name for i in inspections]
    assert [(i.kernel.name, f.code, f.message) for i in inspections for f in i.findings] == []


double_p = Primitive("pallaslab_test_double")  # no batching rule: vmap cannot cross it
double_p.def_impl(lambda x: x * 2)
double_p.def_abstract_eval(lambda x: x)
mlir.register_lowering(double_p, mlir.lower_fun(lambda x: x * 2, multiple_results=False))
unlowered_p = Primitive("pallaslab_test_unlowered")  # no CPU lowering either
unlowered_p.def_abstract_eval(lambda x: x)


def _start_kernel(x_ref, o_ref, *, start_of):
    start = start_of(pl.program_id(0) * 64)
    o_ref[pl.ds(start, 64)] = x_ref[pl.ds(start, 64)]


def _start_case(start_of):
    def fn(x):
        return pl.pallas_call(functools.partial(_start_kernel, start_of=start_of),
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                              compiler_params=TRITON, name="starts")(x)

    return fn, (rand((256,)),)


def test_a_primitive_without_a_batching_rule_is_evaluated_program_by_program():
    assert _findings(lambda: _start_case(lambda s: double_p.bind(s) // 2)) == []
    found = _findings(lambda: _start_case(lambda s: double_p.bind(s)))  # 0, 128, 256, 384
    assert [(f.code, f.operand, f.programs) for f in found] == [
        ("out-of-bounds-access", "args[0]", ((2,), (3,))),
        ("out-of-bounds-access", "outputs", ((2,), (3,))),
        ("uncovered-output", "outputs", ())]


def test_a_store_evaluation_that_fails_says_pallaslab_could_not_analyse_it():
    (found,) = _findings(lambda: _start_case(unlowered_p.bind))
    assert (found.code, found.severity) == ("parallel-write-conflict", "warning")
    assert found.message.startswith(
        "starts: every program's window is the whole output, and pallaslab could not analyse "
        "the kernel's loads and stores to tell which elements each program writes (evaluator "
        "error: NotImplementedError: ")
    assert found.message.endswith(
        "). A race between programs, an access outside an array and unwritten output are not "
        "ruled out.")


def _scoped_kernel(x_ref, o_ref):
    w = pl.ds(pl.program_id(0) * 64, 64)

    def body(s_ref):
        s_ref[...] = x_ref[w]
        o_ref[w] = s_ref[...]

    pl.run_scoped(body, pltpu.VMEM((64,), jnp.float32))


def test_stores_the_evaluation_cannot_follow_are_said_in_plain_words():
    def case():
        def fn(x):
            return pl.pallas_call(_scoped_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(4,), compiler_params=TRITON)(x)

        return fn, (rand((256,)),)

    (found,) = _findings(case)
    assert found.message == (
        "_scoped_kernel: every program's window is the whole output, and pallaslab could not "
        "analyse the kernel's loads and stores to tell which elements each program writes: it "
        "cannot follow loads and stores inside a `run_scoped`. A race between programs, an "
        "access outside an array and unwritten output are not ruled out.")


def _wide_add(x_ref, y_ref, o_ref):
    for w in (pl.ds(0, 128), pl.ds(pl.program_id(0) + 100, 128)):  # the 2nd: 100-227 of 200
        plt.store(o_ref.at[w], plt.load(x_ref.at[w]) + plt.load(y_ref.at[w]))


def test_a_single_program_past_the_end_is_found_and_fails_the_comparison():
    """One program: no two windows clash, yet its loads and store reach past the array; the
    interpreters clamp them, so only the static analysis can tell, and `compare` counts it."""
    def fn(x, y):
        return pl.pallas_call(_wide_add, out_shape=x, grid=(1,), compiler_params=TRITON)(x, y)

    x, y = rand((N,)), rand((N,), seed=1)
    assert {f.code for f in pallaslab.inspect(fn, x, y).findings} == {"out-of-bounds-access"}
    c = pallaslab.compare(fn, x, y, executors="interpret,reference",
                          reference=lambda x, y: x + y)
    assert c.allclose and not c.passed and c.outcome == "errors"
    assert c.verdict() == "all close, but static analysis found errors: out-of-bounds-access"


def _rows_one_wrong(x_ref, o_ref):
    r = pl.program_id(0)
    scale = jnp.where(r == 2, 3.0, 2.0)  # program (2,) scales its row wrongly
    plt.store(o_ref.at[r, :], x_ref[r, :] * scale)


def test_a_mismatch_names_the_program_that_stored_it_not_every_whole_array_window():
    """Every program's window is the whole output: the comparison names the program whose
    stores wrote the mismatched elements (from the evaluated stores), not all 16."""
    def fn(x):
        return pl.pallas_call(_rows_one_wrong, out_shape=x, grid=(x.shape[0],),
                              compiler_params=TRITON)(x)

    c = pallaslab.compare(fn, rand((16, 64)), executors="interpret,reference",
                          reference=lambda x: x * 2.0)
    (pair,) = c.outputs[0].pairs
    assert pair.mismatched_elements == 64 and pair.programs == ((2,),)
