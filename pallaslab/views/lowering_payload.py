"""The Lowering view's pure payload: a kernel's IR per target and stage, mapped line by line to
its Python.

`lowering_payload` is the pure function the widget, the report and the tests share. The IR
line -> Python line maps cross the wire as int32 triples `(ir_line, file, py_line)` in a binary
buffer per stage. Stage texts can be megabytes (a compiled flash attention's per-pass dumps),
so each is capped at `STAGE_TEXT_CAP` characters and the payload carries texts only up to a
budget (`LIVE_BUDGET` for the widget, which asks for the others, `STATIC_BUDGET` for the
report); the Python beside them is the kernel's functions, cut to `MAX_SOURCE_LINES`.
"""

from __future__ import annotations

import inspect
import linecache
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from pallaslab.model import Kernel
from pallaslab.model.source_names import file_label, short_source
from pallaslab.util.text import strip_ansi
from pallaslab.views import _html
from pallaslab.views._html import visible_payload

if TYPE_CHECKING:
    from pallaslab.lowering import KernelLowering
    from pallaslab.lowering.result import Stage

PAYLOAD_VERSION = 1
STAGE_TEXT_CAP = 200_000  # characters of one stage sent to the browser (cut at a line end)
LIVE_BUDGET = 400_000  # characters of stage text in the live widget's payload
STATIC_BUDGET = 1_500_000  # ... in the report's embedded payload (no Python to ask)
MAX_SOURCE_LINES = 600  # Python lines shown beside the IR, over all chunks
PRIMARY_STAGES = ("mosaic", "ttir", "mosaic-gpu")  # what the view opens on


class TargetEntry(TypedDict):
    name: str
    platform: str  # "tpu" | "gpu"
    lowered: bool  # its lowering is in `lowerings`


class StagePayload(TypedDict):
    name: str
    lines: int  # lines of the whole stage
    chars: int
    text: str | None  # None: not sent (the widget asks Python for it)
    sent_lines: int  # lines of `text` (fewer than `lines` when capped)
    map: memoryview  # int32 (ir_line, file, py_line) triples, IR lines 1-based


class DiagnosticPayload(TypedDict):
    severity: str
    code: str
    message: str
    operand: str | None


class TargetLowering(TypedDict):
    target: str
    backend: str
    ok: bool
    compiled: bool
    cached: bool
    diagnostics: list[DiagnosticPayload]
    resources: dict[str, int | None]
    resource_notes: dict[str, str]  # where a resource figure comes from, per resource
    # The resources as every output shows them: (key, label, value, source) per resource
    # someone reported, or the one line saying why none is known (`resource_rows`).
    resource_rows: list[list[str]]
    resource_line: str | None
    stages: list[StagePayload]


class SourceFile(TypedDict):
    path: str
    name: str  # the file's base name, what the view shows


class SourceChunk(TypedDict):
    file: int  # index into `files`
    start: int  # line number of `lines[0]`
    lines: list[str]


class LoweringPayload(TypedDict):
    version: int
    kernel: str
    index: int
    source: str | None
    target: str  # the target shown
    stage: str | None  # the stage shown
    default_target: str
    targets: list[TargetEntry]
    interactive: bool  # a Python kernel answers selection changes (False in the report)
    lowerings: dict[str, TargetLowering]
    files: list[SourceFile]
    sources: list[SourceChunk]
    error: str | None  # why the last lowering asked for did not happen (e.g. missing libtpu)
    revision: int  # bumped by every answer to the widget, so a repeated answer still arrives
    answered: str | None  # the widget's `selection.request` this payload answers


# --- the pure payload -------------------------------------------------------------------------


def default_target(kernel: Kernel, asked: Sequence[str] = ()) -> str:
    """The first target the user asked for, else tpu-v5e for TPU kernels and gpu-h100 for
    Triton and Mosaic GPU kernels (what the kernel is most likely written for)."""
    if asked:
        return asked[0]
    return "gpu-h100" if kernel.backend in ("triton", "mosaic_gpu") else "tpu-v5e"


def default_stage(result: KernelLowering) -> str | None:
    names = result.stage_names
    return next((n for n in PRIMARY_STAGES if n in names), names[0] if names else None)


def lowering_payload(
    kernel: Kernel,
    results: Mapping[str, KernelLowering],
    target: str,
    *,
    stage: str | None = None,
    interactive: bool = False,
    budget: int = STATIC_BUDGET,
    error: str | None = None,
    revision: int = 0,
    answered: str | None = None,
    asked: Sequence[str] = (),
) -> LoweringPayload:
    """Everything the lowering widget shows, from a kernel and its lowerings per target (pure,
    apart from reading the kernel's Python source through `linecache`).

    The shown stage's text is always sent; the other stages' texts while `budget` characters
    last (the shown target's first, in stage order).
    """
    from pallaslab.lowering.targets import TARGETS

    results = {t: clean_lowering(r) for t, r in results.items()}
    shown = results.get(target)
    if stage is None or shown is None or stage not in shown.stage_names:
        stage = default_stage(shown) if shown is not None else None
    files, sources = source_chunks(kernel, results.values())
    file_ids = {f["path"]: i for i, f in enumerate(files)}
    order = [target, *(t for t in results if t != target)]
    picks = [(t, s.name) for t in order if t in results for s in results[t].stages]
    if stage is not None:
        picks.remove((target, stage))
        picks.insert(0, (target, stage))
    send: set[tuple[str, str]] = set()
    left = budget
    for i, (t, name) in enumerate(picks):
        size = min(len(results[t].stage(name).text), STAGE_TEXT_CAP)
        if i == 0 or size <= left:
            send.add((t, name))
            left -= size
    lowerings = {t: _target_lowering(t, r, send, file_ids, kernel) for t, r in results.items()}
    return visible_payload(LoweringPayload(
        version=PAYLOAD_VERSION, kernel=kernel.name, index=kernel.index,
        source=_short(kernel.source), target=target, stage=stage,
        default_target=default_target(kernel, asked),
        targets=[TargetEntry(name=t.name, platform=t.platform, lowered=t.name in results)
                 for t in TARGETS.values()],
        interactive=interactive, lowerings=lowerings, files=files, sources=sources, error=error,
        revision=revision, answered=answered))


def clean_lowering(r: KernelLowering) -> KernelLowering:
    """`r` with no ANSI colour in any stage (JAX colours jaxprs it prints inside Jupyter, and
    a coloured jaxpr hides its `# file.py:LINE` comments from the source map): colour is
    removed and a jaxpr stage without locations gets them from its comments. Lowerings from
    the disk cache made before this existed are cleaned the same way."""
    if not any("\x1b" in s.text for s in r.stages):
        return r
    import dataclasses

    return dataclasses.replace(r, stages=tuple(clean_stage(s) for s in r.stages))


def clean_stage(s: Stage) -> Stage:
    import dataclasses

    from pallaslab.lowering.irtext import jaxpr_with_sources

    if "\x1b" not in s.text:
        return s
    text, sources = strip_ansi(s.text), s.source_lines
    if s.name == "jaxpr" and not sources:
        text, sources = jaxpr_with_sources(text)
    return dataclasses.replace(s, text=text, source_lines=tuple(sources))


def resource_figures(kernel: Kernel | None, target: str, r: KernelLowering
                     ) -> tuple[dict[str, int | None], dict[str, str]]:
    """The resources of a lowering and where each figure comes from. A TPU compile gives VMEM
    and SMEM from the buffers its compiled module declares; `vmem_exact` measures VMEM; a
    compile that says nothing about VMEM gets the occupancy model's figure, labelled an
    estimate."""
    res = r.resources.to_json()
    notes: dict[str, str] = {}
    codes = {d.code for d in r.diagnostics}
    if r.backend == "triton" and r.compiled:
        notes.update({k: "triton compile" for k in ("smem_bytes", "registers", "spills")
                      if res.get(k) is not None})
    if r.backend != "mosaic-tpu" or not r.compiled:
        return res, notes
    if res.get("vmem_bytes") is not None:
        notes["vmem_bytes"] = (
            "measured: the smallest vmem_limit_bytes libtpu accepts" if "vmem-exact" in codes
            else "libtpu: needed, from its VMEM OOM error" if not r.ok
            else "libtpu: buffers the compiled module declares (blocks double-buffered), not "
                 "its need: the compiler may add scratch or share windows; --vmem-exact "
                 "measures the need")
    elif kernel is not None:
        from pallaslab.analysis.occupancy import applies, occupancy
        from pallaslab.lowering.targets import TARGETS

        chip = getattr(TARGETS.get(target), "chip", None)
        if chip and applies(kernel):
            try:
                res["vmem_bytes"] = occupancy(kernel, chip).bytes
                notes["vmem_bytes"] = ("estimate: pallaslab's occupancy model (the compiler "
                                       "did not say)")
            except Exception as err:  # an estimate is a nicety: say why there is none
                notes["vmem_bytes"] = (f"no estimate: pallaslab's occupancy model failed "
                                       f"({type(err).__name__}: {err})")
    if res.get("smem_bytes") is not None and r.ok:
        notes["smem_bytes"] = "libtpu: buffers of the compiled module"
    return res, notes


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1024:,.1f} KiB" if n >= 1024 else f"{n} B"


# (payload key, label, how its figure reads)
RESOURCES = (("vmem_bytes", "VMEM", _bytes), ("smem_bytes", "SMEM", _bytes),
             ("registers", "registers", _html.num), ("spills", "spills", _bytes))


def resource_rows(kernel: Kernel | None, target: str, r: KernelLowering
                  ) -> tuple[tuple[tuple[str, str, str, str], ...], str | None]:
    """(key, label, value, source) per resource someone reported (VMEM of a GPU kernel,
    registers of a TPU one: left out), or no rows and the line saying why none is known."""
    res, notes = resource_figures(kernel, target, r)
    if all(res.get(key) is None for key, _, _ in RESOURCES) and not notes:
        return (), ("resources: none reported by the compiler" if r.compiled
                    else "resources: known once compiled")
    return tuple((key, label, fmt(res.get(key)),
                  notes.get(key, "the compiler" if r.compiled else ""))
                 for key, label, fmt in RESOURCES
                 if res.get(key) is not None or key in notes), None


def _target_lowering(target: str, r: KernelLowering, send: set[tuple[str, str]],
                     file_ids: Mapping[str, int], kernel: Kernel | None = None
                     ) -> TargetLowering:
    resources, notes = resource_figures(kernel, target, r)
    rows, line = resource_rows(kernel, target, r)
    return TargetLowering(
        target=target, backend=r.backend, ok=r.ok, compiled=r.compiled, cached=r.cached,
        diagnostics=[DiagnosticPayload(severity=d.severity, code=d.code, message=d.message,
                                       operand=d.operand) for d in r.diagnostics],
        resources=resources, resource_notes=notes,
        resource_rows=[list(row) for row in rows], resource_line=line,
        stages=[_stage(s.name, s.text, s.source_lines, (target, s.name) in send, file_ids)
                for s in r.stages])


def _stage(name: str, text: str, source_lines: Sequence[tuple[int, str]], send: bool,
           file_ids: Mapping[str, int]) -> StagePayload:
    sent = cap_text(text, STAGE_TEXT_CAP) if send else None
    sent_lines = 0 if sent is None else line_count(sent)  # as the widget counts: "\n" only
    triples = []
    if send:
        for ir_line, src in source_lines:
            path, _, line = src.rpartition(":")
            if ir_line <= sent_lines and path in file_ids and line.isdigit():
                triples.append((ir_line, file_ids[path], int(line)))
    table = np.asarray(triples, dtype="<i4").reshape(-1)
    return StagePayload(name=name, lines=line_count(text), chars=len(text), text=sent,
                        sent_lines=sent_lines, map=memoryview(np.ascontiguousarray(table)))


def cap_text(text: str, cap: int) -> str:
    """`text` cut to at most `cap` characters at a line end."""
    if len(text) <= cap:
        return text
    cut = text.rfind("\n", 0, cap)
    return text[: cut if cut > 0 else cap]


def source_chunks(kernel: Kernel, results: Sequence[KernelLowering] | Any
                  ) -> tuple[list[SourceFile], list[SourceChunk]]:
    """The Python functions the IR came from: for every line an IR line maps to (and the
    kernel's own definition), the innermost enclosing `def`, merged per file."""
    refs: dict[str, set[int]] = {}
    for r in results:
        for s in r.stages:
            for _, src in s.source_lines:
                path, _, line = src.rpartition(":")
                if line.isdigit():
                    refs.setdefault(path, set()).add(int(line))
    if kernel.source:
        path, _, line = kernel.source.rpartition(":")
        if line.isdigit() and (path in refs or not refs):
            refs.setdefault(path, set()).add(int(line))
    files: list[SourceFile] = []
    chunks: list[SourceChunk] = []
    budget = MAX_SOURCE_LINES
    for path in sorted(refs, key=lambda p: (p != _path(kernel.source), p)):
        text = linecache.getlines(path)
        if not text:
            continue
        spans = _merge(sorted(_enclosing(text, n) for n in refs[path] if 1 <= n <= len(text)))
        file_chunks = []
        for start, end in spans:
            end = min(end, start + budget - 1)
            if end < start:
                break
            file_chunks.append(SourceChunk(file=len(files), start=start,
                                           lines=[ln.rstrip("\r\n") for ln in
                                                  text[start - 1: end]]))
            budget -= end - start + 1
        if file_chunks:
            files.append(SourceFile(path=path, name=file_label(path)))
            chunks += file_chunks
    return files, chunks


_DEF = re.compile(r"^(\s*)(async\s+def|def)\s")


def _enclosing(lines: Sequence[str], n: int) -> tuple[int, int]:
    """(first, last) 1-based lines of the innermost `def` containing line n (with its
    decorators), or a few lines around n when it is in no function."""
    for i in range(n - 1, max(-1, n - 400), -1):
        m = _DEF.match(lines[i])
        if not m:
            continue
        try:
            block = inspect.getblock(list(lines[i:]))
        except Exception:  # tokenizer trouble (odd source): fall back to a window
            break
        last = i + len(block)
        if last >= n:
            first = i
            while first > 0 and lines[first - 1].lstrip().startswith("@"):
                first -= 1
            return first + 1, last
    return max(1, n - 3), min(len(lines), n + 3)


def _merge(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _path(source: str | None) -> str | None:
    return None if source is None else source.rpartition(":")[0]


def _short(source: str | None) -> str | None:
    return short_source(source)


def payload_nbytes(payload: LoweringPayload) -> int:
    """Bytes on the wire: the JSON part plus the binary buffers."""
    import json

    from pallaslab.views.report import encode_buffers

    return len(json.dumps(encode_buffers(payload)))


def line_count(text: str) -> int:
    """Lines of a stage's text, counting a last line that has no newline."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)
