"""`%%pallas` flags -> the options the workbench and the run take, checked: a bad value is a
`UsageError` (one line, no traceback)."""

from __future__ import annotations

import math
import re
from typing import Any

from IPython.core.error import UsageError

from pallaslab import settings

EXTRA_OPTIONS: list[str] = []  # argparse dests added by `pallaslab.magic.register_option`

# A value to show when a flag is given without one (argparse says only "expected one argument").
FLAG_EXAMPLES = {
    "--compare": "--compare interpret,reference=my_ref (the executors to compare; my_ref: a "
                 "function of the notebook computing the expected result)",
    "--exercise": "--exercise add-vectors",
    "--tab": "--tab grid",
    "--chip": "--chip v5e",
    "--target": "--target tpu-v5e",
    "--kernel": "--kernel 0",
    "--timeout": "--timeout 60",
    "--devices": "--devices 4",
}


COMPARE_HELP = (
    "run these executors, compare their outputs and open the Compare tab, e.g. "
    "interpret,reference=my_ref. my_ref, a function of the notebook, takes what the last "
    "line's call takes (`matmul(x, y)`: my_ref(x, y)); when the last line is not a single call "
    "(`matmul(x, y).sum()`), it takes the arrays the line names, in the order they appear "
    "(my_ref(x, y)), and returns what the line returns (`print(f(x))`: what f(x) takes and "
    "returns). Executors: {executors}")

_LISTING: list[Any] = []  # the magics whose help lists the registered executors


def list_executors(magic: Any) -> None:
    """`%%pallas?` lists the registered executors in --compare's help, now and after each
    registration (called when the extension loads: the registry brings JAX in)."""
    from pallaslab.execute.registry import watch_executors

    if magic not in _LISTING:
        _LISTING.append(magic)
    watch_executors(_list_in_help)


def _list_in_help() -> None:
    from pallaslab.execute.registry import executor_specs

    names = ", ".join(f"{s.name}=NAME" if s.takes_reference else s.name
                      for s in executor_specs())
    for magic in _LISTING:
        for action in magic.parser._actions:
            if action.dest == "compare":
                action.help = COMPARE_HELP.replace("{executors}", names)
        magic.__doc__ = magic.parser.format_help()


def parse_flags(magic: Any, line: str) -> Any:
    """IPython's `parse_argstring`, with an example value when a flag is given without one."""
    from IPython.core.magic_arguments import parse_argstring

    try:
        return parse_argstring(magic, line)
    except UsageError as err:
        m = re.search(r"argument (--[\w-]+)(?:/[^:]*)?: expected one argument", str(err))
        if m is None or m[1] not in FLAG_EXAMPLES:
            raise
        raise UsageError(f"%%pallas: {m[1]} needs a value, e.g. {FLAG_EXAMPLES[m[1]]}"
                         ) from None


def options_from(args: Any) -> dict[str, Any]:
    from pallaslab.analysis.chips import normalize
    from pallaslab.lowering.targets import TARGETS
    from pallaslab.workbench import WorkbenchError, tab_name

    try:
        tab = tab_name(args.tab) if args.tab else None
        chips = [normalize(c) for c in args.chip]
    except (WorkbenchError, ValueError) as err:
        raise UsageError(f"%%pallas: {err}") from None
    if tab == "compare" and args.compare is None:
        raise UsageError("%%pallas: --tab compare needs --compare EXECUTORS, e.g. --compare "
                         "interpret,reference=my_ref: the Compare tab shows that comparison")
    targets = [t.strip().lower() for t in args.target]
    for t in targets:
        if t not in TARGETS:
            raise UsageError(f"%%pallas: unknown --target {t!r}: the targets are "
                             f"{', '.join(TARGETS)}")
    kernel: int | str | None = args.kernel
    if isinstance(kernel, str) and kernel.lstrip("-").isdigit():
        kernel = int(kernel)
    extra = {dest: getattr(args, dest) for dest in EXTRA_OPTIONS}
    if args.gpu:
        extra["gpu"] = True
    devices = devices_option(args.devices)
    if devices is not None:  # the views too: Devices, Step and Lowering run on N devices
        extra["devices"] = devices
    return {"tab": tab, "chips": chips, "targets": targets, "kernel": kernel, "extra": extra,
            "compare": compare_option(args.compare), "timeout": timeout_option(args.timeout),
            "devices": devices}


def devices_option(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"%%pallas: --devices {text}: the number of simulated CPU devices is "
                         "a whole number >= 1")
    if problem := settings.devices_over_limit(int(text)):  # at once: before any capture
        raise UsageError(f"%%pallas: --devices {text}: {problem}")
    return int(text)


def timeout_option(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise UsageError(f"%%pallas: --timeout {text}: a time limit is a positive number of "
                         "seconds")
    return value


def compare_option(text: str | None) -> tuple[tuple[str, ...], str | None] | None:
    """`--compare interpret,reference=my_ref` -> (executors, reference name): the names are an
    `ExecutorList`, checked as the API and the CLI check theirs."""
    if text is None:
        return None
    from pallaslab.execute.registry import ExecutorError, ExecutorList, executor_spec

    items = [item.partition("=") for item in (t.strip() for t in _unquoted(text).split(","))]
    try:
        listed = ExecutorList.parse([name.strip().lower() for name, _, _ in items],
                                    flag="--compare")
    except ExecutorError as err:
        raise UsageError(f"%%pallas: {err} (reference=NAME)") from None
    reference = None
    for name, (_, _, value) in zip(listed.names, items, strict=True):
        if executor_spec(name).takes_reference:
            if not value.strip():
                raise UsageError(f"%%pallas: --compare {name} needs the reference function: "
                                 f"{name}=my_ref (a function with the kernel call's signature)")
            reference = value.strip()
    try:
        listed.compared(flag="--compare")
    except ExecutorError as err:
        raise UsageError(f"%%pallas: {err}") from None
    return listed.names, reference


def _unquoted(text: str) -> str:
    """`'interpret, reference=ref'` -> `interpret, reference=ref`: IPython passes a quoted
    flag value with its quotes."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def compare_reference(compare: Any, ns: dict[str, Any]) -> Any:
    """The `reference=NAME` function, looked up (dotted names too) in the user's namespace."""
    if not compare or compare[1] is None:
        return None
    name = compare[1]
    head, *rest = name.split(".")
    if head not in ns:
        raise UsageError(f"%%pallas: --compare reference={name}: no such name in the notebook")
    value = ns[head]
    for attr in rest:
        if not hasattr(value, attr):
            raise UsageError(f"%%pallas: --compare reference={name}: {head} has no {attr!r}")
        value = getattr(value, attr)
    if not callable(value):
        raise UsageError(f"%%pallas: --compare reference={name} is not callable "
                         f"(it is a {type(value).__name__})")
    return value
