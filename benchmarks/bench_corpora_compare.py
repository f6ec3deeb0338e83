"""Every correct kernel of the feature catalog (tests/kernels.py), the production corpus
(tests/production.py: tokamax's kernels) and the kernels JAX ships (tests/cases/shipped.py:
`jax.experimental.pallas.ops`) through `pallaslab.compare` with no executor named,
against its reference where the case has one: the outcome of each, every comparison that is
not ALL CLOSE with its reason, and the final line
`corpora: N kernels, all close A, mismatches M, incomplete I (needs a device D), one executor
and no reference O, errors E` (a kernel only one executor runs here, with no reference in its
case, cannot be compared: `compare` asks for a reference).

A catalog kernel is correct unless the catalog expects an error finding of it or tags it as
wrong (wrong, bug, racy, race, deadlock, uncovered); kernels tagged multi-device run on four
simulated devices, as their tests do. An incomplete comparison is one a CPU cannot finish: its
reasons (each executor that did not run) are printed; "needs a device" counts those whose every
reason says the kernel needs a TPU or GPU (compiled for it, or traced on it).

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_corpora_compare.py [NAME ...]
"""

from __future__ import annotations

import collections
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import pallaslab
from pallaslab.execute.protocol import ExecutorError

WRONG_TAGS = frozenset({"wrong", "bug", "racy", "race", "deadlock", "uncovered"})
DEVICES = 4  # the multi-device catalog kernels' simulated devices, as in their tests
NEEDS_DEVICE = ("needs a TPU", "needs a GPU", "run it on a GPU", "run it on a TPU",
                "asked for the device kind while tracing",
                "on a device")


def catalog_cases() -> Iterator[tuple[str, Callable[[], Any], Any, dict[str, Any]]]:
    from kernels import CATALOG

    for name, entry in CATALOG.items():
        if entry.findings or entry.tags & WRONG_TAGS:
            continue
        devices = {"devices": DEVICES} if "multi-device" in entry.tags else {}
        yield f"catalog:{name}", entry.case, entry.reference, devices


def production_cases() -> Iterator[tuple[str, Callable[[], Any], Any, dict[str, Any]]]:
    from production import CORPUS

    for name, case in CORPUS.items():
        yield f"production:{name}", case, None, {}


SHIPPED = ("tpu_flash_attention", "tpu_matmul", "tpu_megablox_gmm", "tpu_paged_attention",
           "tpu_ragged_paged_attention", "gpu_softmax", "gpu_attention")


def shipped_cases() -> Iterator[tuple[str, Callable[[], Any], Any, dict[str, Any]]]:
    from pallaslab.cases import load_function

    here = Path(__file__).resolve().parent.parent / "tests/cases/shipped.py"
    for name in SHIPPED:
        reference = None
        if name == "tpu_ragged_paged_attention":  # JAX ships its reference beside it
            from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel

            reference = kernel.ref_ragged_paged_attention
        yield f"shipped:{name}", load_function(f"{here}:{name}"), reference, {}


def judged(name: str, case: Callable[[], Any], reference: Any,
           options: dict[str, Any]) -> tuple[str, str]:
    """(outcome, the reasons it is not all close) of one kernel's comparison."""
    from production import tokamax_on_cpu

    with tokamax_on_cpu():
        try:
            fn, args = case()
            cmp = pallaslab.compare(fn, *args, reference=reference, **options)
        except ExecutorError as err:  # one executor here, and no reference
            return "one executor", str(err).splitlines()[0][:300]
        except Exception as err:  # a case that cannot even be built or captured here
            return "error", f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
    if cmp.passed:
        return "all close", ""
    reasons = "; ".join(f"{r.executor}: {r.status} ({(r.reason or '')[:240]})"
                        for r in cmp.results if r.status != "ran")
    return cmp.outcome, reasons or cmp.verdict()[:300]


def main(selected: list[str]) -> int:
    start = time.perf_counter()
    tally: collections.Counter[str] = collections.Counter()
    needs_device = 0
    for name, case, reference, options in (*catalog_cases(), *production_cases(),
                                                  *shipped_cases()):
        if selected and not any(s in name for s in selected):
            continue
        t = time.perf_counter()
        outcome, why = judged(name, case, reference, options)
        tally[outcome] += 1
        device = outcome == "incomplete" and any(p in why for p in NEEDS_DEVICE)
        needs_device += device
        print(f"  {name:44s} {outcome:10s} {time.perf_counter() - t:5.1f} s"
              f"{'  ' + why if why else ''}", flush=True)
    n = sum(tally.values())
    print(f"\n{time.perf_counter() - start:.0f} s; outcomes: {dict(tally)}")
    print(f"corpora: {n} kernels, all close {tally['all close']}, mismatches "
          f"{tally['mismatch']}, incomplete {tally['incomplete']} (needs a device "
          f"{needs_device}), one executor and no reference {tally['one executor']}, errors "
          f"{tally['error']}")
    return 0 if tally["mismatch"] == tally["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
