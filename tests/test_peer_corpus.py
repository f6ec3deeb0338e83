"""The peer corpus (issue 24): the kernels of JAX's own Pallas tests, each through `inspect`,
`check` for its backend, `compare` against the test's own expected value and `lower
--compile`, held to the verdict JAX's test expects (tests/peer/, run by tests/peer/run.py).

A stage pallaslab gets wrong today is listed in KNOWN_DEFECTS (strict xfail): fixing the
defect flips it to a failure until the entry is removed. Peers on several simulated devices
run all their stages in one process started once per module (`device_batch`): JAX fixes its
device count when it starts. gpu_wrong.py's deliberately wrong kernels must fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "peer"))

from run import STAGES, judge_wrong, load_peers, run_peers_on_devices, run_stage, wrong_kernels

PEERS = load_peers()
WRONG = wrong_kernels()

# Kinds the issue asks the corpus to cover (TPU/generic here, GPU in tests/peer/gpu_*.py).
REQUIRED_KINDS = {
    "blockspec", "scalar-prefetch", "dynamic-grid", "run_scoped", "local-dma", "remote-dma",
    "semaphores", "emit_pipeline", "core_map", "fuser", "collective", "vmap", "interpret",
    "triton", "mosaic-gpu",
}
MIN_PEERS = 60

# (peer, stage) -> the pallaslab defect that makes the stage fail today, one line. (What JAX's
# own interpreters cannot run is no defect: the peer says so, `interpretable=False`.)
KNOWN_DEFECTS: dict[tuple[str, str], str] = {
}


def _cases():
    for name, p in PEERS.items():
        for stage in STAGES:
            defect = KNOWN_DEFECTS.get((name, stage))
            marks = [pytest.mark.xfail(strict=True, reason=defect)] if defect else []
            yield pytest.param(name, stage, id=f"{p.module[:-3]}/{name}/{stage}", marks=marks)


@pytest.fixture(scope="module")
def device_batch():
    """Every stage of every multi-device peer, from one process with their device count."""
    return run_peers_on_devices([p for p in PEERS.values() if p.devices > 1])


@pytest.mark.tpu_compiler
@pytest.mark.parametrize(("name", "stage"), list(_cases()))
def test_peer_stage(name, stage, request):
    peer = PEERS[name]
    if peer.devices > 1:  # asked for only here, so a run of one-device peers starts no batch
        result = request.getfixturevalue("device_batch")[name].stage(stage)
    else:
        result = run_stage(peer, stage)
    assert result.ok, result.cause


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_kernel_fails(name):
    result = judge_wrong(name)
    assert result.ok, result.cause


def test_known_defects_name_real_peers():
    unknown = sorted({n for n, _ in KNOWN_DEFECTS} - set(PEERS))
    assert not unknown, f"KNOWN_DEFECTS names peers the corpus lacks: {unknown}"
    assert {s for _, s in KNOWN_DEFECTS} <= set(STAGES)


def test_corpus_covers_every_kind():
    kinds = {p.kind for p in PEERS.values()}
    assert kinds >= REQUIRED_KINDS, f"kinds without a peer: {sorted(REQUIRED_KINDS - kinds)}"
    assert len(PEERS) >= MIN_PEERS, f"{len(PEERS)} peers, the issue asks for {MIN_PEERS}"


def test_every_peer_says_what_jax_expects():
    for p in PEERS.values():
        assert "::" in p.origin and p.origin.split("::")[0].endswith("_test.py"), p.origin
        assert p.compiles or p.rejected_by, f"{p.name}: compiles=False needs rejected_by"
        assert p.interpretable or p.why_not, f"{p.name}: interpretable=False needs why_not"
        assert p.reference is not None or not p.interpretable or not p.compiles, (
            f"{p.name}: a kernel JAX's test runs needs its expected value as reference")
