"""`pallaslab` command line: a thin shell over the Python API.

Each subcommand lives in its own module exposing `register(subparsers)`; the module sets
`func` on its parser to a function `(argparse.Namespace) -> int` (the exit status).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommand modules, in the order `pallaslab --help` lists them.
COMMANDS = ("inspect", "check", "lower", "compare", "report")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pallaslab", description="Inspect, check, lower and compare JAX Pallas kernels."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"pallaslab.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
