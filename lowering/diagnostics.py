"""Turn the messages of Pallas's lowering and of the real compilers into coded diagnostics."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from pallaslab.errors import PallasLabError
from pallaslab.lowering.result import Diagnostic
from pallaslab.model.source_names import short_source


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
# libtpu's errors carry a stable code and name ("E2003: CompileTimeMosaicUnproven...", see
# openxla.org/xla/errors): classify by them, never by words that happen to appear in the IR.
_CODED = re.compile(r"\b(?P<code>E\d{4}): (?P<name>[A-Za-z]\w*)(?::[ \t]*(?P<detail>[^\n]*))?")
_LOCATION = re.compile(r'"(?P<file>[^"]+\.py)":(?P<line>\d+)')
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
            f"allowed by Mosaic TPU. Rule: {block_rule(text)}",
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


def block_rule(text: str) -> str:
    """The rule Mosaic TPU's block check broke, from which check raised (jax/_src/pallas/
    mosaic/lowering.py `_check_block_mappings`): each names its own rule."""
    if "blocks of rank >= 1" in text:
        return ("a block in VMEM must have rank >= 1: a rank-0 (scalar) operand goes in SMEM "
                "(memory_space=pltpu.SMEM), or is given shape (1,) or (1, 1).")
    if "in memory space ANY only blocks" in text:
        return ("a block in memory space ANY (or HBM) must be the whole array, with an "
                "index map returning all zeros; copy windows of it with DMAs.")
    if "rank 1 block" in text:
        chunk = re.search(r"multiple of (\d+)", text)
        tiling = re.search(r"tiling size \((\d+)", text)
        return ("a rank-1 block must equal the array, be a multiple of "
                f"{chunk[1] if chunk else 1024}, or be a power of two of at least "
                f"{tiling[1] if tiling else 128} elements.")
    return ("the last two block dimensions must be divisible by 8 and 128 respectively (for "
            "32-bit types), or equal the array's dimensions.")


@dataclasses.dataclass(frozen=True)
class CompilerMessage:
    """One kind of compiler refusal: what the compiler says (`pattern`, searched in its own
    statement, never in the IR it quotes), the diagnostic `code`, and what that means."""

    pattern: re.Pattern[str]
    code: str
    meaning: str


# libtpu's numbered errors (openxla.org/xla/errors): by number. Any other number is a
# `compile-error` carrying the number and name.
TPU_CODES = {
    "E1001": ("vmem-oom", "the kernel's buffers do not fit its scoped VMEM limit"),
    "E2003": ("mosaic-alignment", "Mosaic cannot prove a VMEM access aligned to the tile"),
}
VMEM_OOM_CODES = tuple(c for c, (code, _) in TPU_CODES.items() if code == "vmem-oom")
ALIGNMENT_CODES = tuple(c for c, (code, _) in TPU_CODES.items() if code == "mosaic-alignment")
# Unnumbered messages, by their words, first match wins; none: `compile-error`. Only a
# statement about running out of VMEM is `vmem-oom`: the IR libtpu quotes after its statement
# names a memory space on every VMEM ref (`#xir.memory_space<vmem, tc>`), and its internal
# checks name memory spaces too ("IsSflagMemorySpace(...) vmem").
TPU_MESSAGES = (
    CompilerMessage(re.compile(
        r"Scoped allocation with size|ran out of memory in memory space vmem|"
        r"out of (?:scoped )?vmem|vmem (?:limit )?exceeded", re.I),
        "vmem-oom", "the kernel's buffers do not fit its scoped VMEM limit"),
    CompilerMessage(re.compile(
        r"invalid vector type|vector type|layout|tiling|stride on last dim|last dim size|"
        r"sublane|\blanes?\b|vreg|relayout|shape cast|memref shape|not aligned", re.I),
        "mosaic-layout", "Mosaic cannot lay out a vector (or load or store it) in the shape, "
        "element type or stride the kernel asks for: a layout or vector-type limit of Mosaic "
        "TPU, not a lack of memory"),
    CompilerMessage(re.compile(r"Unimplemented primitive|not implemented|unsupported|"
                               r"not supported", re.I),
                    "unsupported-op", "an operation Mosaic TPU cannot compile"),
)
TRITON_MESSAGES = (
    CompilerMessage(re.compile(r"out of resource: shared memory|too much shared data|"
                               r"shared memory.{0,40}exceed", re.I),
                    "shared-memory-oom", "the kernel's shared memory (its blocks times "
                    "num_stages) exceeds what one GPU block may use"),
    CompilerMessage(re.compile(r"out of resource", re.I),
                    "compile-error", "the kernel needs more of a GPU resource than it has"),
)
# Where the compiler's statement ends and what it quotes (a location, the operation, IR) starts.
_QUOTED = re.compile(r"^\s*(?:at location:|The MLIR operation involved:|%|#loc|module\b|"
                     r"func\.func|tt\.func|Traceback|`ptxas` stderr:|Repro command:)", re.M)
_SHARED = re.compile(r"Required: (\d+), Hardware limit: (\d+)")
MAX_COMPILER_LINES = 40
MAX_COMPILER_CHARS = 12_000


def statement(message: str) -> str:
    """The compiler's own words: its message before the location, operation or IR it quotes."""
    m = _QUOTED.search(message)
    return message[: m.start()] if m else message


def compiler_text(message: str, max_lines: int = MAX_COMPILER_LINES,
                  max_chars: int = MAX_COMPILER_CHARS) -> str:
    """The whole compiler message, each line indented, blank lines dropped: its statement, the
    location and "The MLIR operation involved:" with the operation. Bounded to `max_lines`
    lines (and `max_chars`), saying how many were left out."""
    lines = [line.rstrip() for line in message.strip("\n").splitlines() if line.strip()]
    kept: list[str] = []
    size = 0
    for line in lines[:max_lines]:
        if size + len(line) > max_chars and kept:
            break
        kept.append(line if len(line) <= max_chars else line[: max_chars - 3] + "...")
        size += len(line)
    out = "\n".join("  " + line for line in kept)
    if len(kept) < len(lines):
        out += f"\n  ... ({len(lines) - len(kept)} more lines of the compiler's message not shown)"
    return out


def from_compile_error(message: str, kernel_name: str, target: str,
                       compiler: str = "libtpu") -> Diagnostic:
    """A compiler's refusal, coded by what the compiler said (`compiler`: "libtpu" or
    "triton"): libtpu's own error code when it gives one (`TPU_CODES`: E1001 `vmem-oom`, E2003
    `mosaic-alignment`, any other: `compile-error` with the compiler's code and name as data),
    else by the words of its statement (`TPU_MESSAGES`, `TRITON_MESSAGES`). The message carries
    the compiler's whole text, the MLIR operation involved included."""
    coded = _CODED.search(message) if compiler == "libtpu" else None
    if coded is not None and coded["code"] not in VMEM_OOM_CODES:
        return _from_coded_error(coded, message, kernel_name, target)
    said = statement(message)
    rules = TPU_MESSAGES if compiler == "libtpu" else TRITON_MESSAGES
    rule = next((r for r in rules if r.pattern.search(said)), None)
    code = "vmem-oom" if coded is not None else rule.code if rule else "compile-error"
    if code == "vmem-oom" and (m := _SCOPED.search(message)):
        needed, limit = parse_size(m[1], m[2]), parse_size(m[3], m[4])
        return Diagnostic(
            "error", "vmem-oom",
            f"kernel {kernel_name!r} needs at least {_human(needed)} of scoped VMEM on "
            f"{target}, but the limit is {_human(limit)} (raise it with "
            "pltpu.CompilerParams(vmem_limit_bytes=...) or use smaller blocks). Compiler: "
            + m[0] + ".",
            data=(("needed_bytes", needed), ("limit_bytes", limit)))
    at = _user_location(message)
    where = f" at {at}" if at else ""
    text = compiler_text(message)
    if code == "vmem-oom":
        return Diagnostic("error", "vmem-oom", f"kernel {kernel_name!r} does not fit VMEM on "
                          f"{target}{where}. The compiler said:\n{text}")
    data: tuple[tuple[str, Any], ...] = ()
    if code == "shared-memory-oom" and (m := _SHARED.search(message)):
        data = (("needed_bytes", int(m[1])), ("limit_bytes", int(m[2])))
    meaning = f" ({code}: {rule.meaning})" if rule else ""
    return Diagnostic("error", code, f"the {target} compiler rejected kernel "
                      f"{kernel_name!r}{where}{meaning}. The compiler said:\n{text}", data=data)


def _from_coded_error(coded: re.Match[str], message: str, kernel_name: str, target: str
                      ) -> Diagnostic:
    code, name, detail = coded["code"], coded["name"], (coded["detail"] or "").strip()
    said = f"{code} {name}" + (f": {detail}" if detail else "")
    at = _user_location(message[coded.end():])
    where = f" at {at}" if at else ""
    data = (("compiler_code", code), ("compiler_error", name))
    text = compiler_text(message)
    if code in ALIGNMENT_CODES:
        return Diagnostic(
            "error", "mosaic-alignment",
            f"the {target} compiler cannot prove a memory access of kernel {kernel_name!r} "
            f"aligned{where} ({said}). Rule: Mosaic TPU loads and stores a VMEM ref at offsets "
            "it can prove are multiples of the (8, 128) tile (128 lanes along the last "
            "dimension, 8 sublanes along the second-last); a dynamic slice such as "
            "pl.ds(k * bk, bk) needs bk a multiple of that tile, and pl.multiple_of(k * bk, "
            f"128) to say so. The compiler said:\n{text}", data=data)
    return Diagnostic("error", "compile-error",
                      f"the {target} compiler rejected kernel {kernel_name!r}{where}: {said}. "
                      f"The compiler said:\n{text}", data=data)


def _user_location(text: str) -> str | None:
    """"file.py:LINE" of the first Python location libtpu names after its error."""
    m = _LOCATION.search(text)
    return short_source(f"{m['file']}:{m['line']}") if m else None


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
