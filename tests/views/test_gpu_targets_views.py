"""Asking for a GPU target (`--target gpu-h100`) makes the views speak GPU: the Lowering view's
default is that target, Memory shows the Triton compile's figures, and the TPU pipeline model
is not offered (its tab says why)."""

import pytest
from kernels import matmul, rand

from pallaslab.model import capture
from pallaslab.workbench import Workbench, WorkbenchError


@pytest.fixture(scope="module")
def gpu_workbench():
    x, y = rand((256, 256)), rand((256, 256), seed=1)
    return Workbench(capture(lambda a, b: matmul(a, b, interpret=True), x, y),
                     targets=["gpu-h100"])


def test_lowering_defaults_to_the_asked_target(gpu_workbench):
    view = gpu_workbench.lowering()
    payload = view._payload(live=False)
    assert view.target == "gpu-h100" and payload["default_target"] == "gpu-h100"


def test_the_tpu_pipeline_is_not_offered_for_gpu_targets_and_says_why(gpu_workbench):
    assert "pipeline" not in {t.name for t in gpu_workbench.tabs(0)}
    with pytest.raises(WorkbenchError, match=r"only GPU targets were asked for \(gpu-h100\): "
                                             r"the Pipeline view models the TPU"):
        gpu_workbench.pipeline()


def test_memory_shows_the_gpu_figures(gpu_workbench):
    pytest.importorskip("triton")
    assert gpu_workbench.memory().gpu is True



def test_inspect_json_gives_no_pipeline_buffers_for_gpu_kernels():
    """Pipeline buffer slots are a TPU notion: a Triton kernel's operands have none."""
    from kernels import CATALOG

    from pallaslab.analysis.inspection import inspect_kernel, kernel_json

    fn, args = CATALOG["masked_vector_add"].case()
    [kernel] = capture(fn, *args)
    assert kernel.backend == "triton"
    assert {op["buffers"] for op in kernel_json(inspect_kernel(kernel))["operands"]} == {None}
