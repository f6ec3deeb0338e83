"""The production corpus (tests/production.py: tokamax's kernels) as one table: capture,
check findings, compile verdict with the compiler's resources, VMEM estimate vs libtpu.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/production_corpus.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from production import CORPUS, tokamax_on_cpu

import pallaslab
from pallaslab.analysis.inspection import inspect_capture
from pallaslab.analysis.occupancy import occupancy


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.0f}"


def main() -> None:
    print(f"{'case':28s} {'kernel':32s} {'capture':8s} {'findings':16s} {'compile':34s} "
          f"{'VMEM est/exact KiB':>19s} {'secs':>5s}")
    for name, case in CORPUS.items():
        t = time.perf_counter()
        with tokamax_on_cpu():
            try:
                fn, args = case()
                cap = pallaslab.capture(fn, *args)
            except Exception as err:
                print(f"{name:28s} {'-':32s} {'error':8s} {type(err).__name__}: {err}"[:160])
                continue
            triton = any(k.backend == "triton" for k in cap)
            target = "gpu-h100" if triton else "tpu-v5e"
            lowered = pallaslab.lower(fn, *args, target=target, compile=True,
                                      vmem_exact=not triton)
        secs = time.perf_counter() - t
        inspections = inspect_capture(cap, chips=("v5e",))
        for kernel, insp, result in zip(cap, inspections, lowered.kernels, strict=True):
            codes = sorted({f.code for f in insp.findings if f.severity != "info"})
            res = result.resources
            verdict = ("ok" if result.ok else "FAILED") + (
                f" {target}: {res.registers} regs, {_kib(res.smem_bytes)} KiB smem, "
                f"{res.spills} B spills" if triton else f" {target}")
            exact = next((dict(d.data)["vmem_bytes"] for d in result.diagnostics
                          if d.code == "vmem-exact"), None)
            est = None if triton else occupancy(kernel, "v5e").bytes
            print(f"{name:28s} {kernel.name:32s} {'ok':8s} {','.join(codes) or 'none':16s} "
                  f"{verdict:34s} {_kib(est):>9s}/{_kib(exact):<9s} {secs:5.1f}")


if __name__ == "__main__":
    main()
