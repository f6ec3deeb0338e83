"""Outputs a wrapper made from a kernel's output (transposed, reshaped, sliced, cast, ...),
traced back element by element to it (`pallaslab.model._jax.element_ids`), so their wrong
elements are attributed to the programs that wrote them as a bare kernel's are.

Tracing evaluates the function's jaxpr once more (kernels not run), so it is done only for
outputs that mismatched; a failure to trace says nothing rather than guess.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pallaslab.analysis.tiling import Tiling
from pallaslab.execute.causes.provenance import Provenance
from pallaslab.execute.comparing.pair import PairComparison, blocks_and_programs
from pallaslab.execute.protocol import Prepared
from pallaslab.model import Kernel, _jax

ElementTrace = _jax.ElementTrace
Untraced = _jax.Untraced
Trace = ElementTrace | Untraced
InputTrace = _jax.InputTrace

__all__ = ["ElementTrace", "InputTrace", "Trace", "Untraced", "kernel_origin", "trace_json",
           "trace_kernel_inputs", "trace_outputs", "traced_label", "traced_pairs",
           "traced_provenance", "untraced_line"]


def trace_outputs(prepared: Prepared, wanted: Sequence[int]) -> dict[int, Trace]:
    """Per function output in `wanted`: the kernel output its elements came from, or why
    they cannot be traced (absent: no kernel output reaches it, or tracing failed)."""
    if not wanted:
        return {}
    try:
        found = _jax.trace_elements(prepared.capture.handle.closed_jaxpr, prepared.flat_args,
                                    prepared.capture.kernels, wanted)
    except Exception:  # an equation the evaluation cannot follow: no attribution, no guess
        return {}
    return {i: t for i, t in found.items() if t is not None}


def trace_kernel_inputs(prepared: Prepared, kernel: Kernel) -> dict[str, InputTrace]:
    """Per kernel input origin a wrapper made from one argument (transposed, reshaped,
    batched, ...): which argument elements it holds (empty when tracing fails: no guess)."""
    if kernel.handle is None:
        return {}
    try:
        found = _jax.trace_inputs(prepared.capture.handle.closed_jaxpr, prepared.flat_args,
                                  kernel.handle.eqn, kernel.handle.num_dynamic_grid)
    except Exception:  # an equation the evaluation cannot follow
        return {}
    return {kernel.inputs[n].origin: t for n, t in found.items() if n < len(kernel.inputs)}


def kernel_origin(prepared: Prepared, trace: ElementTrace) -> str:
    return prepared.capture[trace.kernel].outputs[trace.output].origin


def traced_label(name: str, prepared: Prepared, trace: ElementTrace) -> str:
    """"result[0] (outputs, through transpose, slice)"."""
    through = f", through {', '.join(trace.through)}" if trace.through else ""
    return f"{name} ({kernel_origin(prepared, trace)}{through})"


def traced_provenance(prov: Provenance, trace: ElementTrace) -> Provenance:
    """The kernel output's provenance at the function output's elements (-1: an element no
    kernel element became, such as padding)."""
    return dataclasses.replace(prov, program_of=trace.to_output(prov.program_of, -1),
                               line_of=trace.to_output(prov.line_of, -1))


def untraced_line(untraced: Untraced) -> str:
    """Why a mismatched output names no programs."""
    return ("no programs or causes: its wrong elements cannot be traced back to the programs "
            f"that wrote them ({untraced.reason} after the kernel; compare the kernel's own "
            "output, before the wrapper, to locate them)")


def traced_pairs(pairs: tuple[PairComparison, ...], trace: Trace, prepared: Prepared,
                 tilings: dict[int, Tiling | None]) -> tuple[PairComparison, ...]:
    """A wrapped output's mismatched pairs with the blocks and programs of the kernel output
    their wrong elements came from."""
    if not isinstance(trace, ElementTrace):
        return pairs
    tiling = tilings.get(trace.kernel)
    ot = tiling.operands.get(kernel_origin(prepared, trace)) if tiling is not None else None
    if tiling is None or ot is None:
        return pairs
    out = []
    for p in pairs:
        if not p.allclose and p.error is None:
            blocks, programs = blocks_and_programs(trace.to_kernel(p.mismatch), ot, tiling)
            p = dataclasses.replace(p, mismatched_blocks=blocks, programs=programs)
        out.append(p)
    return tuple(out)


def trace_json(trace: Trace | None) -> dict[str, Any] | None:
    if isinstance(trace, ElementTrace):
        return {"kernel": trace.kernel, "output": trace.output, "through": list(trace.through)}
    if isinstance(trace, Untraced):
        return {"reason": trace.reason}
    return None
