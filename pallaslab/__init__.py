"""pallaslab: a Jupyter workbench for JAX Pallas kernels."""

from pallaslab.errors import PallasLabError
from pallaslab.model import Capture, Kernel, Operand, capture

__version__ = "0.1.0"

__all__ = ["Capture", "Kernel", "Operand", "PallasLabError", "__version__", "capture"]
