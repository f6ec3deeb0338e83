"""`pallaslab compare CASE --executors interpret,tpu-interpret[,reference] [--reference F:FN]`:
run a case under several executors and compare them; exit 1 when any pair mismatches."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from pallaslab.cases import load_case, load_function
from pallaslab.cli._shared import console, fail, print_json
from pallaslab.errors import PallasLabError
from pallaslab.execute import EXECUTOR_NAMES, Comparison, compare


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="run under several executors and compare the outputs")
    p.add_argument("case", help="path/to/file.py:function returning (fn, args[, kwargs])")
    p.add_argument("--executors", default="interpret,reference", metavar="E1,E2,...",
                   help=f"comma-separated, from: {', '.join(EXECUTOR_NAMES)} "
                        "(default: interpret,reference)")
    p.add_argument("--reference", metavar="FILE.py:FUNC",
                   help="a pure-JAX function with the kernel function's signature")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: "
                   "by dtype, see pallaslab.execute.comparison)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance (default: rtol x max |b|)")
    p.add_argument("--json", action="store_true", help="print the stable JSON form")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    executors = [e.strip() for e in args.executors.split(",") if e.strip()]
    try:
        reference = load_function(args.reference) if args.reference else None
        case = load_case(args.case)
        result = compare(case.fn, *case.args, executors=executors, reference=reference,
                         rtol=args.rtol, atol=args.atol, **case.kwargs)
    except PallasLabError as err:
        return fail(err)
    if args.json:
        print_json(result.to_json())
    else:
        render(result)
    return 0 if result.allclose else 1


def render(result: Comparison) -> None:
    out = console()
    for r in result.results:
        if r.unavailable:
            out.print(f"[yellow]{r.executor}: unavailable[/] ({escape(r.unavailable)})")
        elif r.error:
            out.print(f"[bold red]{r.executor}: failed[/] {escape(r.error)}")
        else:
            out.print(f"[green]{r.executor}[/]: {r.wall_time * 1e3:.1f} ms "
                      f"(compile {r.compile_time * 1e3:.0f} ms)")
        for f in r.findings:
            out.print(f"    [bold red]{f.code}[/]: {escape(f.message)}")
    for o in result.outputs:
        table = Table(title=f"{o.origin} {o.dtype}{list(o.shape)}", show_edge=False,
                      header_style="bold")
        for col in ("a", "b", "max abs", "max rel", "max ulp", "mismatched", "allclose",
                    "programs"):
            table.add_column(col)
        for p in o.pairs:
            programs = ", ".join(str(pr) for pr in p.programs[:8])
            if len(p.programs) > 8:
                programs += f", ... ({len(p.programs)})"
            table.add_row(p.a, p.b, f"{p.max_abs_err:.3g}", f"{p.max_rel_err:.3g}",
                          str(p.max_ulp), str(p.mismatched_elements),
                          "[green]yes[/]" if p.allclose else "[bold red]no[/]",
                          escape(programs) or "-")
        out.print(table)
