"""`pallaslab` command line: a thin shell over the Python API.

Each subcommand lives in its own module exposing `register(subparsers)`; the module sets
`func` on its parser to a function `(argparse.Namespace) -> int` (the exit status). Errors
that end a command propagate to `main`, which reports them the same way for every
subcommand (see `_shared.EXIT_STATUS_HELP`).

Its modules: `inspect`, `check`, `lower`, `compare`, `tune`, `report` and `cache` (one subcommand
each), `_shared` (loading cases, option checks, exit statuses, one JSON object on stdout
with --json) and `_many` (several cases in one call). It is a shell: it may import any layer,
and nothing of pallaslab imports it. Parsing the command line imports no JAX (each
subcommand imports what it runs when it runs), so `--help` and usage errors are quick.

Signals: Ctrl-C stops the run and says which executor and program it stopped (130); SIGTERM
and SIGHUP (`timeout`, a CI cancellation, `kill`, a closed terminal) kill the executor
workers, remove the temporary directory and exit 128 + the signal's number. A Python handler
runs only when the main thread returns to Python, so a backstop thread, woken through
`signal.set_wakeup_fd`, kills the workers at once and ends the process if the main thread
has not finished within `SIGNAL_GRACE` seconds (a kernel spinning in this process).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence

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

ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
SIGNAL_GRACE = 5.0  # seconds the main thread has to finish after SIGTERM/SIGHUP


class Terminated(BaseException):
    """SIGTERM or SIGHUP ended the command (a BaseException: nothing may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


# Subcommand modules, in the order `pallaslab --help` lists them.
COMMANDS = ("inspect", "check", "lower", "compare", "tune", "report", "cache")


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
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    # Known before parsing, so that even a usage error is one JSON object on stdout.
    json_mode = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
    except UsageError as err:
        return report_usage(err, json_mode)
    # After parsing: enabling JAX's cache imports JAX, which --help and usage errors never need.
    importlib.import_module("pallaslab.cli.cache").enable_jax_cache(own_process=own_process)
    try:
        with ended_by_signals(), json_only_stdout(json_mode):
            return int(args.func(args))
    except UsageError as err:  # a combination of options argparse cannot judge alone
        return report_usage(err, json_mode)
    except KeyboardInterrupt as err:  # its message names the executor and program stopped
        return _report_stop("KeyboardInterrupt", f"interrupted: {err}" if str(err)
                            else "interrupted", 130, json_mode)
    except Terminated as err:
        return _report_stop("Terminated", str(err), 128 + err.signum, json_mode)
    except Exception as err:
        return report_error(err, json_mode)


def _report_stop(err_type: str, message: str, status: int, json_mode: bool) -> int:
    _stop_workers()
    if json_mode:
        print_json(error_json(err_type, message))
    print_error(message)
    return status


@contextlib.contextmanager
def ended_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise `Terminated` in the main thread, backed by a thread that ends
    the process if the main thread cannot get there (see the module's docstring)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return
    previous = {signum: signal.getsignal(signum) for signum in ENDING_SIGNALS}
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    finished = threading.Event()

    def handler(signum: int, frame: object) -> None:
        for ending in ENDING_SIGNALS:  # a second signal ends the process at once
            signal.signal(ending, signal.SIG_DFL)
        raise Terminated(signum)

    old_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for signum in ENDING_SIGNALS:
        signal.signal(signum, handler)
    backstop = threading.Thread(target=_backstop, args=(read_end, finished),
                                name="pallaslab-signal-backstop", daemon=True)
    backstop.start()
    try:
        yield
    finally:
        finished.set()
        signal.set_wakeup_fd(old_wakeup)
        for signum, action in previous.items():
            signal.signal(signum, action)
        os.close(write_end)  # the backstop reads EOF and closes its end
        backstop.join(timeout=1.0)


def _backstop(read_end: int, finished: threading.Event) -> None:
    try:
        while data := os.read(read_end, 1):
            if data[0] in ENDING_SIGNALS:
                _stop_workers()
                if not finished.wait(SIGNAL_GRACE):
                    _remove_tmpdir()
                    os._exit(128 + data[0])
                return
    finally:
        os.close(read_end)


def _stop_workers() -> None:
    # Workers exist only if the executors were imported; importing them here would be slow.
    isolation = sys.modules.get("pallaslab.execute.worker.isolation")
    if isolation is not None:
        isolation.shutdown_worker()


def _remove_tmpdir() -> None:
    from pallaslab.util.tempdir import remove_session_tmpdir

    remove_session_tmpdir()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
