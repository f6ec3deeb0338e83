"""`pallaslab report CASE -o report.html`: one self-contained, offline HTML file, every view."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from pallaslab.cli._shared import console, fail, load_and_capture
from pallaslab.errors import PallasLabError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write one offline HTML file with every view of every kernel")
    p.add_argument("case", help="path/to/file.py:function returning (fn, args[, kwargs])")
    p.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="where to write the HTML (default: report.html)")
    p.add_argument("--chip", action="append", default=[], metavar="CHIP",
                   help="TPU chip for chip-specific views (repeatable)")
    p.add_argument("--target", action="append", default=[], metavar="T",
                   help="judge findings by this target's rules (tpu-v5e, gpu-h100, ...)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pallaslab.workbench import Workbench

    try:
        _, cap = load_and_capture(args.case)
        wb = Workbench(cap, chips=args.chip, targets=args.target)
        html = wb.report(title=args.case)
    except PallasLabError as err:
        return fail(err)
    out = Path(args.output)
    try:
        out.write_text(html, encoding="utf-8")
    except OSError as err:
        console(stderr=True).print(f"[bold red]error:[/] cannot write {escape(args.output)}: "
                                   f"{escape(err.strerror or str(err))}")
        return 2
    size = out.stat().st_size
    console().print(f"wrote {escape(str(out))} ({size / 1024:,.0f} KiB, "
                    f"{len(wb.contexts)} kernel(s), {len(wb.findings)} finding(s))")
    return 0
