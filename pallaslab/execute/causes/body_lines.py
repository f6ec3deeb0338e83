"""The line a value bug is on: the masks, selects, running maxima and accumulators that the
wrong elements' values flow through, ranked by how differently they behave at the wrong
elements than at the right ones.

Programs are grouped by their parallel grid indices (a group shares its scratch: one row of
blocks of an attention or a reduction); a few groups holding wrong elements and a few holding
right ones are re-run (`_jax.BodyEvaluator`, the replay's blocks and scratch as they were), and
each mask or choice in the slice of the wrong store is summarised per element as the values
it took across its group's programs.

With the reference's values, a mask or select is named when taking its other value at the
wrong elements only (`_jax.Flip`, the program re-run from its blocks as they were) gives the
reference's values there: ranked by the share of wrong elements that flip repairs. A running
sum whose added term depends on a running maximum while its carried value never does is
named as a suspicion when the wrong elements lie where that maximum moved. Without the
reference, a site whose summary is the same at every wrong element and rare at the right ones
ranks high.
"""

from __future__ import annotations

import dataclasses
import linecache
from typing import Any

import numpy as np

from pallaslab.execute.causes.provenance import Provenance, Replay
from pallaslab.model import Kernel, _jax
from pallaslab.model._jax.body_values import MASKS, BodyNotEvaluated, Flip, ProgramValues
from pallaslab.model.source_names import short_source

MAX_GROUPS = 2  # groups of programs with wrong elements (and as many with right ones)
MAX_STEPS = 256  # programs evaluated with every intermediate
SEPARATES = 0.5  # the score from which a site is said to behave differently
MAX_NAMED = 3
MAX_FLIPPED = 4  # programs holding wrong elements re-run per flipped site
ROLE = {"select_n": "select", "max": "running max", "min": "running min"}


@dataclasses.dataclass(frozen=True)
class BodyLine:
    """A line the wrong values flow through, ranked."""

    line: str  # "file.py:N"
    text: str  # that line's source text
    role: str  # "mask", "select", "running max", "accumulator"
    score: float  # 0..1: how differently it behaves at wrong elements than at right ones

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Expected:
    """The reference's values of the kernel output, and the tolerance they are judged by."""

    values: np.ndarray
    rtol: float
    atol: float


def body_lines(kernel: Kernel, replay: Replay, origin: str, wrong: np.ndarray,
               prov: Provenance, expected: Expected | None = None
               ) -> tuple[tuple[BodyLine, ...], str] | None:
    """Ranked lines and the sentence saying them (None: nothing can be said)."""
    j = next(k for k, op in enumerate(kernel.outputs) if op.origin == origin)
    ids = replay.tiling.program_ids()
    parallel = _parallel_axes(kernel)
    writer = prov.program_of
    written = writer >= 0
    key_of = np.array([hash(tuple(np.asarray(p)[parallel])) for p in prov.programs])
    group = np.where(written, key_of[np.maximum(writer, 0)], 0)
    bad = list(dict.fromkeys(group[wrong & written].tolist()))[:MAX_GROUPS]
    good = list(dict.fromkeys(group[~wrong & written].tolist()))[:MAX_GROUPS]
    if not bad:
        return None
    keys = np.array([hash(tuple(row[parallel])) for row in ids])
    steps = [int(s) for s in np.flatnonzero(np.isin(keys, bad + good))][:MAX_STEPS]
    writers = {prov.programs[p] for p in np.unique(writer[wrong & written]).tolist()}
    tapped = _Tapped(replay, set(steps), j, writers)
    try:
        tapped.run(max(steps))
    except BodyNotEvaluated as e:
        return (), f"the line cannot be narrowed further: {e}"
    sig, block = tapped.signatures(keys), tapped.block
    slice_ = frozenset().union(*tapped.out_deps)
    ev = tapped.evaluator
    pos = _positions(wrong.shape, block)
    sure = _repairing(tapped, wrong & written, prov, expected) if expected is not None else []
    suspected = _unrescaled(tapped, slice_, group, pos, wrong & written, ~wrong & written,
                            keys)
    if sure or suspected:
        sure, suspected = sure[:MAX_NAMED], suspected[:MAX_NAMED - len(sure[:MAX_NAMED])]
        sentences = ["the wrong values flow through " + "; ".join(t for _, t in sure)] \
            if sure else []
        sentences += [t for _, t in suspected]
        return tuple(b for b, _ in sure + suspected), "; ".join(sentences)
    if expected is not None:
        return (), ("no mask or select its values flow through gives the reference's values "
                    "when it takes its other value at the wrong elements, so the line cannot "
                    "be narrowed further")
    ranked = []
    for site in sorted(slice_ & set(tapped.sites_seen)):
        s = ev.sites[site]
        if s.line is None:
            continue
        score = _score(sig, site, group, pos, wrong & written, ~wrong & written, bad + good)
        if score is not None:
            ranked.append(BodyLine(short_source(s.line) or s.line, _text(s.line),
                                   ROLE.get(s.primitive, "mask"), score))
    ranked.sort(key=lambda b: -b.score)
    lines = _unique(b for b in ranked if b.score >= SEPARATES)
    if not good:
        return (), ("every element these programs wrote is wrong: no right element to tell "
                    "its lines apart, so the line cannot be narrowed further")
    if not lines:
        return (), ("none of the masks, selects or running maxima its values flow through "
                    "behaves differently at the wrong elements than at the right ones, so "
                    "the line cannot be narrowed further")
    named = lines[:MAX_NAMED]
    said = "; ".join(f"{b.line} `{b.text}` (a {b.role} that differs at the wrong elements)"
                     for b in named)
    return tuple(named), f"the wrong values flow through {said}"


def _repairing(tapped: _Tapped, wrong: np.ndarray, prov: Provenance, expected: Expected
               ) -> list[tuple[BodyLine, str]]:
    """Masks and selects whose other value at the wrong elements gives the reference's
    values there, by the share repaired (a select fed by such a mask is left out: it only
    passes the mask's value on)."""
    out = tapped.arrays[tapped.n_in + tapped.j]
    if expected.values.shape != wrong.shape or wrong.ndim != out.ndim:
        return []
    pad = [(0, t - s) for s, t in zip(wrong.shape, out.shape, strict=True)]
    index = {p: k for k, p in enumerate(prov.programs)}
    ev, at = tapped.evaluator, tapped.at
    fixed: dict[int, int] = {}
    total = 0
    deps: dict[int, frozenset[int]] = {}
    for step, ids, refs in tapped.kept[:MAX_FLIPPED]:
        region = tapped.region_of(step)
        mine = np.pad(wrong & (prov.program_of == index[ids]), pad)[region]
        where = _squeeze(mine, tapped.runner.squeezed[tapped.n_in + tapped.j])
        want = _squeeze(np.pad(expected.values, pad)[region],
                        tapped.runner.squeezed[tapped.n_in + tapped.j])
        values = tapped.values_at[step]
        total += int(where.sum())
        for s in _flippable(ev, values, at, where.shape):
            deps[s] = frozenset().union(*values.operand_deps.get(s, ()))
            new = ev.run(ids, refs, Flip(s, where)).outputs[at]
            fixed[s] = fixed.get(s, 0) + int(np.isclose(
                new[where], want[where], rtol=expected.rtol, atol=expected.atol).sum())
    share = {s: f / total for s, f in fixed.items() if total and f / total >= SEPARATES}
    kept = [s for s in share if not any(d in deps[s] and share[d] >= share[s] for d in share)]
    kept.sort(key=lambda s: (-share[s], s))
    found = []
    for k in kept:
        site = ev.sites[k]
        if site.line is None:
            continue
        role = ROLE.get(site.primitive, "mask")
        b = BodyLine(short_source(site.line) or site.line, _text(site.line), role, share[k])
        found.append((b, f"{b.line} `{b.text}` (a {role}: with its other value at the wrong "
                         f"elements, {fixed[k]:,} of {total:,} take the reference's values)"))
    return _unique_said(found)


def _flippable(ev: Any, values: ProgramValues, at: int, shape: tuple[int, ...]) -> list[int]:
    """The boolean masks and selects in the store's slice whose value has the block's shape."""
    return sorted(s for s in values.out_deps[at] if s >= 0 and s in values.features
                  and np.shape(values.features[s]) == shape
                  and (ev.sites[s].primitive == "select_n" or (
                      ev.sites[s].primitive in MASKS
                      and np.asarray(values.features[s]).dtype == bool)))


def _unrescaled(tapped: _Tapped, slice_: frozenset[int], group: np.ndarray, pos: np.ndarray,
                wrong: np.ndarray, right: np.ndarray, keys: np.ndarray
                ) -> list[tuple[BodyLine, str]]:
    """A running sum (a scratch value plus a term) whose term depends on a running maximum
    while its carried value never does, named when the wrong elements lie where that maximum
    moved after its group's first step (there the carried value needed rescaling)."""
    ev = tapped.evaluator
    found = []
    for site, r, m in _accumulators(ev, tapped.taken):
        if -1 - r not in slice_:
            continue  # the wrong store does not read that running sum
        moved = _moved(tapped, m, keys)
        at_wrong = _lookup(moved, group, pos, wrong)
        at_right = _lookup(moved, group, pos, right)
        share = float(at_wrong.mean()) if at_wrong.size else 0.0
        if share < SEPARATES or (at_right.size and at_right.mean() >= share):
            continue
        s = ev.sites[site]
        if s.line is None:
            continue
        b = BodyLine(short_source(s.line) or s.line, _text(s.line), "accumulator", share)
        found.append((b, f"suspected: the running sum at {b.line} `{b.text}` adds terms scaled "
                         "by the new maximum but its carried value is never rescaled "
                         f"({int(at_wrong.sum()):,} of {at_wrong.size:,} wrong elements lie "
                         "where the running maximum moved after its first step)"))
    return _unique_said(found)


def _accumulators(ev: Any, taken: list[tuple[int, ProgramValues]]
                  ) -> list[tuple[int, int, int]]:
    """(add site, the ref it accumulates into, the `max` site its term depends on) for each
    `carried + term` whose carried value is a ref's own value never touched by a `max`."""
    found: dict[int, tuple[int, int, int]] = {}
    for _, values in taken:
        for site, ops in values.operand_deps.items():
            if ev.sites[site].primitive != "add" or len(ops) != 2 or site in found:
                continue
            for carried, term in (ops, ops[::-1]):
                maxes = sorted(d for d in term if d >= 0 and ev.sites[d].primitive == "max")
                if not maxes or any(d >= 0 and ev.sites[d].primitive == "max"
                                    for d in carried):
                    continue
                refs = [-1 - d for d in carried if d < 0 and site in values.out_deps[-1 - d]]
                if refs:
                    found[site] = (site, refs[0], maxes[0])
    return list(found.values())


def _moved(tapped: _Tapped, m: int, keys: np.ndarray) -> dict[int, np.ndarray]:
    """Per group, per position in the block: whether the running maximum `m` moved at any of
    the group's steps after its first."""
    seen: dict[int, list[np.ndarray]] = {}
    for step, values in tapped.taken:
        f = values.features.get(m)
        p = None if f is None else _project(np.asarray(f, np.float64), tapped.block)
        if p is not None:
            seen.setdefault(int(keys[step]), []).append(p.reshape(-1) != 0)
    return {g: np.any(fs[1:], axis=0) if len(fs) > 1 else np.zeros_like(fs[0])
            for g, fs in seen.items()}


def _lookup(per_group: dict[int, np.ndarray], group: np.ndarray, pos: np.ndarray,
            chosen: np.ndarray) -> np.ndarray:
    return np.concatenate([per_group[g][pos[(group == g) & chosen]] for g in per_group] or
                          [np.zeros(0, bool)])


def _unique_said(found: list[tuple[BodyLine, str]]) -> list[tuple[BodyLine, str]]:
    seen: dict[str, tuple[BodyLine, str]] = {}
    for b, said in found:
        seen.setdefault(b.line, (b, said))
    return list(seen.values())


def _unique(lines: Any) -> list[BodyLine]:
    seen: dict[str, BodyLine] = {}
    for b in lines:
        seen.setdefault(b.line, b)
    return list(seen.values())


def _text(line: str) -> str:
    path, _, n = line.rpartition(":")
    return linecache.getline(path, int(n)).strip() if n.isdigit() else ""


def _parallel_axes(kernel: Kernel) -> list[int]:
    sem = kernel.dimension_semantics
    n = len(kernel.grid)
    if sem is None:  # nothing said: each program on its own
        return list(range(n))
    return [d for d, s in enumerate(sem) if "parallel" in str(s).lower()]


def _positions(shape: tuple[int, ...], block: tuple[int, ...]) -> np.ndarray:
    """Per output element, its flat position inside its block (squeezed dims dropped)."""
    coords = np.indices(shape)
    kept = coords[len(shape) - len(block):] if len(block) < len(shape) else coords
    inside = [c % b for c, b in zip(kept, block, strict=True)]
    return np.ravel_multi_index(inside, block)


def _score(sig: dict[tuple[int, int], np.ndarray], site: int, group: np.ndarray,
           pos: np.ndarray, wrong: np.ndarray, right: np.ndarray, groups: list[int]
           ) -> float | None:
    rows_w, rows_r = [], []
    for g in groups:
        s = sig.get((g, site))
        if s is None:
            continue
        rows_w.append(s[pos[(group == g) & wrong]])
        rows_r.append(s[pos[(group == g) & right]])
    if not rows_w or not any(len(r) for r in rows_w):
        return None
    w = np.concatenate([r for r in rows_w if len(r)])
    r = np.concatenate(rows_r) if any(len(x) for x in rows_r) else np.zeros(0)
    values, counts = np.unique(w, return_counts=True)
    top = values[np.argmax(counts)]
    purity = counts.max() / len(w)
    rarity = 1.0 - (float(np.mean(r == top)) if len(r) else 0.0)
    return float(purity * rarity)


class _Tapped(Replay):
    """The replay, evaluating the body with its intermediates at the chosen steps."""

    def __init__(self, replay: Replay, steps: set[int], j: int,
                 writers: set[tuple[int, ...]]) -> None:
        super().__init__(replay.kernel, replay.tiling, replay.runner, replay.recorder,
                         replay.operands)
        self.evaluator = _jax.BodyEvaluator(self.kernel.handle.eqn)
        self.chosen, self.j, self.writers = steps, j, writers
        self.at = len(self.scalars) + self.n_in + j  # the output among the body's refs
        self.taken: list[tuple[int, Any]] = []
        self.values_at: dict[int, ProgramValues] = {}
        # programs that wrote wrong elements, with their refs as they were (to re-run)
        self.kept: list[tuple[int, tuple[int, ...], list[np.ndarray]]] = []
        self.out_deps: list[frozenset[int]] = []
        self.sites_seen: set[int] = set()
        self.block: tuple[int, ...] = ()

    def _one(self, step: int, ids: np.ndarray, first_reads: Any) -> None:
        if step in self.chosen:
            r = self.runner
            blocks = [_squeeze(self.arrays[k][self._region(k, step)], r.squeezed[k])
                      for k in range(len(self.arrays))]
            key = tuple(int(i) for i in ids)
            refs = [np.array(x) for x in (*self.scalars, *blocks, *self.scratch)]
            values = self.evaluator.run(key, refs)
            self.block = blocks[self.n_in + self.j].shape
            self.out_deps.append(values.out_deps[self.at])
            self.sites_seen |= set(values.features)
            self.taken.append((step, values))
            self.values_at[step] = values
            if key in self.writers and len(self.kept) < MAX_FLIPPED:
                self.kept.append((step, key, refs))
        super()._one(step, ids, first_reads)

    def region_of(self, step: int) -> tuple[slice, ...]:
        return self._region(self.n_in + self.j, step)

    def signatures(self, keys: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
        """Per (group, site): per position in the block, the values the site took across
        the group's programs (one id per distinct set of values)."""
        stacks: dict[tuple[int, int], list[np.ndarray]] = {}
        for step, values in self.taken:
            for site, f in values.features.items():
                p = _project(np.asarray(f, np.float64), self.block)
                if p is not None:
                    stacks.setdefault((int(keys[step]), site), []).append(p.reshape(-1))
        found = {}
        for k, arrays in stacks.items():
            s = np.sort(np.stack(arrays), axis=0)
            s[1:][s[1:] == s[:-1]] = np.nan
            s = np.sort(s, axis=0)
            rows = [tuple(x for x in col if not np.isnan(x)) for col in s.T]
            found[k] = np.array([hash(row) for row in rows], np.int64)
        return found


def _project(f: np.ndarray, block: tuple[int, ...]) -> np.ndarray | None:
    """A site's value over the output block: broadcast, or averaged over axes it has
    beyond the block's (a mask over scores summarised per row)."""
    if f.ndim != len(block):
        return np.broadcast_to(f, block) if f.ndim == 0 else None
    for d, (a, b) in enumerate(zip(f.shape, block, strict=True)):
        if a not in (1, b):
            f = f.mean(axis=d, keepdims=True)
    return np.broadcast_to(f, block)


def _squeeze(block: np.ndarray, squeezed: tuple[bool, ...]) -> np.ndarray:
    axes = tuple(i for i, s in enumerate(squeezed) if s)
    return block.squeeze(axis=axes) if axes else block
