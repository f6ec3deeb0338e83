"""`pallaslab check CASE... [--target T...] [--compile] [--json]`: exit 1 on any error.

Errors are error-severity findings of the tiling analysis (judged by each target's rules) and,
for every `--target`, a kernel that fails to lower (or, with `--compile`, to compile) for it.
A case that cannot be loaded is reported and the other cases are still checked; the exit
status is then 2. Case arguments may be files, directories and globs
(`pallaslab.cases.expand_case_arguments`, as in every command taking several cases).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from pallaslab.cases import expand_case_arguments
from pallaslab.cli._shared import (
    CASES_HELP,
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    backend_for_target,
    console,
    describe_error,
    device_count,
    error_json,
    load_and_capture,
    print_error,
    print_json,
    safe,
    simulate_cpu_devices,
    target_name,
)
from pallaslab.cli.inspect import SEVERITY_STYLE
from pallaslab.util.text import visible

if TYPE_CHECKING:  # the model and the analyses import JAX: not to parse the command line
    from pallaslab.model import Capture


@dataclasses.dataclass(frozen=True)
class Problem:
    severity: str
    code: str
    message: str


@dataclasses.dataclass(frozen=True)
class KernelVerdict:
    case: str
    index: int
    name: str
    target: str | None
    errors: int  # error findings + a failed lowering
    problems: tuple[Problem, ...]  # what is shown (errors; also warnings with --warnings)
    warnings: tuple[str, ...] = ()  # the codes of every warning (findings and lowering)

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case, "index": self.index, "name": self.name,
                "target": self.target, "ok": not self.errors, "errors": self.errors,
                "warnings": list(self.warnings),
                "problems": [dataclasses.asdict(p) for p in self.problems]}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="fail (exit 1) on errors: races, uncovered output, ...",
                       description="Fail (exit 1) when a kernel has an error finding (races, "
                                   "uncovered output, misaligned blocks, VMEM overflow) or "
                                   "fails to lower for a --target.")
    p.add_argument("cases", nargs="+", metavar="CASE", help=CASES_HELP)
    p.add_argument("--target", action="append", default=[], metavar="T", type=target_name,
                   help="judge by this target's rules and lower for it (tpu-v5e, gpu-h100, ...;"
                        " repeatable)")
    p.add_argument("--compile", action="store_true",
                   help="also compile for each target with the real compiler (libtpu, triton)")
    p.add_argument("--warnings", action="store_true", help="also list warnings and infos")
    p.add_argument("--devices", type=device_count, default=None, metavar="N",
                   help="trace the cases on N simulated CPU devices (kernels inside shard_map "
                        "as N chips run them; compiled over N chips with --compile)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: every kernel's verdict, and case errors")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    verdicts: list[KernelVerdict] = []
    case_errors: list[dict[str, Any]] = []
    if args.devices:
        simulate_cpu_devices(args.devices)
    for entry in expand_case_arguments(args.cases).entries:
        spec = entry.spec
        try:
            if entry.error is not None:
                raise entry.error
            _, cap = load_and_capture(spec)
            for target in args.target or [None]:
                found = _check(spec, cap, target, args)
                verdicts += found
                if not args.json:
                    _render(found)
        except Exception as err:  # one case's failure does not stop the others
            case_errors.append(_case_error(spec, err, args.json))
    errors = sum(v.errors for v in verdicts)
    status = EXIT_ERROR if case_errors else EXIT_FAILED if errors else EXIT_OK
    if args.json:
        payload: dict[str, Any] = {"ok": status == EXIT_OK, "errors": errors,
                                   "kernels": [v.to_json() for v in verdicts],
                                   "case_errors": case_errors}
        if case_errors:
            payload["error"] = case_errors[0]["error"]
        print_json(payload)
    else:
        console().print(f"{errors} error(s)" + (f", {len(case_errors)} case(s) could not be "
                                                "checked" if case_errors else ""))
    return status


def _case_error(spec: str, err: Exception, json_mode: bool) -> dict[str, Any]:
    err_type, message, tb = describe_error(err)
    if not json_mode and tb:
        sys.stderr.write(visible(tb))
    print_error(message)
    return {"case": spec, **error_json(err_type, message + (f"\n{tb}" if tb else ""))}


def _check(spec: str, cap: Capture, target: str | None, args: argparse.Namespace
           ) -> list[KernelVerdict]:
    from pallaslab.analysis.inspection import inspect_capture
    from pallaslab.analysis.occupancy import DEFAULT_CHIPS

    backend = backend_for_target(target) if target else None
    lowered = _lower(cap, target, args.compile, args.devices) if target else None
    chips = (target.removeprefix("tpu-"),) if target and backend == "tpu" else DEFAULT_CHIPS
    verdicts = []
    for insp in inspect_capture(cap, backend=backend, chips=chips):
        kl = lowered[insp.kernel.index] if lowered is not None else None
        found = [_compiler_says(f, kl, target) for f in insp.findings]
        problems = [Problem(f.severity, f.code, f.message) for f in found
                    if args.warnings or f.severity == "error"]
        warnings = [f.code for f in found if f.severity == "warning"]
        failed = sum(1 for f in found if f.severity == "error")
        if kl is not None:
            problems += [Problem(d.severity, d.code, d.message) for d in kl.diagnostics
                         if args.warnings or d.severity == "error"]
            warnings += [d.code for d in kl.diagnostics if d.severity == "warning"]
            failed += 0 if kl.ok else max(1, len(kl.errors))
        elif target is None and (said := _unlowerable(insp.kernel)) is not None:
            problems.append(Problem(said.severity, said.code, said.message))
            failed += 1
        verdicts.append(KernelVerdict(spec, insp.kernel.index, insp.kernel.name, target,
                                      failed, tuple(problems), tuple(warnings)))
    return verdicts


def _compiler_says(finding: Any, kl: Any, target: str | None) -> Any:
    """A VMEM estimate over the limit is the compiler's call when it was asked: a kernel
    libtpu compiled for this target is not failed on the estimate (it may elide scratch the
    body never needs, e.g. one written and read back in the same program)."""
    compiled = kl is not None and kl.ok and any(st.name.startswith("mosaic:")
                                                for st in kl.stages)
    if finding.code != "vmem-overflow" or finding.severity != "error" or not compiled:
        return finding
    need = kl.resources.vmem_bytes
    needs = f" (its compiled module uses {need / 2**20:.2f} MiB)" if need is not None else ""
    return dataclasses.replace(
        finding, severity="warning",
        message=f"{finding.message} But libtpu compiled it for {target}{needs}: the compiler "
                "needs less VMEM than pallaslab's estimate, so this is not an error.")


def _render(verdicts: list[KernelVerdict]) -> None:
    out = console()
    for v in verdicts:
        label = f"{safe(v.case)} [{v.index}] {safe(v.name)}"
        if v.target:
            label += f" on {v.target}"
        counted = f" ({len(v.warnings)} warning(s))" if v.warnings else ""
        verdict = "[bold red]FAIL[/]" if v.errors else f"[green]ok[/]{counted}"
        out.print(f"{verdict}  {label}")
        for p in v.problems:
            out.print(f"      [{SEVERITY_STYLE.get(p.severity, 'cyan')}]{safe(p.code)}[/]: "
                      f"{safe(p.message)}")
        listed = {p.code for p in v.problems if p.severity == "warning"}
        unlisted = [c for c in dict.fromkeys(v.warnings) if c not in listed]
        if unlisted:  # without --warnings: the codes on one line, so an "ok" is not silent
            out.print(f"      [yellow]warnings[/]: {safe(', '.join(unlisted))} "
                      "[dim](--warnings shows them)[/]")


def _unlowerable(kernel: Any) -> Any:
    """With no --target, the kernel's own backend is the target: a kernel no target of it
    can lower (a pallas_call with Mosaic GPU params) fails as `lower` would."""
    from pallaslab.lowering.params import unlowerable

    return unlowerable(kernel)


def _lower(cap: Capture, target: str, compile: bool, devices: int | None):
    from pallaslab.lowering import lower

    return lower(cap, target=target, compile=compile, devices=devices)
