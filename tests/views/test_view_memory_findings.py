"""The Memory view's notices are the kernel's VMEM findings the header and `check` count, with
their severity; a plain bf16 matmul gets none, and libtpu's measured need overrules the
spill-risk estimate (issue 39, item 2)."""

import functools

import jax
import jax.numpy as jnp
from kernels import CATALOG, matmul

import pallaslab
from pallaslab.analysis.vmem_findings import vmem_findings
from pallaslab.cli import main
from pallaslab.workbench import Workbench, header_verdict

MiB = 1 << 20
BF16 = jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16)


def _matmul(block: int) -> Workbench:
    return pallaslab.inspect(functools.partial(matmul, bm=block, bk=block, bn=block), BF16, BF16)


def _shown(wb: Workbench, **kw) -> list[tuple[str, str]]:
    p = wb.memory(**kw).payload()
    return [(f["code"], f["severity"]) for f in p["findings"]]


def test_a_textbook_bf16_matmul_shows_no_notice_and_counts_none():
    for block in (128, 256, 512):
        wb = _matmul(block)
        view = wb.memory()
        p = view.payload()
        assert p["findings"] == [] and header_verdict(wb.context(0)).findings == 0, block
        # its f32 dot result is the product the `body` row already judges: no spill note
        assert [c["spill_note"] for c in p["chips"]] == [None, None], block
        html = view.to_html()
        assert "pl-warning" not in html and "spill" not in html.lower(), block


def test_a_spill_risk_is_shown_as_the_header_counts_it():
    wb = _matmul(1024)  # v5e: 16 MiB of buffers + the 4 MiB f32 dot result > 16 MiB
    counted = [(f.code, f.severity) for f in wb.context(0).findings]
    assert ("vmem-spill-risk", "warning") in counted
    assert _shown(wb) == [c for c in counted if c[0].startswith("vmem-")]
    assert header_verdict(wb.context(0)).findings == len(counted)
    html = wb.memory().to_html()
    assert ("<p class=\"pl-finding pl-warning\"><span class=\"pl-badge \">warning</span> "
            "<code>vmem-spill-risk</code>: matmul_kernel on TPU v5e: its buffers need 16.00 MiB"
            in html)
    assert "warning vmem-spill-risk: matmul_kernel on TPU v5e" in wb.memory().to_text()


def test_libtpus_measured_need_overrules_the_spill_risk():
    wb = _matmul(1024)
    kernel = wb.context(0).kernel
    assert [f.code for f in vmem_findings(kernel, ["v5e"])] == ["vmem-spill-risk"]
    # the compiler measured the kernel within the limit: no risk to warn about
    assert vmem_findings(kernel, ["v5e"], measured={"v5e": 16 * MiB}) == ()
    assert _shown(wb, measured={"v5e": 16 * MiB}) == []
    # measured above the limit (libtpu needs 18.36 MiB): the warning stands
    refused = {"v5e": int(18.36 * MiB)}
    assert [f.code for f in vmem_findings(kernel, ["v5e"], measured=refused)] == [
        "vmem-spill-risk"]
    assert _shown(wb, measured=refused) == [("vmem-spill-risk", "warning")]


def test_the_header_counts_the_notices_the_measured_memory_view_shows():
    wb = _matmul(1024)
    ctx = wb.context(0)
    before = header_verdict(ctx).findings
    assert "vmem-spill-risk" in [f.code for f in wb.findings]
    # libtpu measured the kernel within v5e's limit: the view drops the notice, and so do the
    # header, `wb.findings` and every later view of the same kernel
    assert _shown(wb, measured={"v5e": 16 * MiB}) == []
    assert header_verdict(ctx).findings == before - 1
    assert "vmem-spill-risk" not in [f.code for f in wb.findings]
    assert "vmem-spill-risk" not in wb.memory().to_text()
    # a later measurement above the limit brings it back everywhere
    assert _shown(wb, measured={"v5e": int(18.36 * MiB)}) == [("vmem-spill-risk", "warning")]
    assert header_verdict(ctx).findings == before


def textbook_matmul():
    """A case for `pallaslab inspect`: the bf16 matmul with 512 blocks."""
    return functools.partial(matmul, bm=512, bk=512, bn=512), (
        jnp.ones((2048, 2048), jnp.bfloat16), jnp.ones((2048, 2048), jnp.bfloat16))


def _inspect_text(capsys, spec: str) -> str:
    assert main(["inspect", spec]) == 0
    return " ".join(capsys.readouterr().out.split())  # rich wraps long lines


def test_the_text_and_the_cli_show_the_spill_note_where_the_view_does(capsys):
    # the dot result is the product the `body` row judges: no note anywhere
    view = _matmul(512).memory()
    assert [c["spill_note"] for c in view.payload()["chips"]] == [None, None]
    assert "note:" not in view.to_text()
    assert "note:" not in _inspect_text(capsys, f"{__file__}:textbook_matmul")
    # a large value that is no matrix product: the same note in the view, its text and the CLI
    fn, args = CATALOG["vmem_overflow"].case()[:2]
    view = pallaslab.inspect(fn, *args).memory()
    notes = [c["spill_note"] for c in view.payload()["chips"]]
    assert notes[0] == notes[1] and notes[0].startswith(
        "the kernel body computes a float32[1024, 2048] value (8.00 MiB)")
    assert view.to_text().count(f"note: {notes[0]}") == 2  # once per chip, as the view
    assert f"note: {notes[0]}" in _inspect_text(capsys, "tests/kernels.py:vmem_overflow")
