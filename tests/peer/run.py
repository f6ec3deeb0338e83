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
from pathlib import Path
from typing import Any

PEER_DIR = Path(__file__).resolve().parent
REPO = PEER_DIR.parent.parent
if str(PEER_DIR) not in sys.path:
    sys.path.insert(0, str(PEER_DIR))

from registry import PEERS, Peer  # noqa: E402

STAGES = ("inspect", "check", "compare", "lower")

# What `check`/`lower --compile` judge a peer for, by the backend its JAX test targets.
TARGETS = {"tpu": "tpu-v5e", "triton": "gpu-h100", "mosaic-gpu": "gpu-h100", "none": "tpu-v5e"}
COMPARE_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class StageResult:
    stage: str
    ok: bool
    cause: str | None = None  # why not ok: one line
    skipped: str | None = None  # why the stage does not apply to this peer


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


def run_stage(peer: Peer, stage: str) -> StageResult:
    judge = {"inspect": _inspect, "check": _check, "compare": _compare, "lower": _lower}[stage]
    try:
        return judge(peer)
    except Exception as err:  # pallaslab raised where it should have answered
        return StageResult(stage, False, f"raised {type(err).__name__}: {_line(str(err))}")


# --- the CLI, in-process -------------------------------------------------------------------


def cli_json(*argv: str, devices: int = 1) -> tuple[int, dict[str, Any]]:
    """`pallaslab ARGV --json` in this process: (exit status, the JSON object). With several
    simulated devices, in a fresh process: JAX fixes its device count when it starts."""
    if devices > 1:
        return _cli_json_in_subprocess([*argv, "--devices", str(devices)])
    from pallaslab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _in_repo(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([*argv, "--json"])
    return status, json.loads(out.getvalue())


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
        return StageResult("inspect", False,
                           f"`pallaslab inspect {peer.path}` exit {status}: {_error_of(data)}")
    if not data.get("kernels"):
        return StageResult("inspect", False, f"`pallaslab inspect {peer.path}` found no kernel")
    return StageResult("inspect", True)


def _check(peer: Peer) -> StageResult:
    argv = ["check", peer.path]
    if peer.backend != "none":
        argv += ["--target", TARGETS[peer.backend]]
    status, data = cli_json(*argv, devices=peer.devices)
    command = f"`pallaslab {' '.join(argv)}`"
    if status == 2 or _error_of(data):
        return StageResult("check", False, f"{command} exit {status}: {_error_of(data)}")
    problems = [f"{p['code']}: {_line(p['message'])}" for k in data["kernels"]
                for p in k["problems"] if p["severity"] == "error"]
    if status == 1 and peer.compiles:  # JAX's test runs it: any error is a false error
        return StageResult("check", False, f"{command} false error: {problems[:1]}")
    if status == 0 and problems:
        return StageResult("check", False, f"{command} exit 0 with errors {problems[:1]}")
    return StageResult("check", True)


def _compare(peer: Peer) -> StageResult:
    if not peer.interpretable:
        return StageResult("compare", True, skipped=f"JAX cannot interpret it: {peer.why_not}")
    import pallaslab

    fn, args, kwargs = _unpack(peer.case())
    # None: pallaslab's own choice (`auto`), the interpreter that can run the kernels,
    # against the reference when the peer has one, else interpret mode against tpu-interpret
    executors = None
    result = pallaslab.compare(fn, *args, executors=executors, reference=peer.reference,
                               devices=peer.devices if peer.devices > 1 else None,
                               timeout=COMPARE_TIMEOUT_S, **kwargs)
    called = f"pallaslab.compare({peer.name}, executors={list(result.executors)})"
    if not result.complete:
        return StageResult("compare", False, f"{called} incomplete: {_line(result.verdict())}")
    if not result.allclose:
        return StageResult("compare", False, f"{called} mismatch: {_mismatches(result)}")
    if not result.passed and peer.compiles:  # static errors of a kernel JAX's test runs
        return StageResult("compare", False, f"{called} false error: {_line(result.verdict())}")
    return StageResult("compare", True)


def _lower(peer: Peer) -> StageResult:
    argv = ["lower", peer.path, "--target", TARGETS[peer.backend], "--compile"]
    if peer.devices > 1:
        argv += ["--devices", str(peer.devices)]
    status, data = cli_json(*argv[:-2], devices=peer.devices) if peer.devices > 1 else \
        cli_json(*argv)
    command = f"`pallaslab {' '.join(argv)}`"
    if status == 2 or _error_of(data):
        return StageResult("lower", False, f"{command} exit {status}: {_error_of(data)}")
    failed = [k for k in data["kernels"] if not k["ok"]]
    codes = {d["code"] for k in failed for d in k["diagnostics"] if d["severity"] == "error"}
    if peer.compiles and failed:
        said = [f"{d['code']}: {_line(d['message'])}" for d in failed[0]["diagnostics"]]
        return StageResult("lower", False, f"{command} false error: {said[:1]}")
    if not peer.compiles and peer.rejected_by not in codes:
        return StageResult("lower", False, f"{command} expected {peer.rejected_by}, got "
                                           f"{sorted(codes) or 'ok'}")
    return StageResult("lower", True)


def _mismatches(result: Any) -> str:
    return "; ".join(f"{o.origin} {p.a} vs {p.b}: max abs err {p.max_abs_err:.3g}, "
                     f"{p.mismatched_elements} element(s)"
                     for o in result.outputs for p in o.pairs if not p.allclose)


def _unpack(case: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    if len(case) == 2:
        return case[0], tuple(case[1]), {}
    return case[0], tuple(case[1]), dict(case[2])
