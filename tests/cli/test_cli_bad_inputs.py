"""The CLI on bad input: every case asserts the exit status and the message, in human form
(the message on stderr) and with --json (stdout is exactly one JSON object with
`error.type` and `error.message`).

Exit statuses: 0 clean; 1 findings, mismatch or failed lowering; 2 usage, a case that cannot
be loaded, a tool error, an incomplete comparison, a time limit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from pallaslab.cli import COMMANDS, main

K = "tests/kernels.py"
BAD = "tests/cases/bad_cases.py"
USAGE = "usage"  # error.type of command-line mistakes under --json

# Case files that fail to import, written to a temporary directory ({tmp} in argv).
FILES = {
    "syntax_error.py": "def case(:\n    return None\n",
    "import_raises.py": "import math\n\nVALUE = math.sqrt(-1)  # the user's line\n",
    "import_exits.py": "import sys\n\nsys.exit(4)\n",
    "prints_at_import.py": (
        "import sys\nsys.path.insert(0, 'tests')\nfrom kernels import vector_add\n"
        "print('hello from the case file')\n"),
}


@dataclasses.dataclass(frozen=True)
class Bad:
    argv: tuple[str, ...]
    message: str  # expected in stderr (human) and in error.message (--json)
    error_type: str  # error.type under --json
    status: int = 2
    json: bool = True  # the subcommand takes --json


def bad(*argv: str, message: str, error_type: str = USAGE, **kw) -> Bad:
    return Bad(tuple(argv), message, error_type, **kw)


CASE_ERR, CODE_ERR = "CaseError", "CaseCodeError"
CATALOG: dict[str, Bad] = {
    # -- loading a case ---------------------------------------------------------------------
    "missing-file": bad("inspect", "tests/cases/nope.py:f", error_type=CASE_ERR,
                        message="case 'tests/cases/nope.py:f': no such file "
                                "'tests/cases/nope.py'"),
    # (an existing file without :func names every case it defines: test_cli_many_cases.py)
    "not-file-colon-func": bad("inspect", "tests/cases/nope", error_type=CASE_ERR,
                               message="case 'tests/cases/nope' is not of the form "
                                       "path/to/file.py:function"),
    "no-such-function": bad("inspect", f"{BAD}:missing", error_type=CASE_ERR,
                            message="bad_cases.py defines no 'missing'"),
    "syntax-error": bad("inspect", "{tmp}/syntax_error.py:case", error_type=CODE_ERR,
                        message="importing syntax_error.py raised SyntaxError: invalid syntax"),
    "exception-at-import": bad("inspect", "{tmp}/import_raises.py:case", error_type=CODE_ERR,
                               message="importing import_raises.py raised ValueError: "
                                       "math domain error"),
    "system-exit-at-import": bad("inspect", "{tmp}/import_exits.py:case", error_type=CODE_ERR,
                                 message="importing import_exits.py raised SystemExit(4)"),
    "case-needs-arguments": bad("inspect", f"{BAD}:needs_arguments", error_type=CASE_ERR,
                                message="needs argument(s) size; a case is a function of no "
                                        "arguments"),
    "case-raises": bad("inspect", f"{BAD}:raises_in_case", error_type=CODE_ERR,
                       message="raises_in_case() raised ValueError: the case itself is broken"),
    "case-calls-sys-exit": bad("inspect", f"{BAD}:exits_in_case", error_type=CODE_ERR,
                               message="exits_in_case() raised SystemExit(3)"),
    "case-returns-array": bad("inspect", f"{BAD}:returns_array", error_type=CASE_ERR,
                              message="returns_array() returned ArrayImpl; a case returns "
                                      "(fn, args) or (fn, args, kwargs)"),
    "case-wrong-shapes": bad("inspect", f"{BAD}:wrong_shapes", error_type=CODE_ERR,
                             message="tracing fn raised TypeError: add got incompatible "
                                     "shapes for broadcasting: (8, 128), (16, 128)"),
    "kernel-raises-while-tracing": bad("inspect", f"{BAD}:kernel_raises_while_tracing",
                                       error_type=CODE_ERR,
                                       message="tracing fn raised RuntimeError: my kernel is "
                                               "broken"),
    "no-kernel": bad("inspect", f"{BAD}:no_kernel", error_type="NoKernelError",
                     message="launched no Pallas kernel"),
    "markup-in-error-message": bad("inspect", f"{BAD}:raises_markup_message",
                                   error_type=CODE_ERR,
                                   message="raised ValueError: [bold]loud[/] :b: "),
    "inspect-unknown-chip": bad("inspect", f"{K}:vector_add", "--chip", "v9",
                                message="argument --chip: unknown TPU chip 'v9': known chips "
                                        "are v4, v5e, v5p, v6e, 7x"),
    "inspect-no-case": bad("inspect", message="the following arguments are required: CASE"),
    # -- check ------------------------------------------------------------------------------
    "check-unknown-target": bad("check", f"{K}:vector_add", "--target", "tpu-v9",
                                message="argument --target: unknown target 'tpu-v9'; valid "
                                        "targets: tpu-v4, tpu-v5e"),
    "check-one-case-missing": bad("check", f"{K}:vector_add", f"{BAD}:missing",
                                  error_type=CASE_ERR, message="defines no 'missing'"),
    "check-kernel-raises": bad("check", f"{BAD}:kernel_raises_while_tracing",
                               error_type=CODE_ERR, message="RuntimeError: my kernel is broken"),
    # -- lower ------------------------------------------------------------------------------
    "lower-unknown-target": bad("lower", f"{K}:vector_add", "--target", "gpu-z9",
                                message="argument --target: unknown target 'gpu-z9'; valid "
                                        "targets: tpu-v4"),
    "lower-unknown-stage": bad("lower", f"{K}:vector_add", "--stage", "foo",
                               message="argument --stage: unknown stage 'foo'; valid stages: "
                                       "all, jaxpr, mosaic"),
    # (a GPU stage for a TPU target: no hint to --compile, which would not make it either)
    "lower-stage-not-produced": bad("lower", f"{K}:vector_add", "--stage", "ptx",
                                    message="lowering for tpu-v5e produced no stage 'ptx'; it "
                                            "produced: jaxpr, mosaic"),
    "lower-compiler-stage-needs-compile": bad(
        "lower", f"{K}:vector_add", "--stage", "mosaic:post-finalize-llo",
        message="lowering for tpu-v5e produced no stage 'mosaic:post-finalize-llo'; it "
                "produced: jaxpr, mosaic (compiler stages need --compile)"),
    "lower-case-raises": bad("lower", f"{BAD}:raises_in_case", error_type=CODE_ERR,
                             message="ValueError: the case itself is broken"),
    # -- compare ----------------------------------------------------------------------------
    "compare-unknown-executor": bad("compare", f"{K}:vector_add", "--executors",
                                    "interpret,nope",
                                    message="argument --executors: unknown executor 'nope'; "
                                            "the executors are: interpret, tpu-interpret"),
    "compare-single-executor": bad("compare", f"{K}:vector_add", "--executors", "interpret",
                                   message="a comparison needs at least two executors; got "
                                           "1 (interpret)"),
    "compare-executor-twice": bad("compare", f"{K}:vector_add", "--executors",
                                  "interpret,interpret",
                                  message="executor 'interpret' is listed twice"),
    "compare-negative-rtol": bad("compare", f"{K}:vector_add", "--rtol", "-1",
                                 message="argument --rtol: must be a finite number >= 0, got "
                                         "'-1'"),
    "compare-nan-atol": bad("compare", f"{K}:vector_add", "--atol", "nan",
                            message="argument --atol: must be a finite number >= 0, got 'nan'"),
    "compare-word-rtol": bad("compare", f"{K}:vector_add", "--rtol", "tight",
                             message="argument --rtol: must be a finite number >= 0, got "
                                     "'tight'"),
    "compare-zero-timeout": bad("compare", f"{K}:vector_add", "--timeout", "0",
                                message="argument --timeout: must be a finite number of "
                                        "seconds > 0, got '0'"),
    "compare-negative-timeout": bad("compare", f"{K}:vector_add", "--timeout", "-5",
                                    message="argument --timeout: must be a finite number of "
                                            "seconds > 0, got '-5'"),
    "compare-reference-without-function": bad(
        "compare", f"{K}:vector_add", "--executors", "interpret,reference",
        message="the 'reference' executor needs --reference FILE.py:FUNC"),
    "compare-reference-missing-file": bad(
        "compare", f"{K}:vector_add", "--reference", "tests/cases/nope.py:ref",
        error_type=CASE_ERR, message="reference 'tests/cases/nope.py:ref': no such file"),
    "compare-reference-syntax-error": bad(
        "compare", f"{K}:vector_add", "--reference", "{tmp}/syntax_error.py:ref",
        error_type=CODE_ERR, message="importing syntax_error.py raised SyntaxError"),
    "compare-kernel-raises": bad("compare", f"{BAD}:kernel_raises_while_tracing",
                                 "--executors", "interpret,tpu-interpret", error_type=CODE_ERR,
                                 message="RuntimeError: my kernel is broken"),
    # -- report -----------------------------------------------------------------------------
    "report-unknown-chip": bad("report", f"{K}:vector_add", "--chip", "tpu-v1",
                               message="argument --chip: unknown TPU chip 'tpu-v1'"),
    "report-unknown-target": bad("report", f"{K}:vector_add", "--target", "h200",
                                 message="argument --target: unknown target 'h200'"),
    "report-no-such-directory": bad("report", f"{K}:vector_add", "-o", "{tmp}/no/dir/r.html",
                                    error_type="ReportWriteError",
                                    message="cannot write the report to '{tmp}/no/dir/r.html': "
                                            "no such directory '{tmp}/no/dir'"),
    "report-output-is-a-directory": bad("report", f"{K}:vector_add", "-o", "{tmp}",
                                        error_type="ReportWriteError",
                                        message="cannot write the report to '{tmp}': it is a "
                                                "directory"),
    "report-case-exits": bad("report", f"{BAD}:exits_in_case", "-o", "{tmp}/r.html",
                             error_type=CODE_ERR, message="exits_in_case() raised SystemExit(3)"),
    # -- tune -------------------------------------------------------------------------------
    "tune-param-without-values": bad("tune", f"{K}:vector_add", "--param", "bm",
                                     message="argument --param: 'bm': expected NAME=V1,V2,..."),
    "tune-unknown-chip": bad("tune", f"{K}:vector_add", "--param", "bm=1", "--chip", "v1",
                             message="argument --chip: unknown TPU chip 'v1'"),
    "tune-missing-param": bad("tune", f"{K}:vector_add",
                              message="the following arguments are required: --param"),
    # -- cache and the command itself -------------------------------------------------------
    "cache-unknown-action": bad("cache", "frobnicate",
                                message="argument action: invalid choice: 'frobnicate'"),
    "no-command": bad(message="the following arguments are required: COMMAND"),
    "unknown-command": bad("frobnicate", message="invalid choice: 'frobnicate'"),
    "unknown-option": bad("inspect", f"{K}:vector_add", "--chips", "v5e",
                          message="unrecognized arguments: --chips v5e"),
}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bad-case-files")
    for name, text in FILES.items():
        (directory / name).write_text(text)
    return str(directory)


def _fill(text: str, tmp: str) -> str:
    return text.replace("{tmp}", tmp)


def test_the_catalog_covers_every_subcommand():
    assert len(CATALOG) >= 30
    assert {b.argv[0] for b in CATALOG.values() if b.argv} >= set(COMMANDS)


@pytest.mark.parametrize("name", list(CATALOG))
def test_bad_input_human(name, tmp, capsys):
    b = CATALOG[name]
    status = main([_fill(a, tmp) for a in b.argv])
    err = capsys.readouterr().err
    assert status == b.status, err
    assert _fill(b.message, tmp) in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(("error: ", "pallaslab")), last  # one closing line says what's wrong


@pytest.mark.parametrize("name", [n for n, b in CATALOG.items() if b.json])
def test_bad_input_json(name, tmp, capsys):
    b = CATALOG[name]
    status = main([*(_fill(a, tmp) for a in b.argv), "--json"])
    out, err = capsys.readouterr()
    assert status == b.status, err
    payload = json.loads(out)  # exactly one JSON object, nothing else on stdout
    assert isinstance(payload, dict)
    assert set(payload["error"]) == {"type", "message"}
    assert payload["error"]["type"] == b.error_type
    assert _fill(b.message, tmp) in payload["error"]["message"]


# --- the user's own traceback ------------------------------------------------------------


@pytest.mark.parametrize(("spec", "last_line"), [
    (f"{BAD}:raises_in_case", "USER-LINE: raises_in_case"),
    (f"{BAD}:kernel_raises_while_tracing", "USER-LINE: _broken_kernel"),
    (f"{BAD}:wrong_shapes", "USER-LINE: _add_kernel"),
    ("{tmp}/import_raises.py:case", "VALUE = math.sqrt(-1)  # the user's line"),
])
@pytest.mark.parametrize("command", ["inspect", "compare"])
def test_user_traceback_ends_on_their_line(command, spec, last_line, tmp, capsys):
    assert main([command, _fill(spec, tmp)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    frames = [line for line in err.splitlines() if line.startswith("  File ")]
    assert frames and all("pallaslab/" not in f and "importlib" not in f and "/jax/" not in f
                          for f in frames), frames
    source_lines = [line.strip() for line in err.splitlines() if line.startswith("    ")
                    and not set(line.strip()) <= set("^~")]
    assert source_lines[-1].endswith(last_line)
    assert "JAX has removed its internal frames" not in err


def test_syntax_error_shows_the_file_line_and_caret(tmp, capsys):
    assert main(["inspect", f"{tmp}/syntax_error.py:case"]) == 2
    err = capsys.readouterr().err
    assert f'File "{tmp}/syntax_error.py", line 1' in err
    assert "def case(:" in err and "SyntaxError: invalid syntax" in err
    assert "importlib" not in err and "pallaslab/" not in err


def test_json_message_carries_the_traceback(capsys):
    assert main(["inspect", f"{BAD}:kernel_raises_while_tracing", "--json"]) == 2
    message = json.loads(capsys.readouterr().out)["error"]["message"]
    assert message.splitlines()[0].endswith("tracing fn raised RuntimeError: my kernel is broken")
    assert "Traceback (most recent call last):" in message
    assert "USER-LINE: _broken_kernel" in message


def test_case_printing_at_import_keeps_json_stdout_clean(tmp, capsys):
    assert main(["inspect", f"{tmp}/prints_at_import.py:vector_add", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["kernels"] and "hello from the case file" in err


def test_check_keeps_checking_after_a_bad_case(capsys):
    assert main(["check", f"{BAD}:raises_in_case", f"{K}:vector_add"]) == 2
    out, err = capsys.readouterr()
    assert "ok  tests/kernels.py:vector_add [0]" in out
    assert "1 case(s) could not be checked" in out and "the case itself is broken" in err
    assert main(["check", f"{BAD}:raises_in_case", f"{K}:vector_add", "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert [k["case"] for k in payload["kernels"]] == [f"{K}:vector_add"]
    assert payload["case_errors"][0]["case"] == f"{BAD}:raises_in_case"
    assert payload["error"]["type"] == CODE_ERR and payload["ok"] is False


# --- user text is shown as text ----------------------------------------------------------

NAMES = {  # case -> how the kernel's name must appear in the terminal
    "markup_closing_tag_name": "Kernel 0: [/]",
    "markup_style_name": "Kernel 0: [bold]x",
    "emoji_code_name": "Kernel 0: :b:",
    "ansi_escape_name": "Kernel 0: red",
    "bidi_override_name": "Kernel 0: abc<U+202E>dcba",
}


@pytest.mark.parametrize("case", list(NAMES))
def test_kernel_names_are_text_not_markup(case, capsys):
    assert main(["inspect", f"{BAD}:{case}"]) == 0
    out = capsys.readouterr().out
    assert NAMES[case] in out
    assert "\x1b" not in out and "\u202e" not in out and "🅱" not in out
    shown = NAMES[case].removeprefix("Kernel 0: ")
    assert main(["lower", f"{BAD}:{case}", "--target", "tpu-v5e"]) == 0
    assert f"Lowering of kernel 0 {shown} for tpu-v5e" in capsys.readouterr().out
    assert main(["check", f"{BAD}:{case}"]) == 0
    assert f"[0] {shown}" in capsys.readouterr().out


def test_markup_in_an_error_message_is_shown_as_written(capsys):
    assert main(["inspect", f"{BAD}:raises_markup_message"]) == 2
    err = capsys.readouterr().err
    assert "ValueError: [bold]loud[/] :b: cleared <U+202E>evil" in err
    assert "\x1b" not in err and "\u202e" not in err


def test_json_keeps_names_exact(capsys):
    assert main(["inspect", f"{BAD}:bidi_override_name", "--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert k["name"] == "abc\u202edcba"


# --- help --------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [[], *([c] for c in COMMANDS)])
def test_help_lists_the_exit_statuses(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "exit status:" in out and "0  clean" in out
    assert "2  usage error, a case that cannot be loaded" in out


# --- the real entry point ----------------------------------------------------------------


def _run(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "pallaslab", *argv], capture_output=True,
                          text=True, env=env, timeout=300)


def test_system_exit_at_import_does_not_end_pallaslab_silently(tmp):
    proc = _run("inspect", f"{tmp}/import_exits.py:case", "--json")
    assert proc.returncode == 2, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["error"]["type"] == CODE_ERR
    assert "importing import_exits.py raised SystemExit(4)" in payload["error"]["message"]
    assert "error: case" in proc.stderr


def test_usage_error_exit_status_of_the_entry_point():
    proc = _run("compare", f"{K}:vector_add", "--rtol", "-1")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "pallaslab compare: error: argument --rtol: must be a finite number >= 0" in proc.stderr


# --- compare: exit status by verdict ------------------------------------------------------


def test_compare_exit_statuses(capsys):
    assert main(["compare", f"{K}:vector_add", "--executors", "interpret,tpu-interpret"]) == 0
    assert "all close" in capsys.readouterr().out
    assert main(["compare", f"{K}:shifted_block_wrong", "--executors", "interpret,reference",
                 "--reference", f"{K}:shifted_block_reference"]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_incomplete_comparison_exits_2(capsys):
    argv = ["compare", f"{K}:elementwise_1d", "--executors", "interpret,device"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert re.search(r"device +. unavailable +. +- +. no TPU or GPU is attached", out), out
    assert "error: INCOMPLETE: only 1 of 2 executor(s) ran" in err
    assert main([*argv, "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["complete"] is False
    assert payload["executors_status"]["device"]["status"] == "unavailable"
    assert payload["error"]["type"] == "IncompleteComparison"
    assert "only 1 of 2 executor(s) ran" in payload["error"]["message"]


def test_time_limit_exits_2(capsys):
    argv = ["compare", f"{BAD}:long_grid", "--executors", "interpret,tpu-interpret",
            "--timeout", "1", "--json"]
    assert main(argv) == 2
    payload = json.loads(capsys.readouterr().out)
    assert {s["status"] for s in payload["executors_status"].values()} == {"timed-out"}
    assert payload["error"]["type"] == "IncompleteComparison"
    assert "timed-out" in payload["error"]["message"]


def test_a_bug_of_ours_is_not_blamed_on_the_user(monkeypatch, capsys):
    import pallaslab.model

    # A capture that enters the user's function and then fails in pallaslab's own code.
    source = ("import jax\n"
              "def capture(fn, *args, **kwargs):\n"
              "    jax.make_jaxpr(fn)(*args, **kwargs)\n"
              "    raise KeyError('internal')\n")
    namespace: dict = {}
    exec(compile(source, pallaslab.model.__file__, "exec"), namespace)
    monkeypatch.setattr(pallaslab.model, "capture", namespace["capture"])
    assert main(["inspect", f"{K}:vector_add"]) == 2
    err = capsys.readouterr().err
    assert "error: internal error: KeyError: 'internal'" in err
    assert "Traceback (most recent call last):" in err and "pallaslab/model" in err
    assert "CaseCodeError" not in err


def test_an_error_inside_a_library_kernel_shows_the_librarys_line(tmp_path, capsys):
    """A kernel library (here, one JAX ships) raising without a message: its own frame stays in
    the traceback, and the one-line error says where it was raised."""
    case = tmp_path / "lib_case.py"
    case.write_text(
        "import jax.numpy as jnp\n\n"
        "def case():\n"
        "    def broken(x):\n"
        "        raise AttributeError\n"
        "    return broken, (jnp.ones((8, 128)),)\n")
    assert main(["inspect", f"{case}:case"]) == 2
    err = capsys.readouterr().err
    assert "raised AttributeError (raised at lib_case.py:5)" in err
    from pathlib import Path

    import jax

    from pallaslab.cases import _is_user_frame, _machinery_roots

    jax_dir = Path(jax.__file__).parent
    roots = _machinery_roots()
    assert _is_user_frame(str(jax_dir / "experimental/pallas/ops/tpu/matmul.py"), roots)
    assert not _is_user_frame(str(jax_dir / "_src/pallas/pallas_call.py"), roots)
