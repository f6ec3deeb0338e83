"""Requests for the executor worker process: the user's function and arguments by cloudpickle,
JAX's primitives and config options by name, and the caller's JAX options mirrored."""

from __future__ import annotations

import contextlib
import pickle
import sys
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


def encode_frames(work: dict[str, Any], kind: str = "execute") -> tuple[bytes, ...]:
    """The same request as frames sent one after another, so the arguments are pickled once
    and never copied into an outer pickle: the header (plain pickle: the kind, the caller's
    path and options, and how many frames follow), the executor, and the call (fn, args,
    kwargs and the rest). The worker keys its captures by the call's frame (`_worker`), which
    the executor is kept out of: two executors comparing one call share one capture."""
    rest = {k: v for k, v in work.items() if k != "executor"}
    frames = (_dumps({"executor": work["executor"]}), _dumps(rest)) if "executor" in work \
        else (_dumps(rest),)
    return (pickle.dumps({**_header(work, kind), "frames": len(frames)}), *frames)


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
    """cloudpickle, with JAX's primitives and config options sent by name. JAX's own closures
    travel by value (`half = pl.pallas_call(...)` in a notebook is one; so is the fuser's
    `fuse` wrapper), and the globals they refer to with them: a primitive copied by value is
    another primitive, which neither pallaslab nor JAX's interpreters recognise as
    `pallas_call`, and config options cannot be pickled at all."""
    import io

    import cloudpickle
    from jax.extend.core import Primitive

    held: dict[int, tuple[str, str]] | None = None

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            nonlocal held
            if isinstance(obj, Primitive) or (type(obj).__module__.startswith("jaxlib")
                                              and type(obj).__name__ == "Config"):
                held = _jax_attributes() if held is None else held
                if (where := held.get(id(obj))) is not None:
                    return _jax_attribute_value, where
            return super().reducer_override(obj)

    buffer = io.BytesIO()
    Pickler(buffer).dump(work)
    return buffer.getvalue()


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
