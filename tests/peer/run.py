"""Run one peer through pallaslab's four verdicts and judge them against JAX's own test.

Shared by `tests/test_peer_corpus.py` and `benchmarks/bench_peer.py`. Each stage goes through
the public surface: `pallaslab inspect/check/lower --json` in-process (exactly what a user's
shell runs) and `pallaslab.compare` (the peer's reference is a Python callable). A stage's
verdict is `StageResult(ok, cause)`; `cause` is one line naming what pallaslab got wrong.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

PEER_DIR = Path(__file__).resolve().parent
REPO = PEER_DIR.parent.parent
if str(PEER_DIR) not in sys.path:
    sys.path.insert(0, str(PEER_DIR))

from registry import PEERS, Peer  # noqa: E402

STAGES = ("inspect", "check", "compare", "lower")
# internal: pallaslab raised, exited 2 or contradicted itself; false-error: it failed a kernel
# JAX's test runs; false-pass: it passed a kernel that is wrong or that the compiler rejects;
# incomplete: compare could not compare a kernel JAX's interpreters can run.
FAILURES = ("internal", "false-error", "false-pass", "incomplete")

# What `check`/`lower --compile` judge a peer for, by the backend its JAX test targets.
TARGETS = {"tpu": "tpu-v5e", "triton": "gpu-h100", "mosaic-gpu": "gpu-h100", "none": "tpu-v5e"}
COMPARE_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class StageResult:
    stage: str
    ok: bool
    cause: str | None = None  # why not ok: one line
    skipped: str | None = None  # why the stage does not apply to this peer
    seconds: float = 0.0  # wall time the stage took (reported, never asserted on)
    # what kind of wrong, when not ok: one of FAILURES
    failure: str | None = None
    # compare only: JAX's reason the comparison is (honestly) incomplete
    jax_limit: str | None = None


@dataclasses.dataclass(frozen=True)
class PeerReport:
    peer: Peer
    stages: tuple[StageResult, ...]

    def stage(self, name: str) -> StageResult:
        return next(s for s in self.stages if s.stage == name)


def load_peers() -> dict[str, Peer]:
    """Import every peer module (tests/peer/*.py but the harness's own) and return the
    registry, sorted by module then name."""
    for path in sorted(PEER_DIR.glob("*.py")):
        if path.stem not in ("registry", "run"):
            importlib.import_module(path.stem)
    return dict(sorted(PEERS.items(), key=lambda kv: (kv[1].module, kv[0])))


def run_peer(peer: Peer, stages: tuple[str, ...] = STAGES) -> PeerReport:
    return PeerReport(peer, tuple(run_stage(peer, s) for s in stages))


def _fail(stage: str, failure: str, cause: str) -> StageResult:
    return StageResult(stage, False, cause, failure=failure)


def run_stage(peer: Peer, stage: str) -> StageResult:
    judge = {"inspect": _inspect, "check": _check, "compare": _compare, "lower": _lower}[stage]
    start = time.perf_counter()
    try:
        result = judge(peer)
    except Exception as err:  # pallaslab raised where it should have answered
        result = StageResult(stage, False, f"raised {type(err).__name__}: {_line(str(err))}",
                             failure="internal")
    return dataclasses.replace(result, seconds=time.perf_counter() - start)


# --- peers on several simulated devices: one process for all of them ------------------------


def run_peers_on_devices(peers: list[Peer], stages: tuple[str, ...] = STAGES
                         ) -> dict[str, PeerReport]:
    """Every stage of every multi-device peer, in one fresh process per device count (JAX
    fixes its device count when it starts), where the CLI and `compare` run in-process on
    that count: one JAX start-up for all of them instead of one per stage."""
    reports: dict[str, PeerReport] = {}
    for count in sorted({p.devices for p in peers}):
        names = [p.name for p in peers if p.devices == count]
        reports.update(_reports_from_process(names, count, stages))
    return reports


def _reports_from_process(names: list[str], devices: int, stages: tuple[str, ...]
                          ) -> dict[str, PeerReport]:
    import os
    import subprocess

    flags = f"{os.environ.get('XLA_FLAGS', '')} " \
            f"--xla_force_host_platform_device_count={devices}".strip()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}
    command = [sys.executable, str(Path(__file__).resolve()), "--devices", str(devices),
               "--stages", ",".join(stages), *names]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1800)
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):  # the batch itself died: every stage says so
        said = _line(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "")
        data = {n: [{"stage": s, "ok": False, "cause": f"the {devices}-device batch process "
                     f"exited {done.returncode}: {said}"} for s in stages] for n in names}
    peers = load_peers()
    return {n: PeerReport(peers[n], tuple(StageResult(**r) for r in data[n])) for n in names}


def _batch_main(argv: list[str]) -> int:
    """`python run.py --devices N --stages a,b NAME...` (started by `run_peers_on_devices`
    with N devices already set): one JSON line {name: [stage result, ...]} on stdout."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--stages", required=True)
    parser.add_argument("names", nargs="+")
    args = parser.parse_args(argv)
    import jax

    if jax.device_count() != args.devices:  # the flag did not take: say so, run nothing
        raise SystemExit(f"this process has {jax.device_count()} devices, not {args.devices}")
    peers = load_peers()
    stages = tuple(args.stages.split(","))
    results = {n: [dataclasses.asdict(r) for r in run_peer(peers[n], stages).stages]
               for n in args.names}
    sys.stdout.write("\n" + json.dumps(results) + "\n")
    return 0


# --- the CLI, in-process -------------------------------------------------------------------


def cli_json(*argv: str, devices: int = 1) -> tuple[int, dict[str, Any]]:
    """`pallaslab ARGV --json` in this process: (exit status, the JSON object). With several
    simulated devices, `--devices N` too, in this process when it has N devices (the batch of
    `run_peers_on_devices`), else in a fresh one: JAX fixes its device count when it starts."""
    if devices > 1:
        argv = (*argv, "--devices", str(devices))
        if not _process_has_devices(devices):
            return _cli_json_in_subprocess(list(argv))
    from pallaslab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _in_repo(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([*argv, "--json"])
    return status, json.loads(out.getvalue())


def _process_has_devices(devices: int) -> bool:
    import jax

    return jax.device_count() == devices


def _cli_json_in_subprocess(argv: list[str]) -> tuple[int, dict[str, Any]]:
    import os
    import subprocess

    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-m", "pallaslab", *argv, "--json"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, json.loads(done.stdout)


@contextlib.contextmanager
def _in_repo():
    import os

    before = os.getcwd()
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(before)


def _error_of(data: dict[str, Any]) -> str | None:
    error = data.get("error")
    return None if error is None else _line(f"{error.get('type')}: {error.get('message')}")


def _line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:300]


# --- the stages ----------------------------------------------------------------------------


def _inspect(peer: Peer) -> StageResult:
    status, data = cli_json("inspect", peer.path, devices=peer.devices)
    if status != 0 or _error_of(data):
        return _fail("inspect", "internal",
                     f"`pallaslab inspect {peer.path}` exit {status}: {_error_of(data)}")
    if not data.get("kernels"):
        return _fail("inspect", "internal", f"`pallaslab inspect {peer.path}` found no kernel")
    return StageResult("inspect", True)


def _check(peer: Peer) -> StageResult:
    argv = ["check", peer.path]
    if peer.backend != "none":
        argv += ["--target", TARGETS[peer.backend]]
    status, data = cli_json(*argv, devices=peer.devices)
    command = f"`pallaslab {' '.join(argv)}`"
    if status == 2 or _error_of(data):
        return _fail("check", "internal", f"{command} exit {status}: {_error_of(data)}")
    problems = [f"{p['code']}: {_line(p['message'])}" for k in data["kernels"]
                for p in k["problems"] if p["severity"] == "error"]
    if status == 1 and peer.compiles:  # JAX's test runs it: any error is a false error
        return _fail("check", "false-error", f"{command} false error: {problems[:1]}")
    if status == 0 and problems:
        return _fail("check", "internal", f"{command} exit 0 with errors {problems[:1]}")
    return StageResult("check", True)


def _compare(peer: Peer) -> StageResult:
    if not peer.interpretable and peer.unavailable_says is None:
        return StageResult("compare", True, skipped=f"JAX cannot interpret it: {peer.why_not}")
    import pallaslab

    fn, args, kwargs = _unpack(peer.case())
    # executors=None: pallaslab's own choice (`auto`), the interpreter that can run the
    # kernels, against the reference when the peer has one, else against tpu-interpret
    result = pallaslab.compare(fn, *args, executors=None, reference=peer.reference,
                               devices=peer.devices if peer.devices > 1 else None,
                               timeout=COMPARE_TIMEOUT_S, **kwargs)
    called = f"pallaslab.compare({peer.name}, executors={list(result.executors)})"
    if not peer.interpretable:
        return _honestly_incomplete(peer, result, called)
    if not result.complete:
        return _fail("compare", "incomplete", f"{called} incomplete: {_line(result.verdict())}")
    if not result.allclose:
        return _fail("compare", "false-error", f"{called} mismatch: {_mismatches(result)}")
    if not result.passed and peer.compiles:  # static errors of a kernel JAX's test runs
        return _fail("compare", "false-error", f"{called} false error: {_line(result.verdict())}")
    return StageResult("compare", True)


def _honestly_incomplete(peer: Peer, result: Any, called: str) -> StageResult:
    """JAX's interpreters cannot run the peer: compare must say the comparison is incomplete
    because an executor is unavailable for JAX's reason, not fail inside pallaslab."""
    if result.complete:
        return _fail("compare", "internal", f"{called} complete for a kernel JAX cannot "
                                            f"interpret ({peer.why_not}): mark it interpretable")
    not_run = {name: s for name, s in result.statuses.items() if s.status != "ran"}
    failed = {name: s.reason for name, s in not_run.items() if s.status != "unavailable"}
    if failed:
        name, reason = next(iter(failed.items()))
        return _fail("compare", "internal", f"{called}: {name} {not_run[name].status} "
                                            f"({_line(reason or '')}) where JAX's limit "
                                            f"makes it unavailable: {peer.why_not}")
    said = " ".join(s.reason or "" for s in not_run.values())
    if peer.unavailable_says not in said:
        return _fail("compare", "internal", f"{called}: unavailable without JAX's reason "
                                            f"{peer.unavailable_says!r}: {_line(said)}")
    return StageResult("compare", True, jax_limit=peer.why_not)


def _lower(peer: Peer) -> StageResult:
    argv = ["lower", peer.path, "--target", TARGETS[peer.backend], "--compile"]
    status, data = cli_json(*argv, devices=peer.devices)
    if peer.devices > 1:
        argv += ["--devices", str(peer.devices)]
    command = f"`pallaslab {' '.join(argv)}`"
    if status == 2 or _error_of(data):
        return _fail("lower", "internal", f"{command} exit {status}: {_error_of(data)}")
    failed = [k for k in data["kernels"] if not k["ok"]]
    codes = {d["code"] for k in failed for d in k["diagnostics"] if d["severity"] == "error"}
    if peer.compiles and failed:
        said = [f"{d['code']}: {_line(d['message'])}" for d in failed[0]["diagnostics"]]
        return _fail("lower", "false-error", f"{command} false error: {said[:1]}")
    if not peer.compiles and peer.rejected_by not in codes:
        return _fail("lower", "internal" if codes else "false-pass",
                     f"{command} expected {peer.rejected_by}, got {sorted(codes) or 'ok'}")
    return StageResult("lower", True)


# --- deliberately wrong kernels (tests/peer/gpu_wrong.py): they must not pass -------------


def wrong_kernels() -> dict[str, str]:
    """gpu_wrong.py's WRONG: case name -> what pallaslab must say about it."""
    from gpu_wrong import WRONG

    return dict(WRONG)


def judge_wrong(name: str) -> StageResult:
    """`pallaslab check --target gpu-h100` or `pallaslab compare --reference` must fail the
    wrong kernel (exit 1): a 0 from both is a false pass, any 2 an internal error."""
    start = time.perf_counter()
    case = f"tests/peer/gpu_wrong.py:{name}"
    check, _ = cli_json("check", case, "--target", TARGETS["triton"])
    compare, data = cli_json("compare", case, "--reference", f"{case}_reference",
                             "--timeout", str(COMPARE_TIMEOUT_S))
    said = f"check exit {check}, compare exit {compare}"
    if 1 in (check, compare):
        result = StageResult("wrong", True)
    elif 2 in (check, compare):  # neither judged it: a tool error or an incomplete compare
        result = _fail("wrong", "internal", f"{case} not judged ({said}): {_error_of(data)}")
    else:
        result = _fail("wrong", "false-pass", f"{case} false pass ({said}), expected: "
                                              f"{wrong_kernels()[name]}")
    return dataclasses.replace(result, seconds=time.perf_counter() - start)


def _mismatches(result: Any) -> str:
    return "; ".join(f"{o.origin} {p.a} vs {p.b}: max abs err {p.max_abs_err:.3g}, "
                     f"{p.mismatched_elements} element(s)"
                     for o in result.outputs for p in o.pairs if not p.allclose)


def _unpack(case: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    if len(case) == 2:
        return case[0], tuple(case[1]), {}
    return case[0], tuple(case[1]), dict(case[2])


if __name__ == "__main__":
    sys.exit(_batch_main(sys.argv[1:]))
