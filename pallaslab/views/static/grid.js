// @ts-check
/**
 * The Grid/BlockSpec visualizer: the kernel's grid as cells and every operand as its blocks.
 * Hover or click a program to light its blocks in every operand; the scrubber and play button
 * walk programs in execution order, marking fetches and revisits; overlays show per-block fetch
 * counts, output coverage and findings. Plain ES module (anywidget `render`), no dependencies.
 * Everything user-derived is inserted with textContent, never as HTML.
 */

import { h, tuple, num, toInt32, rgb, mix, themeColors, canvas } from "./prelude.js";
export { toInt32, rgb } from "./prelude.js";

/** @typedef {{affine: number[] | null, table: number | null}} IndexColumn */
/**
 * @typedef {{origin: string, param?: string | null, label?: string, role: string,
 *   dtype: string, memory_space: string,
 *   windowed: boolean, shape: number[], block_shape: (number | null)[], extent: number[],
 *   scale: number[], offset: number[], index: IndexColumn[], lo: number[], hi: number[],
 *   fetches: number | null, hbm_bytes: number | null, writer_axes?: number[]}} GridOperand
 */
/**
 * @typedef {{code: string, severity: string, message: string, operand: string | null,
 *   programs: number[][], steps: number[], blocks: number[][]}} GridFinding
 */
/**
 * @typedef {{version: number, kernel: string, index: number, source: string | null,
 *   grid: number[], grid_names: string[] | null, semantics: string[] | null, programs: number,
 *   axes: number[], operands: GridOperand[], findings: GridFinding[],
 *   tables: (DataView | ArrayBuffer | ArrayBufferView)[]}} GridPayload
 */
/** @typedef {import("./prelude.js").Model} Model */

/** Cells smaller than this many CSS pixels are drawn per pixel (aggregated), not as rects. */
export const CELL_THRESHOLD = 3;
const MAX_GRID_W = 440;
const MAX_GRID_H = 380;
const MAX_OP_W = 260;
const MAX_OP_H = 220;
const MAX_COUNT_CELLS = 1 << 24;

/** Block-index tables of every operand over the whole grid, computed from the payload. */
export class Tiling {
  /** @param {GridPayload} payload */
  constructor(payload) {
    this.payload = payload;
    this.grid = payload.grid;
    this.rank = payload.grid.length;
    this.programs = payload.programs;
    /** @type {number[]} */
    this.strides = [];
    let s = 1;
    for (let k = this.rank - 1; k >= 0; k--) { this.strides[k] = s; s *= this.grid[k]; }
    this.tables = payload.tables.map(toInt32);
    this.operands = payload.operands;
    /** @type {Map<string, Int32Array>} */
    this.countCache = new Map();
  }

  /** Program ids of a step (execution order is lexicographic, last dim fastest). */
  programIds(step, out = new Array(this.rank)) {
    for (let k = 0; k < this.rank; k++) out[k] = Math.floor(step / this.strides[k]) % this.grid[k];
    return out;
  }

  /** @param {number[]} pid */
  stepOf(pid) {
    let s = 0;
    for (let k = 0; k < this.rank; k++) s += pid[k] * this.strides[k];
    return s;
  }

  /** Block index of operand `o` at `step` along dimension `d`. */
  indexAt(o, d, step) {
    const col = this.operands[o].index[d];
    if (col.table !== null) return this.tables[col.table][step];
    const a = /** @type {number[]} */ (col.affine);
    let v = a[0];
    for (let k = 0; k < this.rank; k++) {
      if (a[k + 1]) v += a[k + 1] * (Math.floor(step / this.strides[k]) % this.grid[k]);
    }
    return v;
  }

  /** @returns {number[]} */
  blockIndex(o, step) {
    const n = this.operands[o].index.length;
    const out = new Array(n);
    for (let d = 0; d < n; d++) out[d] = this.indexAt(o, d, step);
    return out;
  }

  /** Does a copy start at this step (its block differs from the previous step's)? */
  isFetch(o, step) {
    if (step === 0) return true;
    const n = this.operands[o].index.length;
    for (let d = 0; d < n; d++) if (this.indexAt(o, d, step) !== this.indexAt(o, d, step - 1)) return true;
    return false;
  }

  /**
   * Is an output block written back to HBM after this step? On TPU the pipeline keeps an
   * output block in VMEM over a run of consecutive steps on it and writes it back once, at the
   * run's last step (the next step's block differs, or the grid ends).
   */
  isWriteBack(o, step) {
    if (step >= this.programs - 1) return true;
    return this.isFetch(o, step + 1);
  }

  /** Does this step copy the operand's block: fetch an input, write back an output? */
  isCopy(o, step) {
    return this.operands[o].role === "output" ? this.isWriteBack(o, step) : this.isFetch(o, step);
  }

  /** Element range [start, stop) of a block along each dimension (clipped to nothing). */
  elementRange(o, block) {
    const op = this.operands[o];
    return block.map((b, d) => {
      const start = b * op.scale[d] - op.offset[d];
      return [start, start + op.extent[d]];
    });
  }

  /** Size of the block-index box [lo, hi] of an operand, or 0 when it is too large to count. */
  boxSize(o) {
    const op = this.operands[o];
    let n = 1;
    for (let d = 0; d < op.lo.length; d++) n *= op.hi[d] - op.lo[d] + 1;
    return n > MAX_COUNT_CELLS ? 0 : n;
  }

  /** Position of a block index in the operand's [lo, hi] box, or -1 outside it. */
  boxKey(o, block) {
    const op = this.operands[o];
    let key = 0;
    for (let d = 0; d < block.length; d++) {
      const span = op.hi[d] - op.lo[d] + 1;
      const v = block[d] - op.lo[d];
      if (v < 0 || v >= span) return -1;
      key = key * span + v;
    }
    return key;
  }

  /**
   * Per-block counts over the whole grid: "fetches" counts copies (TPU pipeline semantics),
   * "visits" counts the programs whose block it is, "writes" counts an output block's writers:
   * its write-backs (one per run of consecutive steps on it), plus separate writers along the
   * operand's `writer_axes` (concurrent programs). Indexed by `boxKey`. null when too large.
   * @param {number} o
   * @param {"fetches" | "visits" | "writes"} kind
   * @returns {Int32Array | null}
   */
  counts(o, kind) {
    const cacheKey = `${o}:${kind}`;
    const hit = this.countCache.get(cacheKey);
    if (hit) return hit;
    const size = this.boxSize(o);
    if (!size) return null;
    const op = this.operands[o];
    const n = op.index.length;
    const counts = new Int32Array(size);
    const spans = op.lo.map((lo, d) => op.hi[d] - lo + 1);
    const cols = [];
    for (let d = 0; d < n; d++) cols.push(this.column(o, d));
    const writers = kind === "writes" ? (op.writer_axes || []) : [];
    for (let s = 0; s < this.programs; s++) {
      if (kind !== "visits" && s > 0) {
        let same = true;
        for (let d = 0; d < n; d++) if (cols[d][s] !== cols[d][s - 1]) { same = false; break; }
        for (const k of writers) {
          if (!same) break;
          const stride = this.strides[k];
          if (Math.floor(s / stride) % this.grid[k] !== Math.floor((s - 1) / stride) % this.grid[k]) same = false;
        }
        if (same) continue;
      }
      let key = 0;
      for (let d = 0; d < n; d++) key = key * spans[d] + (cols[d][s] - op.lo[d]);
      counts[key]++;
    }
    this.countCache.set(cacheKey, counts);
    return counts;
  }

  /** A whole column of block indices (materialised for affine columns). */
  column(o, d) {
    const col = this.operands[o].index[d];
    if (col.table !== null) return this.tables[col.table];
    const out = new Int32Array(this.programs);
    const a = /** @type {number[]} */ (col.affine);
    const pid = new Array(this.rank).fill(0);
    for (let s = 0; s < this.programs; s++) {
      let v = a[0];
      for (let k = 0; k < this.rank; k++) v += a[k + 1] * pid[k];
      out[s] = v;
      for (let k = this.rank - 1; k >= 0; k--) {  // odometer increment
        if (++pid[k] < this.grid[k]) break;
        pid[k] = 0;
      }
    }
    return out;
  }

  /**
   * Number of operands copied at each step (for the fetch overlay on the grid): inputs
   * fetched when their block changes, outputs written back at the end of each run.
   */
  fetchingPerStep() {
    if (this._fetching) return this._fetching;
    const out = new Uint8Array(this.programs);
    this.operands.forEach((op, o) => {
      if (!op.windowed) return;
      const cols = op.index.map((_, d) => this.column(o, d));
      const back = op.role === "output" ? 1 : 0;  // a run's end: the next step starts another
      for (let s = 0; s < this.programs; s++) {
        const n = s + back;
        let f = n === 0 || n >= this.programs;
        for (let d = 0; !f && d < cols.length; d++) f = cols[d][n] !== cols[d][n - 1];
        if (f) out[s]++;
      }
    });
    /** @type {Uint8Array | undefined} */
    this._fetching = out;
    return out;
  }
}

/**
 * How the grid is laid out as a 2-D picture: rows/columns are two grid axes (or a wrapped 1-D
 * grid), the other axes fixed at `fixed`.
 */
export class GridLayout {
  /**
   * @param {Tiling} t
   * @param {number[]} axes [row axis, column axis]
   * @param {number[]} fixed program id of every axis not drawn
   */
  constructor(t, axes, fixed) {
    this.t = t;
    this.axes = axes;
    this.fixed = fixed;
    if (t.rank === 0) { this.rows = 1; this.cols = 1; this.wrap = 0; }
    else if (t.rank === 1) {
      const g = t.grid[0];
      this.wrap = Math.max(Math.min(g, 32), Math.ceil(Math.sqrt(g)));
      this.cols = Math.min(g, this.wrap);
      this.rows = Math.ceil(g / this.cols);
    } else {
      this.wrap = 0;
      this.rows = t.grid[axes[0]];
      this.cols = t.grid[axes[1]];
    }
  }

  /** Step at a cell, or -1 (past the end of a wrapped 1-D grid). */
  stepAt(r, c) {
    const t = this.t;
    if (t.rank === 0) return 0;
    if (t.rank === 1) { const s = r * this.cols + c; return s < t.programs ? s : -1; }
    let s = 0;
    for (let k = 0; k < t.rank; k++) {
      const v = k === this.axes[0] ? r : k === this.axes[1] ? c : this.fixed[k];
      s += v * t.strides[k];
    }
    return s;
  }

  /** Cell of a step, or null when the step is in another slice. */
  cellOf(step) {
    const t = this.t;
    if (t.rank === 0) return { r: 0, c: 0 };
    if (t.rank === 1) return { r: Math.floor(step / this.cols), c: step % this.cols };
    const pid = t.programIds(step);
    for (let k = 0; k < t.rank; k++) {
      if (k !== this.axes[0] && k !== this.axes[1] && pid[k] !== this.fixed[k]) return null;
    }
    return { r: pid[this.axes[0]], c: pid[this.axes[1]] };
  }
}

/**
 * A canvas pair (base drawing + highlight layer) sized in CSS pixels.
 * @param {HTMLElement} parent
 * @param {number} w
 * @param {number} h
 */
function canvasStack(parent, w, h) {
  const stack = document.createElement("div");
  stack.className = "pl-stack";
  const dpr = window.devicePixelRatio || 1;
  const make = () => {
    const [c, ctx] = canvas(w, h);
    stack.appendChild(c);
    return { canvas: c, ctx };
  };
  const base = make();
  const top = make();
  top.canvas.classList.add("pl-hit");
  parent.appendChild(stack);
  return { stack, base, top, w, h, dpr };
}

/** The two array dimensions of an operand that are drawn (rows, cols); -1 = none. */
function drawnDims(op) {
  const n = op.shape.length;
  if (n === 0) return [-1, -1];
  if (n === 1) return [-1, 0];
  return [n - 2, n - 1];
}

/**
 * The element-space box an operand panel shows along one dimension: the array plus any block
 * that sticks out of it.
 */
function dimSpan(op, d) {
  if (d < 0) return [0, 1];
  const lo = Math.min(0, op.lo[d] * op.scale[d] - op.offset[d]);
  const hi = Math.max(op.shape[d], op.hi[d] * op.scale[d] - op.offset[d] + op.extent[d]);
  return [lo, Math.max(hi, lo + 1)];
}

/** Pixel size of a panel for an element box, keeping the aspect ratio within 1:6. */
function fitBox(rowsEl, colsEl, maxW, maxH) {
  const ratio = Math.min(6, Math.max(1 / 6, rowsEl / colsEl));
  let w = maxW, hh = w * ratio;
  if (hh > maxH) { hh = maxH; w = hh / ratio; }
  return [Math.max(24, Math.round(w)), Math.max(14, Math.round(hh))];
}

/**
 * Mount the grid view.
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  /** @type {GridPayload} */
  const payload = model.get("payload");
  const t = new Tiling(payload);
  const root = h("div", "pallaslab pl-grid");
  el.appendChild(root);
  /** @type {(() => void)[]} */
  const cleanups = [];
  /** @param {EventTarget} target @param {string} type @param {(e: any) => void} fn */
  const listen = (target, type, fn) => {
    target.addEventListener(type, fn);
    cleanups.push(() => target.removeEventListener(type, fn));
  };

  const state = {
    step: 0,  // the current program (scrubber / click)
    hover: -1,  // the hovered program, -1 when none
    axes: payload.axes.slice(),
    fixed: new Array(t.rank).fill(0),
    overlay: "none",
    /** @type {GridFinding | null} */
    finding: null,  // the finding being hovered in the list
    playing: 0,
  };
  let colors = themeColors(root);

  // ---- header and toolbar ----
  const head = h("div", "pl-head");
  const title = h("span", "pl-title");
  title.append("Grid ", h("code", "", payload.kernel));
  const gridText = payload.grid.length ? payload.grid.join(" × ") : "()";
  head.append(title, h("span", "pl-dim",
    `${gridText} = ${num(payload.programs)} programs` +
    (payload.semantics ? ` · ${payload.semantics.join(", ")}` : "") +
    (payload.source ? ` · ${payload.source}` : "")));
  root.appendChild(head);
  root.dataset.programs = String(t.programs);

  if (!(t.programs > 0)) return renderEmpty();

  const bar = h("div", "pl-toolbar");
  root.appendChild(bar);
  const axisName = (k) => (payload.grid_names && payload.grid_names[k]) || `axis ${k}`;

  /** @type {HTMLElement} */
  const sliders = h("span", "pl-group pl-sliders");
  if (t.rank >= 2) {
    const grp = h("span", "pl-group");
    grp.append(h("span", "", "rows"));
    const rowSel = /** @type {HTMLSelectElement} */ (h("select", "pl-axis-row"));
    const colSel = /** @type {HTMLSelectElement} */ (h("select", "pl-axis-col"));
    for (let k = 0; k < t.rank; k++) {
      const label = `${axisName(k)} (${t.grid[k]})`;
      const o1 = /** @type {HTMLOptionElement} */ (h("option", "", label)); o1.value = String(k);
      const o2 = /** @type {HTMLOptionElement} */ (h("option", "", label)); o2.value = String(k);
      rowSel.append(o1); colSel.append(o2);
    }
    rowSel.value = String(state.axes[0]); colSel.value = String(state.axes[1]);
    grp.append(rowSel, h("span", "", "cols"), colSel);
    bar.append(grp);
    const onAxes = (which) => () => {
      let r = Number(rowSel.value), c = Number(colSel.value);
      if (r === c) {  // keep the two axes distinct: the other one takes the old value (swap)
        if (which === 0) { c = state.axes[0]; colSel.value = String(c); }
        else { r = state.axes[1]; rowSel.value = String(r); }
      }
      state.axes = [r, c];
      buildSliders(); layoutGrid(); drawAll();
    };
    listen(rowSel, "change", onAxes(0));
    listen(colSel, "change", onAxes(1));
    bar.append(sliders);
  }
  /** @type {HTMLInputElement[]} */
  let sliderInputs = [];
  function buildSliders() {
    sliders.replaceChildren();
    sliderInputs = [];
    for (let k = 0; k < t.rank; k++) {
      if (k === state.axes[0] || k === state.axes[1]) continue;
      const lab = h("label", "pl-group");
      const inp = /** @type {HTMLInputElement} */ (h("input", "pl-slider"));
      inp.type = "range"; inp.min = "0"; inp.max = String(t.grid[k] - 1);
      inp.value = String(state.fixed[k]); inp.dataset.axis = String(k);
      const val = h("span", "pl-mono", `${state.fixed[k]}`);
      lab.append(h("span", "", `${axisName(k)}`), inp, val);
      inp.addEventListener("input", () => {
        state.fixed[k] = Number(inp.value);
        val.textContent = inp.value;
        drawAll();
      });
      sliders.append(lab);
      sliderInputs.push(inp);
    }
  }

  const ovGroup = h("label", "pl-group");
  const ovSel = /** @type {HTMLSelectElement} */ (h("select", "pl-overlay"));
  for (const [v, label] of [["none", "none"], ["fetches", "fetch counts"],
    ["coverage", "coverage"], ["findings", `findings (${payload.findings.length})`]]) {
    const o = /** @type {HTMLOptionElement} */ (h("option", "", label)); o.value = v; ovSel.append(o);
  }
  ovGroup.append(h("span", "", "overlay"), ovSel);
  bar.append(ovGroup);
  listen(ovSel, "change", () => { state.overlay = ovSel.value; drawAll(); });

  const scrub = h("span", "pl-scrub");
  const play = /** @type {HTMLButtonElement} */ (h("button", "pl-play", "▶"));
  play.title = "play the programs in execution order";
  const prev = /** @type {HTMLButtonElement} */ (h("button", "pl-prev", "‹"));
  const next = /** @type {HTMLButtonElement} */ (h("button", "pl-next", "›"));
  const range = /** @type {HTMLInputElement} */ (h("input", "pl-scrubber"));
  range.type = "range"; range.min = "0"; range.max = String(Math.max(0, t.programs - 1)); range.value = "0";
  range.title = "step (execution order)";
  const stepNum = h("span", "pl-stepnum");
  scrub.append(play, prev, next, range, stepNum);
  bar.append(scrub);

  const legend = h("div", "pl-legend");
  root.appendChild(legend);

  // ---- panels ----
  const main = h("div", "pl-main");
  root.appendChild(main);
  const left = h("div", "pl-left");
  main.appendChild(left);
  const gridPanel = h("div", "pl-panel pl-programs");
  left.appendChild(gridPanel);
  const operandsBox = h("div", "pl-operands");
  main.appendChild(operandsBox);
  const side = h("div", "pl-side");
  left.appendChild(side);

  /** @type {ReturnType<typeof canvasStack> | null} */
  let gridCanvas = null;
  let layout = new GridLayout(t, state.axes, state.fixed);
  let cell = 1;
  const gridCaption = h("div", "pl-axislabel");

  function layoutGrid() {
    layout = new GridLayout(t, state.axes, state.fixed);
    cell = Math.min(44, MAX_GRID_W / layout.cols, MAX_GRID_H / layout.rows);
    const w = Math.max(1, Math.ceil(layout.cols * cell)), hh = Math.max(1, Math.ceil(layout.rows * cell));
    gridPanel.replaceChildren();
    const title = h("h4", "", "programs");
    const rowsLabel = t.rank >= 2 ? axisName(state.axes[0]) : t.rank === 1 ? "" : "";
    title.append(h("span", "pl-dim", t.rank >= 2
      ? `rows: ${rowsLabel}, cols: ${axisName(state.axes[1])}`
      : t.rank === 1 ? `${num(t.programs)} in execution order, ${layout.cols} per row` : "one program"));
    gridPanel.append(title);
    gridCanvas = canvasStack(gridPanel, w, hh);
    gridPanel.append(gridCaption);
    gridCanvas.top.canvas.dataset.role = "grid";
    Object.assign(gridCanvas.top.canvas.dataset, { cell: String(cell), rows: String(layout.rows), cols: String(layout.cols) });
    listen(gridCanvas.top.canvas, "mousemove", onGridMove);
    listen(gridCanvas.top.canvas, "mouseleave", () => setHover(-1));
    listen(gridCanvas.top.canvas, "click", (e) => {
      const s = stepAtEvent(/** @type {MouseEvent} */ (e));
      if (s >= 0) setStep(s, true);
    });
  }

  /** @param {MouseEvent} e */
  function stepAtEvent(e) {
    const rect = /** @type {HTMLCanvasElement} */ (e.target).getBoundingClientRect();
    const c = Math.floor((e.clientX - rect.left) / cell);
    const r = Math.floor((e.clientY - rect.top) / cell);
    if (r < 0 || c < 0 || r >= layout.rows || c >= layout.cols) return -1;
    return layout.stepAt(r, c);
  }
  /** @param {MouseEvent} e */
  function onGridMove(e) { setHover(stepAtEvent(e)); }

  // operand panels
  /** @type {{o: number, op: GridOperand, dims: number[], spans: number[][], sx: number, sy: number, cv: ReturnType<typeof canvasStack>, info: HTMLElement}[]} */
  const panels = [];
  payload.operands.forEach((op, o) => {
    const dims = drawnDims(op);
    if (dims[1] < 0) return;
    const spans = [dimSpan(op, dims[0]), dimSpan(op, dims[1])];
    const rowsEl = spans[0][1] - spans[0][0], colsEl = spans[1][1] - spans[1][0];
    const [w, hh] = dims[0] < 0 ? [MAX_OP_W, 26] : fitBox(rowsEl, colsEl, MAX_OP_W, MAX_OP_H);
    const panel = h("div", "pl-panel pl-operand");
    panel.dataset.origin = op.origin;
    const title = h("h4");
    title.append(h("span", "pl-label", op.label || op.origin), h("span", `pl-role pl-${op.role}`, op.role));
    panel.append(title, h("div", "pl-axislabel",
      `${op.dtype}${tuple(op.shape)} · block ${tuple(op.block_shape.map((b) => (b === null ? "None" : b)))}`));
    const cv = canvasStack(panel, w, hh);
    cv.top.canvas.dataset.role = "operand";
    const info = h("div", "pl-axislabel");
    panel.append(info);
    operandsBox.append(panel);
    panels.push({ o, op, dims, spans, sx: w / colsEl, sy: hh / rowsEl, cv, info });
    listen(cv.top.canvas, "mousemove", (e) => onOperandMove(o, /** @type {MouseEvent} */ (e)));
    listen(cv.top.canvas, "mouseleave", () => { blockHover = null; drawHighlights(); });
  });

  /** @type {{o: number, block: number[], steps: number[]} | null} */
  let blockHover = null;
  /**
   * Hovering a block of an operand: outline every program of the shown grid slice whose block
   * for that operand it is (which programs touch this block?).
   */
  function onOperandMove(o, e) {
    const p = panels.find((q) => q.o === o);
    if (!p) return;
    const rect = /** @type {HTMLCanvasElement} */ (e.target).getBoundingClientRect();
    const ex = p.spans[1][0] + (e.clientX - rect.left) / p.sx;
    const ey = p.spans[0][0] + (e.clientY - rect.top) / p.sy;
    const target = operandSlice(p);
    const [dr, dc] = p.dims;
    target[dc] = Math.floor((ex + p.op.offset[dc]) / p.op.scale[dc]);
    if (dr >= 0) target[dr] = Math.floor((ey + p.op.offset[dr]) / p.op.scale[dr]);
    if (blockHover && blockHover.o === o && blockHover.block.join() === target.join()) return;
    /** @type {number[]} */
    const steps = [];
    if (layout.rows * layout.cols <= 65536) {
      for (let r = 0; r < layout.rows; r++) {
        for (let c = 0; c < layout.cols; c++) {
          const st = layout.stepAt(r, c);
          if (st < 0) continue;
          let same = true;
          for (let d = 0; same && d < target.length; d++) same = t.indexAt(o, d, st) === target[d];
          if (same) steps.push(st);
        }
      }
    }
    blockHover = { o, block: target, steps };
    p.info.textContent = `block ${tuple(target)}: ${steps.length ? `${num(steps.length)} program(s) in this slice use it` : "no program in this slice uses it"}`;
    drawHighlights();
  }

  // info table: the displayed program and its block in every operand
  const info = h("div", "pl-info");
  side.append(info);
  const findingsBox = h("div", "pl-findings-box");
  side.append(findingsBox);

  // ---- drawing ----
  function displayed() { return state.hover >= 0 ? state.hover : state.step; }

  /** Base colour of a program cell under the current overlay and scrubber position. */
  function programColor(step, fetching, findingSteps) {
    if (state.overlay === "fetches" && fetching) {
      const n = fetching[step], top = t.operands.length || 1;
      return n === 0 ? colors.empty : mix(colors.bg, colors.accent, 0.3 + 0.7 * (n / top));
    }
    if (state.overlay === "findings" && findingSteps.has(step)) return colors.error;
    return step < state.step ? mix(colors.cell, colors.accent, 0.45) : colors.cell;
  }

  function findingStepSet() {
    const s = new Set();
    for (const f of payload.findings) for (const st of f.steps) s.add(st);
    return s;
  }

  function drawGrid() {
    if (!gridCanvas) return;
    const { ctx } = gridCanvas.base;
    const W = gridCanvas.w, H = gridCanvas.h;
    ctx.fillStyle = colors.bg;
    ctx.fillRect(0, 0, W, H);
    const fetching = state.overlay === "fetches" ? t.fetchingPerStep() : null;
    const fsteps = findingStepSet();
    if (cell >= CELL_THRESHOLD) {
      const gap = cell >= 8 ? 1 : 0;
      for (let r = 0; r < layout.rows; r++) {
        for (let c = 0; c < layout.cols; c++) {
          const s = layout.stepAt(r, c);
          if (s < 0) continue;
          ctx.fillStyle = programColor(s, fetching, fsteps);
          ctx.fillRect(c * cell, r * cell, cell - gap, cell - gap);
        }
      }
    } else {
      // Aggregated: one device pixel per bucket of programs; a bucket takes the colour of the
      // program at its top-left corner. Steps are affine in (row, col): no per-pixel calls.
      const dpr = gridCanvas.dpr;
      const pw = gridCanvas.base.canvas.width, ph = gridCanvas.base.canvas.height;
      const img = ctx.createImageData(pw, ph);
      const words = new Uint32Array(img.data.buffer);
      /** @type {Map<string, number>} */
      const cache = new Map();
      const packed = (css) => {
        let v = cache.get(css);
        if (v === undefined) { const c = rgb(css); v = ((255 << 24) | (c[2] << 16) | (c[1] << 8) | c[0]) >>> 0; cache.set(css, v); }
        return v;
      };
      const px = cell * dpr;
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
              : packed(programColor(s, fetching, fsteps));
        }
      }
      ctx.putImageData(img, 0, 0);
    }
    // findings: a small marker on every example program (always visible)
    for (const f of payload.findings) {
      for (const s of f.steps) {
        const pos = layout.cellOf(s);
        if (!pos) continue;
        ctx.fillStyle = f.severity === "error" ? colors.error : f.severity === "warning" ? colors.warn : colors.info;
        const m = Math.max(2, cell * 0.28);
        ctx.beginPath();
        ctx.moveTo(pos.c * cell + cell - m - (cell >= 8 ? 1 : 0), pos.r * cell);
        ctx.lineTo(pos.c * cell + cell - (cell >= 8 ? 1 : 0), pos.r * cell);
        ctx.lineTo(pos.c * cell + cell - (cell >= 8 ? 1 : 0), pos.r * cell + m);
        ctx.fill();
      }
    }
  }

  /** The slice of an operand's leading dims shown: those of the displayed program's block. */
  function operandSlice(p) {
    return t.blockIndex(p.o, displayed());
  }

  function drawOperand(p) {
    const { ctx } = p.cv.base;
    const { op, dims, spans, sx, sy } = p;
    const W = p.cv.w, H = p.cv.h;
    ctx.fillStyle = colors.bg;
    ctx.fillRect(0, 0, W, H);
    // outside-the-array region (blocks that stick out): hatched
    ctx.fillStyle = mix(colors.bg, colors.error, 0.12);
    ctx.fillRect(0, 0, W, H);
    const ax = (-spans[1][0]) * sx, ay = dims[0] < 0 ? 0 : (-spans[0][0]) * sy;
    const aw = op.shape[dims[1]] * sx, ah = dims[0] < 0 ? H : op.shape[dims[0]] * sy;
    ctx.fillStyle = colors.cell;
    ctx.fillRect(ax, ay, aw, ah);

    const slice = operandSlice(p);
    const counts = state.overlay === "fetches" ? t.counts(p.o, "fetches")
      : state.overlay === "coverage" ? t.counts(p.o, op.role === "output" ? "writes" : "visits") : null;
    if (counts) drawCounts(p, counts, slice);
    if (state.overlay === "findings") drawFindingBlocks(p, slice);

    // block grid lines (regular blocks only, when at least 3 px apart)
    ctx.strokeStyle = mix(colors.bg, colors.fg2, 0.35);
    ctx.lineWidth = 1;
    ctx.beginPath();
    const lines = (d, scalePx, horizontal) => {
      if (d < 0 || op.scale[d] !== op.extent[d]) return;
      const step = op.extent[d] * scalePx;
      if (step < 3) return;
      for (let e = op.extent[d]; e < op.shape[d]; e += op.extent[d]) {
        const v = Math.round((e - spans[horizontal ? 0 : 1][0]) * scalePx) + 0.5;
        if (horizontal) { ctx.moveTo(ax, v); ctx.lineTo(ax + aw, v); } else { ctx.moveTo(v, ay); ctx.lineTo(v, ay + ah); }
      }
    };
    lines(dims[1], sx, false);
    lines(dims[0], sy, true);
    ctx.stroke();
    ctx.strokeStyle = colors.fg2;
    ctx.strokeRect(ax + 0.5, ay + 0.5, Math.max(0, aw - 1), Math.max(0, ah - 1));
  }

  /** Does a block of the operand lie in the shown slice (its leading dims match)? */
  function inSlice(p, block, slice) {
    for (let d = 0; d < block.length; d++) {
      if (d === p.dims[0] || d === p.dims[1]) continue;
      if (block[d] !== slice[d]) return false;
    }
    return true;
  }

  /** Rectangle (CSS px) of a block in an operand panel. */
  function blockRect(p, block) {
    const rg = t.elementRange(p.o, block);
    const [r0, r1] = p.dims[0] < 0 ? [p.spans[0][0], p.spans[0][1]] : rg[p.dims[0]];
    const [c0, c1] = rg[p.dims[1]];
    return {
      x: (c0 - p.spans[1][0]) * p.sx, y: (r0 - p.spans[0][0]) * p.sy,
      w: (c1 - c0) * p.sx, h: (r1 - r0) * p.sy,
    };
  }

  function drawCounts(p, counts, slice) {
    const { ctx } = p.cv.base;
    const op = p.op;
    let top = 1;
    for (let i = 0; i < counts.length; i++) if (counts[i] > top) top = counts[i];
    const [dr, dc] = p.dims;
    const rLo = dr < 0 ? 0 : op.lo[dr], rHi = dr < 0 ? 0 : op.hi[dr];
    const nBlocks = (rHi - rLo + 1) * (op.hi[dc] - op.lo[dc] + 1);
    if (nBlocks > 262144) { p.info.textContent = `${num(nBlocks)} blocks in view: counts not drawn`; return; }
    const block = slice.slice();
    const coverage = state.overlay === "coverage";
    // "several writers" only where a finding explains it (the rules that count writers)
    const explained = payload.findings.some((f) => f.operand === op.origin
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
        const rc = blockRect(p, block);
        ctx.fillStyle = color;
        ctx.fillRect(rc.x, rc.y, Math.max(rc.w, 0.5), Math.max(rc.h, 0.5));
      }
    }
    // blocks of a blocked output that nobody writes (inside the array but outside [lo, hi])
    if (coverage && op.role === "output" && op.scale[dc] === op.extent[dc]) {
      const nC = Math.ceil(op.shape[dc] / op.extent[dc]);
      const nR = dr < 0 ? 1 : Math.ceil(op.shape[dr] / op.extent[dr]);
      if (nR * nC <= 262144) {
        for (let r = 0; r < nR; r++) {
          for (let c = 0; c < nC; c++) {
            if (dr >= 0) block[dr] = r;
            block[dc] = c;
            if (t.boxKey(p.o, block) >= 0) continue;
            const rc = blockRect(p, block);
            ctx.fillStyle = colors.error;
            ctx.fillRect(rc.x, rc.y, Math.max(rc.w, 0.5), Math.max(rc.h, 0.5));
          }
        }
      }
    }
  }

  function drawFindingBlocks(p, slice) {
    const { ctx } = p.cv.base;
    for (const f of payload.findings) {
      if (f.operand !== p.op.origin) continue;
      for (const b of f.blocks) {
        if (b.length !== p.op.shape.length || !inSlice(p, b, slice)) continue;
        const rc = blockRect(p, b);
        hatch(ctx, rc, f.severity === "error" ? colors.error : colors.warn);
      }
    }
  }

  /** @param {CanvasRenderingContext2D} ctx */
  function hatch(ctx, rc, color) {
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

  /** Highlights: the displayed program's cell and its block in every operand. */
  function drawHighlights() {
    const s = displayed();
    const fetchTag = [];
    if (gridCanvas) {
      const gc = gridCanvas;
      const { ctx } = gc.top;
      ctx.clearRect(0, 0, gridCanvas.w, gridCanvas.h);
      if (state.finding) {
        ctx.strokeStyle = colors.error; ctx.lineWidth = 2;
        for (const fs of state.finding.steps) {
          const pos = layout.cellOf(fs);
          if (pos) ctx.strokeRect(pos.c * cell + 1, pos.r * cell + 1, Math.max(cell - 2, 2), Math.max(cell - 2, 2));
        }
      }
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
      if (blockHover) {
        ctx.strokeStyle = colors.accent; ctx.lineWidth = 2;
        for (const bs of blockHover.steps) {
          const pos = layout.cellOf(bs);
          if (pos) ctx.strokeRect(pos.c * cell + 1, pos.r * cell + 1, Math.max(cell - 2, 2), Math.max(cell - 2, 2));
        }
      }
      if (state.hover >= 0 && state.hover !== state.step) mark(state.step, mix(colors.hl, colors.bg, 0.45), 1);
      mark(s, colors.hl, 1.5);
    }
    const slices = [];
    for (const p of panels) {
      const { ctx } = p.cv.top;
      ctx.clearRect(0, 0, p.cv.w, p.cv.h);
      const slice = operandSlice(p);
      slices.push(slice);
      if (state.finding && state.finding.operand === p.op.origin) {
        for (const b of state.finding.blocks) if (b.length === p.op.shape.length && inSlice(p, b, slice)) hatch(ctx, blockRect(p, b), colors.error);
      }
      const block = t.blockIndex(p.o, s);
      const fetch = t.isCopy(p.o, s);
      const rc = blockRect(p, block);
      if (rc.w < 5 || rc.h < 5) {  // a tiny block: crosshair through it, drawn at least 7 px
        const cx = rc.x + rc.w / 2, cy = rc.y + rc.h / 2;
        ctx.strokeStyle = colors.hl; ctx.lineWidth = 1; ctx.globalAlpha = 0.6;
        ctx.beginPath(); ctx.moveTo(cx, 0); ctx.lineTo(cx, p.cv.h); ctx.moveTo(0, cy); ctx.lineTo(p.cv.w, cy); ctx.stroke();
        ctx.globalAlpha = 1;
        rc.x = cx - 3.5; rc.y = cy - 3.5; rc.w = Math.max(rc.w, 7); rc.h = Math.max(rc.h, 7);
        rc.x = cx - rc.w / 2; rc.y = cy - rc.h / 2;
      }
      ctx.fillStyle = fetch ? mix(colors.hl, colors.bg, 0.15) : mix(colors.hl, colors.bg, 0.6);
      ctx.globalAlpha = 0.85;
      ctx.fillRect(rc.x, rc.y, Math.max(rc.w, 2), Math.max(rc.h, 2));
      ctx.globalAlpha = 1;
      ctx.strokeStyle = fetch ? colors.fg : colors.hl;
      ctx.lineWidth = 2;
      if (!fetch) ctx.setLineDash([4, 3]);
      ctx.strokeRect(rc.x + 1, rc.y + 1, Math.max(rc.w - 2, 1), Math.max(rc.h - 2, 1));
      ctx.setLineDash([]);
      fetchTag.push(fetch);
      const lead = p.op.shape.length > 2 ? ` · slice ${tuple(slice.slice(0, p.op.shape.length - 2))}` : "";
      if (!blockHover || blockHover.o !== p.o) p.info.textContent = `block ${tuple(block)}${lead}`;
    }
    updateInfo(s);
  }

  function updateInfo(s) {
    const pid = t.programIds(s);
    info.replaceChildren();
    const line = h("div");
    line.append(h("span", "pl-program", `program ${tuple(pid)}`),
      h("span", "pl-dim", `  step ${num(s)} (${num(s + 1)} of ${num(t.programs)})${state.hover >= 0 ? " · hover" : ""}`));
    info.append(line);
    const tbl = h("table", "pl-table pl-blocks");
    const thead = h("tr");
    for (const c of ["operand", "block index", "elements", "copy"]) thead.append(h("th", "", c));
    tbl.append(thead);
    t.operands.forEach((op, o) => {
      const tr = h("tr");
      tr.dataset.origin = op.origin;
      const block = t.blockIndex(o, s);
      const ranges = t.elementRange(o, block).map(([a, b], d) =>
        op.block_shape[d] === null ? `${a}` : `${a}:${b}`);
      const output = op.role === "output";
      const fetch = t.isCopy(o, s);
      // outputs: written back at the run's last step; before that the block stays in VMEM
      const tag = !op.windowed ? h("span", "pl-tag pl-none", "no copy")
        : fetch ? h("span", "pl-tag pl-fetch", output ? "write-back" : "fetch")
          : h("span", "pl-tag pl-revisit", output ? "in VMEM" : "revisit");
      const td = h("td"); td.append(tag);
      tr.append(h("td", "pl-mono pl-label", op.label || op.origin), h("td", "pl-mono pl-block", tuple(block)),
        h("td", "pl-mono pl-range", `[${ranges.join(", ")}]`), td);
      tr.dataset.block = block.join(",");
      tr.dataset.copy = !op.windowed ? "none" : fetch ? (output ? "write" : "fetch") : "revisit";
      tbl.append(tr);
    });
    info.append(tbl);
    root.dataset.step = String(state.step);
    root.dataset.hover = String(state.hover);
    root.dataset.shown = String(s);
    range.value = String(state.step);
    stepNum.textContent = `${num(state.step + 1)} / ${num(t.programs)}`;
    gridCaption.textContent = t.rank > 2
      ? `slice ${t.grid.map((g, k) => (k === state.axes[0] || k === state.axes[1] ? ":" : String(state.fixed[k]))).join(", ")}`
      : "";
  }

  function drawLegend() {
    legend.replaceChildren();
    const item = (color, text) => {
      const sp = h("span");
      const sw = h("span", "pl-swatch");
      sw.style.background = color;
      sp.append(sw, text);
      legend.append(sp);
    };
    item(colors.hl, "current program and its blocks (solid: copied at this step, an input fetched or an output written back; dashed: no copy)");
    if (state.overlay === "none") item(mix(colors.cell, colors.accent, 0.45), "programs already run");
    if (state.overlay === "fetches") { item(colors.accent, "more fetches of a block / more operands copying at a step"); item(colors.empty, "step with no copy"); }
    if (state.overlay === "coverage") { item(mix(colors.bg, colors.accent, 0.55), "output block written back once (a run of consecutive programs)"); item(colors.warn, "written by several (see findings)"); item(colors.error, "never written"); }
    if (state.overlay === "findings") item(colors.error, "programs and blocks named by findings");
  }

  function drawFindings() {
    findingsBox.replaceChildren();
    if (!payload.findings.length) { findingsBox.append(h("p", "pl-ok", "No findings.")); return; }
    const ul = h("ul", "pl-findings");
    payload.findings.forEach((f, i) => {
      const li = h("li", `pl-finding pl-${f.severity}`);
      li.dataset.index = String(i);
      li.append(h("span", "pl-badge", f.severity), " ", h("code", "", f.code), " ", f.message);
      li.title = f.steps.length ? "click: go to the first program concerned" : "";
      li.addEventListener("mouseenter", () => { state.finding = f; drawHighlights(); });
      li.addEventListener("mouseleave", () => { state.finding = null; drawHighlights(); });
      li.addEventListener("click", () => {
        if (f.steps.length) setStep(f.steps[0], true);
        state.overlay = "findings"; ovSel.value = "findings"; drawAll();
      });
      ul.append(li);
    });
    findingsBox.append(ul);
  }

  function drawAll() {
    layout.fixed = state.fixed;
    drawGrid();
    for (const p of panels) drawOperand(p);
    drawHighlights();
    drawLegend();
  }

  // ---- state changes ----
  function setHover(s) {
    if (s === state.hover) return;
    const before = displayed();
    state.hover = s;
    const now = displayed();
    // operand slices can change with the program: redraw bases only when they do
    if (panels.some((p) => p.op.shape.length > 2) && before !== now) { for (const p of panels) drawOperand(p); }
    drawHighlights();
  }

  /** Move the current program; bring its slice into view. */
  function setStep(s, sync) {
    s = Math.max(0, Math.min(t.programs - 1, s));
    const prevStep = state.step;
    state.step = s;
    if (t.rank > 2) {
      const pid = t.programIds(s);
      let moved = false;
      for (let k = 0; k < t.rank; k++) {
        if (k === state.axes[0] || k === state.axes[1]) continue;
        if (state.fixed[k] !== pid[k]) { state.fixed[k] = pid[k]; moved = true; }
      }
      if (moved) {
        for (const inp of sliderInputs) {
          const k = Number(inp.dataset.axis);
          inp.value = String(state.fixed[k]);
          const val = inp.nextElementSibling;
          if (val) val.textContent = inp.value;
        }
      }
    }
    if (prevStep !== s) drawAll();
    else drawHighlights();
    if (sync) {
      model.set("selection", { step: s, program: t.programIds(s) });
      model.save_changes();
    }
  }

  listen(range, "input", () => setStep(Number(range.value), false));
  listen(range, "change", () => setStep(Number(range.value), true));
  listen(prev, "click", () => setStep(state.step - 1, true));
  listen(next, "click", () => setStep(state.step + 1, true));
  let raf = 0;
  listen(play, "click", () => {
    if (raf) { stop(); return; }
    if (state.step >= t.programs - 1) setStep(0, false);
    // About ten seconds for the whole grid, at least one step per frame, at most 8 per second
    // for small grids so each step can be read.
    const perFrame = Math.max(1, Math.ceil(t.programs / 600));
    const minGap = t.programs <= 80 ? 125 : 0;
    let last = 0;
    play.textContent = "❚❚";
    const tick = (now) => {
      if (now - last >= minGap) {
        last = now;
        if (state.step >= t.programs - 1) { stop(); return; }
        setStep(state.step + perFrame, false);
      }
      raf = requestAnimationFrame(tick);
    };
    raf = requestAnimationFrame(tick);
  });
  function stop() {
    if (raf) cancelAnimationFrame(raf);
    raf = 0;
    play.textContent = "▶";
    model.set("selection", { step: state.step, program: t.programIds(state.step) });
    model.save_changes();
  }
  cleanups.push(() => { if (raf) cancelAnimationFrame(raf); });

  // theme changes (JupyterLab switches variables on <body>): re-read colours and redraw
  const observer = new MutationObserver(() => { colors = themeColors(root); drawAll(); });
  observer.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-name", "data-jp-theme-light", "class"] });
  cleanups.push(() => observer.disconnect());

  // Other views (Compare, Step, Pipeline) select a program by setting `selection` in Python.
  const onSelection = () => {
    const sel = model.get("selection");
    if (sel && typeof sel.step === "number" && sel.step !== state.step) setStep(sel.step, false);
  };
  model.on("change:selection", onSelection);
  cleanups.push(() => model.off("change:selection", onSelection));
  // A program pointed at in another view of this kernel (the pipeline timeline) lights up here.
  listen(window, "pallaslab:program", (e) => {
    const d = e.detail;
    if (d && d.source !== "grid" && d.kernel === payload.kernel && d.index === payload.index) {
      setHover(typeof d.step === "number" ? d.step : -1);
    }
  });

  buildSliders();
  layoutGrid();
  drawFindings();
  drawAll();
  onSelection();  // a program selected before this view was first drawn (Compare's "open")
  return () => { cleanups.forEach((f) => f()); root.remove(); };

  /**
   * A grid with no programs (a zero dimension): nothing to lay out, step or play. Say so, and
   * list the findings (`empty-grid`, output left unwritten).
   * @returns {() => void}
   */
  function renderEmpty() {
    root.append(h("p", "pl-dim pl-empty-grid",
      `no programs: grid ${tuple(payload.grid)} has a zero dimension, so the kernel body never runs and no block is copied`));
    const box = h("div", "pl-panel pl-findings-box");
    box.append(h("h4", "", "findings"));
    if (!payload.findings.length) box.append(h("p", "pl-ok", "No findings."));
    else {
      const ul = h("ul", "pl-findings");
      for (const f of payload.findings) {
        const li = h("li", `pl-finding pl-${f.severity}`);
        li.append(h("span", "pl-badge", f.severity), " ", h("code", "", f.code), " ", f.message);
        ul.append(li);
      }
      box.append(ul);
    }
    root.append(box);
    return () => root.remove();
  }
}

export default { render };
