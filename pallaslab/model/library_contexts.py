"""Settings of kernel libraries that change how their functions trace, carried from the
caller's process to an executor worker, which traces the function again.

tokamax refuses to trace an op for a device this host lacks ("Not supported on cpu") unless
the caller cross-compiles (`tokamax.config.cross_compile(True)`, a context of the caller's
thread). A worker tracing the same function without it fails where the caller's capture
succeeded. Each setting here is read in the caller (only when its library is already
imported) and entered again around the worker's trace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class LibrarySetting:
    """A context option `module.name` (called with a value, it is a context manager; its
    `value` is the one in force)."""

    module: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.module}.{self.name}"

    def current(self) -> Any:
        """Its value here, or None when its library is not imported (it cannot be in force)."""
        mod = sys.modules.get(self.module)
        option = getattr(mod, self.name, None) if mod is not None else None
        return None if option is None else option.value

    def entered(self, value: Any) -> contextlib.AbstractContextManager[Any]:
        return getattr(importlib.import_module(self.module), self.name)(value)


SETTINGS = (LibrarySetting("tokamax._src.config", "cross_compile"),)


def in_force() -> dict[str, Any]:
    """The settings this thread has on (by key), for `entered` in another process."""
    found = {}
    for setting in SETTINGS:
        value = setting.current()
        if value:
            found[setting.key] = value
    return found


@contextlib.contextmanager
def entered(values: Mapping[str, Any]) -> Iterator[None]:
    """The settings `in_force` read in the caller, in force in this block."""
    with contextlib.ExitStack() as stack:
        for setting in SETTINGS:
            if setting.key in values:
                stack.enter_context(setting.entered(values[setting.key]))
        yield
