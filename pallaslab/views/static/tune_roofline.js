// @ts-check
/**
 * The Tune view's roofline: per chip, each ranked candidate at its arithmetic intensity
 * (ops per HBM byte) and its predicted achieved ops/s, under the chip's roofline (HBM bandwidth
 * times intensity, capped by the peak). Log-log SVG; titles carry each config.
 */

import { h, svg } from "./prelude.js";

const W = 360, H = 230, L = 56, B = 34, T = 14, R = 10;

/**
 * @param {any} p the Tune payload (see tune.js)
 * @param {string} chip
 */
function panel(p, chip) {
  /** @type {{label: string, x: number, y: number, best: boolean}[]} */
  const pts = [];
  for (const c of p.candidates) {
    const e = c.chips[chip];
    if (c.out || !e || !e.flops || !e.hbm_bytes || !e.us) continue;
    pts.push({ label: c.label, x: e.flops / e.hbm_bytes, y: e.flops / (e.us * 1e-6), best: c.rank === 1 });
  }
  if (!pts.length) return null;
  const peak = p.peaks[chip];
  const ridge = peak.flops / peak.hbm;
  const xs = [...pts.map((q) => q.x), ridge], ys = [...pts.map((q) => q.y), peak.flops];
  const x0 = Math.log10(Math.min(...xs)) - 0.5, x1 = Math.log10(Math.max(...xs)) + 0.5;
  const y0 = Math.log10(Math.min(...ys)) - 0.5, y1 = Math.log10(peak.flops) + 0.3;
  const sx = (/** @type {number} */ v) => L + ((Math.log10(v) - x0) / (x1 - x0)) * (W - L - R);
  const sy = (/** @type {number} */ v) => T + (1 - (Math.log10(v) - y0) / (y1 - y0)) * (H - T - B);
  const root = svg("svg", { class: "pl-tune-roofline", width: W, height: H, viewBox: `0 0 ${W} ${H}` });
  root.dataset.chip = chip;
  const lo = 10 ** x0, hi = 10 ** x1;
  const knee = Math.min(Math.max(ridge, lo), hi);
  const line = `M${sx(lo)},${sy(Math.max(peak.hbm * lo, 10 ** y0))} L${sx(knee)},${sy(Math.min(peak.hbm * knee, peak.flops))} L${sx(hi)},${sy(peak.flops)}`;
  root.append(svg("path", { d: line, fill: "none", stroke: "currentColor", "stroke-width": 1.5, class: "pl-tune-roof" },
    `${chip} roofline: ${(peak.hbm / 1e9).toFixed(0)} GB/s HBM, ${(peak.flops / 1e12).toFixed(0)} Tops/s peak`));
  for (const q of pts) {
    const dot = svg("circle", { cx: sx(q.x), cy: sy(q.y), r: q.best ? 5 : 3.5, class: "pl-tune-point",
      fill: q.best ? "#d62728" : "#1f77b4", "fill-opacity": 0.8 },
    `${q.label}: ${q.x.toFixed(1)} ops/B, ${(q.y / 1e12).toFixed(2)} Tops/s predicted`);
    root.append(dot);
  }
  for (let e = Math.ceil(x0); e <= Math.floor(x1); e++) {
    const t = svg("text", { x: sx(10 ** e), y: H - B + 12, "text-anchor": "middle", class: "pl-dim pl-tune-tick" });
    t.textContent = `1e${e}`;
    root.append(t);
  }
  for (let e = Math.ceil(y0); e <= Math.floor(y1); e++) {
    const t = svg("text", { x: L - 4, y: sy(10 ** e) + 4, "text-anchor": "end", class: "pl-dim pl-tune-tick" });
    t.textContent = `1e${e}`;
    root.append(t);
  }
  const labels = [[`${chip}: ops per HBM byte (log)`, L, H - 4], ["ops/s (log)", 4, T + 2]];
  for (const [text, x, y] of labels) {
    const t = svg("text", { x, y, class: "pl-dim" });
    t.textContent = String(text);
    root.append(t);
  }
  return root;
}

/**
 * The roofline section: one panel per chip (none when no candidate carries its work).
 * @param {any} p
 */
export function roofline(p) {
  const box = h("div", "pl-tune-rooflines");
  const panels = p.chips.map((/** @type {string} */ chip) => panel(p, chip)).filter(Boolean);
  if (!panels.length) return box;
  box.append(h("div", "pl-dim", "roofline: predicted achieved ops/s against arithmetic intensity (red: chosen)"), ...panels);
  return box;
}
