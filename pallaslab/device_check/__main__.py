"""`python -m pallaslab.device_check --out DIR [--time-limit S] [--kernel-limit S] [CASE...]`"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pallaslab.device_check import EXIT_USAGE
from pallaslab.device_check.cases import DEFAULT_CASES
from pallaslab.device_check.check import run_check
from pallaslab.device_check.report import exit_status, text_lines

TIME_LIMIT = 450.0  # seconds: the whole check, inside the 8 minutes it is promised in
KERNEL_LIMIT = 90.0  # seconds: one kernel's comparison and profile


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pallaslab.device_check",
        description="Run the GPU catalog on the attached NVIDIA GPU beside the interpreters "
                    "and the references, profile each kernel, and write DIR/summary.json "
                    "and the raw traces. Exit status: 0 all agreed, 1 a mismatch, failure or "
                    "time-out, 2 usage error, 3 no GPU attached.")
    parser.add_argument("--out", required=True, help="the folder for summary.json and traces")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT,
                        help=f"seconds for the whole check (default {TIME_LIMIT:g})")
    parser.add_argument("--kernel-limit", type=float, default=KERNEL_LIMIT,
                        help=f"seconds for each kernel (default {KERNEL_LIMIT:g})")
    parser.add_argument("--subject", default="device",
                        help="the executor compared with the interpreter and the reference "
                             "(default: device; another makes a dry run on a CPU)")
    parser.add_argument("cases", nargs="*", metavar="CASE",
                        help="file.py:function cases (default: the GPU catalog)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return EXIT_USAGE if stop.code else 0
    for name in ("time_limit", "kernel_limit"):
        value = getattr(args, name)
        if not value > 0:
            print(f"--{name.replace('_', '-')} {value!r}: a time limit is a positive number "
                  "of seconds", file=sys.stderr)
            return EXIT_USAGE
    if missing := missing_modules():
        print(f"the device check needs {', '.join(missing)} in {sys.executable}: install "
              f"with `{sys.executable} -m pip install {' '.join(missing)}` (cloudpickle is a "
              "small pure-Python wheel; JAX must be a CUDA-enabled one already)", file=sys.stderr)
        return EXIT_USAGE
    cases = args.cases or [c.spec for c in DEFAULT_CASES]
    summary = run_check(args.out, cases, time_limit=args.time_limit,
                        kernel_limit=args.kernel_limit, subject=args.subject)
    print("\n".join(text_lines(summary)))
    print(f"summary: {args.out.rstrip('/')}/summary.json")
    return exit_status(summary)


def missing_modules() -> list[str]:
    """What the check's process needs and this Python lacks (found without importing JAX)."""
    import importlib.util

    return [m for m in ("jax", "numpy", "cloudpickle") if importlib.util.find_spec(m) is None]


if __name__ == "__main__":
    sys.exit(main())
