"""What each interpreter can run, said in one line when it cannot.

- The HLO interpreter (`interpret=True`) runs a mesh kernel's cores one after another with no
  mesh axes bound: `jax.lax.axis_index("core")` fails ("Found an unbound axis name") and
  cores that wait on each other would never meet. TPU mesh kernels (`pl.kernel` /
  `pl.core_map` over a tensorcore or SparseCore mesh) run under TPU interpret mode instead.
- JAX's TPU interpreter lacks some primitives (e.g. `pl.semaphore_read`): their lowering for
  the CPU is missing ("MLIR translation rule for primitive ... not found"). That is the
  interpreter's limit, not the kernel's fault, so the executor is *unavailable* for that
  kernel, with the primitive and the user's line named.
- JAX's HLO interpreter cannot run a window whose size is traced (`pl.ds(start, size)` of a
  `pl.BoundedSlice` block): `interpret` and `vectorized` are unavailable for such kernels,
  from the interpreter's error. (Triton atomics it cannot discharge, rank-0 ones and
  `atomic_xchg`, pallaslab's run rewrites as loads and stores: `model/_jax/atomics.py`.)
- JAX's TPU interpreter refuses kernels Mosaic compiles, and misreads one access: a grid
  whose "parallel" dimensions do not all come first ("Dimensions with parallel semantics must
  form a prefix of the grid"; known before running, `tpu_interpreter_refusal`), and a masked
  store wholly inside its buffer that it calls out of bounds (its bounds check compares every
  dimension of the mask with the first one: an (8, 5) block storing to any row past the
  fifth). `INTERPRETER_LIMITS` keeps each such limit as data: the interpreter, JAX's error
  and, where the error can also be the kernel's own fault, what tells the two apart;
  `unimplemented` reads it, so the executor is unavailable with JAX's reason, not failed.
- Kernels traced under an abstract TPU (`Kernel.traced_for_chip`, because their tracing asks
  the chip) are traced again for the same chip wherever they are re-traced (the executor
  worker process), and under the caller's own abstract mesh when there is one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pallaslab.model import Kernel, library_contexts
from pallaslab.model._jax import cross_call_semaphores, remote_copies, rerun

# Mesh classes of TPU mesh kernels (tensorcore and SparseCore meshes).
TPU_MESH_KINDS = ("TensorCoreMesh", "VectorSubcoreMesh", "ScalarSubcoreMesh")

_MISSING_RULE = re.compile(
    r"(?:MLIR translation rule|lowering rule) for primitive '(?P<prim>[\w.-]+)' not found"
    r"(?: for platform (?P<platform>\w+))?")
# A shape built from a traced size (a `pl.ds(start, size)` window, pl.BoundedSlice).
_UNSIZED_WINDOW = "Shapes must be 1D sequences of concrete values of integer type"
_NOT_IMPLEMENTED = re.compile(r"NotImplementedError: (?P<what>[^\n]+)")


def is_tpu_mesh(kernel: Kernel) -> bool:
    return kernel.kind == "mesh" and kernel.mesh is not None and \
        kernel.mesh.kind in TPU_MESH_KINDS


def hlo_interpreter_refusal(kernels: Iterable[Kernel]) -> str | None:
    """Why `interpret` cannot run these kernels (None: it can)."""
    kernels = list(kernels)
    for k in kernels:
        if is_tpu_mesh(k):
            assert k.mesh is not None
            return (f"the HLO interpreter cannot run mesh kernels ({k.mesh.kind}); "
                    f"tpu-interpret can (kernel {k.name})")
        if k.communicates and k.backend in (None, "tpu") and \
                not _in_step_between_calls(k, kernels):
            who = ("only when they pass a DMA semaphore between calls and every program "
                   "starts its remote copies unconditionally" if _passes_semaphores(kernels)
                   else "tpu-interpret can")
            return (f"the HLO interpreter cannot run kernels that communicate between devices "
                    f"(remote DMAs, semaphore signals to a device); {who} (kernel {k.name})")
    return None


def _in_step_between_calls(kernel: Kernel, kernels: Iterable[Kernel]) -> bool:
    """Kernels that pass a DMA semaphore between calls (which TPU interpret mode cannot run)
    and talk to other devices only by remote copies every device starts together: the HLO
    interpreter's collective copy is theirs (`model/_jax/remote_copies.py`)."""
    return kernel.handle is not None and _passes_semaphores(kernels) and \
        remote_copies.lockstep_remote_copies(kernel.handle.eqn)


def _passes_semaphores(kernels: Iterable[Kernel]) -> bool:
    return any(cross_call_semaphores.passes_semaphores(k.handle.eqn) for k in kernels
               if k.handle is not None)


def hlo_interpreter_gap(kernels: Iterable[Kernel]) -> str | None:
    """What the kernels use that JAX's HLO interpreter does not implement, decided before
    running (None: nothing known). Unlike `hlo_interpreter_refusal`, no other interpreter
    is implied: `interpret` and `vectorized` would be unavailable, the kernel not at fault.
    Nothing is known today: the rank-0 atomics JAX's rule cannot discharge run as loads
    and stores in pallaslab's run (`model/_jax/atomics.py`)."""
    del kernels
    return None


TPU_INTERPRETER = "JAX's TPU interpreter (TPU interpret mode)"
_PARALLEL_PREFIX = "Dimensions with parallel semantics must form a prefix of the grid"


def parallel_after_other(semantics: Sequence[str] | None) -> int | None:
    """The first grid dimension marked "parallel" that follows one that is not (None: the
    parallel dimensions form a prefix, as JAX's TPU interpreter requires; "core_parallel"
    counts as not parallel there)."""
    seen_other = False
    for d, name in enumerate(semantics or ()):
        if name == "parallel" and seen_other:
            return d
        seen_other = seen_other or name != "parallel"
    return None


def tpu_interpreter_refusal(kernels: Iterable[Kernel]) -> str | None:
    """Why `tpu-interpret` cannot run these kernels (None: it can)."""
    for k in kernels:
        if k.kind == "pallas_call" and \
                (d := parallel_after_other(k.dimension_semantics)) is not None:
            semantics = ", ".join(f'"{s}"' for s in k.dimension_semantics or ())
            return (f"{TPU_INTERPRETER} cannot run kernel {k.name}: its grid's dimension "
                    f"{d} is \"parallel\" after a dimension that is not (dimension_semantics "
                    f"({semantics})), and JAX's TPU interpreter requires the parallel "
                    f"dimensions to come first (ValueError: {_PARALLEL_PREFIX}.); a limit of "
                    "the interpreter, not a fault of the kernel: Mosaic compiles it "
                    "(pallaslab lower --compile); interpret runs it")
        if k.kind == "mesh" and not is_tpu_mesh(k):
            kind = k.mesh.kind if k.mesh else "?"
            return (f"kernel {k.name} is a {k.backend or 'non-TPU'} mesh kernel ({kind}): "
                    "TPU interpret mode runs pallas_call kernels and TPU mesh kernels "
                    "(tensorcore and SparseCore meshes); gpu-interpret runs Mosaic GPU ones")
        if k.backend not in (None, "tpu"):
            return (f"kernel {k.name} has {k.backend} compiler params: TPU interpret mode "
                    "needs TPU (or no) compiler params")
    return None


def unimplemented(mode: str | None, message: str, kernels: Sequence[Kernel]) -> str | None:
    """One line saying JAX's interpreter `mode` (an executor's `spec.interpreter`) does not
    implement a primitive the kernel uses, when `message` (an error the run raised) says so,
    or names another of its limits (`INTERPRETER_LIMITS`); None for any other error."""
    if mode is None:  # another executor's error (a reference raising) is its own
        return None
    if m := _MISSING_RULE.search(message):
        prim = m["prim"]
        where = _sources(kernels, prim)
        platform = f"{m['platform']} " if m["platform"] else ""
        return (f"{mode} does not implement {_user_name(prim)} (primitive {prim!r} has no "
                f"{platform}lowering){where}: a limit of the interpreter, not a fault of the "
                "kernel; compile it for a TPU (pallaslab lower --compile) or run it on one")
    if _UNSIZED_WINDOW in message:
        return (f"{mode} does not implement a window of varying size (pl.ds with a traced "
                "size, as a pl.BoundedSlice block makes): it needs every block shape to be "
                "concrete; a limit of the interpreter, not a fault of the kernel: pallaslab "
                "check judges it statically, pallaslab lower --compile compiles it for a TPU")
    if m := _NOT_IMPLEMENTED.search(message):
        frames = _INTERNAL_FRAME.findall(message)  # the interpreter's rule that gave up
        where = f" (in its {frames[-1][2]})" if frames else ""
        return f"{mode} does not implement what the kernel uses: {m['what'].strip()}{where}"
    return next((why for limit in INTERPRETER_LIMITS if (why := limit.says(mode, message))),
                None)


@dataclasses.dataclass(frozen=True)
class InterpreterLimit:
    """A limit of one of JAX's interpreters, known by the error it raises: `error` matches
    JAX's message; `applies(match)` False means the message is the kernel's own fault after
    all (the error reads the same for both)."""

    interpreter: str  # an executor's `spec.interpreter`
    error: re.Pattern[str]
    what: str  # the limit, in words
    advice: str
    applies: Callable[[re.Match[str]], bool] = lambda match: True

    def says(self, mode: str, message: str) -> str | None:
        """One line when `message` (from `mode`) is this limit, else None."""
        m = self.error.search(message) if mode == self.interpreter else None
        if m is None or not self.applies(m):
            return None
        return (f"{mode} {self.what} (ValueError: {m[0].strip()}); a limit of the "
                f"interpreter, not a fault of the kernel: {self.advice}")


_INDEX = re.compile(r"slice\((?P<start>\d+), (?P<stop>\d+), (?:None|\d+)\)|(?P<int>-?\d+)")


def _range_inside(match: re.Match[str]) -> bool:
    """Does the swapped range JAX printed ("(slice(0, 8, None), 3)", "()": all of it) lie
    inside the buffer's shape? Then no masked lane can be out of bounds."""
    try:
        shape = [int(d) for d in match["shape"].replace(",", " ").split()]
    except ValueError:
        return False
    text = match["range"].strip()
    if re.sub(r"slice\(\d+, \d+, (?:None|\d+)\)|-?\d+|[\s,()]", "", text):
        return False  # an index JAX printed in a form not read here: not judged
    parts = list(_INDEX.finditer(text))
    if len(parts) > len(shape):
        return False
    for p, dim in zip(parts, shape, strict=False):
        if p["int"] is not None and not 0 <= int(p["int"]) < dim:
            return False
        if p["int"] is None and int(p["stop"]) > dim:
            return False
    return True


INTERPRETER_LIMITS: tuple[InterpreterLimit, ...] = (
    InterpreterLimit(
        TPU_INTERPRETER, re.compile(re.escape(_PARALLEL_PREFIX) + r"\.?"),
        "cannot run a grid whose \"parallel\" dimensions do not all come first",
        "Mosaic compiles it (pallaslab lower --compile); interpret runs it"),
    InterpreterLimit(
        TPU_INTERPRETER, re.compile(
            r"Out-of-bounds masked swap of \([^)]*\): swapping \[(?P<range>[^\]]*)\] but "
            r"buffer has shape \((?P<shape>[^)]*)\)"),
        "calls a masked store out of bounds that lies inside its buffer (its check compares "
        "every dimension of the mask with the first one, so a block with fewer columns than "
        "rows fails where the mask is set past that many rows)",
        "interpret runs it; pallaslab lower --compile compiles it for a TPU",
        applies=_range_inside),
)


# An interpreter's own bug or missing feature: Python's "this object has no such attribute"
# errors raised in JAX's Pallas code, in the text of a wrapped host-callback traceback.
_INTERNAL_FRAME = re.compile(
    r'File "(?P<file>[^"]*jax/_src/pallas/[^"]*)", line (?P<line>\d+), in (?P<fn>\w+)')
_INTERNAL_ERRORS = ("AttributeError", "TypeError")


def interpreter_internal_error(mode: str | None, err: BaseException) -> str | None:
    """One line when JAX's interpreter `mode` (an executor's `spec.interpreter`) broke inside
    JAX's own Pallas code with an internal error (an AttributeError/TypeError there means it
    does not handle something the kernel does), None for any other error (a kernel bug the
    interpreter reports, a user error)."""
    if mode is None:
        return None
    text = f"{type(err).__name__}: {err}"
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(err.__traceback__)]
    frames += [(m["file"], int(m["line"])) for m in _INTERNAL_FRAME.finditer(text)]
    last = frames[-1] if frames else None
    kind = next((k for k in _INTERNAL_ERRORS if f"{k}: " in text.splitlines()[-1]
                 or type(err).__name__ == k), None)
    if kind is None or last is None or "jax/_src/pallas/" not in last[0]:
        return None
    line = next((ln for ln in reversed(text.splitlines()) if ln.startswith(f"{kind}: ")),
                f"{kind}: {err}")
    where = f"{last[0].split('jax/_src/pallas/')[-1]}:{last[1]}"
    return (f"{mode} broke inside its own code ({line.strip()}, at jax/_src/pallas/{where}): "
            "it does not handle something this kernel does; not a verdict on the kernel. "
            "Try the other interpreter, or compile it for a TPU (pallaslab lower --compile)")


def _sources(kernels: Sequence[Kernel], primitive: str) -> str:
    for k in kernels:
        sites = rerun.primitive_sources(k, primitive) if k.handle is not None else ()
        if sites:
            more = f" and {len(sites) - 1} more" if len(sites) > 1 else ""
            return f", used by kernel {k.name} at {sites[0]}{more}"
    return ""


def _user_name(primitive: str) -> str:
    """How the user wrote a primitive: `pl.semaphore_read`, `pltpu.<name>`, else its name."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    for prefix, module in (("pl", pl), ("pltpu", pltpu)):
        if callable(getattr(module, primitive, None)):
            return f"{prefix}.{primitive}"
    return primitive


# --------------------------------------------------------------------------------------------
# Re-tracing under the abstract TPU a capture was traced under


def traced_chip(kernels: Iterable[Kernel]) -> str | None:
    """The chip ("v5e") whose abstract TPU the kernels were traced under, if any."""
    return next((k.traced_for_chip for k in kernels if k.traced_for_chip), None)


def retrace_context(kernels: Iterable[Kernel]) -> dict[str, Any]:
    """What another process needs to trace a function as this one did: the abstract mesh
    the caller is under (`jax.sharding.use_abstract_mesh`, if any), else the abstract TPU
    chip capture traced the kernels under, the kernels' names and grids, to check, and the
    library settings that change how they trace (`model/library_contexts.py`)."""
    import jax

    kernels = tuple(kernels)
    mesh = jax.sharding.get_abstract_mesh()
    return {"abstract_mesh": None if mesh.empty else mesh, "chip": traced_chip(kernels),
            "kernels": signature(kernels), "library_settings": library_contexts.in_force()}


@contextlib.contextmanager
def retracing(context: dict[str, Any]) -> Iterator[None]:
    """Trace under the caller's abstract mesh of `retrace_context` (nothing when none; the
    chip goes to `capture(..., chip=)`, which traces under it when tracing asks the TPU)."""
    import jax

    with library_contexts.entered(context.get("library_settings") or {}):
        if context.get("abstract_mesh") is None:
            yield
            return
        with jax.sharding.use_abstract_mesh(context["abstract_mesh"]):
            yield


def signature(kernels: Iterable[Kernel]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """(name, grid) per kernel: what a re-trace must reproduce to run the same kernels."""
    return tuple((k.name, tuple(k.grid)) for k in kernels)


