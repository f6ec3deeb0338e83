"""The executor registry: every executor usable by name is registered here.

An executor is a class following `pallaslab.execute.protocol.Executor` whose `spec` (an
`ExecutorSpec`) declares its name, label, fill values, isolation, what it can run and its
description. `register_executor(cls)` makes it usable by name in `pallaslab.run`,
`pallaslab.compare`, `%%pallas --compare` and the CLI's `--executors`, and lists it there;
everything that needs an executor's facts reads them from here (`executor_spec`).

Like the workbench's tab registry (`pallaslab.views.registry`), this module imports no
executor: implementations import the protocol (and may look others up here, as `vectorized`
does for its fallback), and `pallaslab.execute.builtin` imports the built-in ones and
registers them; `pallaslab.execute` imports it first, so they are always registered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from pallaslab.execute.protocol import Executor, ExecutorError, ExecutorSpec


@dataclasses.dataclass(frozen=True)
class Registered:
    spec: ExecutorSpec
    build: Callable[..., Executor]  # () -> Executor, or (reference) when spec.takes_reference


_EXECUTORS: dict[str, Registered] = {}


def register_executor(executor_class: Any, build: Callable[..., Executor] | None = None
                      ) -> ExecutorSpec:
    """Make the executor whose class (with its `spec`) is `executor_class` usable by name;
    `build` makes an instance (default: the class, called with no argument, or with the
    reference function when `spec.takes_reference`). Registering a name again replaces it.
    Returns the spec."""
    spec = getattr(executor_class, "spec", None)
    if not isinstance(spec, ExecutorSpec):
        raise ExecutorError(f"executor class {getattr(executor_class, '__name__', executor_class)}"
                            f" has no `spec` (an ExecutorSpec), got {spec!r}: declare its name, "
                            "label and description there")
    words = spec.name.split("-")
    if not spec.name or not all(w.isalnum() and w == w.lower() for w in words):
        raise ExecutorError(f"executor name {spec.name!r} (of {executor_class.__name__}) must "
                            "be lower-case words joined by '-', e.g. 'tpu-interpret'")
    _EXECUTORS[spec.name] = Registered(spec, build or executor_class)
    _changed()
    return spec


def unregister_executor(name: str) -> None:
    if _EXECUTORS.pop(name, None) is not None:
        _changed()


# Called after each registration (e.g. the `%%pallas` help, which lists the executors).
_WATCHERS: list[Callable[[], None]] = []


def watch_executors(callback: Callable[[], None]) -> None:
    """Call `callback()` now and whenever an executor is registered or unregistered."""
    if callback not in _WATCHERS:
        _WATCHERS.append(callback)
    callback()


def _changed() -> None:
    for callback in _WATCHERS:
        callback()


def executor_help_names() -> dict[str, str]:
    """The executors' names as help texts say them, from the declarations: `names` (all),
    `default` (what runs when none is named), `reference`, `on_devices`."""
    return {"names": ", ".join(executor_names()), "reference": reference_executor(),
            "default": f"the interpreter that can run the kernels "
                       f"({executor_of_mode('hlo', cpu=True)} on a CPU host), against the "
                       f"reference if given, else against {second_choices()[0]}",
            "on_devices": executor_of_mode("tpu")}


def executor_names() -> tuple[str, ...]:
    """Every registered executor's name, in registration order."""
    return tuple(_EXECUTORS)


def executor_specs() -> tuple[ExecutorSpec, ...]:
    return tuple(r.spec for r in _EXECUTORS.values())


def executor_spec(name: str) -> ExecutorSpec:
    return _registered(name).spec


def find_spec(name: str) -> ExecutorSpec | None:
    """The registered executor's spec, or None (an executor object nobody registered)."""
    found = _EXECUTORS.get(name)
    return None if found is None else found.spec


def spec_for(executor: Any) -> ExecutorSpec:
    """An executor object's spec: its own declaration, else the one registered under its
    name, else the defaults (an object nobody declared or registered runs isolated, its
    outputs not judged for fill values)."""
    spec = getattr(executor, "spec", None)
    if isinstance(spec, ExecutorSpec):
        return spec
    return find_spec(executor.name) or ExecutorSpec(
        name=executor.name, label=executor.name,
        description=f"{type(executor).__name__} (not registered)")


def executor_of_mode(mode: str, *, cpu: bool = False) -> str:
    """The executor that interprets kernels under `mode` ("hlo", "tpu", "gpu"): the first
    registered, or on a CPU host (`cpu`) the first `cpu_preferred` one when there is one."""
    of_mode = [s for s in executor_specs() if s.mode == mode]
    if not of_mode:
        raise ExecutorError(f"no registered executor interprets kernels under {mode!r}")
    preferred = [s for s in of_mode if s.cpu_preferred] if cpu else []
    plain = [s for s in of_mode if not s.cpu_preferred] or of_mode
    return (preferred or plain)[0].name


def reference_executor() -> str:
    """The executor that runs the comparison's reference function (`takes_reference`)."""
    for spec in executor_specs():
        if spec.takes_reference:
            return spec.name
    raise ExecutorError("no registered executor runs a reference function")


def second_choices() -> tuple[str, ...]:
    """The interpreters that check interpret mode's results, best first (`second_rank`)."""
    ranked = sorted((s for s in executor_specs() if s.second_rank is not None),
                    key=lambda s: s.second_rank or 0)
    return tuple(s.name for s in ranked)


def get_executor(name: str | Executor, *, reference: Callable[..., Any] | None = None
                 ) -> Executor:
    """The executor registered as `name` (an executor object is returned as is);
    `reference`: the function the `reference` executor calls."""
    if not isinstance(name, str):
        return name
    entry = _registered(name)
    return entry.build(reference) if entry.spec.takes_reference else entry.build()


def _registered(name: str) -> Registered:
    try:
        return _EXECUTORS[name]
    except KeyError:
        raise ExecutorError(_unknown(name)) from None


def _unknown(name: str, flag: str | None = None) -> str:
    where = f" in {flag}" if flag else ""
    return f"unknown executor {name!r}{where}; the executors are: {', '.join(executor_names())}"


@dataclasses.dataclass(frozen=True)
class ExecutorList:
    """The executors a comparison runs, as named by the API (`executors=`), the CLI
    (`--executors`) and the magic (`--compare`): parsed and checked here alone. No list
    (None where one is taken) means the default, `choice.default_executors`."""

    items: tuple[str | Executor, ...]

    @classmethod
    def parse(cls, value: ExecutorList | str | Sequence[str | Executor], *,
              flag: str | None = None) -> ExecutorList:
        """From names or one comma-separated string; every name registered, none twice.
        `flag`: the option it came from, for the message ("--compare")."""
        if isinstance(value, ExecutorList):
            return value
        items = tuple(e.strip() for e in value.split(",") if e.strip()) \
            if isinstance(value, str) else tuple(value)
        for item in items:
            if isinstance(item, str) and item not in _EXECUTORS:
                raise ExecutorError(_unknown(item, flag))
        names = [_label(e) for e in items]
        for name in names:
            if names.count(name) > 1:
                raise ExecutorError(f"executor {name!r} is listed twice in {names}: each "
                                    "executor runs once")
        return cls(items)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(_label(e) for e in self.items)

    def with_reference(self, reference: object) -> tuple[ExecutorList, str | None]:
        """With the reference executor added when `reference` is given but it is not listed
        (the caller gave a function to check the kernel against), and the note saying so."""
        ref = reference_executor()
        if reference is None or ref in self.names:
            return self, None
        return ExecutorList((*self.items, ref)), (
            f"{ref} added to the executors ({', '.join(self.names) or 'none'}): a reference "
            "function was given, so the kernel is checked against it")

    def compared(self, *, flag: str | None = None) -> ExecutorList:
        """Itself, when it holds the two or more executors a comparison needs."""
        if len(self.items) < 2:
            raise ExecutorError(
                f"{flag or 'a comparison'} needs at least two executors; got {len(self.items)}"
                f" ({', '.join(self.names) or 'none'}). Choose from "
                f"{', '.join(executor_names())}")
        return self


def _label(executor: str | Executor) -> str:
    return executor if isinstance(executor, str) else executor.name
