"""`%%pallas?` and `pallaslab compare --help` list the registered executors from the
registry: one registered later appears in both, and leaves both when unregistered."""

import re

import pytest
from ipython_shell import ipython_shell

from pallaslab.cli import main
from pallaslab.execute import ExecutorSpec, register_executor, unregister_executor


class ThrowawayExecutor:
    spec = ExecutorSpec(name="throwaway-listed", label="a throwaway",
                        description="registered by a test, to be listed in the help")
    name = spec.name


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell("")


def _magic_help(shell) -> str:
    return re.sub(r"-\s+", "-", " ".join(shell.find_cell_magic("pallas").__doc__.split()))


def _cli_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    return re.sub(r"-\s+", "-", " ".join(capsys.readouterr().out.split()))


def test_a_registered_executor_is_listed_in_both_helps_until_unregistered(shell, capsys):
    register_executor(ThrowawayExecutor)
    try:
        assert "reference=NAME, throwaway-listed" in _magic_help(shell)
        cli = _cli_help(capsys)
        assert "device, reference, throwaway-listed (default:" in cli
        assert "throwaway-listed registered by a test, to be listed in the help" in cli
    finally:
        unregister_executor("throwaway-listed")
    assert "throwaway-listed" not in _magic_help(shell)
    assert "throwaway-listed" not in _cli_help(capsys)


def test_the_help_names_the_defaults_from_the_declarations(capsys):
    cli = _cli_help(capsys)
    assert ("(default: the interpreter that can run the kernels (vectorized on a CPU host), "
            "against the reference if given, else against tpu-interpret;") in cli
    assert "run under tpu-interpret; build the mesh" in cli
