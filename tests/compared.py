"""The deliberately wrong catalog kernel compared against its reference, shared by the Compare
view's Python and Chromium tests."""

from __future__ import annotations

import dataclasses

import numpy as np
from kernels import CATALOG, shifted_block_reference

import pallaslab
from pallaslab.execute import Comparison
from pallaslab.execute.causes import Cause, Provenance
from pallaslab.views.compare import compare_workbench

LINE_CAUSE = "8,192 wrong elements, all last written by kernels.py:390 in program (2,)"


def wrong_comparison():
    """(workbench, Compare view, x): `shifted_block_wrong` under interpret and reference."""
    fn, args = CATALOG["shifted_block_wrong"].case()
    wb = pallaslab.inspect(fn, *args)
    view = compare_workbench(wb, executors=("interpret", "reference"),
                             reference=shifted_block_reference)
    return wb, view, np.asarray(args[0])


def explained(comparison: Comparison) -> Comparison:
    """The comparison with a hand-built cause and value provenance: program i wrote rows
    64i..64i+63 at one line (what the line recorder records for this kernel)."""
    prov = Provenance(
        program_of=np.repeat(np.arange(4, dtype=np.int32), 64)[:, None].repeat(128, 1),
        line_of=np.zeros((256, 128), np.int32), programs=((0,), (1,), (2,), (3,)),
        lines=("kernels.py:390",))
    cause = Cause("line", None, "kernels.py:390", ((2,),), LINE_CAUSE)
    return Comparison(comparison.executors, comparison.results, tuple(
        dataclasses.replace(o, causes=(cause,), provenance=prov) for o in comparison.outputs),
        comparison.kernels)
