"""`pallaslab report CASE -o report.html`: one self-contained, offline HTML file, every view."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pallaslab.cli._shared import (
    chip_name,
    console,
    load_and_capture,
    print_json,
    safe,
    target_name,
)
from pallaslab.errors import PallasLabError


class ReportWriteError(PallasLabError, OSError):
    """The report's output file cannot be written."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write one offline HTML file with every view of every kernel",
                       description="Write one self-contained, offline HTML file with every "
                                   "view of every kernel of a case.")
    p.add_argument("case", help="path/to/file.py:function returning (fn, args[, kwargs])")
    p.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="where to write the HTML (default: report.html)")
    p.add_argument("--chip", action="append", default=[], metavar="CHIP", type=chip_name,
                   help="TPU chip for chip-specific views (repeatable)")
    p.add_argument("--target", action="append", default=[], metavar="T", type=target_name,
                   help="judge findings by this target's rules (tpu-v5e, gpu-h100, ...)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: the file written, its size, kernels, findings")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pallaslab.workbench import Workbench

    out = Path(args.output)
    _check_writable(out)  # before the work, not after it
    _, cap = load_and_capture(args.case)
    wb = Workbench(cap, chips=args.chip, targets=args.target)
    html = wb.report(title=args.case)
    try:
        out.write_text(html, encoding="utf-8")
    except OSError as err:
        raise _cannot_write(out, err.strerror or str(err)) from err
    size = out.stat().st_size
    if args.json:
        print_json({"output": str(out), "bytes": size, "kernels": len(wb.contexts),
                    "findings": len(wb.findings)})
    else:
        console().print(f"wrote {safe(out)} ({size / 1024:,.0f} KiB, "
                        f"{len(wb.contexts)} kernel(s), {len(wb.findings)} finding(s))")
    return 0


def _check_writable(path: Path) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise _cannot_write(path, "it is a directory")
    if not parent.is_dir():
        raise _cannot_write(path, f"no such directory {str(parent)!r}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise _cannot_write(path, "permission denied")


def _cannot_write(path: Path, why: str) -> ReportWriteError:
    return ReportWriteError(f"cannot write the report to {str(path)!r}: {why}")
