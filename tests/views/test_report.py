"""`pallaslab report CASE -o report.html`: one self-contained, offline file."""

from __future__ import annotations

import re
from pathlib import Path

from pallaslab.cli import main

KERNELS = Path(__file__).parents[1] / "kernels.py"


def test_report_writes_one_self_contained_file(tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", f"{KERNELS}:two_kernels", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    html = out.read_text()
    assert html.startswith("<!doctype html>")
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    # nothing that could load from anywhere: no URLs (the SVG namespace is a name, never
    # fetched), no src/href attributes
    assert not re.search(r"https?://", html.replace("http://www.w3.org/2000/svg", ""))
    assert not re.search(r"\s(src|href)\s*=", html)
    assert html.count("</script>") == 2
    assert "matmul_kernel" in html and "softmax_kernel" in html
    assert "<noscript>" in html  # the static views, for readers without scripts


def test_report_errors_are_one_line(tmp_path, capsys):
    status = main(["report", f"{KERNELS}:no_such_case", "-o", str(tmp_path / "r.html")])
    assert status == 2
    err = capsys.readouterr().err
    assert "defines no 'no_such_case'" in err
    assert not (tmp_path / "r.html").exists()
    status = main(["report", f"{KERNELS}:matmul_f32", "-o", str(tmp_path / "no" / "r.html")])
    assert status == 2
    assert "cannot write" in capsys.readouterr().err
