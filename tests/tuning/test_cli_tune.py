"""`pallaslab tune FILE.py:CASE --param ...`: the text table, the JSON, several cases, and bad
--param text naming the flag, the rule and the value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pallaslab.cli import main

CASE = str(Path(__file__).with_name("matmul_case.py")) + ":tiled"
PARAMS = ["--param", "bm=256,384,512", "--param", "bk=512,1024", "--chip", "v5e"]


def test_text_names_the_ranking_and_the_configs_out(capsys):
    assert main(["tune", CASE, *PARAMS, "--compile-top", "0"]) == 0
    out = capsys.readouterr().out
    assert "6 candidate(s): 4 ranked, 2 out; modelled on v5e; not compiled" in out
    assert "chosen: {'bm': " in out and "v5e us" in out
    assert "Out" in out and "bm=384 bk=512" in out and "why it is out" in out
    # rich wraps the reason in its table cell where the width falls (the case's path is in
    # it): read the cells' lines joined
    joined = " ".join(line.strip(" │") for line in out.splitlines())
    assert "bm=384 does not divide the dimension 1024" in joined


def test_json_holds_every_candidate_and_the_best(capsys, tmp_path):
    page = tmp_path / "tune.html"
    assert main(["tune", CASE, *PARAMS, "--compile-top", "0", "--json",
                 "--html", str(page)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chips"] == ["v5e"] and data["params"] == ["bm", "bk"]
    assert len(data["candidates"]) == 6 and data["best"] == data["candidates"][0]["config"]
    out = [c for c in data["candidates"] if c["out"]]
    assert {c["config"]["bm"] for c in out} == {384}
    assert "ValueError: bm=384 does not divide the dimension 1024" in out[0]["reason"]
    assert all(c["chips"]["v5e"]["time"] > 0 for c in data["candidates"] if not c["out"])
    assert "<svg" in page.read_text()


def test_the_compiler_verdict_in_json(capsys):
    pytest.importorskip("libtpu")
    assert main(["tune", CASE, "--param", "bm=256,512", "--param", "bk=512",
                 "--target", "tpu-v5e", "--compile-top", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["targets"] == ["tpu-v5e"]
    assert data["candidates"][0]["compiles"] is True
    assert data["candidates"][1]["compiles"] is None


def test_several_cases_each_get_their_tune(capsys):
    assert main(["tune", CASE, CASE, "--param", "bm=256", "--compile-top", "0",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [len(c["candidates"]) for c in data["cases"]] == [1, 1]


def test_every_config_out_exits_1(capsys):
    assert main(["tune", CASE, "--param", "bm=384", "--compile-top", "0"]) == 1


@pytest.mark.parametrize(("param", "words"), [
    ("bm", "argument --param: 'bm': expected NAME=V1,V2,... with NAME a Python identifier"),
    ("bm=1,,2", "argument --param: 'bm=1,,2': an empty value"),
    ("9x=1", "argument --param: '9x=1': expected NAME=V1,V2,..."),
])
def test_bad_param_text_is_a_usage_error_naming_flag_rule_and_value(capsys, param, words):
    assert main(["tune", CASE, "--param", param, "--json"]) == 2
    assert words in json.loads(capsys.readouterr().out)["error"]["message"]


def test_a_param_given_twice_is_a_usage_error(capsys):
    assert main(["tune", CASE, "--param", "bm=1", "--param", "bm=2"]) == 2
    assert "'bm' is given twice; rule: one --param per parameter" in capsys.readouterr().err
