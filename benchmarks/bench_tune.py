"""`pallaslab.tune` on a tiled f32 1024^3 matmul (tests/tuning/matmul_case.py): how many
candidates, seconds per candidate with the model only and with libtpu compiling the top 3
(a cold lowering cache of its own), and the top 3 the model picks per chip, each with libtpu's
verdict for that chip.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_tune.py [--chips v5e,v6e]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPACE = {"bm": [128, 256, 384, 512, 1024], "bn": [128, 256, 512, 1024],
         "bk": [128, 256, 512, 1024]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chips", default="v5e,v6e")
    chips = parser.parse_args().chips.split(",")
    os.environ["PALLASLAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-tune-cache-")
    sys.path.insert(0, str(ROOT / "tests" / "tuning"))
    from matmul_case import arguments, matmul

    import pallaslab

    n = 1
    for values in SPACE.values():
        n *= len(values)
    start = time.perf_counter()
    model = pallaslab.tune(matmul, SPACE, *arguments(), chip=chips, compile_top=0)
    model_s = time.perf_counter() - start
    print(f"{n} candidates on {', '.join(chips)}: {len(model.ranked)} ranked, "
          f"{n - len(model.ranked)} out")
    print(f"model only:       {model_s:7.2f} s, {model_s / n * 1e3:6.1f} ms per candidate, "
          f"{n / model_s:6.1f} candidates/s")
    for chip in chips:
        start = time.perf_counter()
        compiled = pallaslab.tune(matmul, SPACE, *arguments(), chip=chip, compile_top=3)
        took = time.perf_counter() - start
        print(f"\n{chip}: with libtpu (top 3, cold cache): {took:7.2f} s, "
              f"{took / n * 1e3:6.1f} ms per candidate")
        for c in compiled.ranked[:3]:
            e = c.chip(chip)
            print(f"  {c.rank}. {c.label:<24} {e.time * 1e6:8.2f} us  {e.bound:<18} "
                  f"libtpu: {', '.join(v.text for v in c.verdicts) or '-'}")
        refused = [c for c in compiled.candidates if c.verdicts and not c.compiles]
        print(f"  refused by libtpu among those compiled: {len(refused)}")


if __name__ == "__main__":
    main()
