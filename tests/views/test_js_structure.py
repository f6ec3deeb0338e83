"""The front end stays in small parts: no function in the widgets' ES modules runs over
MAX_LINES lines (nested closures count toward the function that holds them)."""

from __future__ import annotations

from js_scan import STATIC, scan_static

MAX_LINES = 120


def test_every_module_is_scanned():
    scanned = scan_static()
    assert sorted(scanned) == sorted(p.name for p in STATIC.glob("*.js"))
    # the parser saw functions of every kind these modules use
    names = {f["name"] for mod in scanned.values() for f in mod["functions"]}
    assert {"render", "h", "constructor"} <= names


def test_the_scanner_measures_spans():
    prelude = {f["name"]: f for f in scan_static()["prelude.js"]["functions"]}
    h = prelude["h"]
    text = (STATIC / "prelude.js").read_text(encoding="utf-8").splitlines()
    assert text[h["start"] - 1].startswith("export function h(")
    assert text[h["end"] - 1] == "}"
    assert h["lines"] == h["end"] - h["start"] + 1


def test_no_function_is_longer_than_the_limit():
    long = [f"{name}:{f['start']}-{f['end']} {f['name']} ({f['lines']} lines)"
            for name, mod in sorted(scan_static().items()) for f in mod["functions"]
            if f["lines"] > MAX_LINES]
    assert not long, (f"functions in pallaslab/views/static/ over {MAX_LINES} lines "
                      f"(split them into named parts): {', '.join(long)}")
