"""`pallaslab` command line: a thin shell over the Python API.

Each subcommand lives in its own module exposing `register(subparsers)`; the module sets
`func` on its parser to a function `(argparse.Namespace) -> int` (the exit status). Errors
that end a command propagate to `main`, which reports them the same way for every
subcommand (see `_shared.EXIT_STATUS_HELP`).

Its modules: `inspect`, `check`, `lower`, `compare`, `report` and `cache` (one subcommand
each) and `_shared` (loading cases, option checks, exit statuses, one JSON object on stdout
with --json). It is a shell: it may import any layer, and nothing of pallaslab imports it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from pallaslab.cli._shared import (
    Parser,
    UsageError,
    add_exit_status,
    error_json,
    json_only_stdout,
    print_error,
    print_json,
    report_error,
    report_usage,
)

# Subcommand modules, in the order `pallaslab --help` lists them.
COMMANDS = ("inspect", "check", "lower", "compare", "report", "cache")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="pallaslab", description="Inspect, check, lower and compare JAX Pallas kernels.")
    add_exit_status(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"pallaslab.cli.{name}").register(sub)
    for command in sub.choices.values():
        add_exit_status(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Known before parsing, so that even a usage error is one JSON object on stdout.
    json_mode = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
    except UsageError as err:
        return report_usage(err, json_mode)
    try:
        with json_only_stdout(json_mode):
            return int(args.func(args))
    except UsageError as err:  # a combination of options argparse cannot judge alone
        return report_usage(err, json_mode)
    except KeyboardInterrupt:
        if json_mode:
            print_json(error_json("KeyboardInterrupt", "interrupted"))
        print_error("interrupted")
        return 130
    except Exception as err:
        return report_error(err, json_mode)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
