"""The peer corpus's registry: kernels of JAX's own Pallas tests, written here as pallaslab cases.

Each peer module (`tests/peer/<group>.py`, importing this as `from registry import peer`: the
CLI puts a case's folder on `sys.path` while loading it) defines zero-argument case functions
returning `(fn, args)` or `(fn, args, kwargs)` (the CLI's `file.py:function` contract) and
registers each with `@peer(...)`, saying what JAX's test expects of the kernel, so the corpus
test can hold pallaslab's verdicts to it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

Case = Callable[[], tuple[Any, ...]]
Backend = Literal["tpu", "triton", "mosaic-gpu", "none"]


@dataclasses.dataclass(frozen=True)
class Peer:
    case: Case
    module: str          # the peer module's file name, e.g. "tpu_blockspec.py"
    kind: str            # the capability it exercises: "blockspec", "scalar-prefetch", ...
    origin: str          # JAX test it was written from: "pallas_test.py::test_add_one"
    backend: Backend     # what `check`/`lower` judge it for
    reference: Callable[..., Any] | None  # the test's expected value, from the case's args
    compiles: bool = True           # False: the real compiler rejects it ...
    rejected_by: str | None = None  # ... with this diagnostic code (e.g. "vmem-oom")
    devices: int = 1                # simulated devices (shard_map collectives)
    interpretable: bool = True      # False: JAX's own interpreters cannot run it (say why)
    why_not: str | None = None      # JAX's reason, when not interpretable
    # ... and what pallaslab's compare must then say: every executor that did not run is
    # "unavailable" (not an internal failure), its reason containing this phrase; None: the
    # case cannot be run at all (e.g. it takes shapes only), compare does not apply
    unavailable_says: str | None = None

    @property
    def name(self) -> str:
        return self.case.__name__

    @property
    def path(self) -> str:
        """`file.py:function`, as the CLI takes it."""
        return f"tests/peer/{self.module}:{self.name}"


PEERS: dict[str, Peer] = {}


def peer(kind: str, origin: str, *, backend: Backend, reference: Callable[..., Any] | None,
         **expect: Any) -> Callable[[Case], Case]:
    """Register a case; `expect` holds `compiles`, `rejected_by`, `devices`, ... (see `Peer`)."""
    def register(fn: Case) -> Case:
        # The file, not __module__: the CLI imports a case file under a name of its own
        module = Path(fn.__code__.co_filename).name
        known = PEERS.get(fn.__name__)
        if known is not None and known.module != module:  # a module loaded twice is fine
            raise ValueError(f"peer case {fn.__name__!r} is in {known.module} and {module}")
        PEERS[fn.__name__] = Peer(fn, module, kind, origin, backend, reference, **expect)
        return fn

    return register
