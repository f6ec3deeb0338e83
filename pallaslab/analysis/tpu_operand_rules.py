"""Mosaic TPU's rules on one operand's BlockSpec, judged without a grid: the block shape's
(8, 128) tiling, the buffer count and `pl.Element` mixed with blocked dimensions."""

from __future__ import annotations

from collections.abc import Callable

from pallaslab.analysis.finding import Finding
from pallaslab.model import Operand


def tpu_block_shape(op: Operand) -> Finding | None:
    """Mosaic's rule: the last two block dims divisible by (8, 128) or equal to the array's.

    Rank-1 blocks: equal to the array, a multiple of 1024 (8 x 128), or a power of two of at
    least 128 x packing (packing = 32 bits / dtype bits).
    """
    if not op.windowed or op.block_dims is None or op.memory_space == "smem":
        return None
    # Like Mosaic, compare positionally with squeezed dims counting as size 1.
    kept = [(d.size, s) for d, s in zip(op.block_dims, op.shape, strict=True)]
    if not kept:
        return Finding(
            "tpu-block-shape", "error",
            f"{_named(op)}: a rank-0 (scalar) {op.dtype} block in {op.memory_space} memory "
            "breaks the TPU rule that a block outside SMEM has rank >= 1 (\"The Pallas TPU "
            "lowering currently supports only blocks of rank >= 1\"). Rule: put a scalar in "
            "SMEM (memory_space=pltpu.SMEM), or give it shape (1,) or (1, 1).",
            operand=op.origin)
    problems: list[str] = []
    if len(kept) >= 2:
        for (size, dim), quantum, which in ((kept[-1], 128, "last"), (kept[-2], 8, "second-last")):
            if size != dim and size % quantum:
                problems.append(f"the {which} block dim {size} is neither a multiple of "
                                f"{quantum} nor the array's {dim}")
        rule = ("the last two block dimensions must be divisible by 8 and 128 respectively, "
                "or equal the array's")
    else:
        size, dim = kept[0]
        packing = max(1, 4 // op.itemsize)
        ok = size == dim or size % 1024 == 0 or (size >= 128 * packing and size & (size - 1) == 0)
        if not ok:
            problems.append(f"the block dim {size} is not the array's {dim}, not a multiple of "
                            f"1024 and not a power of two >= {128 * packing}")
        rule = ("a rank-1 block must equal the array, be a multiple of 1024, or be a power of "
                f"two of at least 128 x {packing} for {op.dtype}")
    if not problems:
        return None
    return Finding(
        "tpu-block-shape", "error",
        f"{op.origin}: block shape {op.block_shape} of the {op.dtype} array {op.shape} breaks "
        f"the TPU tiling rule ({rule}): {'; '.join(problems)}.",
        operand=op.origin,
    )


def _named(op: Operand) -> str:
    return f"{op.origin} ({op.param})" if op.param else op.origin


# Mosaic TPU's pallas_call pipeline (jax/_src/pallas/mosaic/lowering.py) refuses other counts;
# emit_pipeline's own pipeline (nested kernels, not checked here) takes more.
TPU_MAX_BUFFERS = 2


def tpu_buffer_count(op: Operand) -> Finding | None:
    """Mosaic's rule: a pallas_call BlockSpec is single- or double-buffered, nothing else."""
    n = op.buffer_count
    if n is None or 1 <= n <= TPU_MAX_BUFFERS:
        return None
    return Finding(
        "tpu-buffer-count", "error",
        f"{_named(op)}: pipeline_mode=pl.Buffered({n}) asks for {n} buffers, but Mosaic TPU's "
        "pallas_call pipeline supports only single (1) and double (2) buffering (\"Only single "
        f"(1) and double (2) buffering are supported. Got {n}.\"). Rule: pl.Buffered(1) or "
        "pl.Buffered(2) in a TPU pallas_call; deeper pipelines need pltpu.emit_pipeline.",
        operand=op.origin,
    )


def tpu_mixed_element(op: Operand) -> Finding | None:
    """Mosaic's rule: if one block dimension is `pl.Element`, every other one is `pl.Element`
    or squeezed (None)."""
    kinds = [d.kind for d in op.block_dims or ()]
    if "element" not in kinds:
        return None
    blocked = [i for i, k in enumerate(kinds) if k not in ("element", "squeezed")]
    if not blocked:
        return None
    dims = op.block_dims or ()
    shown = ", ".join(f"pl.Element({d.size})" if d.kind == "element" else
                      "None" if d.squeezed else str(d.size) for d in dims)
    which = ", ".join(f"dim {i} ({kinds[i]} {dims[i].size})" for i in blocked)
    return Finding(
        "tpu-mixed-element", "error",
        f"{_named(op)}: block shape ({shown}) mixes pl.Element dimensions with "
        f"non-Element ones ({which}); Mosaic TPU rejects it (\"All block dimensions must be "
        "Elements or none of them can be Elements.\"). Rule: make every block dimension "
        "pl.Element (or squeezed), or none of them.",
        operand=op.origin,
    )


TPU_OPERAND_RULES: tuple[Callable[[Operand], Finding | None], ...] = (
    tpu_block_shape, tpu_mixed_element, tpu_buffer_count)
