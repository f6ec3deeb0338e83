"""Turn the messages of Pallas's lowering and of the real compilers into coded diagnostics."""

from __future__ import annotations

import re

from lowering.result import Diagnostic
from pallaslab.errors import PallasLabError


class LoweringContextError(PallasLabError, RuntimeError):
    """pallaslab did not give Pallas the device context a lowering needs (the target's
    abstract device): a tool error, not a verdict on the kernel."""

_BLOCK_SPEC = re.compile(
    r"Block spec for (?P<origin>\S+) in (?:pallas_call )?(?P<kernel>.+?) at (?P<src>\S+) has "
    r"block shape \((?P<block>.*?)\), array shape \((?P<shape>.*?)\)"
)
_SIZE = r"([\d.]+)\s*([KMGT]i?B?|B)?"
_SCOPED = re.compile(
    rf"Scoped allocation with size {_SIZE} and limit {_SIZE}(?: exceeded scoped vmem limit by "
    rf"{_SIZE})?")
_UNSUPPORTED = re.compile(
    r"Unimplemented primitive|not implemented|Not implemented|unsupported|Unsupported|"
    r"not supported", re.I)
# Pallas asking for a device it was not told about: our context failed, not the kernel.
_CONTEXT = re.compile(
    r"Unsupported (?:TPU|GPU) device kind|only supported on TPU, but the current device is|"
    r"Cannot infer architecture of an unknown abstract GPU")
# Verdicts of Mosaic TPU on a kernel's pipeline (the same codes as the findings that predict
# them), and on a target without the cores the kernel is written for.
_BUFFER_COUNT = re.compile(r"Only single \(1\) and double \(2\) buffering are supported")
_MIXED_ELEMENT = re.compile(r"All block dimensions must be Elements or none of them")
_NO_SPARSECORE = re.compile(r"SparseCore is not available on the current device")
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(number: str, unit: str | None) -> int:
    """"96.00", "M" -> bytes (the TPU compiler prints binary units)."""
    return round(float(number) * _UNITS[(unit or "")[:1].upper()])


def context_error(err: BaseException, kernel_name: str, target: str
                  ) -> LoweringContextError | None:
    """The tool error to raise when `err` says the lowering lacked its device context."""
    text = str(err)
    if not _CONTEXT.search(text):
        return None
    return LoweringContextError(
        f"pallaslab failed to lower kernel {kernel_name!r} for {target}: it did not supply "
        f"the device context Pallas asked for (the target's abstract device). This is a "
        f"pallaslab error, not a verdict on the kernel. Pallas said: {type(err).__name__}: "
        f"{headline(text, max_lines=1)}")


def from_lowering_error(err: BaseException, kernel_name: str, backend: str,
                        operands: dict[str, str | None] | None = None) -> Diagnostic:
    """A coded diagnostic for Pallas's refusal to lower; `operands` maps a code to the origin
    of the operand the kernel's capture says it concerns (e.g. the one with Buffered(3))."""
    text = str(err)
    if m := _BLOCK_SPEC.search(text):
        block = _short_dims(m["block"])
        return Diagnostic(
            "error", "tpu-block-shape",
            f"{m['origin']}: block shape {block} of an array of shape ({m['shape']}) is not "
            "allowed by Mosaic TPU. Rule: the last two block dimensions must be divisible by "
            "8 and 128 respectively (for 32-bit types), or equal the array's dimensions.",
            operand=m["origin"], data=(("block_shape", block), ("array_shape", f"({m['shape']})")))
    message = (f"{backend} could not lower kernel {kernel_name!r}: {type(err).__name__}: "
               f"{headline(text)}")
    for pattern, code in ((_BUFFER_COUNT, "tpu-buffer-count"),
                          (_MIXED_ELEMENT, "tpu-mixed-element")):
        if pattern.search(text):
            operand = (operands or {}).get(code)
            prefix = f"{operand}: " if operand else ""
            return Diagnostic("error", code, prefix + message, operand=operand)
    if _NO_SPARSECORE.search(text):
        return Diagnostic("error", "unsupported-target", message)
    code = "unsupported-op" if _UNSUPPORTED.search(text) else "lowering-error"
    return Diagnostic("error", code, message)


def from_compile_error(message: str, kernel_name: str, target: str) -> Diagnostic:
    if m := _SCOPED.search(message):
        needed, limit = parse_size(m[1], m[2]), parse_size(m[3], m[4])
        return Diagnostic(
            "error", "vmem-oom",
            f"kernel {kernel_name!r} needs at least {_human(needed)} of scoped VMEM on "
            f"{target}, but the limit is {_human(limit)} (raise it with "
            "pltpu.CompilerParams(vmem_limit_bytes=...) or use smaller blocks). Compiler: "
            + m[0] + ".",
            data=(("needed_bytes", needed), ("limit_bytes", limit)))
    if "vmem" in message.lower() and ("oom" in message.lower() or "memory" in message.lower()):
        return Diagnostic("error", "vmem-oom",
                          f"kernel {kernel_name!r} does not fit VMEM on {target}: "
                          + headline(message))
    lowered = message.lower()
    if "layout" in lowered:
        code = "layout"
    elif _UNSUPPORTED.search(message):
        code = "unsupported-op"
    elif "shape" in lowered:
        code = "shape"
    else:
        code = "compile-error"
    return Diagnostic("error", code, f"the {target} compiler rejected kernel {kernel_name!r}: "
                      + headline(message))


def headline(text: str, max_lines: int = 6, max_chars: int = 800) -> str:
    """The informative start of a long compiler/lowering message (no tracebacks, no IR dumps)."""
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("Traceback", "File ", "===", "---", "#loc")):
            continue
        if s.startswith(("module ", "func.func", "%", "}")):
            break
        lines.append(s)
        if len(lines) >= max_lines:
            break
    out = " | ".join(lines)
    return out if len(out) <= max_chars else out[: max_chars - 3] + "..."


def _short_dims(text: str) -> str:
    dims = re.findall(r"Blocked\(block_size=(\d+)\)|(Squeezed\(\))|Element\((\d+)", text)
    if not dims:
        return f"({text})"
    return "(" + ", ".join(b or e or "None" for b, _, e in dims) + ")"


def _human(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 10) == 0 and n % (1 << 20):
        return f"{n / (1 << 20):.2f} MiB"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.2f} {unit}"
    return f"{n} B"
