"""`inspect`, `compare` and `lower` take several cases in one call (issue 28): files,
`file.py:func`, directories and globs; `--json` prints `{"cases": [...]}`, the exit status is
the worst; a lone `file.py:func` keeps the single-case output."""

import json
import textwrap

import pytest

from pallaslab.cases import expand_case_arguments
from pallaslab.cli import main

K = "tests/kernels.py"
NO_KERNEL = "tests/cases/bad_cases.py:no_kernel"

PLUS_ONE = textwrap.dedent("""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl


    def _plus_one_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0


    def _launch(x):
        return pl.pallas_call(_plus_one_kernel,
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


    def plus_one():
        return _launch, (jnp.arange(8.0),)


    def plus_one_long():
        return _launch, (jnp.arange(16.0),)


    def not_a_case(x):  # needs an argument: not a case
        return x
""")


@pytest.fixture
def case_dir(tmp_path):
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "plus.py").write_text(PLUS_ONE)
    (folder / "_helpers.py").write_text("def ignored():\n    raise AssertionError\n")
    (folder / "notes.txt").write_text("not a case file")
    return folder


def run_json(capsys, argv, status):
    assert main([*argv, "--json"]) == status
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("command", [
    ["inspect"],
    ["compare", "--executors", "interpret,vectorized"],
    ["lower", "--target", "tpu-v5e"],
])
def test_a_clean_case_and_a_broken_one(command, capsys):
    data = run_json(capsys, [*command, f"{K}:vector_add", NO_KERNEL], status=2)
    good, bad = data["cases"]
    assert good["case"] == f"{K}:vector_add" and "error" not in good
    assert good["kernels" if command[0] != "compare" else "outputs"]
    assert bad["case"] == NO_KERNEL and bad["error"]["type"] == "NoKernelError"
    assert data["error"] == bad["error"]  # the first error, as every failed command's JSON


def test_each_entry_holds_the_single_case_object(capsys):
    single = run_json(capsys, ["lower", f"{K}:vector_add"], status=0)
    assert "cases" not in single and single["target"] == "tpu-v5e"
    data = run_json(capsys, ["lower", f"{K}:vector_add", f"{K}:elementwise_1d"], status=0)
    first = data["cases"][0]
    assert first.pop("case") == f"{K}:vector_add"
    assert set(first) == set(single) and first["kernels"][0]["name"] == "add_kernel"
    assert "error" not in data


def test_the_exit_status_is_the_worst(capsys):
    # vector_add agrees (0); racy_parallel_accumulate has check's error finding (1).
    argv = ["compare", "--executors", "interpret,vectorized", f"{K}:vector_add",
            f"{K}:racy_parallel_accumulate"]
    data = run_json(capsys, argv, status=1)
    assert [c["passed"] for c in data["cases"]] == [True, False]
    assert main([*argv, NO_KERNEL]) == 2
    out = capsys.readouterr().out
    assert "3 case(s): 1 clean, 1 failed (exit 1), 1 could not finish (exit 2)" in out


def test_a_directory_names_every_case_of_its_files(case_dir, capsys):
    data = run_json(capsys, ["inspect", str(case_dir)], status=0)
    assert [c["case"] for c in data["cases"]] == [f"{case_dir}/plus.py:plus_one",
                                                   f"{case_dir}/plus.py:plus_one_long"]
    assert [c["kernels"][0]["operands"][0]["shape"] for c in data["cases"]] == [[8], [16]]


def test_a_glob_and_a_file_without_function(case_dir, capsys):
    (case_dir / "more.py").write_text(PLUS_ONE)
    data = run_json(capsys, ["lower", str(case_dir / "m*.py"), f"{case_dir}/plus.py"], status=0)
    assert [c["case"].rpartition("/")[2] for c in data["cases"]] == [
        "more.py:plus_one", "more.py:plus_one_long", "plus.py:plus_one", "plus.py:plus_one_long"]
    # A quoted glob lists what the shell's expansion would (a glob names `_` files too).
    files = [str(case_dir / name) for name in ("_helpers.py", "more.py", "plus.py")]
    assert expand_case_arguments([str(case_dir / "*.py")]).entries == \
        expand_case_arguments(files).entries


def test_a_missing_case_among_good_ones_is_its_own_error(case_dir, capsys):
    missing = f"{case_dir}/absent.py:plus_one"
    data = run_json(capsys, ["inspect", f"{K}:vector_add", missing, str(case_dir / "zz*.py"),
                             f"{case_dir}/plus.py:plus_one"], status=2)
    cases = {c["case"]: c for c in data["cases"]}
    assert "no such file" in cases[missing]["error"]["message"]
    assert "matches no file or directory" in cases[str(case_dir / "zz*.py")]["error"]["message"]
    assert cases[f"{K}:vector_add"]["kernels"] and cases[f"{case_dir}/plus.py:plus_one"]["kernels"]
    assert main(["inspect", f"{K}:vector_add", missing]) == 2
    assert f"case {missing!r}: no such file" in capsys.readouterr().err


def test_arguments_that_name_no_case(case_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    (case_dir / "broken.py").write_text("def oops(:\n")
    (case_dir / "helpers.py").write_text("def helper(x):\n    return x\n")
    found = expand_case_arguments([str(tmp_path / "empty"), str(case_dir / "broken.py"),
                                   str(case_dir / "helpers.py"), f"{case_dir}:plus_one"])
    messages = [str(e.error) for e in found.entries]
    assert "holds no case file" in messages[0]
    assert "cannot be read for its cases" in messages[1] and "line 1" in messages[1]
    assert "defines no case" in messages[2]
    assert "is a directory" in messages[3]


def test_a_lone_case_keeps_the_single_case_errors(capsys):
    assert not expand_case_arguments([f"{K}:vector_add"]).several
    assert not expand_case_arguments(["nope.py:f"]).several
    data = run_json(capsys, ["inspect", NO_KERNEL], status=2)
    assert set(data) == {"error"} and data["error"]["type"] == "NoKernelError"
