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


def cause_line(cause: Any) -> str:
    """One cause (`index-map`, `first-visit`, `line`) as the learner should read it."""
    kind, message = cause.kind, cause.message
    name = operand_name(cause.operand)
    where = f" ({cause.line})" if cause.line else ""
    if kind == "index-map":
        if "transposed" in message:
            return (f"your {name} index map looks transposed{where}: the programs read the "
                    f"blocks the reference needs with their indices swapped. {message}")
        return (f"your {name} index map reads the wrong blocks{where}: {message}")
    if kind == "first-visit":
        return (f"the accumulator {name} is read before its first write{where}: initialise "
                "it under `pl.when(k == 0)` (k: the reduction axis's program id). " + message)
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


def diagnosis(comparison: Any) -> tuple[str, ...]:
    """The learner's lines for a failed comparison: causes first, then findings, then where
    the output differs."""
    lines: list[str] = []
    unwritten = any(f.code == "unwritten-output" for f in comparison.findings)
    for o in comparison.outputs:
        lines += [cause_line(c) for c in getattr(o, "causes", ())
                  if (c.kind != "line" or not _has_other_causes(o))
                  and not (unwritten and ("no program wrote" in c.message
                                          or "never written" in c.message))]
    first_visit = any(c.kind == "first-visit" for o in comparison.outputs
                      for c in getattr(o, "causes", ()))
    for f in comparison.findings:
        if first_visit and f.code == "unwritten-output":  # the NaN of the uninitialised read
            continue
        line = finding_line(f)
        if line is not None and line not in lines:
            lines.append(line)
    lines += device_lines(comparison)
    if not lines:
        lines = mismatch_lines(comparison)
    return tuple(lines)


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
