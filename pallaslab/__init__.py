"""pallaslab: a Jupyter workbench for JAX Pallas kernels."""

from pallaslab._platform import prefer_cpu_on_accelerator_free_host

prefer_cpu_on_accelerator_free_host()

from pallaslab.errors import PallasLabError  # noqa: E402
from pallaslab.execute import compare, run, step  # noqa: E402
from pallaslab.model import Capture, Kernel, Operand, capture  # noqa: E402

__version__ = "0.1.0"

__all__ = ["Capture", "Kernel", "Operand", "PallasLabError", "Workbench", "__version__", "capture",
           "compare", "inspect", "load_ipython_extension", "lower", "run", "step"]


def load_ipython_extension(ipython: object) -> None:
    """`%load_ext pallaslab` registers the `%%pallas` cell magic (IPython imported only then)."""
    from pallaslab.execute.isolation import prewarm_worker
    from pallaslab.magic import load_ipython_extension as load

    load(ipython)
    prewarm_worker()  # runs go to a killable worker process: start it while the user types


def __getattr__(name: str) -> object:
    # `lower` lives in the top-level `lowering` package, which imports pallaslab.model: import
    # it on first use so that `import lowering` and `import pallaslab` work in either order.
    if name == "lower":
        from lowering import lower

        return lower
    # The workbench pulls in every view: imported when first used, not by `import pallaslab`
    # (the CLI and scripts that only capture or run start faster).
    if name in ("Workbench", "inspect"):
        from pallaslab import workbench

        return getattr(workbench, name)
    raise AttributeError(f"module 'pallaslab' has no attribute {name!r}")
