"""`pallaslab check CASE... [--target T...]`: exit 1 when any kernel has an error finding."""

from __future__ import annotations

import argparse

from rich.markup import escape

from pallaslab.analysis.inspection import inspect_capture
from pallaslab.cli._shared import backend_for_target, console, fail, load_and_capture
from pallaslab.cli.inspect import SEVERITY_STYLE
from pallaslab.errors import PallasLabError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="fail (exit 1) on errors: races, uncovered output, ...")
    p.add_argument("cases", nargs="+", metavar="CASE", help="path/to/file.py:function")
    p.add_argument("--target", action="append", default=[], metavar="T",
                   help="judge by this target's rules (tpu-v5e, gpu-h100, ...; repeatable)")
    p.add_argument("--warnings", action="store_true", help="also list warnings and infos")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = console()
    errors = 0
    backends: list[str | None] = [*sorted({backend_for_target(t) for t in args.target})] or [None]
    for spec in args.cases:
        try:
            _, cap = load_and_capture(spec)
        except PallasLabError as err:
            fail(err)
            errors += 1
            continue
        for backend in backends:
            for insp in inspect_capture(cap, backend=backend):
                shown = [f for f in insp.findings if args.warnings or f.severity == "error"]
                label = f"{escape(spec)} [{insp.kernel.index}] {escape(insp.kernel.name)}"
                if backend:
                    label += f" ({backend} rules)"
                mark = "[bold red]FAIL[/]" if insp.errors else "[green]ok[/]"
                out.print(f"{mark}  {label}")
                for f in shown:
                    out.print(f"      [{SEVERITY_STYLE[f.severity]}]{f.code}[/]: "
                              f"{escape(f.message)}")
                errors += len(insp.errors)
    out.print(f"{errors} error(s)")
    return 1 if errors else 0
