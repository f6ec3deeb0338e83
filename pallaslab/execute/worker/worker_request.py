"""Requests for the executor worker process: the user's function and arguments by cloudpickle,
JAX's primitives and config options by name, and the caller's JAX options mirrored."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import pickle
import sys
import threading
import uuid
import weakref
from typing import Any

# JAX options a notebook may have changed that change what a kernel computes.
MIRRORED_CONFIG = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_rank_promotion",
                   "jax_numpy_dtype_promotion", "jax_default_prng_impl",
                   "jax_threefry_partitionable")


def encode_request(work: dict[str, Any], kind: str = "execute") -> bytes:
    """A request for the worker: `work` (holding the user's "fn" and "args") travels by
    cloudpickle; raises when it cannot (then the caller runs in this process)."""
    # The outer layer is plain pickle: the worker sets its path and options before it
    # rebuilds the user's objects (which may import the user's modules).
    return pickle.dumps({**_header(work, kind), "work": _dumps(work)})


@dataclasses.dataclass(frozen=True)
class FramedCall:
    """An "execute" request as frames sent one after another, so the arguments are pickled
    once and never copied into an outer pickle: the header (plain pickle: the kind, the
    caller's path and options, and which frames follow), the executor, the call (fn, kwargs
    and the rest) and the arguments. The worker keys its captures by the call's frame and the
    arguments (`_worker`), the executor kept out: two executors comparing one call share one
    capture.

    `args_token` names these very arguments when they cannot change (JAX arrays, immutable):
    a worker that kept them is sent the token alone (`frames(send_args=False)`), and answers
    {"resend-args": True} when it no longer has them."""

    header: dict[str, Any]
    executor: bytes | None
    call: bytes
    args_value: Any = dataclasses.field(repr=False)
    args_token: str | None
    _pickled: list[bytes] = dataclasses.field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.args_token is None:  # pickled now: what cannot travel is known at once
            self._pickled.append(_dumps(self.args_value))

    @property
    def args(self) -> bytes:
        """The arguments' frame: pickled once, and only when they have to travel (JAX arrays
        always pickle)."""
        if not self._pickled:
            self._pickled.append(_dumps(self.args_value))
        return self._pickled[0]

    def frames(self, send_args: bool = True) -> tuple[bytes, ...]:
        parts = [p for p in (self.executor, self.call) if p is not None]
        if send_args:
            parts.append(self.args)
        header = {**self.header, "frames": len(parts), "executor_frame": self.executor
                  is not None, "args_sent": send_args, "args_token": self.args_token}
        return (pickle.dumps(header), *parts)


def encode_frames(work: dict[str, Any], kind: str = "execute") -> FramedCall:
    """`work` as a `FramedCall`; raises when it cannot travel (then the caller runs in this
    process)."""
    rest = {k: v for k, v in work.items() if k not in ("executor", "args")}
    executor = _dumps({"executor": work["executor"]}) if "executor" in work else None
    return FramedCall(_header(work, kind), executor, _dumps(rest), work["args"],
                      args_token(work["args"]))


# Arguments sent lately, by token: their tree structure and a weak reference to each leaf.
_TOKENS: collections.OrderedDict[str, tuple[Any, tuple[weakref.ref[Any], ...]]] = \
    collections.OrderedDict()
_TOKENS_KEPT = 16
_TOKENS_LOCK = threading.Lock()


def args_token(args: Any) -> str | None:
    """The same token for the very same immutable arguments (every leaf a JAX array, in the
    same tree), alive since they were last named; None when a leaf could change in place (a
    NumPy array) or is not an array."""
    import jax

    leaves, tree = jax.tree.flatten(args)
    if not leaves or not all(isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer)
                             for x in leaves):
        return None
    with _TOKENS_LOCK:
        for token, (kept_tree, refs) in _TOKENS.items():
            if kept_tree == tree and len(refs) == len(leaves) and \
                    all(r() is x for r, x in zip(refs, leaves, strict=True)):
                _TOKENS.move_to_end(token)
                return token
        token = uuid.uuid4().hex
        _TOKENS[token] = (tree, tuple(weakref.ref(x) for x in leaves))
        while len(_TOKENS) > _TOKENS_KEPT:
            _TOKENS.popitem(last=False)
        return token


def _header(work: dict[str, Any], kind: str) -> dict[str, Any]:
    """The request's plain-pickle part; raises for what cannot be sent."""
    import cloudpickle
    import jax

    from pallaslab.model import Kernel

    fn, args = work["fn"], work["args"]
    if any(isinstance(a, Kernel) for a in (fn, *args)) or \
            getattr(fn, "__name__", "") == "lone_kernel":
        raise TypeError("a lone captured kernel cannot be sent to a worker")
    for name, module in list(sys.modules.items()):
        # Case files are imported under synthetic names a worker cannot import: send by value.
        if name.startswith("_pallaslab_case_") and module is not None:
            with contextlib.suppress(ValueError):
                cloudpickle.register_pickle_by_value(module)
    config = {name: _config_value(getattr(jax.config, name)) for name in MIRRORED_CONFIG
              if hasattr(jax.config, name)}
    return {"kind": kind, "sys_path": list(sys.path), "config": config}


def _dumps(work: dict[str, Any]) -> bytes:
    """cloudpickle, with the values JAX's modules hold sent by name. JAX's own closures travel
    by value (`half = pl.pallas_call(...)` in a notebook is one; so is the fuser's `fuse`
    wrapper), and the globals they refer to with them: a primitive copied by value is another
    primitive, which neither pallaslab nor JAX's interpreters recognise as `pallas_call`;
    config options and jaxlib's caches cannot be pickled at all; and a sentinel copied by value
    (Pallas's `no_block_spec`, the default `in_specs` of a `pallas_call` made once and closed
    over) is no longer the sentinel."""
    import io

    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if _jax_instance(obj) and (where := _jax_attribute_of(obj)) is not None:
                return _jax_attribute_value, where
            return super().reducer_override(obj)

    buffer = io.BytesIO()
    Pickler(buffer).dump(work)
    return buffer.getvalue()


def _jax_instance(obj: Any) -> bool:
    """An instance of one of JAX's or jaxlib's classes (primitives, config options, caches,
    sentinels); classes themselves travel by reference anyway."""
    return type(obj).__module__.split(".")[0] in ("jax", "jaxlib") and \
        not isinstance(obj, type)


# id -> (module, attribute) of every value the loaded jax modules hold, made again whenever
# more modules are loaded (once per process in practice: ~15 ms).
_HELD: dict[int, tuple[str, str]] = {}
_HELD_FOR_MODULES = [0]


def _jax_attribute_of(obj: Any) -> tuple[str, str] | None:
    """(module, attribute) of a jax module that holds `obj`, or None."""
    if len(sys.modules) != _HELD_FOR_MODULES[0]:
        _HELD.clear()
        _HELD.update(_jax_attributes())
        _HELD_FOR_MODULES[0] = len(sys.modules)
    where = _HELD.get(id(obj))
    # the attribute may have been rebound since, and its old value's id reused
    if where is not None and getattr(sys.modules.get(where[0]), where[1], None) is obj:
        return where
    return None


def _jax_attributes() -> dict[int, tuple[str, str]]:
    """id -> (module, attribute) of every value the loaded jax modules hold (the first
    module found for each)."""
    found: dict[int, tuple[str, str]] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "jax" or name.startswith("jax.")):
            continue
        for attr, value in list(vars(module).items()):
            found.setdefault(id(value), (name, attr))
    return found


def _jax_attribute_value(module: str, attr: str) -> Any:
    import importlib

    return getattr(importlib.import_module(module), attr)


def why_not_sent(err: BaseException) -> str:
    """Why a request could not be made, in one short line."""
    return f"{type(err).__name__}: {err}".splitlines()[0][:200]


def _config_value(value: Any) -> Any:
    # Enum-valued options (dtype promotion) are set back from their string value.
    return getattr(value, "value", value)
