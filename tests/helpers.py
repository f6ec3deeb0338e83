"""Helpers the test files share: `from helpers import line_of, workbench`.

Tests name source lines by their text, never by number, so that editing a kernel file does
not break tests about another kernel. Nothing here imports IPython or a browser, so any test
file may use it.
"""

from __future__ import annotations

import contextlib
import faulthandler
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pallaslab.model import Capture, Kernel
    from pallaslab.workbench import Workbench

TESTS = Path(__file__).resolve().parent
KERNELS_PY = TESTS / "kernels.py"  # the shared kernel catalog
KERNELS_TPU = TESTS / "kernels_tpu.py"


def line_of(text: str, path: str | Path = KERNELS_PY, *, after: str | None = None) -> int:
    """The number (from 1) of the first line of `path` holding `text`, at or after the first
    line holding `after` when given."""
    lines = Path(path).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i, line in enumerate(lines, 1) if i > start and text in line)


def line_ref(text: str, path: str | Path = KERNELS_PY, *, after: str | None = None) -> str:
    """`"kernels.py:N"`: the line `line_of` finds, as a kernel's `source` names it."""
    return f"{Path(path).name}:{line_of(text, path, after=after)}"


def kernel_of(name: str, *, concrete: bool = True, index: int = 0) -> Kernel:
    """Kernel `index` of the catalog case `name`, captured on its arrays (`concrete`) or on
    their shapes and dtypes alone."""
    from kernels import CATALOG, abstract

    import pallaslab

    fn, args = CATALOG[name].case()[:2]
    return pallaslab.capture(fn, *(args if concrete else abstract(args)))[index]


def workbench(name: str, **options: Any) -> Workbench:
    """A workbench on the catalog case `name`; `options` go to `Workbench` (chips, targets,
    tab, kernel, options)."""
    from kernels import CATALOG

    import pallaslab
    from pallaslab.workbench import Workbench

    fn, args = CATALOG[name].case()[:2]
    return Workbench(pallaslab.capture(fn, *args), **options)


def copy_kernel_named(name: str) -> Capture:
    """A two-program copy kernel called `name`: for views that must show a user's string (a
    kernel name such as `<img src=x onerror=...>`) as text, never as markup."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    import pallaslab

    def body(x_ref: Any, o_ref: Any) -> None:
        o_ref[...] = x_ref[...]

    def fn(x: jax.Array) -> jax.Array:
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(2,), in_specs=[spec], out_specs=spec, name=name)(x)

    return pallaslab.capture(fn, jax.ShapeDtypeStruct((16, 128), jnp.float32))


def user_names(shell: Any) -> set[str]:
    """The names a user's cells defined in an IPython shell (not IPython's own)."""
    return {k for k in shell.user_ns if not k.startswith("_") and k not in shell.user_ns_hidden}


def snapshot(shell: Any) -> dict[str, Any]:
    """The shell's namespace without IPython's history variables (`_`, `_i3`, `Out`, ...), to
    check that a magic leaves the namespace as the plain cell would."""
    hidden = {"_", "__", "___", "_oh", "Out", "In", "_ih", "_dh", "_exit_code"}
    return {k: v for k, v in shell.user_ns.items()
            if k not in hidden and not k.startswith("_i")
            and not (k.startswith("_") and k[1:].isdigit())}


def assert_one_line_usage_error(result: Any, out: Any, message: str) -> None:
    """The cell failed with an IPython `UsageError` holding `message`, in one line and without
    a traceback (`result, out` as `ipython_shell.run` returns them)."""
    from IPython.core.error import UsageError

    err = result.error_in_exec
    assert isinstance(err, UsageError), err
    assert message in str(err)
    assert "\n" not in str(err)
    assert "Traceback" not in out.stdout + out.stderr


@contextlib.contextmanager
def failing_on_hang(seconds: float) -> Iterator[None]:
    """A hang fails the test run after `seconds`, with every thread's stack, instead of
    stalling the suite: faulthandler's watchdog thread fires even while the main thread is
    stuck inside XLA."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
