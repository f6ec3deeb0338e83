"""Running the user's code from the magic so that their exceptions read as without it: their
frames only (the magic's hidden), their line as the last frame, tracing errors explained."""

from __future__ import annotations

import ast
import os
import types
from collections.abc import Callable
from typing import Any, Protocol

from IPython.core.error import UsageError


class TracedCall(Protocol):
    """What `capture_line` reads of the magic's traced line (`pallaslab.magic.line.Traced`)."""

    @property
    def fn(self) -> Callable[..., Any]: ...
    @property
    def args(self) -> tuple[Any, ...]: ...
    @property
    def kwargs(self) -> dict[str, Any]: ...
    @property
    def label(self) -> str: ...  # the line, as shown in messages


def capture_line(traced: TracedCall, chip: str | None = None) -> Any:
    """Trace the line once (as on `chip` where the kernel asks the TPU); the user's own
    exception surfaces with their frames only."""
    __tracebackhide__ = True
    from pallaslab.errors import NoKernelError, PallasLabError
    from pallaslab.model import capture

    failure: BaseException
    try:
        return capture(traced.fn, *traced.args, chip=chip, **traced.kwargs)
    except NoKernelError as err:
        if "not a Pallas kernel" in str(err):  # it found another kind of kernel: say which
            raise UsageError(f"%%pallas: {err}") from None
        raise UsageError(f"%%pallas: `{traced.label}` launched no Pallas kernel: tracing the "
                         "cell's last line found no `pallas_call`, `pl.kernel` or "
                         "`plgpu.kernel`") from None
    except PallasLabError as err:
        raise UsageError(f"%%pallas: {err}") from None
    except Exception as err:
        failure = err
    _explain_tracing(failure)
    raise without_our_frames(failure)


def _explain_tracing(err: BaseException) -> None:
    import jax

    tracing = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
               jax.errors.TracerIntegerConversionError)
    if isinstance(err, tracing):
        err.add_note("%%pallas traces the cell's last line once, as jax.jit would, to find its "
                     "kernels and compute its value: Python there cannot read array values "
                     "(`if` on an array, int(), float(), np.asarray(), .item()). Keep the "
                     "kernel call on the last line (`out = f(x)`) and read values in the next "
                     "cell.")


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # pallaslab/


def without_our_frames(err: BaseException) -> BaseException:
    """The exception with pallaslab's own frames removed from its traceback: the user sees
    their line and their functions' frames, as without the magic."""
    kept = []
    tb = err.__traceback__
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE):
            kept.append(tb)
        tb = tb.tb_next
    new: types.TracebackType | None = None
    for t in reversed(kept):
        new = types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return err.with_traceback(new)


# The helpers below run user code. `__tracebackhide__` keeps their frames out of IPython's
# tracebacks, so a user's exception shows the frames it would show without the magic.


_CPU_REFUSAL = "Only interpret mode is supported on CPU backend"  # JAX's, for a TPU kernel
EARLIER_LINE_HINT = ("%%pallas inspects and interprets only the cell's last line; earlier lines "
                     "run as written: put the kernel call on the last line, or pass "
                     "interpret=True")


def run_code(code: Any, ns: dict[str, Any]) -> None:
    """Run the cell's statements before the last; a kernel written for a TPU/GPU that one of
    them launches fails as in a plain cell, with a hint from the magic."""
    __tracebackhide__ = True
    try:
        exec(code, ns)
    except Exception as err:
        if _CPU_REFUSAL in str(err):
            err.add_note(EARLIER_LINE_HINT)
        raise


def exec_with(code: Any, ns: dict[str, Any], local: dict[str, Any]) -> None:
    __tracebackhide__ = True
    eval_with(code, ns, local, run=exec)


def eval_with(code: Any, ns: dict[str, Any], local: dict[str, Any], run: Any = eval) -> Any:
    __tracebackhide__ = True
    # Bind the temporary names, run, and remove them again: the namespace keeps only the
    # cell's own assignments.
    sentinel = object()
    saved = {k: ns.get(k, sentinel) for k in local}
    ns.update(local)
    try:
        return run(code, ns)
    finally:
        for k, v in saved.items():
            if v is sentinel:
                ns.pop(k, None)
            else:
                ns[k] = v


def eval_code(code: Any, ns: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    return eval(code, ns)


def raise_at(err: BaseException, node: ast.stmt, filename: str) -> None:
    """Raise `err` from the cell's own line: the traceback shows that line, not the magic."""
    __tracebackhide__ = True
    stmt = ast.copy_location(ast.Raise(exc=ast.Name("__pl_error", ast.Load()), cause=None), node)
    code = compile(ast.fix_missing_locations(ast.Module(body=[stmt], type_ignores=[])),
                   filename, "exec", dont_inherit=True)
    exec(code, {"__pl_error": err})
