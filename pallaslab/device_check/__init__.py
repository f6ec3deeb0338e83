"""`make device-check`: the GPU catalog run on a real NVIDIA GPU, beside the interpreters.

For a machine with an NVIDIA GPU and a CUDA-enabled JAX already installed (nothing is
installed here). Each catalog kernel (Triton, Mosaic GPU, and Hopper's warpgroup MMA) runs
through the `device` executor beside its interpreter (`interpret` or `gpu-interpret`) and its
pure-JAX reference, then once more under JAX's profiler, read through the Pipeline tab's
profile path (trace -> `ProfileTimeline` -> measured track). Results go to one folder:
`summary.json` (rewritten after every kernel, so a check cut short still leaves one) and the
raw traces under `traces/`.

    python -m pallaslab.device_check --out DIR [--time-limit S] [--kernel-limit S] [CASE...]

The kernels run in a child process (`pallaslab.device_check.child`), which is killed and
replaced when a kernel passes its own time limit: a hung kernel costs its limit, not the check.
Exit status: 0 every kernel that applies to this GPU ran on it and agreed; 1 a mismatch, a
failure, a time-out or a kernel left unrun; 2 a usage error; 3 no GPU is attached (nothing ran).
"""

EXIT_AGREED, EXIT_PROBLEMS, EXIT_USAGE, EXIT_NO_GPU = 0, 1, 2, 3
