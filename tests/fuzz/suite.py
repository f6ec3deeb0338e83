"""The fuzzer's share of `make test`: KERNELS kernels over a fixed seed, split in SHARDS
contiguous index ranges, one per test file (tests/test_fuzz*.py), so pytest-xdist's
`--dist loadfile` judges the shards on both workers at once."""

from __future__ import annotations

from fuzz.campaign import Tally, run_campaign

SEED = 20240601
SHARDS = 2
KERNELS = 300  # 1.3 kernels/s over both shards on a shared 2-core machine: under 4 minutes


def shard_campaign(shard: int) -> Tally:
    """Shard `shard`'s kernels judged, its report and campaign line printed (pytest -s)."""
    per = KERNELS // SHARDS
    tally = run_campaign(SEED, seconds=float("inf"), max_kernels=per, start=shard * per)
    print(f"\nfuzz shard {shard + 1}/{SHARDS}, kernels ({SEED}, {shard * per}..."
          f"{(shard + 1) * per - 1}):")
    print("\n".join(tally.report()))
    print(tally.summary_line())
    return tally


def failures(tally: Tally) -> list[str]:
    return [f"{v.outcome} {v.generated.name}: {v.detail}" for v in tally.failures]
