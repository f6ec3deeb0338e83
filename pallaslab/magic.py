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

The cell's value is computed from that trace (`pallaslab.execute.auto.evaluate`), so the
user's code runs once per cell. With no TPU/GPU attached, kernels written for one run
interpreted, and one line says so. The value is then shown (or assigned) exactly as the plain
cell would. The workbench gets the caller's names for the traced function's flat arguments
as `options["arg_names"]` (`["x", "w.T"]`). The magic has no logic of its own beyond that.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
import os
import symtable
import types
from collections.abc import Callable, Sequence
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

_SHAPES = ("e.g. `matmul(x, y)`, `out = matmul(x, y)` or `jnp.sum(matmul(x, y)) * 2`")


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
    @argument("--compare", default=None, metavar="EXECUTORS",
              help="run these executors, compare their outputs and open the Compare tab, e.g. "
                   "interpret,reference=my_ref. my_ref, a function of the notebook, takes what "
                   "the last line's call takes (`matmul(x, y)`: my_ref(x, y)); when the last "
                   "line is not a single call (`matmul(x, y).sum()`), it takes the arrays the "
                   "line names, in the order they appear (my_ref(x, y)), and returns what the "
                   "line returns. Executors: interpret, tpu-interpret, gpu-interpret, device, "
                   "reference=NAME")
    @argument("--timeout", default=None, metavar="SECONDS",
              help="time limit of each run: the interpreted run that computes the cell's value "
                   "when no TPU/GPU is attached, and each --compare run (default 300 s, or "
                   "$PALLASLAB_TIMEOUT); a run past it is stopped and reported as timed out")
    @argument("--gpu", action="store_true",
              help="compile Triton kernels for a100 and h100 and show shared memory, registers "
                   "and blocks per SM in the Memory tab")
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
        args = parse_argstring(self.pallas, line)
        options = _options(args)
        shell = self.shell
        assert shell is not None
        source = shell.transform_cell(cell)
        filename = shell.compile.cache(source, shell.execution_count, raw_code=cell)
        try:
            tree = ast.parse(source, filename=filename)
        except SyntaxError as err:
            # The cell fails as a plain cell would (IPython shows it as a syntax error), so
            # Run All stops here.
            raise err.with_traceback(None) from None
        if not tree.body:
            raise UsageError("%%pallas: the cell is empty; its last line must be an expression "
                             f"that launches the kernel(s) to inspect, {_SHAPES}")
        *body, last = tree.body
        expr, assign = _last_value(last)
        ns = shell.user_ns
        flags = shell.compile.flags
        if body:
            module = ast.Module(body=body, type_ignores=[])
            _run(compile(module, filename, "exec", flags=flags, dont_inherit=True), ns)
        options["reference"] = _compare_reference(options["compare"], ns)
        traced = _traced(expr, filename, flags, ns)
        cap = _capture(traced)
        wb, comparison = _workbench(cap, traced, options)
        from IPython.display import display

        from pallaslab.execute.auto import evaluate, needing_interpretation, stopped_in

        evaluation = stopped_in(comparison)
        if evaluation is None and needing_interpretation(cap):
            # interpreted here, within the time limit: its one-line note reads above the workbench
            evaluation = evaluate(cap, timeout=options["timeout"])
        if evaluation is not None and evaluation.note:
            print(evaluation.note)
        display(wb)
        if evaluation is None:
            # Kernels run as written are dispatched after the workbench is built: its index
            # maps then do not wait behind the value's computation on the device.
            evaluation = evaluate(cap, timeout=options["timeout"])
        if evaluation.error is not None:  # after the workbench, as the plain cell would fail
            if evaluation.error.__traceback__ is None:  # ours (the interpreted run): at the line
                _raise_at(evaluation.error, last, filename)
            raise _without_our_frames(evaluation.error)
        assert evaluation.outputs is not None
        value = traced.value(evaluation.outputs)
        if assign is not None:  # `out = ...`: assign as the plain cell would
            _exec_with(compile(assign, filename, "exec", dont_inherit=True), ns,
                       {"__pl_value": value})
            return None
        return value


_EXTRA_OPTIONS: list[str] = []  # argparse dests added by `register_option`


def register_option(*flags: str, **kwargs: Any) -> None:
    """Add a `%%pallas` flag for a later tab, e.g. `register_option("--executors", default=None,
    help=...)`. Its parsed value reaches every view as `ctx.options[dest]`."""
    func = PallasMagics.pallas
    parser = func.parser
    action = parser.add_argument(*flags, **kwargs)
    if action.dest not in _EXTRA_OPTIONS:
        _EXTRA_OPTIONS.append(action.dest)
    func.__doc__ = parser.format_help()  # `%%pallas?` lists it


def _options(args: Any) -> dict[str, Any]:
    from pallaslab.analysis.chips import normalize
    from pallaslab.workbench import TARGETS, WorkbenchError, _tab_name

    try:
        tab = _tab_name(args.tab) if args.tab else None
        chips = [normalize(c) for c in args.chip]
    except (WorkbenchError, ValueError) as err:
        raise UsageError(f"%%pallas: {err}") from None
    targets = [t.strip().lower() for t in args.target]
    for t in targets:
        if t not in TARGETS:
            raise UsageError(f"%%pallas: unknown --target {t!r}: the targets are "
                             f"{', '.join(TARGETS)}")
    kernel: int | str | None = args.kernel
    if isinstance(kernel, str) and kernel.lstrip("-").isdigit():
        kernel = int(kernel)
    extra = {dest: getattr(args, dest) for dest in _EXTRA_OPTIONS}
    if args.gpu:
        extra["gpu"] = True
    return {"tab": tab, "chips": chips, "targets": targets, "kernel": kernel, "extra": extra,
            "compare": _compare_option(args.compare), "timeout": _timeout_option(args.timeout)}


def _timeout_option(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise UsageError(f"%%pallas: --timeout {text}: a time limit is a positive number of "
                         "seconds")
    return value


# --- the last line -----------------------------------------------------------------------------


def _last_value(node: ast.stmt) -> tuple[ast.expr, ast.Module | None]:
    """The last statement's value expression, and (for an assignment) the statement that
    assigns `__pl_value` to its targets as the original would."""
    value = ast.Name("__pl_value", ast.Load())
    stmt: ast.stmt | None = None
    if isinstance(node, ast.Expr):
        return node.value, None
    if isinstance(node, ast.Assign):
        expr, stmt = node.value, ast.Assign(targets=node.targets, value=value)
    elif isinstance(node, ast.AugAssign):
        expr, stmt = node.value, ast.AugAssign(target=node.target, op=node.op, value=value)
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        expr, stmt = node.value, ast.AnnAssign(target=node.target, annotation=node.annotation,
                                               value=value, simple=node.simple)
    else:
        shown = ast.unparse(node).splitlines()[0]
        raise UsageError(f"%%pallas: the cell's last line must be an expression or an "
                         f"assignment whose value launches the kernel(s), {_SHAPES}; it is "
                         f"`{shown}`")
    for n in ast.walk(stmt):
        if isinstance(n, (ast.expr, ast.stmt)) and not hasattr(n, "lineno"):
            ast.copy_location(n, node)
    return expr, ast.fix_missing_locations(ast.Module(body=[stmt], type_ignores=[]))


_MISSING = object()


@dataclasses.dataclass
class _Traced:
    """The function the magic traces, its arguments, and how to rebuild the line's value."""

    fn: Callable[..., Any]  # records the value's structure when traced
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    call: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]  # the user's, for compare
    arg_names: tuple[str, ...] | None  # the caller's expression for each traced argument
    label: str  # the line, as shown in messages
    treedef: Any = None
    kept: list[Any] = dataclasses.field(default_factory=list)  # non-traced leaves, or _MISSING

    def value(self, outputs: Sequence[Any]) -> Any:
        """The line's value: its traced leaves from `outputs`, the others as they were."""
        import jax

        it = iter(outputs)
        leaves = [next(it) if v is _MISSING else v for v in self.kept]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


def _traced(expr: ast.expr, filename: str, flags: int, ns: dict[str, Any]) -> _Traced:
    __tracebackhide__ = True
    label = _label(expr)
    if isinstance(expr, ast.Call) and _plain_call(expr):
        fn, args, kwargs, texts, kw_texts = _evaluate_call(expr, filename, flags, ns)
        traced = _Traced(fn, tuple(args), kwargs, (fn, tuple(args), kwargs), None, label)
        traced.arg_names = _argument_names(args, texts, kwargs, kw_texts)
    else:
        names = _array_names(expr, ns)
        lam = ast.Lambda(args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names],
                                            kwonlyargs=[], kw_defaults=[], defaults=[]),
                         body=expr)
        ast.copy_location(lam, expr)
        code = compile(ast.fix_missing_locations(ast.Expression(lam)), filename, "eval",
                       flags=flags, dont_inherit=True)
        fn = eval(code, ns)  # defines the function; runs nothing of the user's
        fn.__name__ = fn.__qualname__ = "cell"
        values = tuple(ns[n] for n in names)
        traced = _Traced(fn, values, {}, (fn, values, {}), None, label)
        traced.arg_names = _argument_names(values, list(names), {}, {})
    traced.fn = _recording(fn, traced)
    return traced


def _label(expr: ast.expr) -> str:
    text = ast.unparse(expr).splitlines()[0]
    return text if len(text) <= 60 else text[:57] + "..."


def _plain_call(call: ast.Call) -> bool:
    """A call whose callee and arguments launch nothing themselves (no call inside them):
    evaluating those first, as Python does, and tracing only the call captures everything."""
    parts: list[ast.AST] = [call.func, *call.args, *(k.value for k in call.keywords)]
    return not any(isinstance(n, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom,
                                  ast.NamedExpr))
                   for part in parts for n in ast.walk(part))


def _array_names(expr: ast.expr, ns: dict[str, Any]) -> list[str]:
    """The free names the expression reads that hold arrays (or pytrees of arrays only), in
    the order they first appear."""
    text = ast.unparse(expr)
    free: set[str] = set()
    try:
        tables = symtable.symtable(f"lambda: ({text})", "<cell>", "exec").get_children()
        while tables:
            table = tables.pop()
            free |= {s.get_name() for s in table.get_symbols()
                     if s.is_global() and s.is_referenced()}
            tables.extend(table.get_children())
    except SyntaxError:  # pragma: no cover - the cell parsed, so its unparse does too
        free = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    loads = sorted((n for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id in free),
                   key=lambda n: (n.lineno, n.col_offset))
    names: list[str] = []
    for n in loads:
        if n.id not in names and n.id in ns and _only_arrays(ns[n.id]):
            names.append(n.id)
    return names


def _array_leaf(leaf: Any) -> bool:
    import jax
    import numpy as np

    return isinstance(leaf, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct))


def _only_arrays(value: Any) -> bool:
    import jax

    if callable(value) or isinstance(value, types.ModuleType):
        return False
    leaves = jax.tree_util.tree_leaves(value)
    return bool(leaves) and all(_array_leaf(leaf) for leaf in leaves)


def _holds_array(value: Any) -> bool:
    """As `pallaslab.capture` decides which arguments it traces (the others stay static)."""
    import jax

    return any(_array_leaf(leaf) for leaf in jax.tree_util.tree_leaves(value))


def _argument_names(args: Sequence[Any], texts: Sequence[str], kwargs: dict[str, Any],
                    kw_texts: dict[str, str]) -> tuple[str, ...]:
    """The caller's expression for each argument the trace takes (`x`, `w.T`, `params`), in
    the order of the traced function's flat arguments: positional ones in order, then
    keywords sorted by name (as JAX flattens them). Arguments holding no array are bound
    before tracing (static), so they have no name here; an argument that is a pytree of arrays
    has one name for all its leaves."""
    names = [t for a, t in zip(args, texts, strict=True) if _holds_array(a)]
    names += [kw_texts[k] for k in sorted(kwargs) if _holds_array(kwargs[k])]
    return tuple(names)


def _is_primary(text: str) -> bool:
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.List,
                             ast.Tuple, ast.Dict))


def _recording(fn: Callable[..., Any], traced: _Traced) -> Callable[..., Any]:
    """`fn`, returning its traced leaves only and remembering the value's structure and its
    other leaves (Python values, arrays it did not compute), to rebuild the value from the
    trace's outputs."""
    import jax

    def record(*args: Any, **kwargs: Any) -> list[Any]:
        out = fn(*args, **kwargs)
        leaves, traced.treedef = jax.tree_util.tree_flatten(out)
        traced.kept = [_MISSING if isinstance(v, jax.core.Tracer) else v for v in leaves]
        return [v for v in leaves if isinstance(v, jax.core.Tracer)]

    try:
        return functools.wraps(fn)(record)
    except (AttributeError, TypeError):  # pragma: no cover - an exotic callable
        return record


def _evaluate_call(call: ast.Call, filename: str, flags: int, ns: dict[str, Any]
                   ) -> tuple[Any, list[Any], dict[str, Any], list[str], dict[str, str]]:
    """The callee, positional and keyword arguments of the call, each evaluated once, and the
    caller's text for each argument."""

    __tracebackhide__ = True

    def ev(expr: ast.expr) -> Any:
        __tracebackhide__ = True
        code = compile(ast.fix_missing_locations(ast.Expression(expr)), filename, "eval",
                       flags=flags, dont_inherit=True)
        return _eval(code, ns)

    fn = ev(call.func)
    args: list[Any] = []
    texts: list[str] = []
    for a in call.args:
        if isinstance(a, ast.Starred):
            items = list(ev(a.value))
            text = ast.unparse(a.value)
            base = text if _is_primary(text) else f"({text})"
            args.extend(items)
            texts.extend(f"{base}[{i}]" for i in range(len(items)))
        else:
            args.append(ev(a))
            texts.append(ast.unparse(a))
    kwargs: dict[str, Any] = {}
    kw_texts: dict[str, str] = {}
    for kw in call.keywords:
        if kw.arg is None:
            values = dict(ev(kw.value))
            text = ast.unparse(kw.value)
            base = text if _is_primary(text) else f"({text})"
            kwargs.update(values)
            kw_texts.update({k: f"{base}[{k!r}]" for k in values})
        else:
            kwargs[kw.arg] = ev(kw.value)
            kw_texts[kw.arg] = ast.unparse(kw.value)
    return fn, args, kwargs, texts, kw_texts


def _capture(traced: _Traced) -> Any:
    """Trace the line once; the user's own exception surfaces with their frames only."""
    __tracebackhide__ = True
    from pallaslab.errors import NoKernelError, PallasLabError
    from pallaslab.model import capture

    failure: BaseException
    try:
        return capture(traced.fn, *traced.args, **traced.kwargs)
    except NoKernelError:
        raise UsageError(f"%%pallas: `{traced.label}` launched no Pallas kernel: tracing the "
                         "cell's last line found no `pallas_call`, `pl.kernel` or "
                         "`plgpu.kernel`") from None
    except PallasLabError as err:
        raise UsageError(f"%%pallas: {err}") from None
    except Exception as err:
        failure = err
    _explain_tracing(failure)
    raise _without_our_frames(failure)


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


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _without_our_frames(err: BaseException) -> BaseException:
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


def _workbench(cap: Any, traced: _Traced, options: dict[str, Any]) -> tuple[Any, Any]:
    """The workbench (with its comparison, when `--compare` asked for one)."""
    from pallaslab.errors import PallasLabError
    from pallaslab.workbench import Workbench

    options["extra"]["arg_names"] = traced.arg_names
    comparison = None
    try:
        compared = options.get("compare")
        wb = Workbench(cap, chips=options["chips"], targets=options["targets"],
                       tab=options["tab"] or ("compare" if compared else None),
                       kernel=options["kernel"], options=options["extra"])
        if compared:
            from pallaslab.views.compare import attach_comparison, user_call

            comparison = attach_comparison(
                wb, executors=compared[0], reference=options.get("reference"),
                call=user_call(*traced.call), timeout=options["timeout"])
    except PallasLabError as err:
        raise UsageError(f"%%pallas: {err}") from None
    return wb, comparison


# The helpers below run user code. `__tracebackhide__` keeps their frames out of IPython's
# tracebacks, so a user's exception shows the frames it would show without the magic.


def _run(code: Any, ns: dict[str, Any]) -> None:
    __tracebackhide__ = True
    exec(code, ns)


def _exec_with(code: Any, ns: dict[str, Any], local: dict[str, Any]) -> None:
    __tracebackhide__ = True
    # Bind the temporary name, run, and remove it again: the namespace keeps only the cell's
    # own assignment.
    sentinel = object()
    saved = {k: ns.get(k, sentinel) for k in local}
    ns.update(local)
    try:
        exec(code, ns)
    finally:
        for k, v in saved.items():
            if v is sentinel:
                ns.pop(k, None)
            else:
                ns[k] = v


def _eval(code: Any, ns: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    return eval(code, ns)


def _raise_at(err: BaseException, node: ast.stmt, filename: str) -> None:
    """Raise `err` from the cell's own line: the traceback shows that line, not the magic."""
    __tracebackhide__ = True
    stmt = ast.copy_location(ast.Raise(exc=ast.Name("__pl_error", ast.Load()), cause=None), node)
    code = compile(ast.fix_missing_locations(ast.Module(body=[stmt], type_ignores=[])),
                   filename, "exec", dont_inherit=True)
    exec(code, {"__pl_error": err})


def _compare_option(text: str | None) -> tuple[tuple[str, ...], str | None] | None:
    """`--compare interpret,reference=my_ref` -> (executors, reference name)."""
    if text is None:
        return None
    from pallaslab.execute import EXECUTOR_NAMES

    executors: list[str] = []
    reference = None
    for item in (t.strip() for t in text.split(",")):
        name, _, value = item.partition("=")
        name = name.strip().lower()
        if name not in EXECUTOR_NAMES:
            raise UsageError(f"%%pallas: unknown executor {item!r} in --compare: the executors "
                             f"are {', '.join(EXECUTOR_NAMES)} (reference=NAME)")
        if name == "reference":
            if not value.strip():
                raise UsageError("%%pallas: --compare reference needs the reference function: "
                                 "reference=my_ref (a function with the kernel call's signature)")
            reference = value.strip()
        executors.append(name)
    if len(executors) < 2:
        raise UsageError(f"%%pallas: --compare needs at least two executors to compare, e.g. "
                         f"interpret,reference=my_ref; got {text!r}")
    return tuple(executors), reference


def _compare_reference(compare: Any, ns: dict[str, Any]) -> Any:
    """The `reference=NAME` function, looked up (dotted names too) in the user's namespace."""
    if not compare or compare[1] is None:
        return None
    name = compare[1]
    head, *rest = name.split(".")
    if head not in ns:
        raise UsageError(f"%%pallas: --compare reference={name}: no such name in the notebook")
    value = ns[head]
    for attr in rest:
        if not hasattr(value, attr):
            raise UsageError(f"%%pallas: --compare reference={name}: {head} has no {attr!r}")
        value = getattr(value, attr)
    if not callable(value):
        raise UsageError(f"%%pallas: --compare reference={name} is not callable "
                         f"(it is a {type(value).__name__})")
    return value


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext pallaslab`: register the `%%pallas` cell magic."""
    ipython.register_magics(PallasMagics)
