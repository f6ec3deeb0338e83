"""The workbench's Step tab steps TPU mesh kernels core by core."""

import numpy as np
from kernels import CATALOG

import pallaslab


def test_mesh_kernel_has_a_step_tab_that_steps_each_core():
    fn, args = CATALOG["mesh_kernel"].case()
    wb = pallaslab.inspect(fn, *args)
    assert "step" in [t.name for t in wb.tabs(0)]
    view = wb.step()
    assert "0/2 programs run" in view.to_text()
    view.step()
    assert "1/2 programs run, last program (0,)" in view.to_text()
    view.step()
    text = view.to_text()
    assert "2/2 programs run, last program (1,)" in text and "outputs" in text
    (out,) = view.stepper.outputs()
    np.testing.assert_allclose(np.asarray(out), np.asarray(args[0]) * 3.0, rtol=1e-6)
