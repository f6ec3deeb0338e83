"""Pure-JAX references for CLI comparisons of catalog kernels."""


def triple(x):
    return x * 3.0
