"""How block sets and programs read in a cause's message."""

from __future__ import annotations

import linecache
from collections.abc import Iterable, Sequence

from pallaslab.model import Operand
from pallaslab.model.source_names import short_source

MAX_LISTED = 6  # blocks or programs named before "... and N more"
_LETTERS = "kmnpqr"


def operand_label(op: Operand) -> str:
    """"args[1] (y_ref)": the origin, with the kernel's own parameter name when known."""
    return f"{op.origin} ({op.param})" if op.param else op.origin


def possessive(name: str) -> str:
    """"args[1]'s", "outputs'"."""
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def block_set_text(blocks: Iterable[tuple[int, ...]], counts: Sequence[int]) -> str:
    """A set of block indices as a learner reads it: "(k, 1) for every k" when it spans a
    whole dimension, else the blocks listed."""
    found = sorted(set(blocks))
    if not found:
        return "no blocks"
    rank = len(found[0])
    per_dim = [sorted({b[d] for b in found}) for d in range(rank)]
    product = 1
    for values in per_dim:
        product *= len(values)
    full = [d for d in range(rank) if len(per_dim[d]) > 1 and
            d < len(counts) and per_dim[d] == list(range(counts[d]))]
    if product == len(found) and full and all(
            len(per_dim[d]) == 1 or d in full for d in range(rank)):
        names = {d: _LETTERS[i % len(_LETTERS)] for i, d in enumerate(full)}
        coords = ", ".join(names[d] if d in names else str(per_dim[d][0]) for d in range(rank))
        every = ", ".join(names[d] for d in full)
        return f"({coords}) for every {every}"
    return listed(found)


def listed(items: Sequence[tuple[int, ...]]) -> str:
    shown = ", ".join(str(tuple(b)) for b in items[:MAX_LISTED])
    more = len(items) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def source_text(source: str | None) -> str | None:
    """The index map's own text (`lambda i, j: (j, i)`) from its source line, if readable."""
    if source is None:
        return None
    path, _, line = source.rpartition(":")
    if not line.isdigit():
        return None
    text = linecache.getline(path, int(line)).strip()
    if not text:
        return None
    start = text.find("lambda")
    if start < 0:
        return text
    return _balanced(text[start:])


def _balanced(text: str) -> str:
    """`text` up to where its brackets close (a lambda inside a call's arguments)."""
    depth = 0
    colon = text.find(":")
    for n, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return text[:n].strip()
        elif ch == "," and depth == 0 and n > colon >= 0:
            return text[:n].strip()
    return text.strip()


def index_map_text(op: Operand) -> str:
    """"index map `lambda i, j, k: (j, k)` (matmul.py:21)", as much of it as is known."""
    where = short_source(op.index_map_source)
    code = source_text(op.index_map_source)
    body = f"index map `{code}`" if code else "index map"
    return f"{body} ({where})" if where else body
