"""A judged kernel written out as a case file `pallaslab compare FILE.py:case --reference
FILE.py:reference` loads: the description is the file's data, rebuilt by this package."""

from __future__ import annotations

from pathlib import Path

from fuzz.spec import Generated

TESTS_DIR = Path(__file__).resolve().parent.parent

TEMPLATE = '''"""Fuzz kernel {name}: {outcome}.
{detail}
Reproduce: pallaslab compare {path}:case --reference {path}:reference --executors {executors}
"""
import sys

sys.path.insert(0, {tests!r})  # the fuzz package, which rebuilds the kernel from its description

import cloudpickle  # noqa: E402
import numpy as np  # noqa: E402

import fuzz.build  # noqa: E402
import fuzz.model  # noqa: E402
import fuzz.ops  # noqa: E402
from fuzz.build import build, inputs  # noqa: E402
from fuzz.model import expected  # noqa: E402
from fuzz.spec import (  # noqa: E402, F401
    AtomicKernel, BlockKernel, DmaKernel, Generated, MosaicGpuKernel, Operand, PipelineKernel,
    RemoteKernel, TritonKernel)

for _module in (fuzz.build, fuzz.model, fuzz.ops):  # the executor worker lacks tests/ on its path
    cloudpickle.register_pickle_by_value(_module)

GENERATED = {generated!r}


def case():
    kernel = GENERATED.kernel
    return build(kernel), inputs(kernel, GENERATED.index)


def reference(*args):
    """The unmutated description's NumPy model (runs as written, not under jax.jit)."""
    return expected(GENERATED.reference_kernel, tuple(np.asarray(a) for a in args))
'''


def write_case(g: Generated, outcome: str, detail: str, executors: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{g.name}.py"
    detail = detail.replace('"""', "'''").replace("\\", "/")
    path.write_text(TEMPLATE.format(name=g.name, outcome=outcome, detail=detail, path=path,
                                    executors=executors, tests=str(TESTS_DIR), generated=g))
    return path
