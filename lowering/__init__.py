"""Lower and really compile captured Pallas kernels for TPU and GPU targets, from a CPU host.

`lower(fn_or_capture, *args, target="tpu-v5e", compile=False, vmem_exact=False)` returns a
`LoweringResult`: per kernel, its IR stages (jaxpr, Mosaic / TTIR / Mosaic GPU, the compiler's
per-pass modules, PTX, SASS), diagnostics with stable codes and resources.

- `api` (`lower`, `lower_kernel`), `targets` (the one list of targets), `params` (compiler
  params swapped for another backend), `slices` (multi-chip TPU topologies);
- `cross`: cross-lowering under the target's abstract device, no hardware;
- `tpu_compile` with `_tpu_worker` (libtpu), `triton_compile` (the triton wheel),
  `mosaic_gpu_compile` with `_mosaic_gpu_worker` (XLA's CUDA plugin, compile-only), and
  `compiler_worker` (their process protocol);
- `diagnostics` (coded diagnostics), `irtext` (IR as text, source maps), `result` (the frozen
  results), `cache` (the disk cache).

The backend layer: it depends on `pallaslab.model` (and `errors`, `util`) only, and nothing in
`pallaslab.model` depends on it.
"""

from pallaslab.lowering.api import lower, lower_kernel
from pallaslab.lowering.cache import cache_dir
from pallaslab.lowering.irtext import normalise
from pallaslab.lowering.result import Diagnostic, KernelLowering, LoweringResult, Resources, Stage
from pallaslab.lowering.targets import GPU_TARGETS, TARGETS, TPU_TARGETS, Target, get_target

__all__ = [
    "GPU_TARGETS",
    "TARGETS",
    "TPU_TARGETS",
    "Diagnostic",
    "KernelLowering",
    "LoweringResult",
    "Resources",
    "Stage",
    "Target",
    "cache_dir",
    "get_target",
    "lower",
    "lower_kernel",
    "normalise",
]
