"""`%%pallas`: run the cell; inspect the kernel call on its last line.

    %load_ext pallaslab
    %%pallas --tab grid
    x = jnp.ones((256, 256))
    my_kernel(x)            # the call to inspect; its value is still the cell's value

The magic parses flags, runs the cell's statements in the user's namespace exactly as
IPython would, evaluates the last line's callee and arguments once, calls it, and displays a
`Workbench` for that call. It has no logic of its own beyond that.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring


@magics_class
class PallasMagics(Magics):
    @magic_arguments()
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
                   "interpret,reference=my_ref (my_ref: a function of the notebook with the "
                   "kernel call's signature); executors: interpret, tpu-interpret, "
                   "gpu-interpret, device, reference=NAME")
    @argument("--timeout", default=None, metavar="SECONDS",
              help="time limit of each --compare run (default 300 s, or $PALLASLAB_TIMEOUT); "
                   "a run past it is stopped and reported as timed out")
    @argument("--gpu", action="store_true",
              help="compile Triton kernels for a100 and h100 and show shared memory, registers "
                   "and blocks per SM in the Memory tab")
    @cell_magic
    def pallas(self, line: str, cell: str) -> Any:
        """Run the cell and open the pallaslab workbench on the kernel call on its last line.

        The last line must be the call that launches the kernel(s), e.g. `matmul(x, y)` (or
        `out = matmul(x, y)`); its value stays the cell's value.
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
            raise UsageError("%%pallas: the cell is empty; its last line must be the kernel "
                             "call to inspect, e.g. `matmul(x, y)`")
        *body, last = tree.body
        call, target = _last_call(last)
        ns = shell.user_ns
        if body:
            module = ast.Module(body=body, type_ignores=[])
            _run(compile(module, filename, "exec", flags=shell.compile.flags, dont_inherit=True),
                 ns)
        fn, call_args, call_kwargs = _evaluate_call(call, filename, shell.compile.flags, ns)
        options["reference"] = _compare_reference(options["compare"], ns)
        value = _call(fn, call_args, call_kwargs, call, filename, ns)
        if target is not None:  # `out = kernel(...)`: assign as the plain cell would
            assign = ast.Module(body=[ast.Assign(targets=target, value=ast.Name("__pl_value",
                                                                                ast.Load()))],
                                type_ignores=[])
            ast.fix_missing_locations(assign)
            _exec_with(compile(assign, filename, "exec", dont_inherit=True), ns,
                       {"__pl_value": value})
        _show(fn, call_args, call_kwargs, options)
        return value if target is None else None


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


def _last_call(node: ast.stmt) -> tuple[ast.Call, list[ast.expr] | None]:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return node.value, None
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
        return node.value, node.targets
    shown = ast.unparse(node).splitlines()[0] if hasattr(ast, "unparse") else type(node).__name__
    raise UsageError(f"%%pallas: the cell's last line must be the kernel call to inspect, e.g. "
                     f"`matmul(x, y)`; it is `{shown}`")


def _evaluate_call(call: ast.Call, filename: str, flags: int, ns: dict[str, Any]
                   ) -> tuple[Any, list[Any], dict[str, Any]]:
    """The callee, positional and keyword arguments of the call, each evaluated once."""

    __tracebackhide__ = True

    def ev(expr: ast.expr) -> Any:
        __tracebackhide__ = True
        code = compile(ast.fix_missing_locations(ast.Expression(expr)), filename, "eval",
                       flags=flags, dont_inherit=True)
        return _eval(code, ns)

    fn = ev(call.func)
    args: list[Any] = []
    for a in call.args:
        if isinstance(a, ast.Starred):
            args.extend(ev(a.value))
        else:
            args.append(ev(a))
    kwargs: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            kwargs.update(ev(kw.value))
        else:
            kwargs[kw.arg] = ev(kw.value)
    return fn, args, kwargs


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


def _call(fn: Any, args: list[Any], kwargs: dict[str, Any], call: ast.Call, filename: str,
          ns: dict[str, Any]) -> Any:
    """Call fn from code compiled at the cell's own line, so tracebacks show that line."""
    __tracebackhide__ = True
    expr = ast.parse("__pl_fn(*__pl_args, **__pl_kwargs)", mode="eval")
    for node in ast.walk(expr):
        if isinstance(node, (ast.expr, ast.keyword)):
            ast.copy_location(node, call)
    code = compile(expr, filename, "eval", dont_inherit=True)
    # The temporaries live in a separate locals mapping: the user's namespace never sees them.
    return eval(code, ns, {"__pl_fn": fn, "__pl_args": args, "__pl_kwargs": kwargs})


def _show(fn: Any, args: list[Any], kwargs: dict[str, Any], options: dict[str, Any]) -> None:
    from IPython.display import display

    from pallaslab.errors import PallasLabError
    from pallaslab.model import capture
    from pallaslab.workbench import Workbench

    try:
        cap = capture(fn, *args, **kwargs)
        compared = options.get("compare")
        wb = Workbench(cap, chips=options["chips"], targets=options["targets"],
                       tab=options["tab"] or ("compare" if compared else None),
                       kernel=options["kernel"], options=options["extra"])
        if compared:
            from pallaslab.views.compare import attach_comparison, user_call

            attach_comparison(wb, executors=compared[0], reference=options.get("reference"),
                              call=user_call(fn, args, kwargs), timeout=options["timeout"])
    except PallasLabError as err:
        raise UsageError(f"%%pallas: {err}") from None
    display(wb)


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
