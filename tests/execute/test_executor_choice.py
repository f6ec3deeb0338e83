"""Which executor runs a kernel is read from the executors' declarations (`ExecutorSpec.mode`,
`cpu_preferred`, `second_rank`, `takes_reference`): declaring other facts changes the choice,
with no name written in `pallaslab.execute.executors.choice`."""

import dataclasses

import pytest
from kernels import CATALOG

from pallaslab import capture
from pallaslab.execute import register_executor, unregister_executor
from pallaslab.execute.executors.choice import default_executor_for, default_executors
from pallaslab.execute.registry import executor_spec, second_choices

VECTORIZED = executor_spec("vectorized")


def _kernels():
    fn, args = CATALOG["elementwise_1d"].case()
    return list(capture(fn, *args))


def _declared(spec):
    return type("Declared", (), {"spec": spec, "name": spec.name})


@pytest.fixture
def restore_vectorized():
    yield
    from pallaslab.execute.executors.vectorized import VectorizedExecutor
    register_executor(VectorizedExecutor)


def test_the_cpu_default_is_the_executor_declared_cpu_preferred(restore_vectorized):
    assert default_executor_for(_kernels()) == "vectorized"
    register_executor(_declared(dataclasses.replace(VECTORIZED, cpu_preferred=False)))
    assert default_executor_for(_kernels()) == "interpret"


def test_the_second_executor_is_the_best_ranked_that_runs_the_kernels():
    assert second_choices()[0] == "tpu-interpret"
    ranked_first = dataclasses.replace(executor_spec("interpret"), name="toy-second",
                                       second_rank=-1, cpu_preferred=False)
    register_executor(_declared(ranked_first))
    try:
        (first, second), note = default_executors(_kernels(), None)
        assert (first, second) == ("vectorized", "toy-second")
        assert note.startswith("executors chosen by default: vectorized, toy-second")
    finally:
        unregister_executor("toy-second")


def test_a_reference_is_checked_by_the_executor_declared_to_take_it():
    (_, second), _ = default_executors(_kernels(), reference=lambda *a: a)
    assert executor_spec(second).takes_reference
