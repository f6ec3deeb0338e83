"""Registering an executor makes it usable by name everywhere (run, compare, the CLI), and
its declared facts (fill values, isolation, description) are what the rest reads.

The toy executor below is the worked example of docs/executors.md: it runs each kernel with
JAX's HLO interpreter in this process, and nothing else knows about it.
"""

import json
import time

import jax
import numpy as np
import pytest
from kernels import CATALOG

import pallaslab
from pallaslab.cli import main
from pallaslab.execute import (
    ExecutorError,
    ExecutorSpec,
    RunResult,
    executor_names,
    get_executor,
    register_executor,
    unregister_executor,
)
from pallaslab.execute.protocol import Prepared, numpy_values
from pallaslab.model import _jax

CASES = "tests/kernels.py"


# --- the toy executor: its module's whole content --------------------------------------------


class ToyInterpretExecutor:
    """Every kernel under JAX's HLO interpreter, in the caller's process, unwatched."""

    spec = ExecutorSpec(
        name="toy-interpret", label="interpret mode (toy)",
        description="a toy: every kernel under interpret=True, in this process",
        isolated=False,  # runs here: no worker, so the time limit is not enforced
        integer_fill="min")  # JAX's HLO interpreter fills unwritten integers with the minimum
    name = spec.name

    def unavailable(self) -> str | None:
        return None

    def cannot_run(self, prepared: Prepared) -> str | None:
        return self.spec.refusal(prepared.capture)

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        cap = prepared.capture
        jaxpr = _jax.rewrite_kernels(cap.handle.closed_jaxpr, lambda eqn: {"interpret": True})
        start = time.perf_counter()
        outputs = jax.block_until_ready(_jax.jaxpr_callable(jaxpr)(*prepared.flat_args))
        return RunResult(self.name, numpy_values(outputs), prepared.output_info,
                         time.perf_counter() - start, 0.0,
                         inputs=numpy_values(prepared.flat_args))


@pytest.fixture
def toy():
    register_executor(ToyInterpretExecutor)  # the registration call
    yield ToyInterpretExecutor.spec
    unregister_executor("toy-interpret")


# --------------------------------------------------------------------------------------------


def test_a_registered_executor_runs_by_name(toy):
    fn, args = CATALOG["elementwise_1d"].case()
    result = pallaslab.run(fn, *args, executor="toy-interpret")
    assert result.status == "ran" and result.executor == "toy-interpret"
    np.testing.assert_array_equal(result.outputs[0], np.asarray(args[0]) * 2.0)
    assert "toy-interpret" in executor_names()


def test_a_registered_executor_is_compared_by_name(toy):
    fn, args = CATALOG["elementwise_1d"].case()
    cmp = pallaslab.compare(fn, *args, executors="toy-interpret,interpret")
    assert cmp.executors == ("toy-interpret", "interpret")
    assert cmp.passed, cmp.verdict()


def test_its_declared_fill_finds_output_no_program_wrote(toy):
    fn, args = CATALOG["uncovered_output"].case()
    result = pallaslab.run(fn, *args, executor="toy-interpret")
    found = [f for f in result.findings if f.code == "unwritten-output"]
    assert len(found) == 1 and "under toy-interpret" in found[0].message, result.findings


def test_the_cli_lists_and_runs_it(toy, capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "toy-interpret a toy: every kernel under interpret=True, in this process" in help_text
    code = main(["compare", f"{CASES}:elementwise_1d", "--executors",
                 "toy-interpret,interpret", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["executors"] == ["toy-interpret", "interpret"], data
    assert data["executors_status"]["toy-interpret"]["status"] == "ran"


def test_unregistered_it_is_unknown_again(toy):
    unregister_executor("toy-interpret")
    with pytest.raises(ExecutorError, match="unknown executor 'toy-interpret'; the executors "
                                            "are: interpret, tpu-interpret, gpu-interpret"):
        get_executor("toy-interpret")


def test_a_class_without_a_spec_or_with_a_bad_name_is_refused():
    class Nameless:
        name = "nameless"

    with pytest.raises(ExecutorError, match="executor class Nameless has no `spec`"):
        register_executor(Nameless)

    class BadName(ToyInterpretExecutor):
        spec = ExecutorSpec(name="Toy_Interpret", label="x", description="x")

    with pytest.raises(ExecutorError, match=r"executor name 'Toy_Interpret' .* must be "
                                            r"lower-case words joined by '-'"):
        register_executor(BadName)
    assert "Toy_Interpret" not in executor_names()


# --- structured facts of a run, read instead of its notes ----------------------------------


def test_a_default_run_records_its_choice():
    fn, args = CATALOG["elementwise_1d"].case()
    result = pallaslab.run(fn, *args)
    assert result.executor == "vectorized" and result.ran_as == "vectorized"
    assert result.default_choice is not None
    assert result.default_choice.chose == "vectorized" and result.default_choice.reason is None
    assert [(b.kernel, b.how, b.dims) for b in result.batching] == [("scale_kernel", "batched",
                                                                     (0,))]


def test_an_executor_named_records_no_choice():
    fn, args = CATALOG["elementwise_1d"].case()
    result = pallaslab.run(fn, *args, executor="interpret")
    assert result.default_choice is None and result.ran_under is None and not result.batching


def test_vectorized_handing_a_kernel_to_the_interpreter_says_so_in_fields():
    fn, args = CATALOG["manual_dma_double_buffer"].case()
    result = pallaslab.run(fn, *args, executor="vectorized")
    assert result.status == "ran" and result.executor == "vectorized"
    assert result.ran_under == "interpret" and result.ran_as == "interpret"
    assert result.fallback.startswith("_double_buffered_copy: the body uses DMAs")
    assert [(b.how, b.rule) for b in result.batching] == [("interpreted", result.fallback.split(
        ": ", 1)[1])]
