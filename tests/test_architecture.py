"""The import rules of design.md, checked by walking every module's imports."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p for pkg in ("pallaslab", "lowering") for p in (ROOT / pkg).rglob("*.py"))
WIDGET_LIBS = ("IPython", "anywidget", "traitlets", "ipywidgets")
HEAVY_OPTIONAL = ("libtpu", "triton", "playwright")
SHELLS = ("pallaslab.magic", "pallaslab.cli")
COMPAT = "pallaslab.model._jax"  # the compat layer: one package, a module per responsibility


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else ast.walk(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def layer(name: str) -> str:
    parts = name.split(".")
    return parts[0] if parts[0] == "lowering" else ".".join(parts[:2])


def under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_import_rules(path):
    me = module_name(path)
    mine = layer(me)
    deps = imports(path)
    ours = {d for d in deps if under(d, "pallaslab", "lowering")}
    if not under(me, COMPAT):
        assert not any(under(d, "jax._src") for d in deps), f"{me} imports jax._src"
    # Nothing imports the shells but the shells and the entry points (`python -m`, %load_ext).
    if not under(me, *SHELLS) and me not in ("pallaslab", "pallaslab.__main__"):
        assert not any(under(d, *SHELLS) for d in ours), f"{me} imports a shell: {ours}"
    if mine == "pallaslab.util":  # leaf utilities: nothing else of ours
        assert all(under(d, "pallaslab.util") for d in ours), f"{me}: {ours}"
    if mine == "pallaslab.model":
        allowed = ("pallaslab.model", "pallaslab.errors", "pallaslab.util")
        assert all(under(d, *allowed) for d in ours), f"model must not depend on {ours}"
    if mine == "pallaslab.analysis":
        forbidden = ("pallaslab.execute", "pallaslab.views", "lowering")
        assert not any(under(d, *forbidden) for d in ours), f"{me}: {ours}"
    if mine == "lowering":
        allowed = ("lowering", "pallaslab.model", "pallaslab.errors", "pallaslab.util")
        assert all(under(d, *allowed) for d in ours), f"lowering depends on {ours}"
    if mine in ("pallaslab.model", "pallaslab.analysis", "lowering"):
        assert not any(under(d, *WIDGET_LIBS) for d in deps), f"{me} imports a widget library"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_heavy_optional_dependencies_are_imported_lazily(path):
    top = imports(path, top_level_only=True)
    assert not any(under(d, *HEAVY_OPTIONAL) for d in top), module_name(path)


def test_only_the_compat_layer_touches_jax_src():
    touching = {module_name(p) for p in MODULES if any(under(d, "jax._src") for d in imports(p))}
    assert touching and all(under(m, COMPAT) for m in touching), touching
    # Nor does anything else name it, e.g. in importlib calls or logger names.
    named = [module_name(p) for p in MODULES
             if "jax._src" in p.read_text() and not under(module_name(p), COMPAT)]
    assert named == []
