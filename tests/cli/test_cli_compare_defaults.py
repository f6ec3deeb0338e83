"""`pallaslab compare` without --executors chooses executors that can run the kernels and
says which; a case's sibling modules reach the executor worker."""

import json

from pallaslab.cli import main

CASES = "tests/kernels.py"
TRIPLE = "tests/cases/references.py:triple"


def test_mesh_kernel_compares_tpu_interpret_with_the_reference_by_default(capsys):
    # mesh_kernel lives in tests/kernels_tpu.py, a sibling module the case file imports:
    # the worker process rebuilds it by value (it does not have tests/ on its path).
    assert main(["compare", f"{CASES}:mesh_kernel", "--reference", TRIPLE, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["executors"] == ["tpu-interpret", "reference"]
    assert data["passed"] is True
    assert any("the HLO interpreter cannot run mesh kernels" in n for n in data["notes"])


def test_default_choice_is_printed_as_a_note(capsys):
    assert main(["compare", f"{CASES}:vector_add"]) == 0
    out = capsys.readouterr().out
    assert "note: executors chosen by default: vectorized, tpu-interpret" in " ".join(out.split())
    assert "all close" in out


def test_mesh_kernel_without_reference_says_what_to_pass(capsys):
    assert main(["compare", f"{CASES}:mesh_kernel"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "only tpu-interpret can run these kernels here" in err
    assert "pass reference=" in err
