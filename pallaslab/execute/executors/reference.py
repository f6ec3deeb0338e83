"""The `reference` executor (the user's pure-JAX function), and whether a reference's
outputs can be compared with the kernel function's."""

from __future__ import annotations

import functools
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from pallaslab.execute.protocol import ExecutorError, ExecutorSpec, Prepared, numpy_values
from pallaslab.execute.result import RunResult
from pallaslab.execute.worker.running import error_text


class ReferenceExecutor:
    """The user's pure-JAX function, called with the same arguments."""

    spec = ExecutorSpec(
        name="reference", label="the reference function",
        description="your pure-JAX function with the kernel function's signature "
                    "(reference=fn, --reference FILE.py:FUNC)",
        takes_reference=True)
    name = spec.name

    def __init__(self, reference: Callable[..., Any] | None):
        self.reference = reference

    def unavailable(self) -> str | None:
        if self.reference is None:
            return "no reference function was given (pass reference=fn or --reference FILE:FUNC)"
        return None

    def cannot_run(self, prepared: Prepared) -> str | None:
        return self.spec.refusal(prepared.capture)

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        """Under `jax.jit` when the reference traces; else (Python control flow on values,
        `int(arr[i])`, NumPy calls) as written, with a note saying so."""
        assert self.reference is not None
        name = getattr(self.reference, "__name__", "function")
        notes: tuple[str, ...] = ()
        try:
            try:
                t0 = time.perf_counter()
                traced = jax.jit(self.reference).trace(*prepared.args, **prepared.kwargs)
                if leaked := escaped_tracers(traced.jaxpr, prepared):
                    raise ExecutorError(_leak_message(name, leaked))
                call: Callable[..., Any] = traced.lower().compile()
            except _NOT_TRACEABLE as err:
                call = self.reference
                notes = (f"the reference {name} ran as written, not under jax.jit: tracing it "
                         f"failed ({type(err).__name__}: it reads array values in Python)",)
            compile_time = time.perf_counter() - t0
            t1 = time.perf_counter()
            outs = jax.block_until_ready(call(*prepared.args, **prepared.kwargs))
            wall = time.perf_counter() - t1
        except ExecutorError:
            raise
        except Exception as err:  # the user's function failing is its own, said as such
            raise ExecutorError(f"the reference {name} raised {error_text(err)}") from err
        if leaked := leaked_tracer(outs, prepared):
            raise ExecutorError(_leak_message(name, leaked))
        leaves = numpy_values(jax.tree.leaves(outs))
        if mismatch := reference_mismatch(name, leaves, prepared):
            raise ExecutorError(mismatch)
        return RunResult(self.name, leaves, prepared.output_info, wall, compile_time,
                         inputs=numpy_values(prepared.flat_args), notes=notes)


# Tracing errors of a reference that reads array values in Python: it runs as written.
_NOT_TRACEABLE = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                  jax.errors.TracerIntegerConversionError, jax.errors.TracerBoolConversionError)


def _leak_message(name: str, outputs: str) -> str:
    return (f"the reference {name} returned a JAX tracer as {outputs}: a value that escaped "
            "from a transformation (jit, vmap, grad) it was traced under, kept in a global or "
            "closed over from an earlier call, instead of an array computed in this call. "
            "Rule: a reference returns arrays computed from its arguments.")


def escaped_tracers(closed_jaxpr: Any, prepared: Prepared) -> str | None:
    """The outputs of the reference's trace that no argument gives: tracing it met tracers
    of another transformation (kept in a global, closed over) and took them as extra inputs.
    None: it took its arguments only."""
    jaxpr = closed_jaxpr.jaxpr
    extra = len(jaxpr.invars) - len(jax.tree.leaves((prepared.args, prepared.kwargs)))
    if extra <= 0:
        return None
    # Which inputs are the escaped ones cannot be told apart from the arguments by position
    # alone: name the outputs that are inputs, else all of them.
    infos = prepared.output_info
    names = [infos[i].name if i < len(infos) else f"result[{i}]"
             for i, v in enumerate(jaxpr.outvars) if v in set(jaxpr.invars)]
    return ", ".join(names) or "its outputs"


def leaked_tracer(outs: Any, prepared: Prepared) -> str | None:
    """The name of the first output that is a JAX tracer (None: none is)."""
    for i, leaf in enumerate(jax.tree.leaves(outs)):
        if isinstance(leaf, jax.core.Tracer):
            infos = prepared.output_info
            return infos[i].name if i < len(infos) else f"result[{i}]"
    return None


def reference_mismatch(name: str, leaves: Sequence[np.ndarray], prepared: Prepared
                       ) -> str | None:
    """Why a reference's outputs cannot be compared with the kernel function's (None: they
    can). Rule: a reference returns what the kernel function returns, output for output, in
    the same shapes and dtypes (a dtype difference is never compared at the looser
    tolerance)."""
    rule = ("Rule: a reference has the kernel function's signature and returns the same "
            "outputs, in the same shapes and dtypes.")
    avals = prepared.capture.handle.closed_jaxpr.out_avals
    if len(leaves) != len(avals):
        return (f"the reference {name} returned {len(leaves)} array(s), but the kernel "
                f"function returns {len(avals)}. {rule}")
    for info, leaf, aval in zip(prepared.output_info, leaves, avals, strict=True):
        if tuple(leaf.shape) != tuple(aval.shape) or np.dtype(leaf.dtype) != np.dtype(aval.dtype):
            cast = (" Cast the reference's output (e.g. .astype(...)) to compare them."
                    if tuple(leaf.shape) == tuple(aval.shape) else "")
            return (f"the reference {name} returned {_typed(leaf.dtype, leaf.shape)} for "
                    f"{info.name}; the kernel returns {_typed(aval.dtype, aval.shape)}."
                    f"{cast} {rule}")
    return None


def _typed(dtype: Any, shape: Sequence[int]) -> str:
    """f32[8,128], as JAX prints array types."""
    short = {"float": "f", "bfloat": "bf", "int": "s", "uint": "u", "complex": "c"}
    name = np.dtype(dtype).name
    for long, abbr in sorted(short.items(), key=lambda kv: -len(kv[0])):
        if name.startswith(long) and name[len(long):].isdigit():
            name = abbr + name[len(long):]
            break
    return f"{name}[{','.join(str(d) for d in shape)}]"


def located(reference: Callable[..., Any]) -> Callable[..., Any]:
    """`reference`, whose exceptions without a message (`raise NotImplementedError`) say where
    they were raised, so that "the reference ref raised NotImplementedError" names a line."""
    # Sent to a worker by value (a case file, a notebook), its code is "<dynamic-code>" there:
    # name its file as this process knows it.
    home = getattr(getattr(reference, "__code__", None), "co_filename", None)

    @functools.wraps(reference)
    def checked_reference(*args: Any, **kwargs: Any) -> Any:
        try:
            return reference(*args, **kwargs)
        except Exception as err:
            if not str(err).strip() and (where := raised_at(err, home)):
                err.args = (f"(no message) raised at {where}",)
            raise

    return checked_reference


def raised_at(err: BaseException, home: str | None = None) -> str | None:
    """file:line (function) of the frame that raised `err` (None: no traceback); a file
    cloudpickle rebuilt ("<dynamic-code>") is named `home` when given."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    file = home if home and last.filename == "<dynamic-code>" else last.filename
    return f"{file}:{last.lineno} ({last.name})"
