"""`pallaslab tune CASE... --param bm=128,256,512 --param bk=128,256 [--chip v5e]
[--target tpu-v5e] [--compile-top 3] [--timeout S] [--html FILE] [--json]`: rank a case's
configs by the model and the compiler (`pallaslab.tune`).

The case function takes the config as keyword arguments and returns `(fn, args)` or
`(fn, args, kwargs)`, as other cases do. Exit status: 0 when some config is ranked, 1 when
every config is out, 2 when the case cannot be loaded or a flag is wrong. With several cases,
the worst.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pallaslab.cli._many import CaseOutcome, run_cases
from pallaslab.cli._shared import (
    CASES_HELP,
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    chip_name,
    console,
    positive_float,
    target_name,
)


def param_text(text: str) -> str:
    """`--param NAME=V1,V2`: checked while parsing (no JAX), kept as text."""
    from pallaslab.tuning.space import TuneSpaceError, parse_param

    try:
        parse_param(text, flag="")
    except TuneSpaceError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def whole_number(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number >= 0 (0: the model only)")
    return int(text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="rank block configs by the model and the compiler",
                       description="Capture a case once per config, rank the configs by the "
                                   "pipeline model's predicted time per chip (configs that do "
                                   "not capture, have error findings or do not fit VMEM are "
                                   "out, with their reason), and compile the fastest few.")
    p.add_argument("cases", nargs="+", metavar="CASE",
                   help=CASES_HELP + "; the case function takes the config as keyword "
                                     "arguments")
    p.add_argument("--param", action="append", required=True, type=param_text,
                   metavar="NAME=V1,V2,...", help="a parameter and its candidate values "
                                                  "(repeatable; the configs are their product)")
    p.add_argument("--chip", action="append", default=None, metavar="CHIP", type=chip_name,
                   help="TPU chip to model (repeatable; default: the target's, else v5e and v6e)")
    p.add_argument("--target", default=None, metavar="T", type=target_name,
                   help="the compiler's target, e.g. tpu-v5e (default: each chip's)")
    p.add_argument("--compile-top", type=whole_number, default=3, metavar="K",
                   help="compile the K fastest with the real compiler (default 3; 0: the "
                        "model only)")
    p.add_argument("--timeout", type=positive_float, default=None, metavar="SECONDS",
                   help="time limit of each case's tune; configs not reached are out, saying so")
    p.add_argument("--html", default=None, metavar="FILE",
                   help="also write the table and the heatmap to FILE as HTML")
    p.add_argument("--json", action="store_true", help="print the JSON form (several cases: "
                   "{\"cases\": [...]})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pallaslab.tuning.space import TuneSpaceError, parse_params

    try:
        space = parse_params(args.param, flag="--param")
    except TuneSpaceError as err:
        raise UsageError(f"argument --param: {err}", prog="pallaslab tune") from None
    return run_cases(args.cases, args.json, lambda spec: tune_case(spec, space, args))


def tune_case(spec: str, space: dict[str, list[Any]], args: argparse.Namespace) -> CaseOutcome:
    from pallaslab.cases import load_function
    from pallaslab.tuning.search import tune_captures

    factory = load_function(spec, what="case")
    result = tune_captures(lambda config: _capture(spec, factory, config), space,
                           chip=args.chip, target=args.target, compile_top=args.compile_top,
                           timeout=args.timeout)
    if args.html:
        Path(args.html).write_text(result.to_html())
    if not args.json:
        from pallaslab.cli._parts import to_rich

        console().print(to_rich(result.tree()))
    return CaseOutcome(EXIT_OK if result.best is not None else EXIT_FAILED, result.to_json())


def _capture(spec: str, factory: Any, config: dict[str, Any]) -> Any:
    """The case for one config, captured; its errors are the config's reason to be out."""
    from pallaslab.cases import Case, capture_case

    built = factory(**config)
    if not isinstance(built, tuple) or len(built) not in (2, 3) or not callable(built[0]):
        raise TypeError(f"case {spec!r} returned {type(built).__name__}; a case returns "
                        "(fn, args) or (fn, args, kwargs)")
    kwargs = dict(built[2]) if len(built) == 3 else {}
    return capture_case(Case(spec, built[0], tuple(built[1]), kwargs))
