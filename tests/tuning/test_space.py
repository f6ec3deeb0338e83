"""Configs of a tune space and `--param` text (no JAX)."""

from __future__ import annotations

import pytest

from pallaslab.tuning.space import TuneSpaceError, configs, parse_param, parse_params


def test_a_mapping_is_the_product_the_last_name_fastest():
    assert configs({"bm": [1, 2], "bk": [3, 4]}) == [
        {"bm": 1, "bk": 3}, {"bm": 1, "bk": 4}, {"bm": 2, "bk": 3}, {"bm": 2, "bk": 4}]
    assert configs({"bm": 128}) == [{"bm": 128}]


def test_param_text_reads_numbers_and_words():
    assert parse_param("bm=128,256") == ("bm", [128, 256])
    assert parse_param("scale=0.5,x, True") == ("scale", [0.5, "x", True])


@pytest.mark.parametrize(("text", "words"), [
    ("bm", "--param 'bm': expected NAME=V1,V2,... with NAME a Python identifier"),
    ("=1,2", "--param '=1,2': expected NAME=V1,V2,..."),
    ("bm=", "--param 'bm=': an empty value"),
    ("bm=1,,2", "--param 'bm=1,,2': an empty value"),
])
def test_bad_param_text_names_the_flag_the_rule_and_the_value(text, words):
    with pytest.raises(TuneSpaceError) as err:
        parse_param(text)
    assert words in str(err.value)


def test_a_name_given_twice_is_an_error():
    with pytest.raises(TuneSpaceError, match="'bm' is given twice; rule: one --tune per"):
        parse_params(["bm=1", "bm=2"], flag="--tune")
