"""The import rules of docs/architecture.md, checked by walking every module's imports."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p for pkg in ("pallaslab", "lowering") for p in (ROOT / pkg).rglob("*.py"))
WIDGET_LIBS = ("IPython", "anywidget", "traitlets", "ipywidgets")
HEAVY_OPTIONAL = ("libtpu", "triton", "playwright")
SHELLS = ("pallaslab.magic", "pallaslab.cli")
COMPAT = "pallaslab.model._jax"  # the compat layer: one package, a module per responsibility
LOWERING = "pallaslab.lowering"  # the backend layer (the repository's lowering/ folder)


def module_name(path: Path, root: Path = ROOT) -> str:
    """Its dotted name; the repository's `lowering/` folder is `pallaslab.lowering` (the link
    `pallaslab/lowering`, which `rglob` does not follow, points at it)."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[0] == "lowering":
        parts = ("pallaslab", *parts)
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
    return ".".join(name.split(".")[:2])


def under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_import_rules(path):
    me = module_name(path)
    mine = layer(me)
    deps = imports(path)
    ours = {d for d in deps if under(d, "pallaslab")}
    if not under(me, COMPAT):
        assert not any(under(d, "jax._src") for d in deps), f"{me} imports jax._src"
    # Nothing imports the shells but the shells and the entry points (`python -m`, %load_ext).
    if not under(me, *SHELLS) and me not in ("pallaslab", "pallaslab.__main__"):
        assert not any(under(d, *SHELLS) for d in ours), f"{me} imports a shell: {ours}"
    if mine == "pallaslab.util":  # leaf utilities: nothing else of ours
        assert all(under(d, "pallaslab.util") for d in ours), f"{me}: {ours}"
    if me == "pallaslab.settings":  # read by every layer: a leaf beside errors
        assert all(under(d, "pallaslab.errors", "pallaslab.util") for d in ours), f"{me}: {ours}"
    if mine == "pallaslab.model":
        allowed = ("pallaslab.model", "pallaslab.errors", "pallaslab.util")
        assert all(under(d, *allowed) for d in ours), f"model must not depend on {ours}"
    if mine == "pallaslab.analysis":
        forbidden = ("pallaslab.execute", "pallaslab.views", LOWERING)
        assert not any(under(d, *forbidden) for d in ours), f"{me}: {ours}"
    if mine == LOWERING:
        allowed = (LOWERING, "pallaslab.model", "pallaslab.errors", "pallaslab.util")
        assert all(under(d, *allowed) for d in ours), f"lowering depends on {ours}"
    if mine in ("pallaslab.model", "pallaslab.analysis", LOWERING):
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


# --- the module graph: no import cycles, no private names across modules ---------------------


def module_paths(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every module of `packages` under `root`."""
    found = {}
    for pkg in packages:
        for path in (root / pkg).rglob("*.py"):
            found[module_name(path, root)] = path
    return found


def imported_names(module: str, path: Path) -> list[tuple[str, str | None]]:
    """(module imported from, name imported or None) for every import of the module, those
    inside functions and relative ones included (`from . import x` made absolute)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: None if path.name == "__init__.py" else -1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found += [(base, a.name) for a in node.names]
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of `modules` it imports (a name imported from a package counts as
    its submodule when it is one, else as the package)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for me, path in modules.items():
        deps = {resolve(f"{base}.{name}" if name else base)
                for base, name in imported_names(me, path)}
        graph[me] = {d for d in deps if d is not None and d != me}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's cycles: its strongly connected components of more than one module, each
    sorted (Tarjan's algorithm, iterative so that deep graphs cannot exhaust the stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, deps = work[-1]
            dep = next(deps, None)
            if dep is not None:
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(sorted(graph.get(dep, ())))))
                elif dep in on_stack:
                    low[node] = min(low[node], index[dep])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


def test_no_import_cycles():
    # Imports inside functions count: they hide a cycle from the interpreter, not from readers.
    cycles = import_cycles(import_graph(module_paths(ROOT, ("pallaslab", "lowering"))))
    assert cycles == [], "import cycles (each a set of modules that import each other):\n" + \
        "\n".join(f"  {len(c)} modules: {', '.join(c)}" for c in cycles)


def test_cycle_detector_finds_a_planted_cycle(tmp_path):
    pkg = tmp_path / "planted"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    # a -> sub.b by a relative import inside a function, sub.b -> a: a cycle; c -> a is not.
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n    return b\n")
    (pkg / "sub" / "b.py").write_text("from planted.a import f\n")
    (pkg / "c.py").write_text("import planted.a\nimport json\n")
    graph = import_graph(module_paths(tmp_path, ("planted",)))
    assert graph["planted.a"] == {"planted.sub.b"}
    assert graph["planted.c"] == {"planted.a"}
    assert import_cycles(graph) == [["planted.a", "planted.sub.b"]]
    assert import_cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}, "v": set()}) == \
        [["x", "y", "z"]]
    assert import_cycles({"x": {"y"}, "y": set()}) == []


def test_no_module_imports_a_private_name_of_another():
    # A helper two modules share is public in the module that owns it (or in a leaf module);
    # private modules (`_jax`, `_html`) may be imported whole.
    modules = module_paths(ROOT, ("pallaslab", "lowering"))
    private = [f"{me} imports {name} from {base}"
               for me, path in sorted(modules.items())
               for base, name in imported_names(me, path)
               if name and name.startswith("_") and not name.startswith("__")
               and under(base, "pallaslab") and f"{base}.{name}" not in modules]
    assert private == [], "private names imported across modules:\n" + "\n".join(private)


MAX_MODULE_LINES = 600  # docs/architecture.md: split a longer module by responsibility
MAX_EXECUTE_ENTRIES = 15  # execute/ is split by role into packages


def test_no_module_is_longer_than_the_stated_limit():
    modules = module_paths(ROOT, ("pallaslab", "lowering"))
    long = {name: n for name, path in modules.items()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_execute_is_split_by_role():
    execute = ROOT / "pallaslab" / "execute"
    entries = sorted(p.name for p in execute.iterdir() if p.name != "__pycache__")
    assert len(entries) <= MAX_EXECUTE_ENTRIES, entries
    for package in ("executors", "comparing", "stepping", "worker", "causes"):
        assert (execute / package / "__init__.py").read_text().startswith('"""'), package


def test_no_module_reexports_another_modules_names():
    # a name is imported from the module that defines it (`import X as X` or a package's own
    # `__init__` aside): importers of an old home were pointed at the new one
    modules = module_paths(ROOT, ("pallaslab",))
    shims = [f"{name}: {line.strip()}" for name, path in modules.items()
             if path.name != "__init__.py"
             for line in path.read_text().splitlines()
             if "re-exported" in line and "noqa: F401" in line]
    assert shims == []


TESTS_TABLE = "## Where the tests are"  # the section of docs/architecture.md that says where


def table_of_tests(page: str) -> list[tuple[list[str], list[str]]]:
    """The section's rows: the backticked module paths of the first cell, the backticked
    `tests/...` paths of the second (a `<name>` stands for any name)."""
    section = page.split(TESTS_TABLE, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 2 or set(cells[0]) <= set("- "):
            continue
        code = [re.findall(r"`([^`]+)`", c) for c in cells]
        if code[0] and code[0][0].endswith((".py", "/")):
            rows.append((code[0], [t for t in code[1] if t.startswith("tests/")]))
    return rows


def named_tests(path: Path, root: Path = ROOT) -> list[Path]:
    """Test files named after the module in its layer's test folder (docs/architecture.md)."""
    parts = path.relative_to(root).parts
    layer = parts[0] if parts[0] == "lowering" else parts[1] if len(parts) > 2 else ""
    folder = root / "tests" / layer if (root / "tests" / layer).is_dir() else root / "tests"
    stem = path.parent.name if path.stem == "__init__" else path.stem
    prefixes = [f"test_{stem}"] + ([f"test_view_{stem}"] if layer == "views" else [])
    return [t for t in folder.glob("test_*.py")
            if any(t.stem == p or t.stem.startswith(p + "_") for p in prefixes)]


def covered(relative: str, entries: list[str]) -> bool:
    return any(relative == e or (e.endswith("/") and relative.startswith(e)) for e in entries)


def test_every_module_has_tests_a_newcomer_can_find():
    rows = table_of_tests((ROOT / "docs" / "architecture.md").read_text())
    entries = [e for modules, _ in rows for e in modules]
    unfound = [str(p.relative_to(ROOT)) for p in MODULES
               if not named_tests(p) and not covered(str(p.relative_to(ROOT)), entries)]
    assert unfound == [], (f"no test file named after these modules, and no row for them in "
                           f"docs/architecture.md '{TESTS_TABLE}': {unfound}")
    stale = [e for e in entries if not (ROOT / e).exists()]
    assert stale == [], f"'{TESTS_TABLE}' names modules that do not exist: {stale}"
    missing = [t for _, tests in rows for t in tests
               if not (sorted(ROOT.glob(t.replace("<name>", "*"))) if "<name>" in t
                       else (ROOT / t).exists())]
    assert missing == [], f"'{TESTS_TABLE}' names tests that do not exist: {missing}"
    assert all(tests for _, tests in rows), "a row of the table names no test"


def test_the_tests_table_reader_and_the_naming_rule(tmp_path):
    page = ("## Where the tests are\n\n| module or package | tests |\n| --- | --- |\n"
            "| `pallaslab/a/`, `pallaslab/b.py` | `tests/a/test_x.py` (why), "
            "`tests/test_<name>.py` |\n"
            "\n## Next\n| `pallaslab/c.py` | `tests/test_c.py` |\n")
    assert table_of_tests(page) == [(["pallaslab/a/", "pallaslab/b.py"],
                                  ["tests/a/test_x.py", "tests/test_<name>.py"])]
    assert covered("pallaslab/a/deep/m.py", ["pallaslab/a/"])
    assert not covered("pallaslab/ab.py", ["pallaslab/a/", "pallaslab/a.py/"])
    for name in ("tests/views/test_view_grid_more.py", "tests/views/test_grid.py",
                 "tests/views/test_views_other.py", "tests/analysis/test_tilings.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    names = lambda p: sorted(t.name for t in named_tests(tmp_path / p, tmp_path))
    assert names("pallaslab/views/grid.py") == ["test_grid.py", "test_view_grid_more.py"]
    assert names("pallaslab/views/__init__.py") == ["test_views_other.py"]
    assert names("pallaslab/analysis/tiling.py") == []  # test_tilings is not test_tiling
