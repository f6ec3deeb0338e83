"""One name for one thing across the tabs (issue 39 item 4): a source line as the user knows
it ("Cell In[2]:16", "file.py:16"), never as a worker process knew it ("<dynamic-code>:16"),
and a semaphore by the body's name for it ("local_sem (scratch[0])"), never by the
interpreter's id ("#2000") alone. Step, Devices, Pipeline, Grid and Compare name them here."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pallaslab.model._jax.deadlock import semaphore_names
from pallaslab.model._jax.param_names import function_at
from pallaslab.model.source_names import short_source
from pallaslab.util.names import ref_name

if TYPE_CHECKING:
    from pallaslab.model import Kernel

_DYNAMIC = re.compile(r"^<dynamic-code>:(\d+)$")
_INDEXED = re.compile(r"^(?P<origin>\w+\[\d+\])(?P<index>(\[[\d, ]+\])?)$")


def source_name(source: str | None, kernel: Kernel | None = None) -> str | None:
    """The line as the user's tracebacks name it. A function sent to a worker by value (a
    notebook's) comes back as "<dynamic-code>:N": named by the kernel's own line N when it
    knows exactly one."""
    if source is None:
        return None
    m = _DYNAMIC.match(source)
    if m and kernel is not None:
        known = {s for s in _sources(kernel) if s.rpartition(":")[2] == m[1]}
        if not known:  # a line of a body (a Step equation's): the file whose body holds it
            known = {f"{path}:{m[1]}" for path, lines in _bodies(kernel) if int(m[1]) in lines}
        if len(known) == 1:
            source = known.pop()
    return short_source(source)


def _bodies(kernel: Kernel) -> list[tuple[str, range]]:
    """The file and lines of the kernel's body and its nested pipelines' bodies, read from
    the file as the capture named it (a notebook's cell included)."""
    found = []
    for k in (kernel, *kernel.pipelines):
        node = function_at(k.source)
        if node is not None and k.source:
            found.append((k.source.rpartition(":")[0],
                          range(node.lineno, (node.end_lineno or node.lineno) + 1)))
    return found


def _sources(kernel: Kernel) -> set[str]:
    found = {kernel.source, kernel.call_site, *(d.source for d in kernel.dmas),
             *(op.source for op in kernel.semaphore_ops),
             *(op.index_map_source for op in kernel.operands)}
    for pipe in kernel.pipelines:
        found |= _sources(pipe)
    return {s for s in found if s}


def semaphore_name(kernel: Kernel | None, semaphore: int | str | None) -> str | None:
    """"local_sem (scratch[0])", "recv_sems[1] (scratch[2][1])": a semaphore by the body's
    name first, from the interpreter's id or the kernel's origin for it; None for an id the
    kernel has no name for (a `run_scoped` or a sync_copy's own semaphore)."""
    if semaphore is None:
        return None
    if isinstance(semaphore, int):
        found = semaphore_names(kernel.operands).get(semaphore) if kernel is not None else None
        if found is None:
            return None
        semaphore = found
    origin: str = semaphore
    m = _INDEXED.match(origin)
    if kernel is None or m is None:
        return origin
    refs = {op.origin: op for op in (*kernel.operands, *kernel.scoped)}
    op = refs.get(m["origin"])
    if op is None or not op.param:
        return origin
    return ref_name(op.param + m["index"], origin)
