"""`%%pallas`: run the cell; inspect every kernel its last line launches.

    %load_ext pallaslab
    %%pallas --tab grid
    x = jnp.ones((256, 256))
    jnp.sum(my_kernel(x)) * 2     # any expression, or `out = ...`: its value stays the cell's

The magic parses flags, runs the cell's statements before the last one in the user's
namespace exactly as IPython would, and traces the last line's value once with
`pallaslab.capture`:

- a call whose callee and arguments call nothing themselves (`f(x, w.T, block=128)`): the
  callee and the arguments are evaluated as Python would, and the call is traced;
- any other expression (`f(x).sum()`, `f(x) + g(y)`, `jax.grad(loss)(x)`): it becomes a
  function of the names it reads that hold arrays (or pytrees of arrays), in the order they
  first appear; everything else it reads is closed over.

The cell's value is computed from that trace (`pallaslab.execute.executors.auto.evaluate`), so
the user's code runs once in the notebook (under `--compare`, it is the comparison's run of the
executor that would compute it: `compared_evaluation`, the kernels run once); `--compare` and
`--devices` reuse that capture too (`prepare(captured=...)`), and only the worker process
traces the call again, where what it prints goes to the worker's log. With no TPU/GPU attached,
kernels written for one run interpreted in the killable worker process (which traces the call
again there), one line says so, and what they print is printed. What the line only does with
its value (`print(f(x))`, `results.append(f(x))`, f-strings, `(out := f(x)).sum()`) runs on the
computed value, not on tracers (`host`); a trace that leaves tracers in the notebook is a
UsageError. The value is then shown (or assigned) exactly as the plain cell would. The
workbench gets the caller's names for the traced function's flat arguments as
`options["arg_names"]` (`["x", "w.T"]`). The magic has no logic of its own beyond that.

Its parts: `options` (the flags, checked), `line` (the last line as a function to trace and
its value rebuilt), `host` (what of the line runs on the computed value) and `user_code`
(running the user's code so their errors read as without the magic). It is a shell:
it may import any layer, and nothing of pallaslab imports it (docs/architecture.md).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from pallaslab.magic.exercise import add_exercise_flags, exercise_cell
from pallaslab.magic.line import (
    SHAPES,
    ComputedPart,
    last_value,
    leaked_tracers_error,
    traced_line,
    tracer_holders,
    value_tracer_error,
)
from pallaslab.magic.options import COMPARE_HELP, compare_reference, list_executors, parse_flags
from pallaslab.magic.options import EXTRA_OPTIONS as _EXTRA_OPTIONS
from pallaslab.magic.options import options_from as _options
from pallaslab.magic.tune import tune_cell
from pallaslab.magic.user_code import (
    capture_line,
    exec_with,
    raise_at,
    run_code,
    without_our_frames,
)

if TYPE_CHECKING:
    from pallaslab.execute.executors.auto import Evaluation
    from pallaslab.magic.line import Traced

__all__ = ["PallasMagics", "load_ipython_extension", "parse_argstring", "register_option"]


@magics_class
class PallasMagics(Magics):
    # IPython puts one "%" before the parser's name: the usage line reads `%%pallas`.
    @magic_arguments(name="%pallas")
    @argument("--tab", default=None, metavar="NAME",
              help="the tab to open first (overview, grid, and any tab added later)")
    @argument("--chip", action="append", default=[], metavar="CHIP",
              help="TPU chip for chip-specific views, e.g. v5e (repeatable)")
    @argument("--target", action="append", default=[], metavar="T",
              help="target whose rules the findings follow, e.g. tpu-v5e, gpu-h100 (repeatable)")
    @argument("--kernel", default=None, metavar="N",
              help="show only this kernel (launch index or name) when the call launches several")
    @argument("--compare", default=None, metavar="EXECUTORS", help=COMPARE_HELP)
    @argument("--timeout", default=None, metavar="SECONDS",
              help="time limit of each run: the interpreted run that computes the cell's value "
                   "when no TPU/GPU is attached (in a worker process, so even a program "
                   "spinning in a compiled loop stops), and each --compare run (default 300 s, "
                   "or $PALLASLAB_TIMEOUT); a run past it is stopped and reported as timed out")
    @argument("--devices", default=None, metavar="N",
              help="run on N simulated CPU devices (a worker process configured for them), e.g. "
                   "a shard_map kernel with remote DMAs under tpu-interpret: the cell's value "
                   "and the Devices and Step tabs (and the --compare executors) run there")
    @argument("--gpu", action="store_true",
              help="compile Triton kernels for a100 and h100 and show shared memory, registers "
                   "and blocks per SM in the Memory tab")
    @argument("--tune", nargs="+", default=None, metavar="NAME=V1,V2",
              help="rank these configs (e.g. bm=128,256,512 bk=128,256): the last line is "
                   "captured once per config with the names bound, and the ranked table is the "
                   "cell's value (pallaslab.tune)")
    @argument("--compile-top", default=None, metavar="K",
              help="with --tune: compile the K fastest with the real compiler (default 3)")
    @cell_magic
    def pallas(self, line: str, cell: str) -> Any:
        """Run the cell and open the pallaslab workbench on every kernel its last line launches.

        The last line is any expression, or an assignment (`out = ...`, `out += ...`,
        `a, b = ...`), e.g. `matmul(x, y)`, `matmul(x, y).sum()`, `f(x) + g(y)` or
        `jax.grad(loss)(x)`. It is traced once to find its kernels, and the cell's value is
        computed from that trace: your code runs once, and the value (or assignment) is what
        the plain cell gives. With no TPU/GPU attached, kernels written for one (no
        `interpret=True`) run under interpret mode, and one line says so.
        """
        __tracebackhide__ = True  # user exceptions show their own frames, not the magic's
        options = _options(parse_flags(self.pallas, line))
        if (course := parse_flags(self.pallas, line)).exercise is not None:  # `.exercise`
            return exercise_cell(self.shell, cell, course.exercise, hint=course.hint)
        shell = self.shell
        assert shell is not None
        filename, body, last = _statements(shell, cell)
        if (flags_given := parse_flags(self.pallas, line)).tune is not None:
            return tune_cell(shell, filename, body, last, flags_given.tune,
                             flags_given.compile_top, options)
        expr, assign = last_value(last)
        ns = shell.user_ns
        flags = shell.compile.flags
        if body:
            module = ast.Module(body=body, type_ignores=[])
            run_code(compile(module, filename, "exec", flags=flags, dont_inherit=True), ns)
        options["reference"] = compare_reference(options["compare"], ns)
        traced = traced_line(expr, filename, flags, ns)
        holders = tracer_holders(ns, shell.user_ns_hidden)
        cap = capture_line(traced, options["chips"][0] if options["chips"] else None)
        if leaked := tracer_holders(ns, shell.user_ns_hidden) - holders:
            raise leaked_tracers_error(leaked, traced.label)
        wb, comparison, device_run = _workbench(cap, traced, options)
        evaluation = _show_and_evaluate(wb, cap, comparison, device_run, options, traced)
        if evaluation.error is not None:  # after the workbench, as the plain cell would fail
            if evaluation.error.__traceback__ is None:  # ours (the interpreted run): at the line
                raise_at(evaluation.error, last, filename)
            raise without_our_frames(evaluation.error)
        assert evaluation.outputs is not None
        value = traced.value(evaluation.outputs)  # runs `print(...)` of `print(f(x))`
        if leaked := tracer_holders(ns, shell.user_ns_hidden) - holders:
            raise leaked_tracers_error(leaked, traced.label)
        if _holds_tracers(value):
            raise value_tracer_error(traced.label)
        if assign is not None:  # `out = ...`: assign as the plain cell would
            exec_with(compile(assign, filename, "exec", dont_inherit=True), ns,
                      {"__pl_value": value})
            return None
        return None if _quiet(shell, cell) else value


def _statements(shell: Any, cell: str) -> tuple[str, list[ast.stmt], ast.stmt]:
    """The cell's file name (for tracebacks), its statements before the last, and the last."""
    __tracebackhide__ = True
    source = shell.transform_cell(cell)
    filename = shell.compile.cache(source, shell.execution_count, raw_code=cell)
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as err:
        # The cell fails as a plain cell would (IPython shows only the syntax error, see
        # `show_cell_syntax_error`), so Run All stops here.
        raise CellSyntaxError(err.msg, (err.filename, err.lineno, err.offset, err.text,
                                        err.end_lineno, err.end_offset)) from None
    if not tree.body:
        raise UsageError("%%pallas: the cell is empty; its last line must be an expression "
                         f"that launches the kernel(s) to inspect, {SHAPES}")
    *body, last = tree.body
    return filename, body, last


class CellSyntaxError(SyntaxError):
    """A `%%pallas` cell that does not parse: shown as IPython shows a plain cell's syntax
    error (the error alone, without the magic's frames)."""


def show_cell_syntax_error(shell: Any, etype: type, value: BaseException, tb: Any,
                           tb_offset: int | None = None) -> None:
    """IPython's handler for `CellSyntaxError`: the syntax error as a plain cell shows it
    (IPython shows the error being handled, here a plain SyntaxError raised from no frame of
    the magic's)."""
    try:
        raise SyntaxError(*value.args) from None
    except SyntaxError:
        shell.showsyntaxerror()


def _handle_cell_syntax_errors(ipython: Any) -> None:
    """Register `show_cell_syntax_error` beside any custom exception handler already set."""
    handled = tuple(getattr(ipython, "custom_exceptions", ()))
    if CellSyntaxError in handled:
        return
    previous = ipython.CustomTB if handled else None

    def handler(shell: Any, etype: type, value: BaseException, tb: Any,
                tb_offset: int | None = None) -> Any:
        if isinstance(value, CellSyntaxError) or previous is None:
            return show_cell_syntax_error(shell, etype, value, tb, tb_offset)
        return previous(etype, value, tb, tb_offset=tb_offset)

    ipython.set_custom_exc((*handled, CellSyntaxError), handler)


def _quiet(shell: Any, cell: str) -> bool:
    """`f(x);`: the value is not shown, as in a plain cell (IPython's own test)."""
    semicolon = getattr(type(shell.displayhook), "semicolon_at_end_of_expression", None)
    return bool(semicolon is not None and semicolon(cell))


def _holds_tracers(value: Any) -> bool:
    import jax

    return any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(value))


def _show_and_evaluate(wb: Any, cap: Any, comparison: Any, device_run: Any,
                       options: dict[str, Any], traced: Traced) -> Evaluation:
    """Display the workbench and compute the line's value from the trace (errors are kept in
    the evaluation, for the caller to raise after the workbench), or take it from the
    `--compare` run when that ran the kernels as the value would (they then run once). What
    the interpreted run printed, and its note, read above the workbench."""
    from IPython.display import display

    from pallaslab.execute.executors.auto import (
        compared_evaluation,
        devices_evaluation,
        evaluate,
        needing_interpretation,
        run_on_devices,
        stopped_in,
    )

    timeout = options["timeout"]
    evaluation = stopped_in(comparison) or run_on_devices(comparison) or (
        devices_evaluation(device_run) if device_run is not None else None) or \
        compared_evaluation(cap, comparison, options["devices"])
    if evaluation is None and needing_interpretation(cap):
        # interpreted in the worker process, within the time limit: its one-line note reads
        # above the workbench
        evaluation = evaluate(cap, timeout=timeout, call=traced.sendable)
    if evaluation is not None:
        for p in evaluation.prints:  # as the plain `interpret=True` cell prints them
            print(p.text)
        if evaluation.note:
            print(evaluation.note)
    display(wb)
    if evaluation is None:
        # Kernels run as written are dispatched after the workbench is built: its index maps
        # then do not wait behind the value's computation on the device.
        evaluation = evaluate(cap, timeout=timeout)
    return evaluation


def register_option(*flags: str, **kwargs: Any) -> None:
    """Add a `%%pallas` flag for a later tab, e.g. `register_option("--executors", default=None,
    help=...)`. Its parsed value reaches every view as `ctx.options[dest]`."""
    func = PallasMagics.pallas
    parser = func.parser
    action = parser.add_argument(*flags, **kwargs)
    if action.dest not in _EXTRA_OPTIONS:
        _EXTRA_OPTIONS.append(action.dest)
    func.__doc__ = parser.format_help()  # `%%pallas?` lists it


def _workbench(cap: Any, traced: Traced, options: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The workbench, with its comparison when `--compare` asked for one, else with the run on
    simulated devices that `--devices` alone asks for (None when not asked)."""
    from pallaslab.errors import PallasLabError, untested_jax_failure
    from pallaslab.views.compare import attach_comparison, user_call
    from pallaslab.workbench import Workbench

    options["extra"]["arg_names"] = traced.arg_names
    comparison = device_run = None
    try:
        compared = options.get("compare")
        # Step, Compare and a trace on simulated devices re-run the user's own call (it
        # travels to the worker, where the captured jaxpr cannot): the workbench has it at once
        call, reuse = _call_to_rerun(cap, traced, user_call)
        wb = Workbench(cap, chips=options["chips"], targets=options["targets"],
                       tab=options["tab"] or ("compare" if compared else None),
                       kernel=options["kernel"], options=options["extra"], call=call)
        if compared:
            reference = options.get("reference")
            if reuse and reference is not None and not all(traced.computed):
                reference = ComputedPart(reference, traced.computed)
            comparison = attach_comparison(
                wb, executors=compared[0], reference=reference,
                timeout=options["timeout"], **reuse,
                **({"devices": options["devices"]} if options["devices"] else {}))
        elif options["devices"]:
            device_run = _run_on_devices(wb, options, reuse)
    except PallasLabError as err:
        raise UsageError(f"%%pallas: {err}") from None
    except Exception as err:  # pallaslab's own failure: on an untested JAX, said as such
        if (untested := untested_jax_failure(err)) is None:
            raise
        raise UsageError(f"%%pallas: {untested}") from None
    return wb, comparison, device_run


def _call_to_rerun(cap: Any, traced: Traced, user_call: Any) -> tuple[Any, dict[str, Any]]:
    """The call `--compare` and `--devices` run, and `{"captured": cap}` when they may reuse
    the line's capture instead of tracing the call again here (the user's Python then runs
    once in the notebook, as in a plain cell; the worker process traces it again, where its
    prints go to the worker's log). The call is the user's own function, returning the
    leaves this trace computed (`Traced.sendable`: what `cap` captured), when every argument
    holds arrays; else None: the captured jaxpr is re-run (see `user_call`)."""
    from pallaslab.execute.data import any_abstract

    if user_call(*traced.call) is None:
        return None, {}
    call = traced.sendable
    # abstract arguments get the executors' random data, on which `cap` was not captured
    return call, ({} if any_abstract(call[1:]) else {"captured": cap})


def _run_on_devices(wb: Any, options: dict[str, Any], reuse: dict[str, Any]) -> Any:
    """`--devices N` without `--compare`: the workbench's call run once on N simulated
    devices (the cell's value, and the run the Devices tab draws)."""
    from pallaslab.execute import run

    s = wb.session
    fn, args, kwargs = s.call_args()
    s.device_run = run(fn, *args, devices=options["devices"], timeout=options["timeout"],
                       **reuse, **kwargs)
    return s.device_run


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext pallaslab`: register the `%%pallas` cell magic."""
    ipython.register_magics(PallasMagics)
    _handle_cell_syntax_errors(ipython)
    list_executors(PallasMagics.pallas)


add_exercise_flags(PallasMagics.pallas)  # `%%pallas --exercise NAME [--hint]`
