"""What a kernel equation says of its parts, read the same way wherever a kernel is read
(`kernels`, `nested`, `stepper`, `stores`, `rerun`): memory spaces, element types, block
dimensions and operands, dimension semantics, and the user's source lines."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from jax._src import source_info_util
from jax._src.pallas import core as pallas_core

from pallaslab.model._jax.base import jaxpr_text
from pallaslab.model.kernel import BlockDim, Operand


def element_type(dtype: Any) -> tuple[np.dtype, str | None]:
    """(numpy dtype, None) for array elements; (int32 stand-in, its name) for barriers and
    semaphores."""
    if is_numpy_dtype(dtype):
        return np.dtype(dtype), None
    return np.dtype("int32"), (str(getattr(dtype, "name", dtype)) if dtype is not None else None)


def is_numpy_dtype(dtype: Any) -> bool:
    """Whether numpy knows the dtype (semaphore and barrier dtypes it does not)."""
    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return dtype is not None


def block_operand(bm: Any, role: str, aliased: str | None) -> Operand:
    """The operand a Pallas block mapping describes (`aliased`: its aliased operand's origin)."""
    # A semaphore passed between kernels (JAX's async-copy pattern) is an input or output
    # whose elements are semaphores: no numpy dtype, no window (semaphores are not
    # pipelined), described by its value type.
    dtype, value_type = element_type(bm.array_aval.dtype)
    block_dims = None if value_type is not None else \
        tuple(block_dim(d) for d in bm.block_shape)
    memory_space = memory_space_of(bm.block_aval)
    buffer_count: int | None = None
    if memory_space not in ("any", "hbm", "smem", "semaphore", "semaphore_mem"):
        mode = bm.pipeline_mode
        count = getattr(mode, "buffer_count", 2) if mode is not None else 2
        buffer_count = int(count[0] if isinstance(count, tuple) else count)
    _, index_src = func_source(bm.index_map_jaxpr)
    return Operand(
        origin=str(bm.origin),
        role=role,  # type: ignore[arg-type]
        shape=tuple(int(s) for s in bm.array_aval.shape),
        dtype=dtype,
        memory_space=memory_space,
        block_dims=block_dims,
        index_map_jaxpr=jaxpr_text(bm.index_map_jaxpr),
        index_map_source=index_src,
        buffer_count=buffer_count,
        aliased_with=aliased,
        value_type=value_type,
    )


def block_dim(d: Any) -> BlockDim:
    match d:
        case pallas_core.Squeezed():
            return BlockDim("squeezed", 1)
        case pallas_core.Blocked(block_size=size):
            return BlockDim("blocked", int(size))
        case pallas_core.Element(block_size=size, padding=padding):
            return BlockDim("element", int(size), (int(padding[0]), int(padding[1])))
        case pallas_core.BoundedSlice(block_size=size):
            return BlockDim("bounded", int(size))
        case pallas_core.Indirect(block_size=size):
            return BlockDim("indirect", int(size))
    raise TypeError(f"unknown Pallas block dimension {d!r}")  # pragma: no cover


def memory_space_of(aval: Any) -> str:
    """An aval's memory space in lower case ("vmem", "smem", "any"); "default" when unset."""
    space = getattr(aval, "memory_space", None)
    if space is None:
        return "default"
    value = getattr(space, "value", None)
    text = str(value if isinstance(value, str) else space)
    return text.rsplit(".", 1)[-1].lower()


def semantics_name(s: Any) -> str:
    """A dimension semantic ("parallel", "arbitrary"), whether given as enum or string."""
    value = getattr(s, "value", s)
    return str(value).rsplit(".", 1)[-1].lower()


_FUNC_SRC = re.compile(r"^(?P<name>.*?) at (?P<file>.+):(?P<line>\d+)$")


def func_source(jaxpr: Any) -> tuple[str | None, str | None]:
    """(function name, "file.py:LINE") a jaxpr was traced from, as far as JAX recorded it."""
    info = getattr(jaxpr, "debug_info", None)
    text = getattr(info, "func_src_info", None) if info is not None else None
    if not text:
        return None, None
    m = _FUNC_SRC.match(text)
    if m is None:
        return text, None
    return m["name"], f"{m['file']}:{m['line']}"


def call_site_of(eqn: Any) -> str | None:
    """"file.py:LINE" of the user's code that made the equation, or None."""
    frame = source_info_util.user_frame(eqn.source_info.traceback)
    if frame is None:
        return None
    return f"{frame.file_name}:{frame.start_line}"
