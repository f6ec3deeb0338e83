"""Pieces the subcommands share: exit codes, the console and safe text, option validators,
loading cases, and reporting errors (one JSON object on stdout with --json)."""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import json
import math
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any, NoReturn, cast

from pallaslab import settings
from pallaslab.cases import Case, CaseCodeError, capture_case, load_case
from pallaslab.errors import (
    PallasLabError,
    SettingError,
    UntestedJaxError,
    untested_jax_failure,
)
from pallaslab.util.text import visible

if TYPE_CHECKING:  # the model imports JAX, rich takes 70 ms: parsing needs neither
    from rich.console import Console

    from pallaslab.model import Capture

# Exit statuses, the same in every subcommand.
EXIT_OK = 0
EXIT_FAILED = 1  # error findings, a mismatch, a kernel that failed to lower or compile
EXIT_ERROR = 2  # usage, a case that cannot be loaded, a tool error, incomplete, time limit

EXIT_STATUS_HELP = """exit status:
  0  clean (inspect and report: whatever they found; check gates on findings)
  1  error findings (check, compare), a mismatch, or a kernel that failed to
     lower or compile
  2  usage error, a case that cannot be loaded, a tool error (e.g. a missing
     compiler), an incomplete comparison or a time limit
with --json, stdout is always one JSON object; on failure
{"error": {"type": ..., "message": ...}}"""

CASES_HELP = ("path/to/file.py:function returning (fn, args[, kwargs]); several, a file "
              "(its every case), a directory (its *.py files) or a glob run in one process")

# Stages a lowering can produce (lowering/cross.py, tpu_compile.py, triton_compile.py);
# "mosaic[N]" is a kernel's N-th Mosaic module, "mosaic:PASS" the module after a compiler pass.
STAGES = ("jaxpr", "mosaic", "mosaic-gpu", "ttir", "ttgir", "llir", "ptx", "sass")
_STAGE_FORMS = re.compile(r"mosaic\[\d+\]|mosaic:[\w.-]+")


# --- usage errors ------------------------------------------------------------------------


class UsageError(Exception):
    """A command line that does not make sense; reported like argparse's own errors."""

    def __init__(self, message: str, prog: str = "pallaslab", usage: str = "") -> None:
        super().__init__(message)
        self.prog = prog
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises `UsageError` (so `--json` can report it as JSON)
    instead of printing and exiting; subcommand parsers inherit this class."""

    # Help text that needs a heavy import (the executor registry imports JAX) is filled in
    # by this function when the help is first shown, never while parsing.
    fill_help: Callable[[argparse.ArgumentParser], None] | None = None

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog, self.format_usage())

    def format_help(self) -> str:
        if self.fill_help is not None:
            fill, self.fill_help = self.fill_help, None
            fill(self)
        return super().format_help()

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """The options, then every `PALLASLAB_*` setting: a bad one is a usage error too,
        reported before the command starts (as a bad flag would be)."""
        if self.prog == "pallaslab":
            start_worker_early(list(sys.argv[1:] if args is None else args))
        parsed = super().parse_args(args, namespace)
        try:
            settings.check_all()
        except SettingError as err:
            raise UsageError(str(err), self.prog, self.format_usage()) from None
        return parsed


# Commands whose executors run in the worker process: it is started before parsing (see
# `start_worker_early`).
EARLY_WORKER_COMMANDS = ("compare",)


def start_worker_early(argv: list[str]) -> None:
    """Start the executor worker now, before the command imports JAX, so that the worker's
    own start overlaps the command's (`pallaslab.util.worker_process`). Only in a process
    that has no worker yet (nothing imported the executors: a fresh `pallaslab` command),
    for a command that runs executors, and not for --help or simulated --devices (another
    worker)."""
    if not argv or argv[0] not in EARLY_WORKER_COMMANDS or \
            "pallaslab.execute.worker.isolation" in sys.modules:
        return
    if any(a in ("-h", "--help") or a.startswith("--devices") for a in argv):
        return
    from pallaslab.util import worker_process

    worker_process.start_early()


def fill_help_later(parser: argparse.ArgumentParser,
                    fill: Callable[[argparse.ArgumentParser], None]) -> None:
    """`fill(parser)` completes the parser's help when it is first shown (see `Parser`)."""
    assert isinstance(parser, Parser), f"{parser.prog}'s parser is a {type(parser).__name__}"
    parser.fill_help = fill


def add_exit_status(parser: argparse.ArgumentParser) -> None:
    """Every --help ends with the exit statuses (after the subcommand's own epilog)."""
    parser.epilog = f"{parser.epilog}\n\n{EXIT_STATUS_HELP}" if parser.epilog else \
        EXIT_STATUS_HELP
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


# --- option validators (argparse `type=`: uniform "argument --x: ..." messages) -------------


def nonnegative_float(text: str) -> float:
    return _finite(text, lambda v: v >= 0, "a finite number >= 0")


def device_count(text: str) -> int:
    """`--devices N`: simulated CPU devices, from 1 to this machine's limit
    ($PALLASLAB_MAX_DEVICES)."""
    return _rule(settings.device_count, text)


def simulate_cpu_devices(n: int) -> bool:
    """Give this process's JAX `n` CPU devices, so a case that builds its mesh from
    `jax.devices()` is captured on `n` of them; possible only before JAX's backends start
    (a command's first use of JAX). False when they had started already."""
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", n)
    except Exception:  # backends already initialised: the capture keeps their devices
        return False
    return True


def positive_float(text: str) -> float:
    """`--timeout SECONDS`, in the words $PALLASLAB_TIMEOUT's check uses too."""
    return _rule(settings.seconds, text)


def _rule[T](check: Callable[[str], T], text: str) -> T:
    """A rule of `pallaslab.settings` as an argparse type: its ValueError a usage error."""
    try:
        return check(text)
    except SettingError as err:  # a bad setting the rule itself reads (PALLASLAB_MAX_DEVICES)
        raise argparse.ArgumentTypeError(f"cannot be checked: {err}") from None
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _finite(text: str, ok: Callable[[float], bool], rule: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not ok(value):
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}")
    return value


def target_name(text: str) -> str:
    from pallaslab.lowering.targets import TARGETS, get_target

    try:
        return get_target(text).name
    except PallasLabError:
        raise argparse.ArgumentTypeError(
            f"unknown target {text!r}; valid targets: {', '.join(TARGETS)}") from None


def chip_name(text: str) -> str:
    from pallaslab.analysis.chips import normalize

    try:
        return normalize(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def stage_name(text: str) -> str:
    if text == "all" or text in STAGES or _STAGE_FORMS.fullmatch(text):
        return text
    raise argparse.ArgumentTypeError(
        f"unknown stage {text!r}; valid stages: all, {', '.join(STAGES)}, mosaic[N] "
        "(a kernel's N-th Mosaic module) and mosaic:PASS (with --compile)")


# --- the console and user text -----------------------------------------------------------


def console(stderr: bool = False) -> Console:
    """Markup is for our own literals only: interpolate user text through `safe()`. No emoji
    codes (`:b:` stays text); no highlighting of numbers and paths in user text."""
    from rich.console import Console

    # Pipes and CI logs get a wide page instead of rich's 80 columns, without the spaces rich
    # pads each line with up to that width (tables, indented tree sections).
    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return Console(stderr=stderr, highlight=False, emoji=False)
    stripped = cast(IO[str], _LinesStripped(probe.file))  # a stream: write, flush, isatty
    return Console(file=stripped, highlight=False, emoji=False, width=160)


class _LinesStripped:
    """A text stream that drops the trailing spaces of each line written through it."""

    def __init__(self, stream: IO[str]):
        self._stream = stream
        self._line = ""

    def write(self, text: str) -> int:
        *done, self._line = (self._line + text).split("\n")
        for line in done:
            self._stream.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:
        # a print that ended without a newline (end=""): written as it is, not held back
        self._stream.write(self._line)
        self._line = ""
        self._stream.flush()

    def isatty(self) -> bool:
        return False


def safe(text: object) -> str:
    """User text (a kernel name, a path, a message, IR) for a rich markup string: shown as
    written, never read as markup, control and bidi-override characters made visible."""
    from rich.markup import escape

    return escape(visible(str(text)))


# --- cases -------------------------------------------------------------------------------


def load_and_capture(spec: str) -> tuple[Case, Capture]:
    case = load_case(spec)
    return case, capture_case(case)


# --- output ------------------------------------------------------------------------------

_json_stream: contextvars.ContextVar[IO[str] | None] = contextvars.ContextVar(
    "pallaslab_json_stream", default=None)


@contextlib.contextmanager
def json_only_stdout(enabled: bool) -> Iterator[None]:
    """With --json the JSON object is the only thing on stdout: whatever else writes to
    stdout meanwhile (a case printing at import, a kernel's debug prints) goes to stderr."""
    if not enabled:
        yield
        return
    token = _json_stream.set(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _json_stream.reset(token)


def print_json(payload: Any) -> None:
    stream = _json_stream.get() or sys.stdout
    stream.write(json.dumps(payload, indent=2) + "\n")
    stream.flush()


def error_json(err_type: str, message: str) -> dict[str, Any]:
    return {"error": {"type": err_type, "message": message}}


def print_error(message: str) -> None:
    """One `error:` line on stderr."""
    console(stderr=True).print(f"[bold red]error:[/] {safe(message)}", soft_wrap=True)


def describe_error(err: BaseException) -> tuple[str, str, str | None]:
    """(type for JSON, one-line message, traceback to show or None) of an error that ends a
    command or one case of it."""
    if isinstance(err, CaseCodeError):
        return type(err).__name__, str(err), err.user_traceback
    if isinstance(err, UntestedJaxError) and err.__cause__ is not None:  # raised by the API
        return type(err).__name__, str(err), "".join(traceback.format_exception(err.__cause__))
    if isinstance(err, PallasLabError):
        return type(err).__name__, str(err), None
    # Not ours to explain: a bug in pallaslab (or a library); the whole traceback helps. On a
    # JAX pallaslab is not tested with, most likely JAX's internals changed: said so.
    text = "".join(traceback.format_exception(err))
    if (untested := untested_jax_failure(err)) is not None:
        return UntestedJaxError.__name__, untested, text
    return type(err).__name__, f"internal error: {type(err).__name__}: {err}", text


def report_error(err: BaseException, json_mode: bool) -> int:
    """Tell about an error that ended the command; returns the exit status (2)."""
    err_type, message, tb = describe_error(err)
    if json_mode:
        print_json(error_json(err_type, message + (f"\n{tb}" if tb else "")))
    elif tb:
        sys.stderr.write(visible(tb))
    print_error(message)
    return EXIT_ERROR


def report_usage(err: UsageError, json_mode: bool) -> int:
    message = f"{err.prog}: error: {err}"
    if json_mode:
        print_json(error_json("usage", message))
    else:
        sys.stderr.write(visible(err.usage))
    sys.stderr.write(visible(message) + "\n")
    return EXIT_ERROR


def backend_for_target(target: str) -> str:
    """Which semantics a target's findings are judged by."""
    return "tpu" if target.startswith("tpu") else "triton"
