"""The candidate configs of a tune: a mapping of parameter names to candidate values (their
product), or a list of config dicts; and `--param bm=128,256` text. No JAX."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pallaslab.errors import PallasLabError

MAX_CANDIDATES = 4096  # a space larger than this is refused, naming its size


class TuneSpaceError(PallasLabError, ValueError):
    """A search space or `--param` text that cannot be read; the message names the rule."""


Config = dict[str, Any]


def configs(space: Mapping[str, Iterable[Any]] | Sequence[Mapping[str, Any]]) -> list[Config]:
    """Every config of `space`, in order (the last parameter varies fastest)."""
    if isinstance(space, Mapping):
        return _product(space)
    if isinstance(space, (str, bytes)) or not isinstance(space, Sequence):
        raise TuneSpaceError(f"tune space: {type(space).__name__} {space!r:.60}; rule: a space "
                             "maps parameter names to candidate values ({'bm': [128, 256]}) or "
                             "is a list of config dicts")
    out = []
    for i, config in enumerate(space):
        if not isinstance(config, Mapping) or not all(isinstance(k, str) for k in config):
            raise TuneSpaceError(f"tune space: item {i} is {config!r:.60}; rule: each config "
                                 "of a list is a dict of parameter names to values")
        out.append(dict(config))
    return _checked(out)


def _product(space: Mapping[str, Iterable[Any]]) -> list[Config]:
    if not space:
        raise TuneSpaceError("tune space: no parameters, so no candidate configs; rule: give "
                             "at least one name with its values ({'bm': [128, 256]})")
    names, values = [], []
    for name, candidates in space.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise TuneSpaceError(f"tune space: parameter {name!r}; rule: a parameter is a "
                                 "Python identifier (it is passed as a keyword argument)")
        if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Iterable):
            candidates = [candidates]
        listed = list(candidates)
        if not listed:
            raise TuneSpaceError(f"tune space: parameter {name!r} has no candidate values; "
                                 "rule: each parameter needs at least one")
        names.append(name)
        values.append(listed)
    size = 1
    for v in values:
        size *= len(v)
    if size > MAX_CANDIDATES:
        raise TuneSpaceError(f"tune space: {size} candidates; rule: at most {MAX_CANDIDATES} "
                             "(narrow the values or pass a list of configs)")
    return _checked([dict(zip(names, combo, strict=True))
                     for combo in itertools.product(*values)])


def _checked(out: list[Config]) -> list[Config]:
    if not out:
        raise TuneSpaceError("tune space: no candidate configs; rule: give at least one")
    if len(out) > MAX_CANDIDATES:
        raise TuneSpaceError(f"tune space: {len(out)} candidates; rule: at most "
                             f"{MAX_CANDIDATES}")
    return out


def parse_param(text: str, flag: str = "--param") -> tuple[str, list[Any]]:
    """`bm=128,256,512` -> ("bm", [128, 256, 512]); values are ints, floats, True/False/None,
    else strings."""
    name, sep, values = text.partition("=")
    name = name.strip()
    head = f"{flag} {text!r}" if flag else repr(text)
    rule = "NAME=V1,V2,... with NAME a Python identifier and at least one value"
    if not sep or not name.isidentifier():
        raise TuneSpaceError(f"{head}: expected {rule}, e.g. bm=128,256,512")
    items = [v.strip() for v in values.split(",")]
    if not values.strip() or any(not v for v in items):
        raise TuneSpaceError(f"{head}: an empty value; expected {rule}, e.g. "
                             f"{name}=128,256")
    return name, [_value(v) for v in items]


def parse_params(texts: Iterable[str], flag: str = "--param") -> dict[str, list[Any]]:
    """Several `--param` texts -> a space; a name given twice is an error."""
    space: dict[str, list[Any]] = {}
    for text in texts:
        name, values = parse_param(text, flag)
        if name in space:
            raise TuneSpaceError(f"{flag} {text!r}: {name!r} is given twice; rule: one {flag} "
                                 f"per parameter, its values separated by commas")
        space[name] = values
    return space


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def config_text(config: Mapping[str, Any]) -> str:
    """`bm=128 bk=256`."""
    return " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
                    for k, v in config.items())
