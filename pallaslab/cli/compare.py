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
    fill_help_later,
    nonnegative_float,
    positive_float,
    print_error,
    safe,
    simulate_cpu_devices,
)

if TYPE_CHECKING:
    from pallaslab.execute import Comparison
    from pallaslab.execute.registry import ExecutorList


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="run under several executors and compare the outputs",
                       description="Run a case under several executors and compare every "
                                   "pair of outputs; a mismatch names the grid programs that "
                                   "wrote the wrong blocks.")
    p.add_argument("cases", nargs="+", metavar="CASE", help=CASES_HELP)
    p.add_argument(
        "--executors", default=None, metavar="E1,E2,...", type=executors_arg,
        help="two or more (or one with --reference), comma-separated, from: {names} "
             "(default: {default}; the result's notes say which). With --reference, "
             "'{reference}' is added when not listed. Every executor named must run, else the "
             "comparison is incomplete (exit 2)")
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
                        "semaphores) run under {on_devices}; build the mesh from "
                        "jax.devices()")
    p.add_argument("--equal-nan", action="store_true",
                   help="count NaN == NaN as equal (by default NaN equals nothing: output no "
                        "program wrote is NaN under the interpreters)")
    p.add_argument("--json", action="store_true", help="print the stable JSON form (several "
                   "cases: {\"cases\": [...]})")
    p.set_defaults(func=run)

    def fill_help(parser: argparse.ArgumentParser) -> None:
        from pallaslab.execute.registry import executor_help_names

        for action in parser._actions:  # the executors' names, from the registry
            for key, text in executor_help_names().items():
                action.help = action.help and action.help.replace(f"{{{key}}}", text)
        parser.epilog = "\n\n".join(filter(None, (executors_epilog(), parser.epilog)))

    fill_help_later(p, fill_help)


def executors_arg(text: str) -> ExecutorList:
    """--executors: an `ExecutorList` (`run` checks its count once --reference is known)."""
    from pallaslab.execute.registry import ExecutorError, ExecutorList

    try:
        return ExecutorList.parse(text)
    except ExecutorError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def check_executors(args: argparse.Namespace) -> None:
    """The --executors, with the reference --reference adds, are two or more, and the
    reference executor is named only with --reference."""
    from pallaslab.execute.registry import ExecutorError, executor_spec

    if args.executors is None:
        return
    try:
        args.executors.with_reference(args.reference)[0].compared()
    except ExecutorError as err:
        raise UsageError(f"argument --executors: {err}; or give --reference FILE.py:FUNC "
                         "(the reference is then the second)", prog="pallaslab compare"
                         ) from None
    for name in args.executors.names:
        if executor_spec(name).takes_reference and not args.reference:
            raise UsageError(f"argument --executors: the {name!r} executor needs --reference "
                             "FILE.py:FUNC (a pure-JAX function with the kernel function's "
                             "signature)", prog="pallaslab compare")


def run(args: argparse.Namespace) -> int:
    check_executors(args)
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
    """The comparison's one tree (`compare_tree`, what the Compare view shows) on the terminal,
    then the verdict (incomplete: said on stderr, as the error)."""
    from pallaslab.cli._parts import to_rich
    from pallaslab.views.compare_tree import compare_tree

    out = console()
    out.print(to_rich(compare_tree(result, "")))
    if result.outcome != "incomplete":
        style = "green" if result.passed else "bold red"
        out.print(f"[{style}]{safe(result.verdict())}[/]")
