// @ts-check
/**
 * What the shown program touches inside its blocks (issue 27 item 4): per operand, the
 * elements its loads and stores reach (slices, `pl.ds` windows, strides, masks), painted over
 * its block in the operand panel; lanes a mask turned off are painted apart (not touched). The
 * flags arrive as one uint8 per element of the block as the body sees it (READ 1,
 * READ_MASKED 2, WRITE 4, WRITE_MASKED 8), one row per distinct pattern, and each recorded
 * program's row.
 */

import { rgb, mix, typed } from "./prelude.js";

/** @typedef {import("./grid_panels.js").GridView} GridView */
/** @typedef {import("./grid_panels.js").OperandPanel} OperandPanel */
/**
 * @typedef {{origin: string, shape: number[], dims: number[], flags: number, rows: number[],
 *   lines: string[]}} GridAccessOperand (flags: distinct rows; rows: each program's row)
 * @typedef {{steps: number[], operands: GridAccessOperand[], text: string[],
 *   note: string | null, tables: import("./prelude.js").Buffer[]}} GridAccesses
 */

export const READ = 1, READ_MASKED = 2, WRITE = 4, WRITE_MASKED = 8;

/** The recorded position of step `s` (-1: not recorded). @param {GridView} v @param {number} s */
export function recordedIndex(v, s) {
  const acc = v.payload.accesses;
  return acc ? acc.steps.indexOf(s) : -1;
}

/** The shown program's accesses in words, or why they are not shown. @param {GridView} v @param {number} s */
export function accessText(v, s) {
  const acc = v.payload.accesses;
  if (!acc) return "";
  const k = recordedIndex(v, s);
  if (k >= 0) return acc.text[k];
  return acc.note || "accesses inside blocks not recorded for this program";
}

/** Colours of the overlay. @param {GridView} v */
export function accessColors(v) {
  const c = v.colors;
  const write = mix(c.error, c.accent, 0.5);
  return { read: c.accent, write, both: mix(c.accent, c.fg, 0.55), masked: mix(c.bg, c.fg2, 0.35) };
}

/**
 * The flags of operand panel `p` at recorded program `k`, OR-reduced over the block's
 * undrawn dims to (rows, cols) of the drawn ones; null when not recorded.
 * @param {GridView} v @param {OperandPanel} p @param {number} k
 * @returns {{rows: number, cols: number, flags: Uint8Array} | null}
 */
export function blockFlags(v, p, k) {
  const acc = v.payload.accesses;
  const a = acc ? acc.operands.find((x) => x.origin === p.op.origin) : undefined;
  if (!acc || !a || k < 0) return null;
  const all = typed(acc.tables[a.flags], Uint8Array);
  const row = a.rows[k];
  const size = a.shape.reduce((x, y) => x * y, 1);
  const rd = a.dims.indexOf(p.dims[0]), cd = a.dims.indexOf(p.dims[1]);
  const rows = rd < 0 ? 1 : a.shape[rd], cols = cd < 0 ? 1 : a.shape[cd];
  const out = new Uint8Array(rows * cols);
  const strides = a.shape.map((_, d) => a.shape.slice(d + 1).reduce((x, y) => x * y, 1));
  for (let e = 0; e < size; e++) {
    const f = all[row * size + e];
    if (!f) continue;
    const r = rd < 0 ? 0 : Math.floor(e / strides[rd]) % rows;
    const c = cd < 0 ? 0 : Math.floor(e / strides[cd]) % cols;
    out[r * cols + c] |= f;
  }
  return { rows, cols, flags: out };
}

/**
 * Paint the accesses of the shown program inside its block's rectangle `rc` (CSS px) on the
 * panel's top layer: each device pixel ORs the elements it covers, so a one-element window
 * stays visible in a large block.
 * @param {GridView} v @param {OperandPanel} p @param {number} s the shown step
 * @param {{x: number, y: number, w: number, h: number}} rc
 */
export function drawBlockAccesses(v, p, s, rc) {
  const got = blockFlags(v, p, recordedIndex(v, s));
  if (!got || rc.w < 2 || rc.h < 2) return;
  const dpr = p.cv.dpr;
  const pw = Math.max(1, Math.round(rc.w * dpr)), ph = Math.max(1, Math.round(rc.h * dpr));
  const W = Math.min(pw, got.cols), H = Math.min(ph, got.rows);  // never more pixels than elements
  const pooled = new Uint8Array(W * H);
  for (let r = 0; r < got.rows; r++) {
    const y = Math.floor(r * H / got.rows);
    for (let c = 0; c < got.cols; c++) pooled[y * W + Math.floor(c * W / got.cols)] |= got.flags[r * got.cols + c];
  }
  const col = accessColors(v);
  const rgbs = { read: rgb(col.read), write: rgb(col.write), both: rgb(col.both), masked: rgb(col.masked) };
  const small = document.createElement("canvas");
  small.width = W; small.height = H;
  const sctx = /** @type {CanvasRenderingContext2D} */ (small.getContext("2d"));
  const img = sctx.createImageData(W, H);
  for (let i = 0; i < W * H; i++) {
    const f = pooled[i];
    const read = (f & READ) > 0, write = (f & WRITE) > 0, masked = (f & (READ_MASKED | WRITE_MASKED)) > 0;
    const c = read && write ? rgbs.both : write ? rgbs.write : read ? rgbs.read : masked ? rgbs.masked : null;
    if (!c) continue;
    img.data.set([c[0], c[1], c[2], 235], 4 * i);
  }
  sctx.putImageData(img, 0, 0);
  const ctx = p.cv.top.ctx;
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(small, rc.x, rc.y, rc.w, rc.h);
  p.cv.top.canvas.dataset.accesses = String(pooled.reduce((n, f) => n + (f ? 1 : 0), 0));
}
