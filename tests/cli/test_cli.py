"""`pallaslab inspect` and `pallaslab check` honour their contracts (docs/architecture.md)."""

import json
import math
import os
import subprocess
import sys

import pytest
from kernels import CATALOG

from pallaslab.cli import main

CASES = "tests/kernels.py"
OPERAND_KEYS = {"origin", "param", "role", "shape", "dtype", "block_shape", "memory_space",
                "buffer_count", "fetches", "hbm_bytes"}
FINDING_KEYS = {"code", "severity", "message", "operand", "programs"}


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_json_contract(capsys):
    data = run_json(capsys, "inspect", f"{CASES}:matmul_f32", "--json")
    assert data["schema_version"] == 1
    (k,) = data["kernels"]
    assert k["name"] == "matmul_kernel" and k["source"].startswith("kernels.py:")
    assert k["grid"] == [4, 3, 2] and k["programs"] == 24
    assert k["dimension_semantics"] == ["parallel", "parallel", "arbitrary"]
    assert [op["origin"] for op in k["operands"]] == ["args[0]", "args[1]", "outputs",
                                                      "scratch[0]"]
    for op in k["operands"]:
        assert set(op) >= OPERAND_KEYS
    x = k["operands"][0]
    assert (x["role"], x["shape"], x["dtype"], x["block_shape"]) == (
        "input", [512, 256], "float32", [128, 128])
    assert (x["buffer_count"], x["fetches"], x["hbm_bytes"]) == (2, 24, 24 * 128 * 128 * 4)
    assert k["operands"][3]["role"] == "scratch" and k["operands"][3]["fetches"] is None
    assert k["findings"] == []


@pytest.mark.parametrize("name", list(CATALOG))
def test_inspect_json_for_every_catalog_kernel(capsys, name):
    data = run_json(capsys, "inspect", f"{CASES}:{name}", "--json")
    for k in data["kernels"]:
        assert isinstance(k["grid"], list) and all(isinstance(g, int) for g in k["grid"])
        for f in k["findings"]:
            assert set(f) >= FINDING_KEYS and f["severity"] in ("error", "warning", "info")
            assert len(f["programs"]) <= 8
    codes = {f["code"] for k in data["kernels"] for f in k["findings"]
             if f["severity"] != "info"}
    assert codes == set(CATALOG[name].findings)


def test_squeezed_dims_are_null_in_json(capsys):
    (k,) = run_json(capsys, "inspect", f"{CASES}:squeezed_dims", "--json")["kernels"]
    assert k["operands"][0]["block_shape"] == [None, 64, 256]


def test_inspect_human_output(capsys):
    assert main(["inspect", f"{CASES}:racy_parallel_accumulate"]) == 0
    out = capsys.readouterr().out
    assert "Kernel 0: row_sum_kernel" in out
    assert "grid 4 = 4 programs" in out and "semantics: parallel" in out
    assert "operand" in out and "fetches" in out and "HBM bytes" in out
    assert "error parallel-write-conflict" in out


def test_piped_output_has_no_padding_spaces(capsys):
    # rich pads tables and indented sections to the page width; a pipe gets the text alone
    assert main(["inspect", f"{CASES}:matmul_f32"]) == 0
    out = capsys.readouterr().out
    assert "HBM bytes" in out and out.endswith("\n")
    assert [line for line in out.splitlines() if line.endswith(" ")] == []


def test_check_exit_status(capsys):
    assert main(["check", f"{CASES}:matmul_f32", f"{CASES}:row_softmax"]) == 0
    out = capsys.readouterr().out
    assert "ok  tests/kernels.py:matmul_f32 [0] matmul_kernel" in out and "0 error(s)" in out
    assert main(["check", f"{CASES}:matmul_f32", f"{CASES}:uncovered_output"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  tests/kernels.py:uncovered_output [0] scale_kernel" in out
    assert "uncovered-output" in out


def test_check_target_switches_rules_and_lowers(capsys):
    # TPU: misaligned blocks are a finding and Mosaic's own verdict.
    assert main(["check", f"{CASES}:tpu_misaligned", "--target", "tpu-v5e"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  tests/kernels.py:tpu_misaligned [0] add_kernel on tpu-v5e" in out
    assert "is not allowed by Mosaic TPU" in out
    # GPU: no (8, 128) rule, but Triton rejects the non-power-of-two block when lowering.
    assert main(["check", f"{CASES}:tpu_misaligned", "--target", "gpu-h100"]) == 1
    out = capsys.readouterr().out
    assert "tpu-block-shape" not in out and "size is a power of 2" in out
    # A k-accumulating matmul races on GPU (every program may run concurrently).
    assert main(["check", f"{CASES}:matmul_f32", "--target", "gpu-h100"]) == 1
    assert "parallel-write-conflict" in capsys.readouterr().out
    assert main(["check", f"{CASES}:row_softmax", "--target", "tpu-v5e",
                 "--target", "gpu-h100"]) == 0


def test_bad_case_is_reported_not_raised(capsys):
    assert main(["inspect", "tests/cases/bad_cases.py:returns_array"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "a case returns (fn, args) or (fn, args, kwargs)" in err
    assert main(["inspect", "tests/cases/bad_cases.py:no_kernel"]) == 2
    assert "launched no Pallas kernel" in capsys.readouterr().err


def test_console_script_runs_in_a_fresh_process():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    proc = subprocess.run([sys.executable, "-m", "pallaslab", "check",
                           f"{CASES}:output_revisit_clobber"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "output-revisit" in proc.stdout
    # No libtpu start-up noise on a host without accelerators.
    assert "TPU_WORKER_HOSTNAMES" not in proc.stderr


SHIPPED = ["tpu_flash_attention", "tpu_matmul", "tpu_megablox_gmm", "tpu_paged_attention",
           "tpu_ragged_paged_attention", "gpu_softmax", "gpu_attention"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("name", SHIPPED)
def test_jax_shipped_kernels_through_the_cli(capsys, name):
    spec = f"tests/cases/shipped.py:{name}"
    (k,) = run_json(capsys, "inspect", spec, "--json")["kernels"]
    assert k["programs"] == math.prod(k["grid"])
    windowed = [op for op in k["operands"] if op["fetches"] is not None]
    assert windowed and all(op["hbm_bytes"] > 0 for op in windowed)
    assert main(["check", spec]) == 0  # JAX's own kernels pass every check


def test_inspect_vmem_section_and_overflow(capsys):
    (k,) = run_json(capsys, "inspect", f"{CASES}:matmul_f32", "--json")["kernels"]
    # 2 buffers x (x, y, out) 64 KiB blocks + the 64 KiB f32 accumulator (libtpu agrees: 448 KiB)
    assert k["vmem"] == {"tpu-v5e": {"bytes": 448 * 1024, "limit": 16 << 20, "fits": True},
                         "tpu-v6e": {"bytes": 448 * 1024, "limit": 32 << 20, "fits": True}}
    (k,) = run_json(capsys, "inspect", f"{CASES}:vmem_overflow", "--json", "--chip", "v6e")[
        "kernels"]
    assert list(k["vmem"]) == ["tpu-v6e"] and not k["vmem"]["tpu-v6e"]["fits"]
    (f,) = [f for f in k["findings"] if f["code"] == "vmem-overflow"]
    assert f["severity"] == "error" and "needs 40.00 MiB of scoped VMEM" in f["message"]
    assert main(["check", f"{CASES}:vmem_overflow", "--target", "tpu-v6e"]) == 1


def test_make_lab_opens_git_ignored_copies_of_the_tutorials(tmp_path):
    """Issue 10 item 12: running a tutorial under `make lab` must not write into notebooks/."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for name in ("Makefile", "pyproject.toml", "pins.txt"):
        shutil.copy(root / name, tmp_path / name)
    shutil.copytree(root / "notebooks", tmp_path / "notebooks")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    jupyter = bin_dir / "jupyter"  # a stand-in that records what it was asked to open
    jupyter.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/../opened"\n')
    jupyter.chmod(0o755)
    (tmp_path / ".venv" / ".installed").touch()  # setup is done (newer than pyproject.toml)
    (tmp_path / ".venv" / "mosaic-gpu-compiler").mkdir()
    (tmp_path / ".venv" / "mosaic-gpu-compiler" / ".installed").touch()  # and its compiler
    run = subprocess.run(["make", "lab"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    opened = (tmp_path / ".venv" / "opened").read_text().split()
    assert opened[0] == "lab" and opened[-1] == "lab/" and "notebooks/" not in opened
    tutorials = sorted(p.name for p in (root / "notebooks").glob("*.ipynb"))
    assert tutorials and sorted(p.name for p in (tmp_path / "lab").glob("*.ipynb")) == tutorials
    assert "copies of the tutorials in lab/" in run.stdout
    # a second run keeps the user's edited copy (and outputs) and adds nothing else
    mine = tmp_path / "lab" / tutorials[0]
    mine.write_text("edited")
    assert subprocess.run(["make", "lab"], cwd=tmp_path, capture_output=True,
                          timeout=60).returncode == 0
    assert mine.read_text() == "edited"
    # lab/ is ignored by git in the repository itself
    ignored = subprocess.run(["git", "check-ignore", "-q", f"lab/{tutorials[0]}"], cwd=root)
    assert ignored.returncode == 0
    assert "`make lab` works on copies" in (root / "README.md").read_text()


def test_the_buffers_column_is_what_the_kernel_gets():
    """Constant-index weights get one VMEM slot, as the Memory view counts them, although
    their pipeline mode asks for two (`buffer_count`)."""
    import pallaslab
    from pallaslab.analysis.inspection import inspect_capture, kernel_json

    fn, args = CATALOG["layer_norm"].case()
    (insp,) = inspect_capture(pallaslab.capture(fn, *args))
    ops = {op["origin"]: op for op in kernel_json(insp)["operands"]}
    assert [(ops[o]["buffer_count"], ops[o]["buffers"]) for o in ("args[0]", "args[1]")] == \
        [(2, 2), (2, 1)]


def test_lower_prints_whole_ir_lines_when_piped(capsys):
    """Piped (not a terminal), the IR is printed as it is: the func.func line keeps its
    attributes, however long, and no line is padded."""
    assert main(["lower", "tests/kernels.py:matmul_f32", "--target", "tpu-v5e",
                 "--stage", "mosaic"]) == 0
    out = capsys.readouterr().out
    func = next(line for line in out.splitlines() if "func.func @" in line)
    assert len(func) > 200 and "dimension_semantics" in func and "window_params" in func
    assert not any(line.endswith(" ") for line in out.splitlines() if "func." in line)
