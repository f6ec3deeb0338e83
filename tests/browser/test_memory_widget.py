"""The memory view's ES module in real Chromium, against an in-page fake model."""

from __future__ import annotations

import jax
import pytest
from harness import mount
from kernels import CATALOG, matmul

import pallaslab

MiB = 1 << 20


def payload(name):
    fn, args = CATALOG[name].case()[:2]
    return pallaslab.inspect(fn, *args).memory().payload()


def widths(page, chip):
    """CSS pixel width of each segment of a chip's bar, by origin, and the track's width."""
    return page.evaluate(
        """(chip) => {
            const row = document.querySelector(`.pl-mem-row[data-chip="${chip}"]`);
            const track = row.querySelector('.pl-mem-track').getBoundingClientRect().width;
            const segs = Array.from(row.querySelectorAll('.pl-seg[data-origin]'))
                .map(s => [s.dataset.origin, s.getBoundingClientRect().width]);
            return {track, segs: Object.fromEntries(segs)};
        }""", chip)


def test_bars_are_drawn_to_scale_with_overflow_marked(page, results_dir):
    p = payload("vmem_overflow")
    mount(page, "memory.js", p)
    rows = page.locator(".pl-mem-row[data-chip]")
    assert rows.count() == 2
    assert [rows.nth(i).get_attribute("data-fits") for i in range(2)] == ["false", "false"]
    # scale: the chip's 128 MiB of VMEM spans the track; args[0] is 16 MiB of it, scratch 8 MiB
    w = widths(page, "v5e")
    track = w["track"] - 2  # the 1px border each side
    assert w["segs"]["args[0]"] == pytest.approx(track * 16 / 128, abs=1.5)
    assert w["segs"]["scratch[0]"] == pytest.approx(track * 8 / 128, abs=1.5)
    # the limit mark sits at 16/128 (v5e) and the 24 MiB beyond it are hatched
    mark = page.evaluate("""() => {
        const row = document.querySelector('.pl-mem-row[data-chip="v5e"]');
        const t = row.querySelector('.pl-mem-track').getBoundingClientRect();
        const m = row.querySelector('.pl-mem-limit').getBoundingClientRect();
        const z = row.querySelector('.pl-mem-overzone').getBoundingClientRect();
        return [(m.left - t.left) / t.width, (z.left - t.left) / t.width, z.width / t.width];
    }""")
    assert mark[0] == pytest.approx(16 / 128, abs=0.01)
    assert mark[1] == pytest.approx(16 / 128, abs=0.01)
    assert mark[2] == pytest.approx(24 / 128, abs=0.01)
    v5e = page.locator('.pl-mem-row[data-chip="v5e"] .pl-mem-over').inner_text()
    v6e = page.locator('.pl-mem-row[data-chip="v6e"] .pl-mem-over').inner_text()
    assert (v5e, v6e) == ("overflow by 24 MiB", "overflow by 8 MiB")
    # the vmem-overflow errors the header counts, per chip; the spill note is a note, per chip
    assert page.locator(".pl-finding.pl-error").count() == 2
    assert page.locator(".pl-finding.pl-warning").count() == 0
    assert page.locator(".pl-mem-note").count() == 2

    # hover a segment: its numbers, and the same operand lit on every chip
    page.hover('.pl-mem-row[data-chip="v6e"] .pl-seg[data-origin="outputs"]')
    info = page.locator(".pl-mem-info").inner_text()
    assert info.startswith("outputs output on v6e: 2 x 1024x2048 float32 = 16 MiB")
    lit = page.eval_on_selector_all(".pl-seg.pl-lit", "s => s.map(x => x.dataset.origin)")
    assert lit == ["outputs", "outputs"]
    page.screenshot(path=str(results_dir / "memory-overflow.png"))

    # rescale to the chips' VMEM capacity: the same bar shrinks to 40/128 of the track
    page.select_option("select.pl-mem-scale", "capacity")
    w = widths(page, "v5e")
    assert sum(w["segs"].values()) == pytest.approx((w["track"] - 2) * 40 / 128, abs=3)


def test_what_if_table_marks_rows(page, results_dir):
    fn, args = CATALOG["matmul_f32"].case()[:2]
    x = jax.ShapeDtypeStruct((4096, 4096), "float32")

    def make(b):
        return (lambda a, c: matmul(a, c, bm=b, bk=b, bn=b)), (x, x)

    view = pallaslab.inspect(fn, *args).memory().what_if(make, [2048, 128, 256])
    mount(page, "memory.js", view.payload())
    rows = page.locator("table.pl-whatif tr[data-fits]")
    assert rows.count() == 3
    assert [rows.nth(i).get_attribute("data-fits") for i in range(3)] == ["true", "true", "false"]
    assert "best" in rows.nth(0).inner_text()
    assert "fits no chip" in rows.nth(2).inner_text()
    assert rows.nth(2).locator("td.pl-mem-over").count() >= 3  # verdict + both chips
    page.screenshot(path=str(results_dir / "memory-whatif.png"))


def test_small_kernels_open_at_their_share_of_vmem_and_zoom_on_request(page, results_dir):
    mount(page, "memory.js", payload("matmul_f32"))  # 448 KiB against 16 / 32 MiB limits
    # opened on the chip's VMEM: 448 KiB of 128 MiB is a sliver, not a full bar
    assert page.locator(".pl-memory").get_attribute("data-scale") == "capacity"
    w = widths(page, "v5e")
    assert sum(w["segs"].values()) <= 0.01 * w["track"] + 1
    assert "bar = 128 MiB (the chip's VMEM)" in page.locator(".pl-mem-legend").inner_text()
    page.select_option("select.pl-mem-scale", "usage")
    assert "(the largest need, zoomed in)" in page.locator(".pl-mem-legend").inner_text()
    w = widths(page, "v5e")
    fill = 0.82  # of the bar, leaving room for the off-scale limit's label
    assert sum(w["segs"].values()) == pytest.approx(fill * (w["track"] - 2), abs=3)
    assert w["segs"]["scratch[0]"] == pytest.approx(fill * (w["track"] - 2) / 7, abs=1.5)
    assert page.locator('.pl-mem-row[data-chip="v5e"] .pl-mem-offscale').inner_text() == \
        "limit 16 MiB →"
    page.screenshot(path=str(results_dir / "memory-small.png"))
    page.select_option("select.pl-mem-scale", "limit")
    w = widths(page, "v5e")
    assert sum(w["segs"].values()) == pytest.approx((w["track"] - 2) * 448 / 32768, abs=4)


def test_gpu_section_table_for_a_triton_kernel(page, results_dir):
    from cases.triton_kernels import softmax  # a Triton row softmax (num_warps=4)

    x = jax.ShapeDtypeStruct((64, 256), "float32")
    p = pallaslab.inspect(softmax, x).memory(gpu=True).payload()  # the real Triton compile
    evil = '<img src=x onerror="window.pwned=1">'
    p["gpu"]["gpus"].append({**p["gpu"]["gpus"][0], "gpu": "b200", "error": evil})
    mount(page, "memory.js", p)
    assert page.locator(".pl-mem-row[data-chip]").count() == 0  # no TPU bars for Triton
    rows = page.locator("table.pl-mem-gputable tr[data-gpu]")
    assert [rows.nth(i).get_attribute("data-gpu") for i in range(3)] == ["a100", "h100", "b200"]
    for i, g in enumerate(p["gpu"]["gpus"][:2]):
        cells = rows.nth(i).locator("td").all_inner_texts()
        assert cells == [g["gpu"], f"{g['shared_bytes']:,} B", str(g["registers"]), "0 B", "4",
                         str(g["blocks_per_sm"]), g["limited_by"],
                         f"{round(100 * g['occupancy'])}%"]
        assert g["registers"] > 0 and g["blocks_per_sm"] >= 1
    assert rows.nth(2).locator("td.pl-mem-over").inner_text() == evil  # text, not markup
    assert page.locator("img").count() == 0 and page.evaluate("window.pwned") is None
    page.screenshot(path=str(results_dir / "memory-gpu.png"))


def test_gpu_section_shows_why_nothing_was_compiled(page):
    p = payload("matmul_f32")
    p["gpu"] = {"gpus": [], "error": "Compiling for GPU needs the Python package 'triton'"}
    mount(page, "memory.js", p)
    assert page.locator(".pl-mem-gpu p.pl-dim").inner_text() == p["gpu"]["error"]
    assert page.locator(".pl-mem-row[data-chip]").count() == 2  # the TPU bars stay
