"""`pallaslab check --compile`: where libtpu compiles a kernel, the VMEM estimate does not fail
it; where libtpu rejects it, check fails with the compiler's reason."""

import json

from pallaslab.cli import main

CASE = "tests/kernels.py:vmem_overflow"


def check_json(capsys, *argv):
    status = main(["check", *argv, "--json"])
    return status, json.loads(capsys.readouterr().out)


def test_estimate_over_the_limit_is_a_warning_when_libtpu_compiles_it(capsys):
    # v6e: the body writes its scratch and reads it straight back; libtpu elides it and the
    # pipeline buffers fit v6e's 32 MiB, while the estimate counts the scratch too.
    status, data = check_json(capsys, CASE, "--target", "tpu-v6e", "--compile", "--warnings")
    assert status == 0 and data["errors"] == 0
    (k,) = data["kernels"]
    (overflow,) = [p for p in k["problems"] if p["code"] == "vmem-overflow"]
    assert overflow["severity"] == "warning"
    assert "But libtpu compiled it for tpu-v6e (its compiled module uses" in overflow["message"]


def test_estimate_stays_an_error_without_the_compiler_and_when_libtpu_rejects(capsys):
    status, data = check_json(capsys, CASE, "--target", "tpu-v6e")
    assert status == 1 and "vmem-overflow" in {p["code"] for p in data["kernels"][0]["problems"]}
    status, data = check_json(capsys, CASE, "--target", "tpu-v5e", "--compile")
    codes = {p["code"]: p["severity"] for p in data["kernels"][0]["problems"]}
    assert status == 1 and codes == {"vmem-overflow": "error", "vmem-oom": "error"}
