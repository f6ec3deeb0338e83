"""`pallaslab check CASE... [--target T...] [--compile]`: exit 1 on any error.

Errors are error-severity findings of the tiling analysis (judged by each target's rules) and,
for every `--target`, a kernel that fails to lower (or, with `--compile`, to compile) for it.
"""

from __future__ import annotations

import argparse

from rich.markup import escape

from pallaslab.analysis.inspection import inspect_capture
from pallaslab.analysis.occupancy import DEFAULT_CHIPS
from pallaslab.cli._shared import backend_for_target, console, fail, load_and_capture
from pallaslab.cli.inspect import SEVERITY_STYLE
from pallaslab.errors import PallasLabError
from pallaslab.model import Capture


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="fail (exit 1) on errors: races, uncovered output, ...")
    p.add_argument("cases", nargs="+", metavar="CASE", help="path/to/file.py:function")
    p.add_argument("--target", action="append", default=[], metavar="T",
                   help="judge by this target's rules and lower for it (tpu-v5e, gpu-h100, ...;"
                        " repeatable)")
    p.add_argument("--compile", action="store_true",
                   help="also compile for each target with the real compiler (libtpu, triton)")
    p.add_argument("--warnings", action="store_true", help="also list warnings and infos")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = console()
    errors = 0
    for spec in args.cases:
        try:
            _, cap = load_and_capture(spec)
            for target in args.target or [None]:
                errors += _check(out, spec, cap, target, args)
        except PallasLabError as err:
            fail(err)
            errors += 1
    out.print(f"{errors} error(s)")
    return 1 if errors else 0


def _check(out, spec: str, cap: Capture, target: str | None, args: argparse.Namespace) -> int:
    backend = backend_for_target(target) if target else None
    lowered = _lower(cap, target, args.compile) if target else None
    errors = 0
    chips = (target.removeprefix("tpu-"),) if target and backend == "tpu" else DEFAULT_CHIPS
    for insp in inspect_capture(cap, backend=backend, chips=chips):
        lines = [(f.severity, f.code, f.message) for f in insp.findings
                 if args.warnings or f.severity == "error"]
        failed = len(insp.errors)
        if lowered is not None:
            kl = lowered[insp.kernel.index]
            lines += [(d.severity, d.code, d.message) for d in kl.diagnostics
                      if args.warnings or d.severity == "error"]
            failed += 0 if kl.ok else max(1, len(kl.errors))
        label = f"{escape(spec)} [{insp.kernel.index}] {escape(insp.kernel.name)}"
        if target:
            label += f" on {target}"
        out.print(f"{'[bold red]FAIL[/]' if failed else '[green]ok[/]'}  {label}")
        for severity, code, message in lines:
            out.print(f"      [{SEVERITY_STYLE.get(severity, 'cyan')}]{code}[/]: "
                      f"{escape(message)}")
        errors += failed
    return errors


def _lower(cap: Capture, target: str, compile: bool):
    from lowering import lower

    return lower(cap, target=target, compile=compile)
