"""`pallaslab lower CASE... --target T [--compile] [--vmem-exact] [--devices N] [--json]`:
lowered IR per kernel (several cases share one process and one lowering cache).

Exit status: 0 when every kernel lowers (and compiles, with --compile), 1 when one does not,
2 when the case cannot be loaded, a dependency is missing or a --stage is not produced. With
several cases, the worst.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pallaslab.cli._many import CaseOutcome, run_cases
from pallaslab.cli._shared import (
    CASES_HELP,
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    console,
    device_count,
    fill_help_later,
    load_and_capture,
    safe,
    simulate_cpu_devices,
    stage_name,
    target_name,
)
from pallaslab.util.text import visible

if TYPE_CHECKING:
    from rich.console import Console

    from pallaslab.lowering import KernelLowering
    from pallaslab.model import Kernel

LEXERS = {"llir": "llvm", "ptx": "ptx"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lower", help="lower (and compile) every kernel for a TPU or GPU target",
                       description="Lower (and, with --compile, compile) every kernel of a "
                                   "case for a TPU or GPU target and show the IR.")
    p.add_argument("cases", nargs="+", metavar="CASE", help=CASES_HELP)
    target = p.add_argument("--target", default="tpu-v5e", metavar="T", type=target_name,
                            help="one of: {targets} (default tpu-v5e)")
    p.add_argument("--compile", action="store_true",
                   help="also run the real compiler (libtpu for TPU, triton for GPU)")
    p.add_argument("--vmem-exact", action="store_true",
                   help="TPU: find the smallest vmem_limit_bytes the compiler accepts")
    p.add_argument("--stage", action="append", default=None, metavar="NAME", type=stage_name,
                   help="print this stage's IR (repeatable; 'all' for every stage): jaxpr, "
                        "mosaic, mosaic-gpu, ttir; with --compile mosaic:PASS, ttgir, llir, "
                        "ptx, sass")
    p.add_argument("--devices", type=device_count, default=None, metavar="N",
                   help="TPU: trace the case on N simulated CPU devices and compile kernels "
                        "inside shard_map over N devices of a multi-chip topology (default: as "
                        "many as their mesh had when captured)")
    p.add_argument("--no-cache", action="store_true", help="ignore the on-disk result cache")
    p.add_argument("--json", action="store_true", help="print the stable JSON form (several "
                   "cases: {\"cases\": [...]})")
    p.set_defaults(func=run)

    def fill_help(parser: argparse.ArgumentParser) -> None:
        from pallaslab.lowering.targets import TARGETS  # (the lowering package imports JAX)

        target.help = (target.help or "").replace("{targets}", ", ".join(TARGETS))

    fill_help_later(p, fill_help)


def run(args: argparse.Namespace) -> int:
    if args.devices:  # a shard_map case is then traced on N devices, as N chips run it
        simulate_cpu_devices(args.devices)
    return run_cases(args.cases, args.json, lambda spec: lower_case(spec, args))


def lower_case(spec: str, args: argparse.Namespace) -> CaseOutcome:
    from pallaslab.lowering import lower

    _, cap = load_and_capture(spec)
    result = lower(cap, target=args.target, compile=args.compile,
                   vmem_exact=args.vmem_exact, use_cache=not args.no_cache,
                   devices=args.devices)
    _require_stages(args.stage or [], result)  # (--json holds every stage)
    if not args.json:
        out = console()
        captured = {k.index: k for k in cap}
        for kernel in result.kernels:
            render(kernel, result.target, args.stage, out, captured.get(kernel.index))
    return CaseOutcome(EXIT_OK if result.ok else EXIT_FAILED, result.to_json())


def _require_stages(wanted: list[str], result) -> None:
    """A --stage no kernel produced is a usage error naming the stages there are."""
    produced = {s.name for k in result.kernels for s in k.stages}
    missing = [s for s in wanted if s != "all" and s not in produced]
    if missing:
        raise UsageError(
            f"argument --stage: lowering for {result.target} produced no stage "
            f"{', '.join(repr(s) for s in missing)}; it produced: "
            f"{', '.join(sorted(produced)) or 'none'}"
            + (" (compiler stages need --compile)" if not any(k.compiled for k in result.kernels)
               and all(_compiler_stage(s, result.target) for s in missing) else ""),
            prog="pallaslab lower")


def _compiler_stage(stage: str, target: str) -> bool:
    """Is `stage` one the target's compiler makes with --compile (libtpu's passes; Triton's
    and ptxas's GPU stages)?"""
    if target.startswith("tpu-"):
        return stage.startswith("mosaic:")
    return stage in ("ttgir", "llir", "ptx", "sass")


def render(kernel: KernelLowering, target: str, stages: list[str] | None, out: Console,
           captured: Kernel | None = None) -> None:
    """The kernel's lowering as the Lowering view's tree (`lowering_tree`), then the IR of
    each stage asked for, whole."""
    from pallaslab.cli._parts import to_rich
    from pallaslab.views.lowering_tree import target_section

    out.print(to_rich(target_section(kernel.index, kernel.name, target, kernel, captured)))
    wanted = [s for s in kernel.stages
              if stages and ("all" in stages or s.name in stages)]
    for s in wanted:
        out.print(f"\n[bold]--- {safe(s.name)} ---[/]")
        if out.is_terminal:  # highlighted, long lines wrapped (never cut)
            from rich.syntax import Syntax

            out.print(Syntax(visible(s.text), LEXERS.get(s.name, "text"), line_numbers=True,
                             word_wrap=True))
        else:  # piped or redirected: the IR as it is, whole lines, no padding
            out.print(visible(s.text), markup=False, highlight=False, soft_wrap=True)
    out.print()
