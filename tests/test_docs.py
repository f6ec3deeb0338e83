"""The written-down architecture stays true: code cites only documents in the repository, and
every relative link of the docs and the README leads to a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("pallaslab", "lowering", "tests", "benchmarks")
TEXT_SUFFIXES = {".py", ".js", ".css", ".md", ".toml", ".txt", ".html", ".ipynb"}
OUTSIDE_DOCUMENT = "design" + ".md"  # spelled apart so that this file does not cite it
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # [text](target), the one link form our docs use
SCHEME = re.compile(r"[a-z][a-z0-9+.-]*:")  # https:, mailto:, ...


def code_files() -> list[Path]:
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*")
                  if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts)


def test_no_code_cites_a_document_outside_the_repository():
    citing = [f"{p.relative_to(ROOT)}:{n}" for p in code_files()
              for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
              if OUTSIDE_DOCUMENT in line]
    assert citing == [], f"these cite {OUTSIDE_DOCUMENT}, which is not in the repository " \
                         f"(cite docs/architecture.md or the README): {citing}"


def relative_links(markdown: str) -> list[str]:
    """Link targets that name a file of the repository (not a URL, not an anchor alone)."""
    return [t for t in LINK.findall(markdown) if not SCHEME.match(t) and not t.startswith("#")]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files_that_exist(doc):
    missing = [t for t in relative_links(doc.read_text())
               if not (doc.parent / t.split("#", 1)[0]).exists()]
    assert missing == [], f"{doc.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_architecture_page_exists_and_is_linked_from_the_readme():
    assert (ROOT / "docs" / "architecture.md").is_file()
    assert "docs/architecture.md" in relative_links((ROOT / "README.md").read_text())


def test_the_link_pattern_finds_relative_links_only():
    page = ("[a](docs/x.md) [b](https://example.com) [c](#anchor) [d](../y.md#part) "
            "[e](mailto:someone@example.com)")
    assert relative_links(page) == ["docs/x.md", "../y.md#part"]


# A path of ours in prose: `pallaslab/...` or `lowering/...` (not the tail of `tests/lowering/`)
CODE_PATH = re.compile(r"(?<![\w./-])((?:pallaslab|lowering)/[\w./]*\w/?)")
BARE_MODULE = re.compile(r"`((?:\w+/)*\w+\.py)`")  # `tiling.py`, `worker/isolation.py`


def code_paths(markdown: str) -> list[str]:
    return CODE_PATH.findall(markdown)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_name_modules_that_exist(doc):
    # the walk-through of a call and the causes name modules by path; a move or a rename
    # must take the page along
    text = doc.read_text()
    missing = [p for p in code_paths(text) if not (ROOT / p).exists()]
    assert missing == [], f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"
    ours = ["/" + str(p.relative_to(ROOT)) for d in (*CODE_DIRS, "tools")
            for p in (ROOT / d).rglob("*.py")]
    unknown = [n for n in BARE_MODULE.findall(text) if not any(o.endswith("/" + n) for o in ours)]
    assert unknown == [], f"{doc.relative_to(ROOT)} names modules found nowhere: {unknown}"


def test_the_path_pattern_finds_our_paths_only():
    text = ("`pallaslab/model/capture.py`, `tests/lowering/test_cache.py`, lowering/api.py. "
            "pallaslab/views/ and `pallaslab.model`")
    assert code_paths(text) == ["pallaslab/model/capture.py", "lowering/api.py",
                                "pallaslab/views/"]
    assert BARE_MODULE.findall("`tiling.py` and `worker/isolation.py` not `x.pyc`") == \
        ["tiling.py", "worker/isolation.py"]
