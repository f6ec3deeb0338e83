"""`%%pallas --tune bm=... bk=...`: the cell's last line captured once per config with the
names bound, the ranked table as the cell's value, the notebook's namespace left as it was."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("IPython")

from ipython_shell import ipython_shell, plain_text, run

SETUP = """
import sys
sys.path.insert(0, {folder!r})
from matmul_case import matmul, arguments
x, y = arguments()
"""


@pytest.fixture(scope="module")
def sh() -> Iterator:
    from pathlib import Path

    folder = str(Path(__file__).parents[1] / "tuning")
    yield from ipython_shell(SETUP.format(folder=folder))


def test_the_cell_is_tuned_and_the_namespace_left_as_it_was(sh):
    before = dict(sh.user_ns)
    result, out = run(sh, "%%pallas --tune bm=256,384,512 bk=512,1024 --chip v5e "
                          "--compile-top 0\nmatmul(x, y, bm=bm, bn=256, bk=bk)")
    assert result.success, result.error_in_exec
    tuned = result.result
    assert len(tuned.candidates) == 6 and tuned.params == ("bm", "bk")
    assert tuned.best is not None and tuned.best.config["bm"] in (256, 512)
    assert any("bm=384 does not divide" in (c.reason or "") for c in tuned.candidates)
    assert "bm" not in sh.user_ns and "bk" not in sh.user_ns
    kept = {k: v for k, v in sh.user_ns.items() if k in before and not k.startswith("_")}
    assert all(kept[k] is before[k] for k in kept)
    shown = [o.data.get("text/plain", "") for o in out.outputs]  # the progress line, the view
    assert any(text.startswith("tuning: ") for text in shown), shown
    # the cell's value is displayed as the Tune view, its text form beside the widget
    assert "6 candidate(s): 4 ranked, 2 out" in "".join(shown) + plain_text(out)


@pytest.mark.parametrize(("flags", "words"), [
    ("--tune bm", "%%pallas: --tune 'bm': expected NAME=V1,V2,..."),
    ("--tune bm=1 bm=2", "'bm' is given twice; rule: one --tune per parameter"),
    ("--tune bm=256 --compile-top x", "--compile-top x: a whole number >= 0"),
])
def test_bad_tune_text_names_the_flag_rule_and_value(sh, flags, words):
    result, out = run(sh, f"%%pallas {flags}\nmatmul(x, y, bm=bm)")
    assert not result.success
    assert words in plain_text(out) + str(result.error_in_exec)
