"""`pallaslab compare CASE... --executors interpret,tpu-interpret[,reference] [--reference F:FN]`:
run cases under several executors and compare them (several cases share one process, so one
warm executor worker).

Exit status: 0 when every pair agrees and nothing was found; 1 when a pair mismatches or the
kernel was found wrong (an error finding of a run, even one that stopped it, such as a
deadlock, or of the static analysis, such as `block-out-of-bounds`); 2 when the comparison is
incomplete for a reason that is not the kernel's (fewer than two executors ran, or a named
executor or the reference did not run: unavailable here, failed, stopped by the time limit)
or the case cannot be loaded. With several cases, the worst.

The executors (and so JAX) are imported when the command runs or its help is shown, not to
parse the command line.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING, Any

from pallaslab.cli._many import CaseOutcome, run_cases
from pallaslab.cli._shared import (
    CASES_HELP,
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    console,
    device_count,
    error_json,
    executor_list,
    fill_help_later,
    nonnegative_float,
    positive_float,
    print_error,
    safe,
    simulate_cpu_devices,
)

if TYPE_CHECKING:
    import numpy as np
    from rich.table import Table

    from pallaslab.execute import Comparison
    from pallaslab.execute.comparing.comparison import OutputComparison
    from pallaslab.execute.comparing.pair import PairComparison

STATUS_STYLE = {"ran": "green", "unavailable": "yellow", "failed": "bold red",
                "timed-out": "bold red"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="run under several executors and compare the outputs",
                       description="Run a case under several executors and compare every "
                                   "pair of outputs; a mismatch names the grid programs that "
                                   "wrote the wrong blocks.")
    p.add_argument("cases", nargs="+", metavar="CASE", help=CASES_HELP)
    executors = p.add_argument(
        "--executors", default=None, metavar="E1,E2,...", type=executors_arg,
        help="two or more (or one with --reference), comma-separated, from: {names} "
             "(default: the interpreter that can run the kernels, against --reference if "
             "given, else interpret against tpu-interpret; the result's notes say which). "
             "With --reference, 'reference' is added when not listed. Every executor named "
             "must run, else the comparison is incomplete (exit 2)")
    p.add_argument("--reference", metavar="FILE.py:FUNC",
                   help="a pure-JAX function with the kernel function's signature")
    p.add_argument("--rtol", type=nonnegative_float, default=None,
                   help="relative tolerance (default: by dtype, see "
                        "pallaslab.execute.comparing.comparison)")
    p.add_argument("--atol", type=nonnegative_float, default=None,
                   help="absolute tolerance (default: rtol x max |b|)")
    p.add_argument("--timeout", type=positive_float, default=None, metavar="SECONDS",
                   help="time limit of each executor's run (default: pallaslab.compare's; "
                        "a run stopped by it makes the comparison incomplete, exit 2, when "
                        "fewer than two executors ran)")
    p.add_argument("--devices", type=device_count, default=None, metavar="N",
                   help="run on N simulated CPU devices (a worker process configured for them): "
                        "kernels inside shard_map that talk to other devices (remote DMAs, "
                        "semaphores) run under tpu-interpret; build the mesh from "
                        "jax.devices()")
    p.add_argument("--equal-nan", action="store_true",
                   help="count NaN == NaN as equal (by default NaN equals nothing: output no "
                        "program wrote is NaN under the interpreters)")
    p.add_argument("--json", action="store_true", help="print the stable JSON form (several "
                   "cases: {\"cases\": [...]})")
    p.set_defaults(func=run)

    def fill_help(parser: argparse.ArgumentParser) -> None:
        from pallaslab.execute import executor_names

        executors.help = (executors.help or "").replace(
            "{names}", ", ".join(executor_names()))
        parser.epilog = "\n\n".join(filter(None, (executors_epilog(), parser.epilog)))

    fill_help_later(p, fill_help)


def executors_arg(text: str) -> list[str]:
    """--executors: as `executor_list`, but one name is accepted (--reference, when given,
    is the second; `run` refuses one name without it)."""
    from pallaslab.execute import executor_names

    names = [e.strip() for e in text.split(",") if e.strip()]
    if len(names) == 1 and names[0] in executor_names():
        return names
    return executor_list(text)


def run(args: argparse.Namespace) -> int:
    if args.executors is not None and len(args.executors) == 1 and not args.reference:
        raise UsageError(f"argument --executors: a comparison needs at least two executors, "
                         f"got {args.executors[0]!r} alone; name another, or give --reference "
                         "FILE.py:FUNC (the reference is then the second)",
                         prog="pallaslab compare")
    if args.executors is not None and "reference" in args.executors and not args.reference:
        raise UsageError("argument --executors: the 'reference' executor needs --reference "
                         "FILE.py:FUNC (a pure-JAX function with the kernel function's "
                         "signature)", prog="pallaslab compare")
    if args.devices:  # traced here as on N devices too (a case may skip its kernel on one)
        simulate_cpu_devices(args.devices)
    from pallaslab.cases import load_function

    reference = load_function(args.reference) if args.reference else None
    return run_cases(args.cases, args.json, lambda spec: compare_case(spec, reference, args))


def compare_case(spec: str, reference: Any, args: argparse.Namespace) -> CaseOutcome:
    from pallaslab.cases import load_case, tracing_user_code
    from pallaslab.execute import compare

    case = load_case(spec)
    with tracing_user_code(case):  # the user's own tracing errors show their traceback
        result = compare(case.fn, *case.args, executors=args.executors, reference=reference,
                         rtol=args.rtol, atol=args.atol, timeout=args.timeout,
                         equal_nan=args.equal_nan, devices=args.devices, **case.kwargs)
    incomplete = result.verdict() if result.outcome == "incomplete" else None
    payload = result.to_json()
    if incomplete:
        payload.update(error_json("IncompleteComparison", incomplete))
    if not args.json:
        render(result)
    if incomplete:
        print_error(incomplete)
        return CaseOutcome(EXIT_ERROR, payload)
    # A mismatch, or the kernel's error (a race, unwritten output, a deadlock): exit 1.
    return CaseOutcome(EXIT_OK if result.passed else EXIT_FAILED, payload)


def executors_epilog() -> str:
    """The registered executors, one per line with its description (`ExecutorSpec`)."""
    from pallaslab.execute import executor_specs

    specs = executor_specs()
    width = max((len(s.name) for s in specs), default=0)
    indent = " " * (width + 4)
    lines = [textwrap.fill(s.description, 79, initial_indent=f"  {s.name:<{width}}  ",
                           subsequent_indent=indent) for s in specs]
    return "executors:\n" + "\n".join(lines)


def render(result: Comparison) -> None:
    out = console()
    by_name = {r.executor: r for r in result.results}
    for note in result.notes:
        out.print(f"[dim]note: {safe(note)}[/]")
    for name, status in result.statuses.items():
        style = STATUS_STYLE.get(status.status, "bold red")
        r = by_name.get(name)
        if status.status == "ran" and r is not None:
            out.print(f"[{style}]{safe(name)}[/]: {r.wall_time * 1e3:.1f} ms "
                      f"(compile {r.compile_time * 1e3:.0f} ms)")
        else:
            out.print(f"[{style}]{safe(name)}: {status.status}[/] ({safe(status.reason or '')})")
        for f in r.findings if r is not None else ():
            if f"{f.code}: {f.message}" != status.reason:  # else just said, as the reason
                out.print(f"    [bold red]{safe(f.code)}[/]: {safe(f.message)}")
    for s in result.static_findings:
        out.print(f"[bold red]static analysis of {safe(s.name)}[/] (as pallaslab check):")
        out.print(f"    [bold red]{safe(s.finding.code)}[/]: {safe(s.finding.message)}")
    for o in (o for o in result.outputs if o.pairs):  # no pair ran: nothing to tabulate
        out.print(_table(o))
    for warning in result.warnings:
        out.print(f"[yellow]warning: {safe(warning)}[/]")
    for line in result.cause_lines():  # why a mismatch is wrong, one cause a line
        out.print(f"[bold red]cause[/] {safe(line)}")
    if result.outcome != "incomplete":  # (incomplete: said on stderr, as the error)
        style = "green" if result.passed else "bold red"
        out.print(f"[{style}]{safe(result.verdict())}[/]")


def _table(o: OutputComparison) -> Table:
    from rich.table import Table

    nans = any(p.nan_a or p.nan_b for p in o.pairs)
    table = Table(title=f"{safe(o.origin)} {o.dtype}{list(o.shape)}", show_edge=False,
                  header_style="bold")
    columns = ["a", "b", "max abs", "max rel", "max ulp", *(["NaN a / b"] if nans else []),
               "mismatched", "allclose", "programs"]
    for col in columns:
        table.add_column(col)
    for p in o.pairs:
        programs = ", ".join(str(pr) for pr in p.programs[:8])
        if len(p.programs) > 8:
            programs += f", ... ({len(p.programs)})"
        abs_err, rel_err, ulp = pair_figures(p, o.dtype)
        table.add_row(safe(p.a), safe(p.b), abs_err, rel_err, ulp,
                      *([f"{p.nan_a:,} / {p.nan_b:,}"] if nans else []),
                      f"{p.mismatched_elements:,}",
                      "[green]yes[/]" if p.allclose else "[bold red]no[/]",
                      safe(programs) or "-")
    return table


def pair_figures(p: PairComparison, dtype: np.dtype) -> tuple[str, str, str]:
    """max abs, max rel and max ULP as shown: "nan" where a NaN on one side makes the error
    infinite, "-" for ULP of integer outputs (their |a - b| is max abs already)."""
    import numpy as np

    from pallaslab.execute.comparing.pair import is_float

    nan = bool(p.nan_a or p.nan_b)

    def figure(x: float) -> str:
        return "nan" if nan and not np.isfinite(x) else f"{x:.3g}"

    ulp = "-" if not is_float(dtype) or (nan and not np.isfinite(p.max_abs_err)) else \
        f"{p.max_ulp:,}"
    return figure(p.max_abs_err), figure(p.max_rel_err), ulp
