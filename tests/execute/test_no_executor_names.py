"""No module names an executor by a string literal outside the executor declarations
(issue 37 item 3): which executor runs a kernel is read from `ExecutorSpec`'s fields
(`mode`, `cpu_preferred`, `second_rank`, `takes_reference`, ...) through the registry.

Every module's AST is walked and its string constants compared with `executor_names()`.
Not counted: docstrings, dict keys, subscripts and `.get`/`.pop` keys (the words "device" and
"interpret" are also JSON fields and the `pallas_call` parameter), the declarations
(`protocol.py`, `registry.py`, `builtin.py`), an executor module's own `ExecutorSpec(name=...)`,
and exercise data. What is left must be listed in `EXCEPTIONS`, with why."""

from __future__ import annotations

import ast
from pathlib import Path

from pallaslab.execute.registry import executor_names

ROOT = Path(__file__).resolve().parents[2] / "pallaslab"
DECLARATIONS = {"execute/protocol.py", "execute/registry.py", "execute/builtin.py"}

# (module, literal): why it stays. Each entry must still be found (the test says when not).
EXCEPTIONS = {
    ("cases.py", "reference"): "a word of the message (`what=\"reference\"`: 'the reference "
                               "function'), not an executor",
    ("device_check/__main__.py", "device"): "the device check's subject (the attached "
                                            "device, or a dry run), not an executor",
    ("device_check/check.py", "device"): "the device check's subject and its event name",
    ("device_check/child.py", "device"): "the device check's subject and its event name",
    ("device_check/kernel_check.py", "device"): "the device check's subject, which is also "
                                                "the executor it compares",
    ("views/step_tree.py", "device"): "a column header of the Step tab's device table",
}


def _not_counted(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))  # a docstring
        elif isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault") \
                    and node.args:
                skip.add(id(node.args[0]))
            if isinstance(func, ast.Name) and func.id == "ExecutorSpec":
                skip.update(id(k.value) for k in node.keywords if k.arg == "name")
    return skip


def named_executors(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each string constant in `source` that names an executor."""
    tree = ast.parse(source)
    skip = _not_counted(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in skip]


def _found() -> dict[tuple[str, str], list[int]]:
    names = set(executor_names())
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        if module.startswith("exercises/") or module in DECLARATIONS:
            continue
        for line, name in named_executors(path.read_text(), names):
            found.setdefault((module, name), []).append(line)
    return found


def test_no_module_names_an_executor_by_string():
    found = _found()
    unexplained = {f"{m}:{lines}: {name!r}" for (m, name), lines in found.items()
                   if (m, name) not in EXCEPTIONS}
    assert not unexplained, "name executors through ExecutorSpec fields and the registry " \
                            f"(executor_of_mode, reference_executor, ...): {sorted(unexplained)}"
    assert not set(EXCEPTIONS) - set(found), "no longer needed: remove from EXCEPTIONS"


def test_the_walk_finds_a_name_and_passes_over_keys_and_docstrings():
    source = ('"""interpret"""\nx = {"device": d["interpret"], "k": p.get("reference")}\n'
              'if name == "tpu-interpret":\n    pass\n'
              'spec = ExecutorSpec(name="vectorized", label="vectorized")\n')
    assert named_executors(source, set(executor_names())) == [(3, "tpu-interpret"),
                                                              (5, "vectorized")]
