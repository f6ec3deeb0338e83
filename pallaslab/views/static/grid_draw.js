// @ts-check
/**
 * The grid view's canvas drawing: the programs panel (cells, or one pixel per bucket of programs
 * on big grids), every operand panel (the array, its blocks, the fetch/coverage/findings
 * overlays' colours) and the highlight layer (the shown program and its block in every operand).
 * Drawing reads the view's state and never changes it; `grid_interaction.js` changes it.
 */

import { num, rgb, mix } from "./prelude.js";
import { displayed, operandSlice, inSlice, blockRect } from "./grid_panels.js";
import { drawBlockAccesses } from "./grid_accesses.js";

/** @typedef {import("./prelude.js").Colors} Colors */
/** @typedef {import("./grid_tiling.js").GridFinding} GridFinding */
/** @typedef {import("./grid_panels.js").GridView} GridView */
/** @typedef {import("./grid_panels.js").CanvasStack} CanvasStack */
/** @typedef {import("./grid_panels.js").OperandPanel} OperandPanel */

/** Cells smaller than this many CSS pixels are drawn per pixel (aggregated), not as rects. */
export const CELL_THRESHOLD = 3;
/** Operand overlays with more blocks than this in view are not drawn block by block. */
const MAX_DRAWN_BLOCKS = 262144;

// ---- the programs panel ---------------------------------------------------------------------

/**
 * Base colour of a program cell under the current overlay and scrubber position.
 * @param {GridView} v @param {number} step @param {Uint8Array | null} fetching
 * @param {Set<number>} findingSteps
 */
function programColor(v, step, fetching, findingSteps) {
  const { state, colors } = v;
  if (state.overlay === "fetches" && fetching) {
    const n = fetching[step], top = v.t.operands.length || 1;
    return n === 0 ? colors.empty : mix(colors.bg, colors.accent, 0.3 + 0.7 * (n / top));
  }
  if (state.overlay === "findings" && findingSteps.has(step)) return colors.error;
  return step < state.step ? mix(colors.cell, colors.accent, 0.45) : colors.cell;
}

/** Every step some finding names. @param {GridFinding[]} findings @returns {Set<number>} */
function findingStepSet(findings) {
  const s = new Set();
  for (const f of findings) for (const st of f.steps) s.add(st);
  return s;
}

/** Draw the programs panel's base layer. @param {GridView} v */
export function drawGrid(v) {
  const gc = v.gridCanvas;
  if (!gc) return;
  const { ctx } = gc.base;
  ctx.fillStyle = v.colors.bg;
  ctx.fillRect(0, 0, gc.w, gc.h);
  const fetching = v.state.overlay === "fetches" ? v.t.fetchingPerStep() : null;
  const fsteps = findingStepSet(v.payload.findings);
  if (v.cell >= CELL_THRESHOLD) drawCells(v, ctx, fetching, fsteps);
  else drawAggregated(v, gc, fetching, fsteps);
  drawFindingMarkers(v, ctx);
}

/**
 * One rectangle per program.
 * @param {GridView} v @param {CanvasRenderingContext2D} ctx @param {Uint8Array | null} fetching
 * @param {Set<number>} fsteps
 */
function drawCells(v, ctx, fetching, fsteps) {
  const { layout, cell } = v;
  const gap = cell >= 8 ? 1 : 0;
  for (let r = 0; r < layout.rows; r++) {
    for (let c = 0; c < layout.cols; c++) {
      const s = layout.stepAt(r, c);
      if (s < 0) continue;
      ctx.fillStyle = programColor(v, s, fetching, fsteps);
      ctx.fillRect(c * cell, r * cell, cell - gap, cell - gap);
    }
  }
}

/**
 * Aggregated: one device pixel per bucket of programs; a bucket takes the colour of the
 * program at its top-left corner. Steps are affine in (row, col): no per-pixel calls.
 * @param {GridView} v @param {CanvasStack} gc @param {Uint8Array | null} fetching
 * @param {Set<number>} fsteps
 */
function drawAggregated(v, gc, fetching, fsteps) {
  const { layout, colors, state, t } = v;
  const { ctx } = gc.base;
  const pw = gc.base.canvas.width, ph = gc.base.canvas.height;
  const img = ctx.createImageData(pw, ph);
  const words = new Uint32Array(img.data.buffer);
  /** @type {Map<string, number>} */
  const cache = new Map();
  const packed = (/** @type {string} */ css) => {
    let w = cache.get(css);
    if (w === undefined) { const c = rgb(css); w = ((255 << 24) | (c[2] << 16) | (c[1] << 8) | c[0]) >>> 0; cache.set(css, w); }
    return w;
  };
  const px = v.cell * gc.dpr;
  const colAt = new Int32Array(pw), rowAt = new Int32Array(ph);
  for (let x = 0; x < pw; x++) colAt[x] = Math.min(layout.cols - 1, Math.floor(x / px));
  for (let y = 0; y < ph; y++) rowAt[y] = Math.min(layout.rows - 1, Math.floor(y / px));
  const base = layout.stepAt(0, 0);
  const sr = layout.rows > 1 ? layout.stepAt(1, 0) - base : 0;
  const sc = layout.cols > 1 ? layout.stepAt(0, 1) - base : 0;
  const plain = state.overlay === "none" || (state.overlay === "findings" && fsteps.size === 0);
  const cellColor = packed(colors.cell), doneColor = packed(mix(colors.cell, colors.accent, 0.45));
  const empty = packed(colors.bg);
  for (let y = 0; y < ph; y++) {
    const rowStep = base + rowAt[y] * sr;
    const off = y * pw;
    for (let x = 0; x < pw; x++) {
      const s = rowStep + colAt[x] * sc;
      words[off + x] = s >= t.programs ? empty
        : plain ? (s < state.step ? doneColor : cellColor)
          : packed(programColor(v, s, fetching, fsteps));
    }
  }
  ctx.putImageData(img, 0, 0);
}

/**
 * A small corner marker on every example program of a finding (always visible).
 * @param {GridView} v @param {CanvasRenderingContext2D} ctx
 */
function drawFindingMarkers(v, ctx) {
  const { layout, cell, colors } = v;
  const inset = cell >= 8 ? 1 : 0;
  for (const f of v.payload.findings) {
    for (const s of f.steps) {
      const pos = layout.cellOf(s);
      if (!pos) continue;
      ctx.fillStyle = f.severity === "error" ? colors.error : f.severity === "warning" ? colors.warn : colors.info;
      const m = Math.max(2, cell * 0.28);
      ctx.beginPath();
      ctx.moveTo(pos.c * cell + cell - m - inset, pos.r * cell);
      ctx.lineTo(pos.c * cell + cell - inset, pos.r * cell);
      ctx.lineTo(pos.c * cell + cell - inset, pos.r * cell + m);
      ctx.fill();
    }
  }
}

// ---- operand panels -------------------------------------------------------------------------

/** Draw an operand panel's base layer: the array, its overlay and its block lines. @param {GridView} v @param {OperandPanel} p */
export function drawOperand(v, p) {
  const { colors, state, t } = v;
  const { ctx } = p.cv.base;
  const { op, dims, spans, sx, sy } = p;
  const W = p.cv.w, H = p.cv.h;
  ctx.fillStyle = colors.bg;
  ctx.fillRect(0, 0, W, H);
  // outside-the-array region (blocks that stick out): tinted
  ctx.fillStyle = mix(colors.bg, colors.error, 0.12);
  ctx.fillRect(0, 0, W, H);
  const ax = (-spans[1][0]) * sx, ay = dims[0] < 0 ? 0 : (-spans[0][0]) * sy;
  const aw = op.shape[dims[1]] * sx, ah = dims[0] < 0 ? H : op.shape[dims[0]] * sy;
  ctx.fillStyle = colors.cell;
  ctx.fillRect(ax, ay, aw, ah);

  const slice = operandSlice(v, p);
  const counts = state.overlay === "fetches" ? t.counts(p.o, "fetches")
    : state.overlay === "coverage" ? t.counts(p.o, op.role === "output" ? "writes" : "visits") : null;
  if (counts) drawCounts(v, p, counts, slice);
  if (state.overlay === "findings") drawFindingBlocks(v, p, slice);

  // block grid lines (regular blocks only, when at least 3 px apart)
  ctx.strokeStyle = mix(colors.bg, colors.fg2, 0.35);
  ctx.lineWidth = 1;
  ctx.beginPath();
  /** @param {number} d @param {number} scalePx @param {boolean} horizontal */
  const lines = (d, scalePx, horizontal) => {
    if (d < 0 || op.scale[d] !== op.extent[d]) return;
    const step = op.extent[d] * scalePx;
    if (step < 3) return;
    for (let e = op.extent[d]; e < op.shape[d]; e += op.extent[d]) {
      const at = Math.round((e - spans[horizontal ? 0 : 1][0]) * scalePx) + 0.5;
      if (horizontal) { ctx.moveTo(ax, at); ctx.lineTo(ax + aw, at); } else { ctx.moveTo(at, ay); ctx.lineTo(at, ay + ah); }
    }
  };
  lines(dims[1], sx, false);
  lines(dims[0], sy, true);
  ctx.stroke();
  ctx.strokeStyle = colors.fg2;
  ctx.strokeRect(ax + 0.5, ay + 0.5, Math.max(0, aw - 1), Math.max(0, ah - 1));
}

/**
 * The fetch-count or coverage overlay of an operand: each block in the slice coloured by its
 * count; for coverage, an output's blocks nobody writes in red.
 * @param {GridView} v @param {OperandPanel} p @param {Int32Array} counts @param {number[]} slice
 */
function drawCounts(v, p, counts, slice) {
  const { colors, t } = v;
  const { ctx } = p.cv.base;
  const op = p.op;
  let top = 1;
  for (let i = 0; i < counts.length; i++) if (counts[i] > top) top = counts[i];
  const [dr, dc] = p.dims;
  const rLo = dr < 0 ? 0 : op.lo[dr], rHi = dr < 0 ? 0 : op.hi[dr];
  const nBlocks = (rHi - rLo + 1) * (op.hi[dc] - op.lo[dc] + 1);
  if (nBlocks > MAX_DRAWN_BLOCKS) { p.info.textContent = `${num(nBlocks)} blocks in view: counts not drawn`; return; }
  const block = slice.slice();
  const coverage = v.state.overlay === "coverage";
  // "several writers" only where a finding explains it (the rules that count writers)
  const explained = v.payload.findings.some((f) => f.operand === op.origin
    && (f.code === "output-revisit" || f.code === "parallel-write-conflict"));
  for (let r = rLo; r <= rHi; r++) {
    for (let c = op.lo[dc]; c <= op.hi[dc]; c++) {
      if (dr >= 0) block[dr] = r;
      block[dc] = c;
      const key = t.boxKey(p.o, block);
      const n = key < 0 ? 0 : counts[key];
      let color;
      if (coverage && op.role === "output") {
        color = n === 0 ? colors.error : n === 1 || !explained ? mix(colors.bg, colors.accent, 0.55) : mix(colors.bg, colors.warn, Math.min(1, 0.35 + 0.65 * n / top));
      } else {
        if (n === 0) continue;
        color = mix(colors.bg, colors.accent, 0.25 + 0.75 * (n / top));
      }
      fillBlock(ctx, blockRect(t, p, block), color);
    }
  }
  if (coverage && op.role === "output" && op.scale[dc] === op.extent[dc]) drawUnwrittenBlocks(v, p, block);
}

/**
 * Blocks of a blocked output that nobody writes (inside the array but outside [lo, hi]).
 * @param {GridView} v @param {OperandPanel} p @param {number[]} block scratch block index
 */
function drawUnwrittenBlocks(v, p, block) {
  const op = p.op;
  const [dr, dc] = p.dims;
  const nC = Math.ceil(op.shape[dc] / op.extent[dc]);
  const nR = dr < 0 ? 1 : Math.ceil(op.shape[dr] / op.extent[dr]);
  if (nR * nC > MAX_DRAWN_BLOCKS) return;
  for (let r = 0; r < nR; r++) {
    for (let c = 0; c < nC; c++) {
      if (dr >= 0) block[dr] = r;
      block[dc] = c;
      if (v.t.boxKey(p.o, block) >= 0) continue;
      fillBlock(p.cv.base.ctx, blockRect(v.t, p, block), v.colors.error);
    }
  }
}

/** @param {CanvasRenderingContext2D} ctx @param {{x: number, y: number, w: number, h: number}} rc @param {string} color */
function fillBlock(ctx, rc, color) {
  ctx.fillStyle = color;
  ctx.fillRect(rc.x, rc.y, Math.max(rc.w, 0.5), Math.max(rc.h, 0.5));
}

/** The findings overlay of an operand: the blocks findings name, hatched. @param {GridView} v @param {OperandPanel} p @param {number[]} slice */
function drawFindingBlocks(v, p, slice) {
  const { ctx } = p.cv.base;
  for (const f of v.payload.findings) {
    if (f.operand !== p.op.origin) continue;
    for (const b of f.blocks) {
      if (b.length !== p.op.shape.length || !inSlice(p, b, slice)) continue;
      hatch(v.colors, ctx, blockRect(v.t, p, b), f.severity === "error" ? v.colors.error : v.colors.warn);
    }
  }
}

/**
 * @param {Colors} colors @param {CanvasRenderingContext2D} ctx
 * @param {{x: number, y: number, w: number, h: number}} rc @param {string} color
 */
function hatch(colors, ctx, rc, color) {
  ctx.save();
  ctx.beginPath();
  ctx.rect(rc.x, rc.y, rc.w, rc.h);
  ctx.clip();
  ctx.fillStyle = mix(colors.bg, color, 0.25);
  ctx.fillRect(rc.x, rc.y, rc.w, rc.h);
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  for (let k = -rc.h; k < rc.w; k += 6) { ctx.moveTo(rc.x + k, rc.y + rc.h); ctx.lineTo(rc.x + k + rc.h, rc.y); }
  ctx.stroke();
  ctx.restore();
  ctx.strokeStyle = color;
  ctx.lineWidth = 2;
  ctx.strokeRect(rc.x + 1, rc.y + 1, Math.max(0, rc.w - 2), Math.max(0, rc.h - 2));
}

// ---- highlights (the top layers) ------------------------------------------------------------

/** The top layers: the shown program's cell and its block in every operand. @param {GridView} v */
export function drawHighlights(v) {
  const s = displayed(v);
  if (v.gridCanvas) drawGridHighlights(v, v.gridCanvas, s);
  for (const p of v.panels) drawOperandHighlight(v, p, s);
}

/**
 * The programs panel's top layer: the hovered finding's programs, the programs using a hovered
 * block, the current program (dimmed while another is hovered) and the shown one.
 * @param {GridView} v @param {CanvasStack} gc @param {number} s the shown step
 */
function drawGridHighlights(v, gc, s) {
  const { state, colors, layout, cell, blockHover } = v;
  const { ctx } = gc.top;
  ctx.clearRect(0, 0, gc.w, gc.h);
  /** @param {number[]} steps @param {string} color */
  const outline = (steps, color) => {
    ctx.strokeStyle = color; ctx.lineWidth = 2;
    for (const st of steps) {
      const pos = layout.cellOf(st);
      if (pos) ctx.strokeRect(pos.c * cell + 1, pos.r * cell + 1, Math.max(cell - 2, 2), Math.max(cell - 2, 2));
    }
  };
  if (state.finding) outline(state.finding.steps, colors.error);
  /** @param {number} step @param {string} color @param {number} width */
  const mark = (step, color, width) => {
    const pos = layout.cellOf(step);
    if (!pos) return;
    if (cell < 5) {  // aggregated: a crosshair and a visible dot find the program
      const cx = (pos.c + 0.5) * cell, cy = (pos.r + 0.5) * cell;
      ctx.strokeStyle = color; ctx.lineWidth = 1; ctx.globalAlpha = 0.6;
      ctx.beginPath(); ctx.moveTo(cx, 0); ctx.lineTo(cx, gc.h); ctx.moveTo(0, cy); ctx.lineTo(gc.w, cy); ctx.stroke();
      ctx.globalAlpha = 1; ctx.fillStyle = color; ctx.fillRect(cx - 3, cy - 3, 6, 6);
      ctx.strokeStyle = colors.fg; ctx.strokeRect(cx - 3.5, cy - 3.5, 7, 7);
      return;
    }
    ctx.fillStyle = color;
    ctx.fillRect(pos.c * cell, pos.r * cell, cell, cell);
    if (cell >= 6) { ctx.strokeStyle = colors.fg; ctx.lineWidth = width; ctx.strokeRect(pos.c * cell + 0.5, pos.r * cell + 0.5, cell - 1, cell - 1); }
  };
  if (blockHover) outline(blockHover.steps, colors.accent);
  if (state.hover >= 0 && state.hover !== state.step) mark(state.step, mix(colors.hl, colors.bg, 0.45), 1);
  mark(s, colors.hl, 1.5);
}

/**
 * An operand panel's top layer: the hovered finding's blocks and the shown program's block
 * (solid when it is copied at this step, dashed when not).
 * @param {GridView} v @param {OperandPanel} p @param {number} s the shown step
 */
function drawOperandHighlight(v, p, s) {
  const { state, colors, t } = v;
  const { ctx } = p.cv.top;
  ctx.clearRect(0, 0, p.cv.w, p.cv.h);
  const slice = operandSlice(v, p);
  if (state.finding && state.finding.operand === p.op.origin) {
    for (const b of state.finding.blocks) if (b.length === p.op.shape.length && inSlice(p, b, slice)) hatch(colors, ctx, blockRect(t, p, b), colors.error);
  }
  const block = t.blockIndex(p.o, s);
  const fetch = t.isCopy(p.o, s);
  const rc = blockRect(t, p, block, s);
  const exact = { ...rc };
  if (rc.w < 5 || rc.h < 5) {  // a tiny block: crosshair through it, drawn at least 7 px
    const cx = rc.x + rc.w / 2, cy = rc.y + rc.h / 2;
    ctx.strokeStyle = colors.hl; ctx.lineWidth = 1; ctx.globalAlpha = 0.6;
    ctx.beginPath(); ctx.moveTo(cx, 0); ctx.lineTo(cx, p.cv.h); ctx.moveTo(0, cy); ctx.lineTo(p.cv.w, cy); ctx.stroke();
    ctx.globalAlpha = 1;
    rc.w = Math.max(rc.w, 7); rc.h = Math.max(rc.h, 7);
    rc.x = cx - rc.w / 2; rc.y = cy - rc.h / 2;
  }
  ctx.fillStyle = fetch ? mix(colors.hl, colors.bg, 0.15) : mix(colors.hl, colors.bg, 0.6);
  ctx.globalAlpha = 0.85;
  ctx.fillRect(rc.x, rc.y, Math.max(rc.w, 2), Math.max(rc.h, 2));
  ctx.globalAlpha = 1;
  drawBlockAccesses(v, p, s, exact);  // what it touches inside, under the block's outline
  ctx.strokeStyle = fetch ? colors.fg : colors.hl;
  ctx.lineWidth = 2;
  if (!fetch) ctx.setLineDash([4, 3]);
  ctx.strokeRect(rc.x + 1, rc.y + 1, Math.max(rc.w - 2, 1), Math.max(rc.h - 2, 1));
  ctx.setLineDash([]);
}
