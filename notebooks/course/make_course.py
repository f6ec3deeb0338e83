"""Write the course notebooks (01_....ipynb ... 06_....ipynb) from `pallaslab.exercises`.

Run from the repository root: `python notebooks/course/make_course.py`. Each exercise gets its
explanation, a picture (pallaslab's grid view of the kernel to write, live and as static
HTML), a stub cell checked by `%%pallas --exercise NAME`, and the solution in a collapsed cell
(its source: the solution function and the helpers it uses, from
`pallaslab.exercises.solutions`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import nbformat

from pallaslab.exercises import exercises
from pallaslab.exercises.solutions import SOLUTIONS

HERE = Path(__file__).resolve().parent
FILES = {1: "01_grids", 2: "02_tiled_matmul", 3: "03_reductions", 4: "04_scalar_prefetch_moe",
         5: "05_flash_attention", 6: "06_dmas_pipelines_collectives"}
SETUP = """%load_ext pallaslab
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.exercises import exercise
from pallaslab.exercises.solutions import SOLUTIONS"""
HOW = ("Each exercise: read the explanation and the picture (pallaslab's grid view of the kernel "
       "to write: which block of each operand every program touches), fill the stub, and run "
       "its cell. `%%pallas --exercise NAME` checks your function against a hidden pure-JAX "
       "reference on a CPU and tells you *why* it is wrong (an index map that looks transposed, "
       "an accumulator read before its first write, programs that race on an output block, "
       "output no program wrote). Add `--hint` for hints. The solution is in the collapsed cell "
       "below each stub.")


def solution_source(fn) -> str:
    """The solution function's source and, before it, the module's imports and the top-level
    definitions it uses (transitively), in the module's order."""
    module = importlib.import_module(fn.__module__)
    tree = ast.parse(inspect.getsource(module))
    defs: dict[str, ast.stmt] = {}
    imports = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.unparse(node))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            defs[node.targets[0].id] = node
    needed, todo = set(), [fn.__name__]
    while todo:
        name = todo.pop()
        if name in needed or name not in defs:
            continue
        needed.add(name)
        todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)]
    body = [ast.get_source_segment(inspect.getsource(module), d)
            for name, d in defs.items() if name in needed]
    return "\n".join(imports) + "\n\n\n" + "\n\n\n".join(b for b in body if b)


def exercise_cells(ex) -> list:
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    picture = code(f"# The kernel to write, as pallaslab draws it (nothing runs: it is traced)\n"
                   f"pallaslab.inspect(SOLUTIONS[{ex.name!r}],\n"
                   f"                  *exercise({ex.name!r}).concrete_inputs()).grid()")
    picture.metadata["jupyter"] = {"source_hidden": True}
    solution = code(f"%%pallas --exercise {ex.name}\n# Solution\n"
                    + solution_source(SOLUTIONS[ex.name]))
    solution.metadata["jupyter"] = {"source_hidden": True}
    solution.metadata["tags"] = ["solution"]
    stub = code(f"%%pallas --exercise {ex.name}\n{ex.stub}")
    stub.metadata["tags"] = ["exercise"]
    return [md(f"## {ex.notebook}.{_index(ex)} {ex.title} (`{ex.name}`)\n\n{ex.explanation}\n\n"
               f"Write `{ex.signature}`."), picture, stub, solution]


def _index(ex) -> int:
    same = [e for e in exercises().values() if e.notebook == ex.notebook]
    return same.index(ex) + 1


def notebook(n: int) -> nbformat.NotebookNode:
    chosen = [e for e in exercises().values() if e.notebook == n]
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python",
                                 "name": "python3"}
    title = f"# Pallas course {n}/6: {chosen[0].section}\n\n{HOW}"
    nb.cells = [nbformat.v4.new_markdown_cell(title), nbformat.v4.new_code_cell(SETUP)]
    for ex in chosen:
        nb.cells += exercise_cells(ex)
    return nb


def main() -> None:
    for n, stem in FILES.items():
        nbformat.write(notebook(n), HERE / f"{stem}.ipynb")


if __name__ == "__main__":
    main()
