"""The catalog's registry: `CATALOG` (name -> `Entry`), the `@case` decorator and helpers.

Kernel modules (`kernels.py`, `kernels_tpu.py`) register their cases here, so the catalog is one
dict whichever module a test imports first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

Case = Callable[[], tuple[Any, ...]]


@dataclasses.dataclass(frozen=True)
class Entry:
    case: Case
    tags: frozenset[str]
    findings: frozenset[str]  # error/warning finding codes the analysis must raise (no others)
    reference: Callable[..., Any] | None = None  # pure-JAX function the outputs must match


CATALOG: dict[str, Entry] = {}


def case(*tags: str, findings: tuple[str, ...] = (),
         reference: Callable[..., Any] | None = None) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        CATALOG[fn.__name__] = Entry(fn, frozenset(tags), frozenset(findings), reference)
        return fn

    return register


def rand(shape: tuple[int, ...], dtype: Any = jnp.float32, seed: int = 0) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


def abstract(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args)


def catalog_names(*, tag: str | None = None) -> list[str]:
    return [n for n, e in CATALOG.items() if tag is None or tag in e.tags]


def catalog_line(text: str, file: str = "kernels.py") -> str:
    """"kernels.py:LINE" of the first catalog line holding `text` (catalog edits move lines).
    `file` is relative to tests/, or the name of a test module in one of its folders."""
    tests = Path(__file__).parent
    path = tests / file if (tests / file).exists() else next(tests.glob(f"*/{file}"))
    lines = path.read_text().splitlines()
    return f"{file}:{next(n for n, line in enumerate(lines, 1) if text in line)}"
