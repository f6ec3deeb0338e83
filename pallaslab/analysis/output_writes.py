"""How a kernel's body writes its outputs, as JAX records it (`model._jax.verdict_facts`), and
the static rule it decides: `unwritten-output`, an output the body never writes. Also which
outputs a spin lock guards (`lock-guarded-store`: the GPU write-conflict rules let their
programs share elements, and say what they assumed).

Only pallas_call kernels are read (their outputs map one-to-one onto the body's refs); mesh
kernels (`pl.kernel`, `core_map`) and nested pipelines are left to the interpreters' runs.
"""

from __future__ import annotations

from collections.abc import Iterator

from pallaslab.analysis.finding import Finding
from pallaslab.model import Kernel, Operand
from pallaslab.model._jax import verdict_facts
from pallaslab.model.source_names import short_source


def _eqn(kernel: Kernel) -> object | None:
    eqn = getattr(kernel.handle, "eqn", None)
    if kernel.kind != "pallas_call" or eqn is None or "grid_mapping" not in eqn.params:
        return None
    return eqn


def write_kinds(kernel: Kernel) -> dict[str, frozenset[str]]:
    """Output origin -> the kinds of writes into it ("store", "atomic", "dma", "other");
    empty when the kernel's body cannot be read this way."""
    eqn = _eqn(kernel)
    return verdict_facts.output_write_kinds(eqn) if eqn is not None else {}


def only_atomic(kernel: Kernel, origin: str) -> bool:
    """Is every write into output `origin` an atomic read-modify-write (atomic_add, _max,
    _cas, _xchg, ...)? Programs sharing its elements then do not race."""
    return write_kinds(kernel).get(origin) == frozenset({"atomic"})


def revisit_any(kernel: Kernel) -> frozenset[str]:
    """Outputs whose pipeline mode allows revisiting a block at any step
    (`pl.Buffered(1, revisit=pl.RevisitMode.ANY)`)."""
    eqn = _eqn(kernel)
    return verdict_facts.revisit_any_outputs(eqn) if eqn is not None else frozenset()


def written_for_interpreter(kernel: Kernel) -> bool:
    """A pallas_call written with `interpret=True` and no compiler params: it targets no
    hardware until a target is named."""
    eqn = _eqn(kernel)
    return (eqn is not None and not kernel.compiler_params and kernel.backend is None
            and verdict_facts.interpreted(eqn))


def lock_guards(kernel: Kernel) -> dict[str, verdict_facts.LockedStores]:
    """Output origin -> the spin lock around every load and store of it (acquired by a loop
    spinning on atomic_cas, released by atomic_xchg); outputs not so guarded are absent."""
    eqn = _eqn(kernel)
    return verdict_facts.lock_guarded_outputs(eqn) if eqn is not None else {}


def lock_guarded_finding(kernel: Kernel, op: Operand, guard: verdict_facts.LockedStores,
                         shared: str) -> Finding:
    """The info that a write conflict was dismissed because a lock guards the stores.
    `shared` says what the programs share ("programs (0,) and (3,) both store element ()")."""
    lock = kernel.operands[guard.lock]
    lock_name = f"{lock.origin} ({lock.param})" if lock.param else lock.origin
    return Finding(
        "lock-guarded-store", "info",
        f"{_named(op)}: {shared}, but every load and store of it (at {_lines(guard.stores)}) "
        f"lies between taking the spin lock {lock_name} (the loop spinning on atomic_cas at "
        f"{_lines(guard.acquires)}) and releasing it (atomic_xchg at "
        f"{_lines(guard.releases)}). Assumed: the lock lets one program in at a time, so "
        "these stores are not a parallel-write-conflict; the order in which programs take "
        "the lock is not fixed, so the result must not depend on it (an increment does not).",
        operand=op.origin)


def unwritten_outputs(kernel: Kernel) -> Iterator[Finding]:
    """Outputs no equation of the body writes (no store, atomic or DMA into them, nor any
    other write JAX records), and not aliased to an input: they hold garbage."""
    kinds = write_kinds(kernel)
    for op in kernel.outputs:
        if op.aliased_with is not None or kinds.get(op.origin, True):
            continue
        yield unwritten_finding(kernel, op)


def unwritten_finding(kernel: Kernel, op: Operand) -> Finding:
    name = _named(op)
    ref = op.param or "its ref"
    where = f" (kernel {kernel.name} at {_short(kernel.source)})" if kernel.source else \
        f" (kernel {kernel.name})"
    return Finding(
        "unwritten-output", "error",
        f"{name}{where}: the kernel body never writes this output: no store, atomic or DMA "
        f"into {ref}, and it is not aliased to an input (input_output_aliases), so all of "
        "it holds whatever was in memory (garbage on TPU/GPU). Rule: a kernel must write "
        "every output it declares (found without running it).",
        operand=op.origin)


def _named(op: Operand) -> str:
    return f"{op.origin} ({op.param})" if op.param else op.origin


def _lines(sources: tuple[str, ...]) -> str:
    return ", ".join(_short(s) for s in sources) or "lines unknown"


def _short(source: str) -> str:
    return short_source(source)
