"""IR as data: extracting modules from lowered HLO, source-line maps, normalised text.

Pure text processing: no JAX here, so it is cheap to test and reuse.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable

from pallaslab.model._jax import MOSAIC_LOC_TAG

# --- custom calls in lowered StableHLO ------------------------------------------------------

_TPU_CONFIG = re.compile(
    r'stablehlo\.custom_call @tpu_custom_call\(.*?backend_config = "((?:[^"\\]|\\.)*)"')


def unescape_mlir_string(s: str) -> str:
    """MLIR string literals escape bytes as `\\XX` (hex) and `\\\\`, `\\"`."""
    return re.sub(r"\\([0-9A-Fa-f]{2}|\\|\")",
                  lambda m: m[1] if m[1] in ('\\', '"') else chr(int(m[1], 16)), s)


def tpu_custom_call_configs(hlo_text: str) -> list[dict]:
    """The `custom_call_config` of every `tpu_custom_call` in a lowered module, in order."""
    return [json.loads(unescape_mlir_string(m[1]))["custom_call_config"]
            for m in _TPU_CONFIG.finditer(hlo_text)]


def config_bytes(config: dict, key: str) -> bytes | None:
    value = config.get(key)
    return base64.b64decode(value) if value else None


# --- debug prints (GPU backends print their modules with debug=True) ----------------------

_HEADER = re.compile(r"^The (?P<what>.+?) (?:for (?:pallas_call|mpmd_map)[^\n]*?)?:\n", re.M)


def debug_sections(printed: str) -> dict[str, str]:
    """Split Pallas's `debug=True` output into {"kernel jaxpr": ..., "Triton module": ...}."""
    headers = list(_HEADER.finditer(printed))
    out: dict[str, str] = {}
    for h, nxt in zip(headers, [*headers[1:], None], strict=True):
        end = nxt.start() if nxt is not None else len(printed)
        what = re.sub(r" idx=\d+", "", h["what"])
        out.setdefault(what, printed[h.end():end].strip("\n") + "\n")
    return out


# --- locations ------------------------------------------------------------------------------

_ALIAS_DEF = re.compile(r"^(#loc\d*) = (.*)$", re.M)
_FILE_LINE = re.compile(r'"?([^\s"():]+\.py)"?:(\d+)(?::\d+)?')
_REF = re.compile(r"#loc\d*\b")


class LocationTable:
    """`#locN = ...` alias definitions, resolved to the Python source line they point at."""

    def __init__(self, text: str) -> None:
        self.defs = {m[1]: _strip_loc_wrapper(m[2]) for m in _ALIAS_DEF.finditer(text)}
        self._memo: dict[str, tuple[str, ...]] = {}

    def files(self, expr: str, depth: int = 0) -> tuple[str, ...]:
        """Every "file.py:LINE" in a location expression, innermost (callee) first."""
        out: list[str] = []
        pos = 0
        tokens = sorted([*((m.start(), "ref", m[0]) for m in _REF.finditer(expr)),
                         *((m.start(), "file", f"{m[1]}:{m[2]}")
                           for m in _FILE_LINE.finditer(expr))])
        for start, kind, value in tokens:
            if start < pos:
                continue
            if kind == "file":
                out.append(value)
            elif depth < 64:
                out.extend(self._resolve(value, depth))
            pos = start + 1
        return tuple(out)

    def _resolve(self, ref: str, depth: int) -> tuple[str, ...]:
        if ref not in self._memo:
            self._memo[ref] = self.files(self.defs.get(ref, ""), depth + 1)
        return self._memo[ref]

    def source_line(self, expr: str) -> str | None:
        """The user's line for a location: the outermost frame outside installed packages.

        Kernel-body locations hold only the frames inside the kernel function; JAX's
        innermost frame is sometimes a stale one (a `pl.when` body that already returned),
        while the outermost is the kernel's own line, which is what a reader looks for.
        """
        found = self.files(expr)
        user = [f for f in found if "site-packages" not in f and "/jax/" not in f]
        candidates = user or list(found)
        return candidates[-1] if candidates else None


def _strip_loc_wrapper(expr: str) -> str:
    expr = expr.strip()
    return expr[4:-1] if expr.startswith("loc(") and expr.endswith(")") else expr


# Trailing or inline location tokens of pretty-printed MLIR (`enable_debug_info=True`).
_LOC_TOKEN = re.compile(
    r'\s*(?:\[unknown\]|loc\((?:[^()]|\([^()]*\))*\)|"[^"\n]*"\(#loc\d*\)|#loc\d+\b'
    r'|"[^"\n]*\.py":\d+:\d+(?: to (?:\d+)?:\d+)?|callsite\([^\n]*?\)|"' + MOSAIC_LOC_TAG
    + r'\d+")(?=[,)\s]*$|[,)]|\s+\{)'
)


def strip_locations(text: str) -> str:
    """Drop location annotations and `#loc` alias lines, leaving parseable, readable IR."""
    lines = []
    for line in text.splitlines():
        if line.startswith("#loc"):
            continue
        lines.append(_LOC_TOKEN.sub("", line).rstrip())
    return "\n".join(lines).strip("\n") + "\n"


def pretty_ir_with_sources(text: str, table: LocationTable | None = None
                           ) -> tuple[str, tuple[tuple[int, str], ...]]:
    """Clean text of a pretty-printed module and its IR-line -> Python-line map."""
    table = table or LocationTable(text)
    clean: list[str] = []
    sources: list[tuple[int, str]] = []
    for line in text.splitlines():
        if line.startswith("#loc") or not line.strip():
            continue
        tokens = [m.group(0).strip() for m in _LOC_TOKEN.finditer(line)]
        clean.append(_LOC_TOKEN.sub("", line).rstrip())
        for token in tokens:
            src = table.source_line(token)
            if src is not None:
                sources.append((len(clean), src))
                break
    return "\n".join(clean) + "\n", tuple(sources)


def mosaic_with_sources(tagged: str, locs_module: str | None
                        ) -> tuple[str, tuple[tuple[int, str], ...]]:
    """Clean Mosaic TPU text and its source map, from `_jax.mosaic_tpu_module`'s output.

    Operation i carries the name location "@pl<i>"; the debug-locations module lists the real
    location of item i in `tpu.locs = [...]`.
    """
    per_item: list[str] = []
    table = None
    if locs_module:
        table = LocationTable(locs_module)
        m = re.search(r"tpu\.locs = \[(.*?)\]\}", locs_module, re.S)
        per_item = [s.strip() for s in m[1].split(",")] if m else []
    tag = re.compile(r'"' + MOSAIC_LOC_TAG + r'(\d+)"')
    clean: list[str] = []
    sources: list[tuple[int, str]] = []
    for line in tagged.splitlines():
        if line.startswith("#loc") or not line.strip():
            continue
        clean.append(_LOC_TOKEN.sub("", line).rstrip())
        if table is None:
            continue
        for m in tag.finditer(line):
            i = int(m[1])
            src = table.source_line(per_item[i]) if i < len(per_item) else None
            if src is not None:
                sources.append((len(clean), src))
                break
    return "\n".join(clean) + "\n", tuple(sources)


_JAXPR_SOURCE = re.compile(r"\s+# (?P<file>\S+?\.py):(?P<line>\d+)(?::\d+)?(?: \(.*\))?$")


def jaxpr_with_sources(text: str) -> tuple[str, tuple[tuple[int, str], ...]]:
    """Strip the `# file.py:LINE:COL (fn)` comments of a source-annotated jaxpr into a map."""
    clean: list[str] = []
    sources: list[tuple[int, str]] = []
    for line in text.splitlines():
        m = _JAXPR_SOURCE.search(line)
        if m is not None:
            line = line[: m.start()]
            sources.append((len(clean) + 1, f"{m['file']}:{m['line']}"))
        clean.append(line.rstrip())
    return "\n".join(clean) + "\n", tuple(sources)


# --- normalisation for golden tests ----------------------------------------------------------

_UNSTABLE = (
    (re.compile(r'("?)(/[^\s"]*/)?([\w.-]+\.py)\1:(\d+)'), r"\3:\4"),  # absolute paths
    (re.compile(r"stable_mosaic\.version = \d+"), "stable_mosaic.version = N"),
    (re.compile(r'mosaic_gpu\.dump_basename = "[^"]*"'), 'mosaic_gpu.dump_basename = "N"'),
    (re.compile(r'kernel_hash = "[^"]*"'), 'kernel_hash = "N"'),
    (re.compile(r"\bat 0x[0-9a-f]+\b"), "at 0x0"),
)


def normalise(text: str) -> str:
    """Text for golden comparisons: no locations, no paths, no counters, no hashes.

    SSA names are kept: MLIR derives them from the values (`%c0_i32`), so they are stable for
    a given jax version.
    """
    out = strip_locations(text)
    for pattern, repl in _UNSTABLE:
        out = pattern.sub(repl, out)
    return "\n".join(line.rstrip() for line in out.splitlines()) + "\n"


def first_lines(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[:n])


def join_nonempty(parts: Iterable[str]) -> str:
    return "\n".join(p for p in parts if p)
