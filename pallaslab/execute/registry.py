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
from collections.abc import Callable
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
    return spec


def unregister_executor(name: str) -> None:
    _EXECUTORS.pop(name, None)


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
        raise ExecutorError(f"unknown executor {name!r}; the executors are: "
                            f"{', '.join(executor_names())}") from None
