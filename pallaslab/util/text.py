"""Showing untrusted text (kernel names, paths, printed output, IR) safely.

User strings reach terminals and HTML. Terminal control sequences are never written raw,
and bidirectional-override characters (which can make displayed text differ from what it
is, "Trojan Source") are shown as visible `<U+202E>` marks. ANSI colour sequences that JAX
itself puts in pretty-printed jaxprs are removed outright.
"""

from __future__ import annotations

import re

# Bidi embeddings, overrides and isolates (Unicode TR9), plus the marks.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
                          "\u200e\u200f\u061c")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f" + "".join(sorted(BIDI_CONTROLS)) + "]")


def strip_ansi(text: str) -> str:
    """Remove ANSI colour and OSC sequences (e.g. from JAX's coloured jaxpr printing)."""
    return _ANSI.sub("", text)


def visible(text: str) -> str:
    """`text` with ANSI sequences removed and every other control or bidi character shown
    as a visible mark (`<U+202E>`, `<U+001B>`); newlines and tabs are kept."""
    return _UNSAFE.sub(lambda m: f"<U+{ord(m.group()):04X}>", strip_ansi(str(text)))
