"""Library settings that change how a function traces travel to the executor worker."""

import pytest

from pallaslab.model import library_contexts

config = pytest.importorskip("tokamax._src.config", reason="tokamax is in the test extra")


def test_tokamax_cross_compile_is_read_here_and_entered_there():
    assert library_contexts.in_force() == {}
    with config.cross_compile(True):
        carried = library_contexts.in_force()
    assert carried == {"tokamax._src.config.cross_compile": True}
    assert not config.cross_compile.value
    with library_contexts.entered(carried):
        assert config.cross_compile.value
    assert not config.cross_compile.value
