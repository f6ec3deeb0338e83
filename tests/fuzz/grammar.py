"""The kernel grammar: `generate(seed, index)` draws one description (and maybe a mutant of it)
from `random.Random` seeded by (seed, index) alone, so any kernel of a campaign is rebuilt
without the ones before it. `avoid` names grammar features to leave out."""

from __future__ import annotations

import random

from fuzz.mutate import mutants_of
from fuzz.ops import ELEMENTWISE
from fuzz.spec import (
    AtomicKernel,
    BlockKernel,
    DmaKernel,
    Generated,
    Kernel,
    MosaicGpuKernel,
    Operand,
    PipelineKernel,
    RemoteKernel,
    TritonKernel,
)

FAMILIES = ("tpu-block", "tpu-dma", "gpu-triton", "tpu-pipeline", "gpu-atomics", "mosaic-gpu",
            "tpu-multi")
# Row-coordinate expressions of the index-map families an input may take (`i`: the program's
# row coordinate, `ni`: the grid's extent along it, `p`: the scalar-prefetch table).
ROW_MAPS = {"identity": "i", "reversed": "ni - 1 - i", "rotated": "(i + 1) % ni",
            "strided": "2 * i", "halved": "i // 2", "prefetch": "p[i]", "broadcast": "0"}
# Grammar features a run may leave out (`avoid`, `--avoid-known`): those two executor issues
# once hit (both fixed, tests/execute/test_fuzz_found_executors.py), to bisect a regression.
PARALLEL_AFTER_ARBITRARY = "parallel-after-arbitrary"
ROUND_TRIP = "bf16-round-trip"


def generate(seed: int, index: int, *, mutant_rate: float = 0.35,
             families: tuple[str, ...] = FAMILIES,
             avoid: frozenset[str] = frozenset()) -> Generated:
    r = random.Random(seed * 1_000_003 + index)
    family = r.choice(families)
    kernel: Kernel = {"tpu-block": _block_kernel, "tpu-dma": _dma_kernel,
                      "gpu-triton": _triton_kernel,
                      "tpu-pipeline": _pipeline_kernel,
                      "gpu-atomics": _atomic_kernel,
                      "mosaic-gpu": _mosaic_gpu_kernel,
                      "tpu-multi": _remote_kernel}[family](r, avoid)
    if r.random() < mutant_rate:
        options = mutants_of(kernel)
        if options:
            name, mutated = r.choice(options)
            return Generated(seed, index, mutated, kernel, name)
    return Generated(seed, index, kernel)


# --- TPU BlockSpec kernels ---------------------------------------------------------------------


def _rows(r: random.Random, dtype: str, *, partial: bool) -> tuple[int, int, int]:
    """(rows, block rows, blocks): block rows a multiple of the dtype's sublane tile."""
    block = r.choice((8, 16)) if dtype == "float32" else 16
    n = r.randint(1, 4)
    short = r.randint(1, block - 1) if partial and r.random() < 0.5 else 0
    return n * block - short, block, n


def _semantics(r: random.Random, reduction_last: bool, rank: int,
               avoid: frozenset[str]) -> tuple[str, ...]:
    if reduction_last:
        lead = tuple(r.choice(("parallel", "arbitrary")) for _ in range(rank - 1))
        if PARALLEL_AFTER_ARBITRARY in avoid:
            lead = tuple(sorted(lead, reverse=True))  # "parallel" < "arbitrary" reversed
        return (*lead, "arbitrary")
    sem = tuple(r.choice(("parallel", "arbitrary")) for _ in range(rank))
    return tuple(sorted(sem, reverse=True)) if PARALLEL_AFTER_ARBITRARY in avoid else sem


def _block_kernel(r: random.Random, avoid: frozenset[str]) -> BlockKernel:
    body = r.choice(("elementwise",) * 3 + ("reduce",) * 2 + ("dot",))
    return {"elementwise": _elementwise, "reduce": _reduce, "dot": _dot}[body](r, avoid)


def _elementwise(r: random.Random, avoid: frozenset[str]) -> BlockKernel:
    rank = r.choice((1, 2, 3))
    dtype = r.choice(("float32", "float32", "bfloat16"))
    op = r.choice(sorted(ELEMENTWISE))
    transposed = rank >= 2 and dtype == "float32" and r.random() < 0.15
    if transposed:
        block_r, n_r = 128, r.randint(1, 2)
        rows = block_r * n_r
    else:
        rows, block_r, n_r = _rows(r, dtype, partial=True)
    n_c = r.randint(1, 3) if rank >= 2 else 1
    cols = 128 * n_c if rank >= 2 else r.choice((128, 256))
    block_c = 128 if rank >= 2 else cols
    if rank >= 2 and not transposed and r.random() < 0.25:
        cols -= r.randint(1, 127)  # a partial edge block along the lanes too
    batch = r.randint(1, 3) if rank == 3 else 0
    coords = (("b",) if batch else ()) + ("i",) + (("j",) if rank >= 2 else ())
    grid = ((batch,) if batch else ()) + (n_r,) + ((n_c,) if rank >= 2 else ())
    even = rows % block_r == 0
    prefetch: tuple[int, ...] = ()

    def operand(position: int) -> Operand:
        nonlocal prefetch
        col = "j" if rank >= 2 else "0"
        lead_shape, lead_block, lead_map = ((batch,), (None,), "b, ") if batch else ((), (), "")
        if position == 0 and transposed:
            return Operand((*lead_shape, cols, rows), (*lead_block, block_c, block_r),
                           f"({lead_map}{col}, i)", dtype, transposed=True, family="transposed")
        families = ["identity"] * 3
        families += ["reversed", "rotated", "strided", "halved", "prefetch"] if even else []
        families += ["broadcast"] if position == 1 else []
        family = r.choice(families)
        if family == "prefetch" and prefetch:
            family = "identity"
        height = {"strided": 2 * rows, "halved": -(-n_r // 2) * block_r, "broadcast": 1}.get(
            family, rows)
        block = 1 if family == "broadcast" else block_r
        if family == "prefetch":
            prefetch = tuple(r.sample(range(n_r), n_r))
        return Operand((*lead_shape, height, cols), (*lead_block, block, block_c),
                       f"({lead_map}{ROW_MAPS[family]}, {col})", dtype, family=family)

    inputs = tuple(operand(n) for n in range(ELEMENTWISE[op][0]))
    out_family = r.choice(("identity", "identity", "reversed")) if even else "identity"
    lead = ((batch,), (None,), "b, ") if batch else ((), (), "")
    output = Operand(lead[0] + (rows, cols), lead[1] + (block_r, block_c),
                     f"({lead[2]}{ROW_MAPS[out_family]}, {'j' if rank >= 2 else '0'})", dtype,
                     family=out_family)
    same_blocks = all(o.block == output.block and not o.transposed for o in inputs)
    chunk = (8 if dtype == "float32" else 16) if same_blocks and r.random() < 0.3 else 0
    round_trip = ROUND_TRIP not in avoid and r.random() < 0.15
    return BlockKernel("elementwise", op, coords, grid, _semantics(r, False, rank, avoid),
                       inputs, output, prefetch, round_trip, chunk)


def _reduce(r: random.Random, avoid: frozenset[str]) -> BlockKernel:
    rank = r.choice((2, 3))
    dtype = r.choice(("float32", "float32", "bfloat16"))
    rows, block_r, n_r = _rows(r, dtype, partial=True)
    n_k = r.randint(1, 4)
    batch = r.randint(1, 2) if rank == 3 else 0
    lead_shape, lead_block, lead_map = ((batch,), (None,), "b, ") if batch else ((), (), "")
    family = r.choice(("identity", "identity", "reversed", "prefetch"))
    k_expr = {"identity": "k", "reversed": "nk - 1 - k", "prefetch": "p[k]"}[family]
    prefetch = tuple(r.sample(range(n_k), n_k)) if family == "prefetch" else ()
    x = Operand((*lead_shape, rows, 128 * n_k), (*lead_block, block_r, 128),
                f"({lead_map}i, {k_expr})", dtype, family=family)
    width = r.choice((1, 128))  # a row reduction, or a sum of the row's blocks
    out = Operand((*lead_shape, rows, width), (*lead_block, block_r, width),
                  f"({lead_map}i, 0)", "float32")
    coords = (("b",) if batch else ()) + ("i", "k")
    grid = ((batch,) if batch else ()) + (n_r, n_k)
    op = r.choice(("sum", "max"))
    round_trip = ROUND_TRIP not in avoid and r.random() < 0.2
    return BlockKernel("reduce", op, coords, grid, _semantics(r, True, rank, avoid), (x,), out,
                       prefetch, round_trip, init_coord="k")


def _dot(r: random.Random, avoid: frozenset[str]) -> BlockKernel:
    dtype = r.choice(("float32", "bfloat16"))
    block_m = r.choice((8, 16)) if dtype == "float32" else 16
    n_m, n_n = r.randint(1, 3), r.randint(1, 2)
    n_k = n_n if r.random() < 0.5 else r.randint(1, 3)  # square y blocks: swappable maps
    x = Operand((n_m * block_m, 128 * n_k), (block_m, 128), "(i, k)", dtype)
    y = Operand((128 * n_k, 128 * n_n), (128, 128), "(k, j)", dtype)
    out = Operand((n_m * block_m, 128 * n_n), (block_m, 128), "(i, j)", "float32")
    return BlockKernel("dot", "dot", ("i", "j", "k"), (n_m, n_n, n_k),
                       _semantics(r, True, 3, avoid), (x, y), out, init_coord="k")


# --- TPU manual DMA and Triton kernels ---------------------------------------------------------


def _dma_kernel(r: random.Random, avoid: frozenset[str]) -> DmaKernel:
    dtype = r.choice(("float32", "float32", "bfloat16"))
    rows = r.choice((8, 16)) if dtype == "float32" else 16
    n = r.randint(1, 4)
    source = r.choice(("i", "i", "ni - 1 - i"))
    op = r.choice([name for name, (arity, *_) in ELEMENTWISE.items() if arity == 1])
    return DmaKernel((rows * n, r.choice((128, 256))), rows, op, source,
                     r.choice(("async", "sync")), 2 if rows == 16 and r.random() < 0.4 else 1,
                     r.random() < 0.4, dtype)


def _triton_kernel(r: random.Random, avoid: frozenset[str]) -> TritonKernel:
    if r.random() < 0.6:
        op = r.choice(sorted(ELEMENTWISE))
        block = r.choice((32, 64, 128))
        valid = r.randint(1, 4 * block)
        return TritonKernel("vector", (valid,), block, valid, op, ELEMENTWISE[op][0] == 2)
    width = r.choice((16, 32, 64))
    return TritonKernel("rows", (r.randint(1, 8), width), width, r.randint(1, width),
                        r.choice(("sum", "max")), r.random() < 0.5)


# --- Triton atomics ----------------------------------------------------------------------------


def _atomic_kernel(r: random.Random, avoid: frozenset[str]) -> AtomicKernel:
    layout = r.choice(("histogram", "histogram", "counter", "split"))
    block = r.choice((16, 32, 64))
    n = r.randint(block + 1, 4 * block)  # two programs or more
    bins = r.choice((8, 16, 32)) if layout != "counter" else 1
    return AtomicKernel(layout, n, block, bins, r.choice(("add", "add", "max", "min")))


# --- Mosaic GPU pipelines -----------------------------------------------------------------------

# A tile of a warpgroup's 128 threads: (rows, tile) of 2,048 or 4,096 elements.
MOSAIC_GPU_TILES = ((64, 32), (64, 64), (128, 32))


def _mosaic_gpu_kernel(r: random.Random, avoid: frozenset[str]) -> MosaicGpuKernel:
    op = r.choice(sorted(ELEMENTWISE))
    rows, tile = r.choice(MOSAIC_GPU_TILES)
    tiles = r.randint(1, 4)
    maps = ("c",) * 3 + (("nc - 1 - c", "(c + 1) % nc") if tiles > 1 else ())
    cols = tuple(r.choice(maps) for _ in range(ELEMENTWISE[op][0]))
    return MosaicGpuKernel(r.randint(1, 3), rows, tile, tiles, op, cols,
                           stages=r.choice((1, 2, 3)),
                           dtype=r.choice(("float32", "float32", "float16")))


# --- kernels across devices ---------------------------------------------------------------------


def _remote_kernel(r: random.Random, avoid: frozenset[str]) -> RemoteKernel:
    devices = r.randint(2, 4)
    op = r.choice(sorted(o for o, (arity, *_) in ELEMENTWISE.items() if arity == 1))
    return RemoteKernel(devices, r.choice((8, 16)), r.randint(1, devices - 1), op)


# --- TPU in-kernel pipelines -------------------------------------------------------------------

PIPELINE_ROWS = ("i", "i", "ni - 1 - i", "(i + 1) % ni")


def _pipeline_kernel(r: random.Random, avoid: frozenset[str]) -> PipelineKernel:
    dtype = r.choice(("float32", "float32", "bfloat16"))
    block = r.choice((8, 16)) if dtype == "float32" else 16
    ni, nj, outer = r.randint(1, 3), r.randint(1, 2), r.choice((1, 1, 2))
    op = r.choice(sorted(ELEMENTWISE))
    rows = tuple(r.choice(PIPELINE_ROWS) for _ in range(ELEMENTWISE[op][0]))
    return PipelineKernel((outer * ni * block, nj * 128), block, op, rows,
                          r.choice(("i", "i", "ni - 1 - i")), outer, dtype)
