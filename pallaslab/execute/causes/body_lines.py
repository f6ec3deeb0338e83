"""The line a value bug is on: the masks, selects, running maxima and accumulators that the
wrong elements' values flow through, ranked by how differently they behave at the wrong
elements than at the right ones.

Programs are grouped by their parallel grid indices (a group shares its scratch: one row of
blocks of an attention or a reduction); a few groups holding wrong elements and a few holding
right ones are re-run (`_jax.BodyEvaluator`, the replay's blocks and scratch as they were), and
each mask or choice in the slice of the wrong store is summarised per element as the values
it took across its group's programs. A site whose summary is the same at every wrong element
and rare at the right ones ranks high.
"""

from __future__ import annotations

import dataclasses
import linecache
from typing import Any

import numpy as np

from pallaslab.execute.causes.provenance import Provenance, _Replay
from pallaslab.model import Kernel, _jax
from pallaslab.model.source_names import short_source

MAX_GROUPS = 2  # groups of programs with wrong elements (and as many with right ones)
MAX_STEPS = 256  # programs evaluated with every intermediate
SEPARATES = 0.5  # the score from which a site is said to behave differently
MAX_NAMED = 3
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


def body_lines(kernel: Kernel, replay: _Replay, origin: str, wrong: np.ndarray,
               prov: Provenance) -> tuple[tuple[BodyLine, ...], str] | None:
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
    tapped = _Tapped(replay, set(steps), j)
    tapped.run(max(steps))
    sig, block = tapped.signatures(keys), tapped.block
    slice_ = frozenset().union(*tapped.out_deps)
    ev = tapped.evaluator
    pos = _positions(wrong.shape, block)
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


class _Tapped(_Replay):
    """The replay, evaluating the body with its intermediates at the chosen steps."""

    def __init__(self, replay: _Replay, steps: set[int], j: int) -> None:
        super().__init__(replay.kernel, replay.tiling, replay.runner, replay.recorder,
                         replay.operands)
        self.evaluator = _jax.BodyEvaluator(self.kernel.handle.eqn)
        self.chosen, self.j = steps, j
        self.taken: list[tuple[int, Any]] = []
        self.out_deps: list[frozenset[int]] = []
        self.sites_seen: set[int] = set()
        self.block: tuple[int, ...] = ()

    def _one(self, step: int, ids: np.ndarray, first_reads: Any) -> None:
        if step in self.chosen:
            r = self.runner
            blocks = [_squeeze(self.arrays[k][self._region(k, step)], r.squeezed[k])
                      for k in range(len(self.arrays))]
            values = self.evaluator.run(tuple(int(i) for i in ids),
                                        [*self.scalars, *blocks, *self.scratch])
            at = len(self.scalars) + self.n_in + self.j
            self.block = blocks[self.n_in + self.j].shape
            self.out_deps.append(values.out_deps[at])
            self.sites_seen |= set(values.features)
            self.taken.append((step, values))
        super()._one(step, ids, first_reads)

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
