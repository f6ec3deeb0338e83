"""Every payload TypedDict in pallaslab/views/*.py has a JSDoc @typedef of the same name in the
widgets' ES modules, with the same keys: the two sides of the wire cannot drift apart."""

from __future__ import annotations

import ast
from pathlib import Path

from js_scan import scan_static

VIEWS = Path(__file__).resolve().parents[2] / "pallaslab" / "views"


def python_typeddicts() -> dict[str, tuple[str, set[str]]]:
    """{name: (file, keys)} of every TypedDict class in views/*.py (inherited keys included)."""
    classes: dict[str, tuple[str, list[str], set[str]]] = {}
    for path in sorted(VIEWS.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            keys = {s.target.id for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            classes[node.name] = (path.name, bases, keys)

    def is_typeddict(name: str) -> bool:
        return name == "TypedDict" or (name in classes and any(map(is_typeddict, classes[name][1])))

    def keys_of(name: str) -> set[str]:
        _, bases, keys = classes[name]
        return keys.union(*(keys_of(b) for b in bases if b in classes))

    return {name: (file, keys_of(name)) for name, (file, bases, _) in classes.items()
            if any(map(is_typeddict, bases))}


def js_typedefs() -> dict[str, tuple[str, set[str]]]:
    """{name: (file, keys)} of every @typedef with an object type (references followed)."""
    defs = {name: (file, d) for file, mod in scan_static().items()
            for name, d in mod["typedefs"].items()}

    def keys_of(name: str) -> set[str]:
        _, d = defs[name]
        return set(d["keys"]).union(*(keys_of(r) for r in d["refs"] if r in defs and r != name))

    return {name: (file, keys_of(name)) for name, (file, d) in defs.items() if d["literal"]}


def test_the_python_side_is_found():
    found = python_typeddicts()
    assert {"ComparePayload", "StepPayload", "LoweringPayload", "PipelinePayload"} <= set(found)
    assert "version" in found["StepPayload"][1]


def test_every_payload_typeddict_has_a_typedef_of_the_same_name():
    js = js_typedefs()
    missing = sorted(f"{name} ({file})" for name, (file, _) in python_typeddicts().items()
                     if name not in js)
    assert not missing, f"payload TypedDicts with no JSDoc @typedef of that name: {missing}"


def test_each_pair_has_the_same_keys():
    js = js_typedefs()
    differ = []
    for name, (file, keys) in sorted(python_typeddicts().items()):
        if name not in js:
            continue
        js_file, js_keys = js[name]
        if keys != js_keys:
            differ.append(f"{name}: only in {file}: {sorted(keys - js_keys)}, "
                          f"only in {js_file}: {sorted(js_keys - keys)}")
    assert not differ, "TypedDict and @typedef keys differ:\n" + "\n".join(differ)
