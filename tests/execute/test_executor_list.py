"""One executor list: `ExecutorList.parse` reads names or one comma-separated string, and its
checks say the same words whether the list came from the API, the CLI or the magic."""

import pytest
from ipython_shell import ipython_shell, run
from kernels import CATALOG

import pallaslab
from pallaslab.cli import main
from pallaslab.execute import ExecutorError
from pallaslab.execute.registry import ExecutorList

UNKNOWN = "unknown executor 'nope'"
FEWER = "needs at least two executors; got 1 (interpret)"


def test_parse_reads_text_and_sequences_alike():
    assert ExecutorList.parse(" interpret, tpu-interpret ,").names == \
        ExecutorList.parse(["interpret", "tpu-interpret"]).names == ("interpret", "tpu-interpret")
    listed = ExecutorList.parse("interpret")
    assert ExecutorList.parse(listed) is listed


@pytest.mark.parametrize(("text", "message"), [
    ("interpret,nope", UNKNOWN + "; the executors are: interpret, tpu-interpret"),
    ("interpret,interpret", "executor 'interpret' is listed twice"),
])
def test_parse_refuses_unknown_and_repeated_names(text, message):
    with pytest.raises(ExecutorError, match=message):
        ExecutorList.parse(text)


def test_the_reference_is_added_once_with_a_note():
    listed, note = ExecutorList.parse("interpret").with_reference(print)
    assert listed.names == ("interpret", "reference")
    assert note.startswith("reference added to the executors (interpret)")
    assert listed.with_reference(print) == (listed, None)
    with pytest.raises(ExecutorError, match="a comparison " + FEWER.replace("(", r"\(")
                       .replace(")", r"\)")):
        ExecutorList.parse("interpret").compared()


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell("from kernels import CATALOG\n"
                             "fn, args = CATALOG['elementwise_1d'].case()")


@pytest.mark.parametrize("text", ["interpret,nope", "interpret"])
def test_the_api_the_cli_and_the_magic_say_the_same(shell, capsys, text):
    fn, args = CATALOG["elementwise_1d"].case()
    with pytest.raises(ExecutorError) as api:
        pallaslab.compare(fn, *args, executors=text)
    said = str(api.value).split(". Choose from")[0]
    main(["compare", "tests/kernels.py:vector_add", "--executors", text])
    assert said in " ".join(capsys.readouterr().err.split())
    result, _ = run(shell, f"%%pallas --compare {text}\nfn(*args)")
    magic = str(result.error_in_exec)
    assert said.replace("a comparison", "--compare").replace(UNKNOWN, UNKNOWN + " in --compare") \
        in magic
