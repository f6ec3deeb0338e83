"""A comparison's causes and findings retold in a learner's words (one line each).

The causes (`pallaslab.execute.causes`) and findings say what pallaslab established; this
module only rephrases them and adds what to do about it. Causes are read with `getattr` so
that a comparison without them still gets a diagnosis from its findings and mismatches.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pallaslab.analysis.finding import Finding

_REF_NAME = re.compile(r"\((\w+)\)")


def operand_name(origin: str | None) -> str:
    """"args[1] (y_ref)" -> "y_ref"; an origin without a kernel parameter name stays."""
    if not origin:
        return "an operand"
    m = _REF_NAME.search(origin)
    return m.group(1) if m else origin


def programs_text(programs: Sequence[Sequence[int]], most: int = 3) -> str:
    shown = ", ".join(str(tuple(p)) for p in programs[:most])
    more = len(programs) - most
    return shown + (f" and {more} more" if more > 0 else "")


def cause_line(cause: Any, reduction_axis: int | None = None) -> str:
    """One cause (`index-map`, `first-visit`, `line`) as the learner should read it;
    `reduction_axis`: the grid axis an accumulator's program id is tested on."""
    kind, message = cause.kind, cause.message
    name = operand_name(cause.operand)
    where = f" ({cause.line})" if cause.line else ""
    if kind == "index-map":
        if "transposed" in message:
            return (f"your {name} index map looks transposed{where}: the programs read the "
                    f"blocks the reference needs with their indices swapped. {message}")
        return (f"your {name} index map reads the wrong blocks{where}: {message}")
    if kind == "first-visit":
        axis = "AXIS" if reduction_axis is None else str(reduction_axis)
        when = f"pl.program_id({axis}) == 0"
        said = (f"axis {axis}: the grid axis the accumulation runs over"
                if reduction_axis is not None
                else "AXIS: the number of the grid axis the accumulation runs over")
        return (f"the accumulator {name} is read before its first write{where}: initialise "
                f"it under `@pl.when({when})` ({said}). "
                + message.replace("pl.program_id(k)", f"pl.program_id({axis})"))
    if kind == "line":
        return f"the wrong values were written here: {message}"
    return message


def finding_line(f: Finding) -> str | None:
    """A kernel-error finding as advice; None for findings a learner need not act on."""
    name = operand_name(f.operand)
    who = programs_text(f.programs)
    if f.code in ("data-race", "parallel-write-conflict"):
        pair = f"programs {who}" if len(f.programs) > 1 else "several programs"
        return (f"{pair} write the same {name} block: mark the grid axis that revisits it "
                f"'arbitrary' in `dimension_semantics` (or give each program its own block). "
                f"{f.message}")
    if f.code == "unwritten-output":
        return (f"output elements no program wrote ({name}): check that the grid covers the "
                f"whole output and that every program stores its block. {f.message}")
    if f.code in ("out-of-bounds-read", "block-out-of-bounds"):
        return (f"{name}: a program reads or writes outside the array: check the grid size and "
                f"the index map's block indices. {f.message}")
    if f.severity == "error":
        return f"{f.code}: {f.message}"
    return None


def mismatch_lines(comparison: Any) -> list[str]:
    """Where the output differs from the reference, when no cause was named."""
    lines = []
    for o in comparison.outputs:
        for p in o.pairs:
            if p.allclose or p.error:
                continue
            gridded = any(len(b) for b in p.programs)  # a kernel without a grid has one block
            blocks = f" in block(s) {programs_text(p.mismatched_blocks)}" \
                if p.mismatched_blocks and gridded else ""
            writers = f", written by program(s) {programs_text(p.programs)}" \
                if gridded else ""
            lines.append(f"{o.origin}: {p.mismatched_elements:,} element(s) differ from the "
                         f"reference (largest error {p.max_abs_err:.3g}){blocks}{writers}")
    return lines


_UNWRITTEN = ("unwritten-output", "uncovered-output")
_OUTSIDE = ("out-of-bounds-read", "block-out-of-bounds")


def diagnosis(comparison: Any) -> tuple[str, ...]:
    """The learner's lines for a failed comparison: causes first, then findings, then where
    the output differs. One line per cause (a finding several operands share is one line),
    operands named by the kernel's own parameter names, no line breaks inside a line."""
    kernels = tuple(getattr(comparison, "kernels", ()))
    lines: list[str] = []
    findings = list(comparison.findings)
    unwritten = any(f.code in _UNWRITTEN for f in findings)
    for o in comparison.outputs:
        lines += [cause_line(c, reduction_axis(kernels, c.operand))
                  for c in getattr(o, "causes", ())
                  if (c.kind != "line" or not _has_other_causes(o))
                  and not (unwritten and ("no program wrote" in c.message
                                          or "never written" in c.message))]
    first_visit = any(c.kind == "first-visit" for o in comparison.outputs
                      for c in getattr(o, "causes", ()))
    outside = [f for f in findings if f.code in _OUTSIDE]
    if outside:
        offsets = element_offsets_line(kernels)
        lines.append((offsets + " " if offsets else "") + _outside_line(outside))
    if not first_visit:  # else: the NaN of the uninitialised read
        unwritten_line = _unwritten_line([f for f in findings if f.code in _UNWRITTEN])
        if unwritten_line is not None:
            lines.append(unwritten_line)
    for f in findings:
        if f.code in _UNWRITTEN or f.code in _OUTSIDE:
            continue
        line = finding_line(f)
        if line is not None:
            lines.append(line)
    lines += device_lines(comparison)
    if not lines:
        lines = mismatch_lines(comparison)
    names = param_names(kernels)
    return tuple(dict.fromkeys(one_line(named(line, names)) for line in lines))


def _outside_line(found: list[Finding]) -> str:
    """Blocks outside their arrays, one line for every operand they concern."""
    who = ", ".join(dict.fromkeys(operand_name(f.operand) for f in found))
    return (f"{who}: a program reads or writes outside the array: check the grid size and the "
            f"index map's block indices. {found[0].message}")


def _unwritten_line(found: list[Finding]) -> str | None:
    """Output elements no program wrote, one line per output, with one count: the static
    finding's (what the grid's blocks cover, as on hardware) when there is one, else the
    run's (what the interpreter left unwritten)."""
    if not found:
        return None
    static = [f for f in found if f.code == "uncovered-output"]
    said = static or found
    who = ", ".join(dict.fromkeys(operand_name(f.operand) for f in said))
    return (f"output elements no program wrote ({who}): check that the grid covers the "
            f"whole output and that every program stores its block. "
            + " ".join(dict.fromkeys(f.message for f in said)))


def one_line(text: str) -> str:
    """A bullet on one line: a notebook wraps it at the width it has."""
    return " ".join(text.split())


def param_names(kernels: Sequence[Any]) -> dict[str, str]:
    """Operand origin -> the kernel function's own parameter name ("args[1]" -> "b_ref"),
    for origins every kernel names alike."""
    found: dict[str, set[str]] = {}
    for k in kernels:
        for op in getattr(k, "operands", ()):
            if op.param and not op.param.startswith("*"):
                found.setdefault(op.origin, set()).add(op.param)
    return {origin: next(iter(p)) for origin, p in found.items() if len(p) == 1}


def named(text: str, names: dict[str, str]) -> str:
    """`text` with Pallas's origins ("args[1] (b_ref)", "args[1]", "outputs") replaced by the
    parameter names the learner wrote."""
    for origin, param in names.items():
        text = text.replace(f"{origin} ({param})", param)
    for origin, param in sorted(names.items(), key=lambda kv: -len(kv[0])):
        if "[" in origin:
            text = re.sub(rf"(?<![\w.]){re.escape(origin)}", param, text)
        else:  # a bare origin ("outputs") only where it names the operand
            text = re.sub(rf"(?<![\w\[.]){re.escape(origin)}(?=[:')]| block| index)",
                          param, text)
    return text


def reduction_axis(kernels: Sequence[Any], origin: str | None) -> int | None:
    """The grid axis an accumulator's output blocks do not follow (the last such axis), in
    the kernel that has `origin` (e.g. 2 for a grid (i, j, k) whose output map is (i, j))."""
    import numpy as np

    from pallaslab.analysis.tiling import tile

    origin = (origin or "").split(" (")[0]
    for kernel in kernels:
        if origin and not any(op.origin == origin for op in kernel.operands):
            continue
        try:
            tiling = tile(kernel)
        except Exception:  # no tiling: no axis to name
            return None
        if tiling is None or not tiling.grid or tiling.programs == 0:
            return None
        outs = [t for t in tiling.operands.values() if t.role == "output"]
        if not outs:
            return None
        ids = tiling.program_ids()
        free = []
        for axis in range(len(tiling.grid)):
            others = np.delete(ids, axis, axis=1)
            if all(len(np.unique(np.concatenate([others, t.block_indices], axis=1), axis=0))
                   == len(np.unique(others, axis=0)) for t in outs):
                free.append(axis)
        return free[-1] if free else len(tiling.grid) - 1
    return None


def element_offsets_line(kernels: Sequence[Any]) -> str | None:
    """The sentence for index maps that return element offsets (block index x block size)
    where Pallas wants block indices, when some operand's map does so."""
    import numpy as np

    from pallaslab.analysis.tiling import tile

    who: list[str] = []
    example = None
    for kernel in kernels:
        try:
            tiling = tile(kernel)
        except Exception:  # no tiling: nothing to say
            continue
        if tiling is None or tiling.programs == 0:
            continue
        for t in tiling.operands.values():
            bi = np.asarray(t.block_indices)
            scale = np.asarray(t.scale)
            count = -(-np.asarray(t.shape) // np.maximum(scale, 1))
            if bi.ndim != 2 or bi.shape[1] != len(scale) or not len(bi):
                continue
            beyond = (bi >= count).any(axis=0) & (scale > 1)
            if not beyond.any():
                continue
            dims = np.flatnonzero(beyond)
            if not all((bi[:, d] % scale[d] == 0).all() and (bi[:, d] // scale[d] < count[d]
                                                              ).all() for d in dims):
                continue
            who.append(operand_name(t.origin))
            if example is None:
                step = int(np.flatnonzero((bi >= count).any(axis=1))[0])
                got = tuple(int(v) for v in bi[step])
                want = tuple(int(v) // int(s) if d in dims else int(v)
                             for d, (v, s) in enumerate(zip(bi[step], scale, strict=True)))
                example = (tiling.program_at(step), got, want)
    if example is None:
        return None
    program, got, want = example
    maps = "index map" if len(who) == 1 else "index maps"
    return (f"index maps return block indices, not element offsets: your {', '.join(who)} "
            f"{maps} return {got} for program {program}, the element where block {want} "
            f"starts; return the block index ({want}): Pallas multiplies it by the block size.")


def device_lines(comparison: Any) -> list[str]:
    """A run on simulated devices: which device's shard is wrong and which DMA wrote it."""
    shards = [n for n in comparison.notes
              if n.startswith("device ") and "mismatched elements" in n]
    if not shards:
        return []
    return [f"{mismatch_lines(comparison)[0] if mismatch_lines(comparison) else 'a mismatch'}"
            "; check which device each remote copy sends to (`device_id`) and which "
            "shard it sends", *shards]


def _has_other_causes(output: Any) -> bool:
    return any(c.kind != "line" for c in getattr(output, "causes", ()))
