"""SMEM that a Mosaic GPU kernel touches while a TMA copy may still be using it, read off the
kernel's jaxpr in program order.

JAX's GPU interpreter lands a TMA copy at once and reads SMEM at once, so two orderings that
real hardware needs pass every run:

- `unwaited-copy`: `copy_gmem_to_smem(src, dst, barrier)` puts `dst` in flight until a
  `barrier_wait(barrier)`; the threads touching `dst` before that read what the copy may not
  have written yet.
- `uncommitted-smem`: SMEM the threads wrote is read by the TMA engine of a later
  `copy_smem_to_gmem` only after `commit_smem()` (a fence between the two proxies); without
  it the copy may send stale SMEM.

The walk follows one warpgroup's program order: loops run their body twice (a hazard carried
into the next iteration shows), a `cond` runs each branch from the same state and goes on with
what any branch left in flight. Only accesses known to overlap are hazards: a window with a
dynamic start (a pipeline's slot) is never judged, so correct multi-buffered kernels stay
clean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from jax._src import core as jax_core
from jax._src.state import indexing

from pallaslab.model._jax.equation_fields import call_site_of, memory_space_of
from pallaslab.model._jax.trace import all_sub_jaxprs
from pallaslab.model.kernel import Kernel

HazardKind = Literal["unwaited-copy", "uncommitted-smem"]
Window = tuple[tuple[int, int], ...] | None  # per dimension [lo, hi); None: not static
_WRITES = frozenset({"swap", "addupdate"})
_STATE_OPS = frozenset({"get", "swap", "addupdate"})
_LOOPS = frozenset({"scan", "while"})
_NOT_ACCESSES = frozenset({"barrier_wait", "barrier_arrive"})


@dataclasses.dataclass(frozen=True)
class SmemRef:
    origin: str  # "scoped[0]", "scratch[1]", ...
    param: str | None  # the kernel body's parameter name

    def __str__(self) -> str:
        return f"{self.origin} ({self.param})" if self.param else self.origin


@dataclasses.dataclass(frozen=True)
class SmemHazard:
    """SMEM touched while a TMA copy may still use it."""

    kind: HazardKind
    ref: SmemRef
    copy_line: str | None  # "file.py:LINE" of the TMA copy (unwaited) or of the store
    access_line: str | None  # of the access (unwaited) or of copy_smem_to_gmem
    access: str  # "read", "write", or the primitive ("wgmma", "copy_smem_to_gmem")
    barrier: SmemRef | None = None  # the copy's barrier (unwaited-copy)


@dataclasses.dataclass(frozen=True)
class _InFlight:
    ref: SmemRef
    window: Window
    barrier: SmemRef | None
    barrier_index: Window
    line: str | None


@dataclasses.dataclass
class _State:
    in_flight: list[_InFlight] = dataclasses.field(default_factory=list)
    stored: list[_InFlight] = dataclasses.field(default_factory=list)  # written, uncommitted

    def copy(self) -> _State:
        return _State(list(self.in_flight), list(self.stored))

    def absorb(self, other: _State) -> None:
        """What either path may leave: the union, each entry once."""
        self.in_flight += [e for e in other.in_flight if e not in self.in_flight]
        self.stored += [e for e in other.stored if e not in self.stored]


@dataclasses.dataclass
class _Walk:
    refs: dict[Any, SmemRef]
    found: dict[SmemHazard, None] = dataclasses.field(default_factory=dict)


def smem_hazards(kernel: Kernel) -> tuple[SmemHazard, ...]:
    """The SMEM ordering hazards of a Mosaic GPU `plgpu.kernel` (none for other kernels)."""
    if kernel.kind != "mesh" or kernel.backend != "mosaic_gpu":
        return ()
    body = kernel.handle.eqn.params["jaxprs"][0]
    refs = {v: SmemRef(op.origin, op.param)
            for v, op in zip(body.invars, kernel.operands, strict=False)}
    _name_scoped(body, refs, [0])
    walk = _Walk(refs)
    _run(body, _State(), walk)
    return tuple(walk.found)


def _name_scoped(jaxpr: Any, refs: dict[Any, SmemRef], count: list[int]) -> None:
    """`run_scoped` buffers as the capture numbers them (`nested`): "scoped[i]" in the order a
    depth-first walk meets them, with the body's parameter names."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "run_scoped":
            inner = eqn.params["jaxpr"]
            names = getattr(inner.debug_info, "arg_names", None) or ()
            for i, v in enumerate(inner.invars):
                param = str(names[i]) if i < len(names) and names[i] else None
                refs[v] = SmemRef(f"scoped[{count[0]}]", param)
                count[0] += 1
        subs = [eqn.params["body_jaxpr"].jaxpr] if eqn.primitive.name == "while" else \
            list(all_sub_jaxprs(eqn.params))
        for sub in subs:
            _name_scoped(getattr(sub, "jaxpr", sub), refs, count)


def _run(jaxpr: Any, state: _State, walk: _Walk) -> None:
    for eqn in jaxpr.eqns:
        _step(eqn, state, walk)


def _step(eqn: Any, state: _State, walk: _Walk) -> None:
    name = eqn.primitive.name
    if name == "copy_gmem_to_smem":
        _copy_in(eqn, state, walk)
    elif name == "barrier_wait":
        _wait(eqn, state, walk)
    elif name == "commit_smem":
        state.stored.clear()
    elif name == "cond":
        _cond(eqn, state, walk)
    elif name in _LOOPS:
        _loop(eqn, state, walk)
    elif name == "run_scoped":  # its constvars are the refs it closes over
        inner = eqn.params["jaxpr"]
        _bind(walk, inner.constvars, eqn.invars)
        _run(inner, state, walk)
    elif subs := list(all_sub_jaxprs(eqn.params)):  # pjit, closed calls: inline
        for sub in subs:
            jaxpr = getattr(sub, "jaxpr", sub)
            _bind(walk, jaxpr.invars, eqn.invars)
            _run(jaxpr, state, walk)
    else:
        _access(eqn, state, walk)
        if name == "copy_smem_to_gmem":
            _copy_out(eqn, state, walk)
        elif name in _WRITES:
            _store(eqn, state, walk)


def _cond(eqn: Any, state: _State, walk: _Walk) -> None:
    after = _State()
    for branch in eqn.params["branches"]:
        _bind(walk, branch.jaxpr.invars, eqn.invars[1:])
        path = state.copy()
        _run(branch.jaxpr, path, walk)
        after.absorb(path)
    state.in_flight[:], state.stored[:] = after.in_flight, after.stored


def _loop(eqn: Any, state: _State, walk: _Walk) -> None:
    """Two iterations in order; a loop that may not run at all also leaves what came in."""
    if eqn.primitive.name == "while":
        nc = eqn.params["cond_nconsts"]
        body = eqn.params["body_jaxpr"].jaxpr
        _bind(walk, body.invars, eqn.invars[nc:])
        may_skip = True
    else:
        body = eqn.params["jaxpr"].jaxpr
        _bind(walk, body.invars, eqn.invars)
        may_skip = eqn.params.get("length", 1) == 0
    before = state.copy()
    for _ in range(1 if eqn.params.get("length") == 1 else 2):
        _run(body, state, walk)
    if may_skip:
        state.absorb(before)


def _bind(walk: _Walk, inner: Sequence[Any], outer: Sequence[Any]) -> None:
    """A sub-jaxpr's parameters name the refs they are bound to."""
    if len(inner) != len(outer):
        return
    for iv, ov in zip(inner, outer, strict=True):
        if isinstance(ov, jax_core.Var) and ov in walk.refs:
            walk.refs.setdefault(iv, walk.refs[ov])


# --- the TMA copies, the barrier waits, the threads' accesses -------------------------------


def _copy_in(eqn: Any, state: _State, walk: _Walk) -> None:
    params = eqn.params
    has_barrier = bool(params.get("has_barrier"))
    leaves = iter(eqn.invars[3 if has_barrier else 2:])
    _take(leaves, params["src_transforms_treedef"])
    dst_transforms = _take(leaves, params["dst_transforms_treedef"])
    barrier_transforms = _take(leaves, params["barrier_transforms_treedef"])
    dst = walk.refs.get(eqn.invars[1])
    if dst is None or not has_barrier:  # a copy no barrier tracks: nothing to wait on
        return
    _touch(eqn, dst, _window(dst_transforms, eqn.invars[1].aval), state, walk, "write")
    barrier = walk.refs.get(eqn.invars[2])
    state.in_flight.append(_InFlight(
        dst, _window(dst_transforms, eqn.invars[1].aval), barrier,
        _window(barrier_transforms, eqn.invars[2].aval), call_site_of(eqn)))


def _wait(eqn: Any, state: _State, walk: _Walk) -> None:
    barrier = walk.refs.get(eqn.invars[0])
    index = _window(eqn.params["transforms_treedef"].unflatten(eqn.invars[1:]),
                    eqn.invars[0].aval)
    state.in_flight[:] = [
        e for e in state.in_flight
        if not (barrier is None or e.barrier is None
                or (e.barrier == barrier and not _known_disjoint(e.barrier_index, index)))]


def _copy_out(eqn: Any, state: _State, walk: _Walk) -> None:
    src = walk.refs.get(eqn.invars[0])
    if src is None:
        return
    window = _access_window(eqn, 0)
    for e in state.stored:
        if e.ref == src and _overlap(e.window, window):
            walk.found[SmemHazard("uncommitted-smem", src, e.line, call_site_of(eqn),
                                  "copy_smem_to_gmem")] = None


def _store(eqn: Any, state: _State, walk: _Walk) -> None:
    ref = walk.refs.get(eqn.invars[0])
    if ref is None or memory_space_of(eqn.invars[0].aval) != "smem":
        return
    transforms = eqn.params["tree"].unflatten(eqn.invars[2:])
    state.stored.append(_InFlight(ref, _window(transforms, eqn.invars[0].aval), None, None,
                                  call_site_of(eqn)))


def _access(eqn: Any, state: _State, walk: _Walk) -> None:
    """Threads (or a TMA store, an MMA) using SMEM a copy may still be filling."""
    name = eqn.primitive.name
    if name in _NOT_ACCESSES or not state.in_flight:
        return
    what = "read" if name == "get" else "write" if name in _WRITES else name
    for i, v in enumerate(eqn.invars):
        ref = walk.refs.get(v) if isinstance(v, jax_core.Var) else None
        if ref is not None and (name not in _STATE_OPS or i == 0):
            _touch(eqn, ref, _access_window(eqn, i), state, walk, what)


def _access_window(eqn: Any, i: int) -> Window:
    """The part of operand `i` that `eqn` touches: None (some part) where not read off."""
    name, ref = eqn.primitive.name, eqn.invars[i]
    if name in _STATE_OPS:
        transforms = eqn.params["tree"].unflatten(eqn.invars[1 if name == "get" else 2:])
        return _window(transforms, ref.aval)
    if name == "copy_smem_to_gmem" and i == 0:
        return _window(_take(iter(eqn.invars[2:]), eqn.params["src_transforms_treedef"]),
                       ref.aval)
    return None


def _touch(eqn: Any, ref: SmemRef, window: Window, state: _State, walk: _Walk,
           what: str) -> None:
    for e in state.in_flight:
        if e.ref == ref and _overlap(e.window, window):
            walk.found[SmemHazard("unwaited-copy", ref, e.line, call_site_of(eqn), what,
                                  e.barrier)] = None


# --- windows ---------------------------------------------------------------------------------


def _take(leaves: Iterator[Any], treedef: Any) -> Any:
    return treedef.unflatten([next(leaves) for _ in range(treedef.num_leaves)])


def _window(transforms: Any, aval: Any) -> Window:
    """The elements a ref's transforms select, per dimension of the ref; () for the whole ref;
    None when not static (a dynamic start, a reshaping transform before an index)."""
    transforms = list(transforms or ())
    if not transforms:
        return ()
    first, rest = transforms[0], transforms[1:]
    if not isinstance(first, indexing.NDIndexer) or \
            any(isinstance(t, indexing.NDIndexer) for t in rest):
        return () if not any(isinstance(t, indexing.NDIndexer) for t in transforms) else None
    shape = tuple(getattr(getattr(aval, "inner_aval", aval), "shape", ()))
    window = []
    for index in first.indices:
        if isinstance(index, indexing.Slice):
            start = _static(index.start)
            if start is None or index.stride != 1:
                return None
            window.append((start, start + int(index.size)))
        elif (at := _static(index)) is not None:
            window.append((at, at + 1))
        else:
            return None
    return tuple(window) + tuple((0, s) for s in shape[len(window):])


def _static(value: Any) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, jax_core.Literal):
        try:
            return int(value.val)
        except (TypeError, ValueError):
            return None
    return None


def _overlap(a: Window, b: Window) -> bool:
    """Known to overlap: () is the whole ref, which overlaps any part of it; a part that is
    not static (None) is never judged against another part."""
    if a == () or b == ():
        return True
    if a is None or b is None:
        return False
    return all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b, strict=False))


def _known_disjoint(a: Window, b: Window) -> bool:
    return a is not None and b is not None and a != () and b != () and not _overlap(a, b)
