"""pallaslab: a Jupyter workbench for JAX Pallas kernels."""

from pallaslab._platform import prefer_cpu_on_accelerator_free_host

prefer_cpu_on_accelerator_free_host()

from pallaslab.errors import PallasLabError  # noqa: E402
from pallaslab.model import Capture, Kernel, Operand, capture  # noqa: E402

__version__ = "0.1.0"

__all__ = ["Capture", "Kernel", "Operand", "PallasLabError", "__version__", "capture"]
