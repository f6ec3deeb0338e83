"""pallaslab: a Jupyter workbench for JAX Pallas kernels.

The public API: `capture` (describe every kernel a call launches), `inspect` (a `Workbench` of
views over them), `run`, `compare` and `step` (execute them), `lower` (lower and compile them
for a TPU or GPU target), `tune` (rank a kernel's block sizes by the model and the compiler),
and `load_ipython_extension` (`%load_ext pallaslab`, the `%%pallas` magic). The packages, in
the order data flows (docs/architecture.md):

- `pallaslab.model`: frozen descriptions of captured kernels; `model._jax` is the only code
  touching JAX's private modules;
- `pallaslab.analysis`: pure analyses (tiling, findings, occupancy, pipeline model);
- `pallaslab.execute`: executors, compare, the steppers, the killable worker process;
- `pallaslab.lowering` (the repository's `lowering/` folder): cross-lowering and real compiles;
- `pallaslab.views` and `pallaslab.workbench`: one view per tab, and the tabbed workbench;
- `pallaslab.exercises`: the course's exercises and their checker; `pallaslab.device_check`:
  `make device-check`, the GPU catalog on a real GPU;
- `pallaslab.tuning`: `tune`, block configs ranked by the model and the compiler;
- `pallaslab.magic` and `pallaslab.cli`: thin shells; `pallaslab.util`: leaf helpers;
  `pallaslab.cases` loads `file.py:function` cases, `pallaslab.errors` holds the errors.

Everything but `PallasLabError` is imported on first use, so `import pallaslab` stays fast
(no JAX).
"""

from pallaslab._platform import prefer_cpu_on_accelerator_free_host

prefer_cpu_on_accelerator_free_host()

from typing import TYPE_CHECKING  # noqa: E402

from pallaslab.errors import PallasLabError  # noqa: E402

if TYPE_CHECKING:
    from pallaslab.execute import compare, run, step
    from pallaslab.model import Capture, Kernel, Operand, capture
    from pallaslab.tuning import tune

__version__ = "0.1.0"

__all__ = ["Capture", "Kernel", "Operand", "PallasLabError", "Workbench", "__version__", "capture",
           "compare", "inspect", "load_ipython_extension", "lower", "run", "step", "tune"]


def load_ipython_extension(ipython: object) -> None:
    """`%load_ext pallaslab` registers the `%%pallas` cell magic (IPython imported only then)."""
    from pallaslab.execute.worker.isolation import prewarm_worker
    from pallaslab.magic import load_ipython_extension as load

    load(ipython)
    prewarm_worker()  # runs go to a killable worker process: start it while the user types


# Imported on first use, as `lower` and the workbench below: they import JAX (about a second),
# which `pallaslab --help` and a usage error never need.
_LAZY = {"compare": "pallaslab.execute", "run": "pallaslab.execute", "step": "pallaslab.execute",
         "Capture": "pallaslab.model", "Kernel": "pallaslab.model", "Operand": "pallaslab.model",
         "capture": "pallaslab.model", "tune": "pallaslab.tuning.search"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    # `lower` lives in `pallaslab.lowering`, which imports the compilers' front ends: import it
    # on first use so that `import pallaslab` stays lean.
    if name == "lower":
        from pallaslab.lowering import lower

        return lower
    # The workbench pulls in every view: imported when first used, not by `import pallaslab`
    # (the CLI and scripts that only capture or run start faster).
    if name in ("Workbench", "inspect"):
        from pallaslab import workbench

        return getattr(workbench, name)
    raise AttributeError(f"module 'pallaslab' has no attribute {name!r}")
