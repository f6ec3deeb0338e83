"""Kernel descriptions: plain data, from which both the Pallas kernel (`build`) and the
NumPy model (`model`) are made. Index maps are Python expressions over the grid's coordinate
names (`i`, `j`, `k`, `b`), their extents (`ni`, ...) and the scalar-prefetch table `p`."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Operand:
    shape: tuple[int, ...]
    block: tuple[int | None, ...]  # None: a squeezed dimension
    index_map: str  # e.g. "(b, ni - 1 - i, j)"
    dtype: str = "float32"
    transposed: bool = False  # stored transposed: the body reads it as `ref[...].T`
    family: str = "identity"  # the index map's family, for the tallies


@dataclasses.dataclass(frozen=True)
class BlockKernel:
    """A TPU BlockSpec `pallas_call`. `body`: "elementwise" (op over the inputs' blocks),
    "reduce" (op folded over the last grid axis into a VMEM scratch accumulator) or "dot"
    (a matmul accumulated in f32 scratch over the last grid axis)."""
    body: str
    op: str
    coords: tuple[str, ...]  # grid coordinate names, in grid order
    grid: tuple[int, ...]
    semantics: tuple[str, ...]
    inputs: tuple[Operand, ...]
    output: Operand
    prefetch: tuple[int, ...] = ()  # the scalar-prefetch table `p` (empty: none)
    round_trip: bool = False  # the body's value goes through bfloat16 and back
    chunk_rows: int = 0  # >0: the body runs over row chunks of pl.ds in a fori_loop
    init_coord: str = ""  # reduce/dot: the coordinate whose first step zeroes the scratch
    skip_init: bool = False  # reduce/dot: the scratch is never initialized
    skip_last_store: bool = False  # the grid's last program stores nothing
    family: str = "tpu-block"

    @property
    def features(self) -> tuple[str, ...]:
        f = [self.family, f"body:{self.body}", f"op:{self.op}", f"grid-rank:{len(self.grid)}"]
        f += [f"semantics:{'/'.join(self.semantics)}"]
        f += ["squeezed"] * any(None in o.block for o in (*self.inputs, self.output))
        f += ["transposed"] * any(o.transposed for o in self.inputs)
        f += ["partial-edge"] * any(_partial(o) for o in (*self.inputs, self.output))
        f += ["scalar-prefetch"] * bool(self.prefetch)
        f += ["bf16"] * any(o.dtype == "bfloat16" for o in (*self.inputs, self.output))
        f += ["bf16-round-trip"] * self.round_trip + ["pl.ds-chunks"] * bool(self.chunk_rows)
        f += sorted({f"map:{o.family}" for o in (*self.inputs, self.output)})
        return tuple(f)


@dataclasses.dataclass(frozen=True)
class DmaKernel:
    """A TPU kernel copying row chunks of an HBM (`pltpu.ANY`) input into VMEM scratch by DMA,
    one chunk of `rows` rows per program (grid (n,)), then storing `op` of it."""
    shape: tuple[int, int]
    rows: int
    op: str
    source: str  # the chunk a program copies, an expression over `i`, `ni`
    copy: str  # "async" (make_async_copy, start, wait) or "sync" (pltpu.sync_copy)
    sub_chunks: int  # >1: each chunk copied in this many pl.ds pieces in a fori_loop
    output_in_hbm: bool  # the output is ANY too, written back by sync_copy
    dtype: str = "float32"
    skip_last_store: bool = False
    family: str = "tpu-dma"

    @property
    def grid(self) -> tuple[int, ...]:
        return (self.shape[0] // self.rows,)

    @property
    def features(self) -> tuple[str, ...]:
        return (self.family, f"op:{self.op}", f"copy:{self.copy}",
                *["dma-sub-chunks"] * (self.sub_chunks > 1),
                *["output-in-hbm"] * self.output_in_hbm, *["bf16"] * (self.dtype == "bfloat16"))


@dataclasses.dataclass(frozen=True)
class TritonKernel:
    """A Triton-style GPU kernel on whole-array refs: "vector" (programs over `block`-element
    windows of a 1-D array, masked past its end) or "rows" (a program per row, the first
    `valid` columns live; the row's op reduces over them, the padding is stored as zeros)."""
    layout: str
    shape: tuple[int, ...]
    block: int  # vector: the window; rows: the row length
    valid: int  # elements (vector) or columns (rows) inside the mask
    op: str
    two_inputs: bool
    mask_shift: int = 0  # the mask admits `valid + mask_shift` elements
    skip_last_store: bool = False
    other_zero: bool = False  # rows/max: masked loads fill 0, not -inf
    family: str = "gpu-triton"

    @property
    def grid(self) -> tuple[int, ...]:
        return (-(-self.valid // self.block),) if self.layout == "vector" else (self.shape[0],)

    @property
    def features(self) -> tuple[str, ...]:
        return (self.family, f"layout:{self.layout}", f"op:{self.op}",
                *["partial-edge"] * (self.layout == "vector" and self.valid % self.block != 0),
                *["two-inputs"] * self.two_inputs)


@dataclasses.dataclass(frozen=True)
class PipelineKernel:
    """A TPU kernel on HBM (`pl.ANY`) refs that pipelines `block`-row by 128-lane blocks
    through VMEM itself with `pltpu.emit_pipeline` over an inner grid (i, j), storing `op` of
    its inputs' blocks. Each input's block row is an expression over `i`, `ni` (`rows` maps);
    the output's is `out_map`. With `outer` > 1 the pallas_call has a grid of `outer`
    programs, each pipelining its own slice of rows (its own inner grid over that slice)."""
    shape: tuple[int, int]  # the whole array: outer * ni * block rows, nj * 128 columns
    block: int
    op: str
    rows: tuple[str, ...]  # per input: the block row of inner step (i, j)
    out_map: str = "i"
    outer: int = 1
    dtype: str = "float32"
    family: str = "tpu-pipeline"

    @property
    def inner_grid(self) -> tuple[int, int]:
        return self.shape[0] // self.outer // self.block, self.shape[1] // 128

    @property
    def grid(self) -> tuple[int, ...]:
        return (self.outer,)

    @property
    def features(self) -> tuple[str, ...]:
        names = {"i": "identity", "ni - 1 - i": "reversed", "(i + 1) % ni": "rotated"}
        maps = sorted({f"pipeline-map:{names.get(m, 'shifted')}"
                       for m in (*self.rows, self.out_map)})
        return (self.family, f"op:{self.op}", f"inputs:{len(self.rows)}",
                *["outer-grid"] * (self.outer > 1), *["bf16"] * (self.dtype == "bfloat16"),
                *maps)


@dataclasses.dataclass(frozen=True)
class AtomicKernel:
    """A Triton kernel folding into its output with atomics, the output starting at zeros (an
    aliased input): "histogram" (programs over `block`-value windows of `n` values, each lane
    folding its value into bin `index[lane]` of `bins`), "counter" (each program folds its
    window into the one rank-0 output) or "split" (a (bins, n) input, a program per `block`
    columns folding its columns into the `bins` rows of the output: split-K). Windows past
    `n` are masked. `op`: the atomic, "add", "max" or "min"."""
    layout: str
    n: int
    block: int
    bins: int
    op: str
    index_shift: int = 0  # histogram: each lane's bin is (index + shift) % bins
    plain_store: bool = False  # a store of the program's fold where the atomic was meant
    family: str = "gpu-atomics"

    @property
    def grid(self) -> tuple[int, ...]:
        return (-(-self.n // self.block),)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return () if self.layout == "counter" else (self.bins,)

    @property
    def features(self) -> tuple[str, ...]:
        return (self.family, f"layout:{self.layout}", f"op:atomic-{self.op}",
                *["partial-edge"] * (self.n % self.block != 0),
                *["rank-0-atomic"] * (self.layout == "counter"))


@dataclasses.dataclass(frozen=True)
class MosaicGpuKernel:
    """A Mosaic GPU kernel (`plgpu.kernel`): `blocks` blocks, each streaming (`rows`, `tile`)
    tiles of its own rows through shared memory with `plgpu.emit_pipeline` over the column
    tiles (TMA copies in, predicated copies out), storing `op` of its inputs' tiles. Each
    input's column tile is an expression over `c`, `nc` (`cols` maps); the output's is
    `out_col`, its block row `out_row` (over `b`, the block)."""
    blocks: int
    rows: int
    tile: int
    tiles: int
    op: str
    cols: tuple[str, ...]
    out_col: str = "c"
    out_row: str = "b"
    stages: int = 2  # max_concurrent_steps
    dtype: str = "float32"
    family: str = "mosaic-gpu"

    @property
    def shape(self) -> tuple[int, int]:
        return self.blocks * self.rows, self.tiles * self.tile

    @property
    def grid(self) -> tuple[int, ...]:
        return (self.blocks,)

    @property
    def features(self) -> tuple[str, ...]:
        names = {"c": "identity", "nc - 1 - c": "reversed", "(c + 1) % nc": "rotated"}
        maps = sorted({f"pipeline-map:{names.get(m, 'shifted')}" for m in self.cols})
        return (self.family, f"op:{self.op}", f"inputs:{len(self.cols)}",
                f"stages:{self.stages}", *["f16"] * (self.dtype == "float16"), *maps)


@dataclasses.dataclass(frozen=True)
class RemoteKernel:
    """A TPU kernel under `shard_map` over a ring of `devices` simulated devices: each device
    sends its (`rows`, 128) shard to the device `shift` places to its right by one remote DMA
    (`make_async_remote_copy`), into a VMEM buffer, waits for it, and stores `op` of what it
    received."""
    devices: int
    rows: int
    shift: int
    op: str
    wait_recv: bool = True  # a receiver that does not wait reads its buffer before it lands
    family: str = "tpu-multi"

    @property
    def shape(self) -> tuple[int, int]:
        return self.devices * self.rows, 128

    @property
    def grid(self) -> tuple[int, ...]:
        return ()

    @property
    def features(self) -> tuple[str, ...]:
        return (self.family, f"devices:{self.devices}", f"op:{self.op}",
                f"ring-shift:{self.shift}")


Kernel = (BlockKernel | DmaKernel | TritonKernel | PipelineKernel | AtomicKernel
          | MosaicGpuKernel | RemoteKernel)


@dataclasses.dataclass(frozen=True)
class Generated:
    """One drawn kernel: its description, the seed and index that reproduce it, and when it is
    a mutant, the correct description it was made from and the mutation's name."""
    seed: int
    index: int
    kernel: Kernel
    original: Kernel | None = None
    mutation: str | None = None

    @property
    def name(self) -> str:
        return f"s{self.seed}_k{self.index}" + (f"_{self.mutation}" if self.mutation else "")

    @property
    def reference_kernel(self) -> Kernel:
        return self.original if self.original is not None else self.kernel


def _partial(o: Operand) -> bool:
    return any(b is not None and s % b for s, b in zip(o.shape, o.block, strict=True))
