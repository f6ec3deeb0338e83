"""`pallaslab lower CASE --target T [--compile] [--vmem-exact] [--json]`: lowered IR per kernel.

Exit status: 0 when every kernel lowers (and compiles, with --compile), 1 when one does not,
2 when the case cannot be loaded or a dependency is missing.
"""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.syntax import Syntax

from pallaslab.cli._shared import console, fail, load_and_capture, print_json
from pallaslab.cli.inspect import SEVERITY_STYLE
from pallaslab.errors import PallasLabError

LEXERS = {"llir": "llvm", "ptx": "ptx"}


def register(sub: argparse._SubParsersAction) -> None:
    from lowering.targets import TARGETS

    p = sub.add_parser("lower", help="lower (and compile) every kernel for a TPU or GPU target")
    p.add_argument("case", help="path/to/file.py:function returning (fn, args[, kwargs])")
    p.add_argument("--target", default="tpu-v5e", metavar="T",
                   help=f"one of: {', '.join(TARGETS)} (default tpu-v5e)")
    p.add_argument("--compile", action="store_true",
                   help="also run the real compiler (libtpu for TPU, triton for GPU)")
    p.add_argument("--vmem-exact", action="store_true",
                   help="TPU: find the smallest vmem_limit_bytes the compiler accepts")
    p.add_argument("--stage", action="append", default=None, metavar="NAME",
                   help="print this stage's IR (repeatable; 'all' for every stage)")
    p.add_argument("--no-cache", action="store_true", help="ignore the on-disk result cache")
    p.add_argument("--json", action="store_true", help="print the stable JSON form")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lowering import lower

    try:
        _, cap = load_and_capture(args.case)
        result = lower(cap, target=args.target, compile=args.compile,
                       vmem_exact=args.vmem_exact, use_cache=not args.no_cache)
    except PallasLabError as err:
        return fail(err)
    if args.json:
        print_json(result.to_json())
    else:
        out = console()
        for kernel in result.kernels:
            render(kernel, result.target, args.stage, out)
    return 0 if result.ok else 1


def render(kernel, target: str, stages: list[str] | None, out) -> None:
    mark = "[green]ok[/]" if kernel.ok else "[bold red]FAIL[/]"
    what = "compiled" if kernel.compiled else "lowered"
    out.print(f"{mark}  [bold]kernel {kernel.index}: {escape(kernel.name)}[/]  {what} for "
              f"{target} via {kernel.backend}{'  [dim](cached)[/]' if kernel.cached else ''}")
    for d in kernel.diagnostics:
        out.print(f"    [{SEVERITY_STYLE[d.severity]}]{d.severity} {d.code}[/]: "
                  f"{escape(d.message)}")
    res = {k: v for k, v in kernel.resources.to_json().items() if v is not None}
    if res:
        out.print("    resources: " + ", ".join(f"{k}={v:,}" for k, v in res.items()))
    out.print("    stages: " + ", ".join(
        f"{s.name} [dim]({len(s.text.splitlines())} lines)[/]" for s in kernel.stages))
    wanted = [s for s in kernel.stages
              if stages and ("all" in stages or s.name in stages)]
    for s in wanted:
        out.print(f"\n[bold]--- {escape(s.name)} ---[/]")
        out.print(Syntax(s.text, LEXERS.get(s.name, "text"), line_numbers=True,
                         word_wrap=False))
    out.print()
