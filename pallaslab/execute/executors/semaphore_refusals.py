"""Semaphores that outlive a kernel: what JAX's interpreters cannot run, said in one line.

JAX's async-copy pattern starts a DMA in one `pallas_call` and returns its DMA semaphore (and
the copy's destination) as outputs, which the next `pallas_call` takes as inputs and waits
on. Neither interpreter of JAX 0.12 runs it, whatever the kernel does (checked with JAX alone,
`pltpu.force_tpu_interpret_mode()` and `interpret=True`, no pallaslab involved):

- TPU interpret mode makes every output as an array of its "uninitialized" value, which a
  semaphore type has none of (`NotImplementedError: nan + dma_sem`; with
  `uninitialized_memory="zero"` it fails in `jnp.full` like the HLO interpreter), and it
  allocates a kernel's semaphores per launch, so none could outlive the kernel anyway;
- the HLO interpreter fills outputs with `jnp.full`, which semaphore types lack
  (`AttributeError: type object 'AbstractSemaphoreTyRules' has no attribute 'full'`).

So an executor refuses such kernels up front (status "unavailable", with this reason) rather
than failing inside JAX; `check` and `lower --compile` still judge them statically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pallaslab.model import Kernel, Operand, _jax

Refusal = Callable[[Sequence[Kernel]], "str | None"]

_TPU_WHY = ("it makes each output as an array of its uninitialized value, which a semaphore "
            "has none of (NotImplementedError: nan + dma_sem), and frees a kernel's "
            "semaphores when the kernel ends")
_HLO_WHY = ("it fills each output with jnp.full, which semaphore types lack (AttributeError: "
            "type object 'AbstractSemaphoreTyRules' has no attribute 'full')")
_STATIC = "`check` and `lower --compile` judge it statically"


def passed_semaphore(kernels: Sequence[Kernel]) -> str | None:
    """"outputs[2] of kernel A, waited in kernel B as args[2]" for the first semaphore a kernel
    takes or returns (the pattern no interpreter runs), None when there is none."""
    kernels = list(kernels)
    for k in kernels:
        for op in k.outputs:
            if op.is_semaphore:
                user = _jax.semaphore_user(k, op, kernels)
                waited = f", waited in kernel {user[0].name} as {_named(user[1])}" if user \
                    else ""
                return f"{_named(op)} of kernel {k.name}{waited}"
        for op in k.inputs:
            if op.is_semaphore:
                return f"{_named(op)} of kernel {k.name}, a semaphore made by another kernel"
    return None


def tpu_interpreter_semaphore_refusal(kernels: Sequence[Kernel]) -> str | None:
    """Why JAX's TPU interpreter cannot run these kernels' semaphores, or None."""
    return _refusal("JAX's TPU interpreter", _TPU_WHY, kernels)


def hlo_interpreter_semaphore_refusal(kernels: Sequence[Kernel]) -> str | None:
    """Why JAX's HLO interpreter (interpret=True) cannot run these kernels' semaphores, or
    None."""
    return _refusal("JAX's HLO interpreter (interpret=True)", _HLO_WHY, kernels)


def with_hlo_semaphore_refusal(refusal: Refusal) -> Refusal:
    """`refusal` that also refuses semaphores passed between kernels other than plain
    `pallas_call`s (an executor's spec): between `pallas_call`s, pallaslab's interpreted run
    passes them itself, in program order (`model/_jax/cross_call_semaphores.py`)."""
    def refuse(kernels: Sequence[Kernel]) -> str | None:
        passing = [k for k in kernels
                   if any(op.is_semaphore for op in (*k.inputs, *k.outputs))]
        if all(k.kind == "pallas_call" for k in passing):
            return refusal(kernels)
        return hlo_interpreter_semaphore_refusal(kernels) or refusal(kernels)
    return refuse


def _refusal(interpreter: str, why: str, kernels: Sequence[Kernel]) -> str | None:
    where = passed_semaphore(kernels)
    if where is None:
        return None
    return (f"{interpreter} cannot run a DMA semaphore passed between pallas_calls "
            f"({where}): {why}; a limit of the interpreter, not a verdict on the kernel; "
            f"{_STATIC}")


def _named(op: Operand) -> str:
    return f"{op.origin} ({op.param})" if op.param else op.origin
