// @ts-check
/**
 * The grid view's data: the payload's types and the block-index arithmetic over the whole grid
 * (`Tiling`: which block every operand sees at every step, copies, per-block counts) and how the
 * grid is laid out as a 2-D picture (`GridLayout`). No DOM here.
 */

import { toInt32 } from "./prelude.js";

/** @typedef {{affine: number[] | null, table: number | null}} IndexColumn */
/**
 * @typedef {{origin: string, param?: string | null, label?: string, role: string,
 *   dtype: string, memory_space: string,
 *   windowed: boolean, shape: number[], block_shape: (number | null)[], extent: number[],
 *   scale: number[], offset: number[], index: IndexColumn[], size?: (IndexColumn | null)[],
 *   lo: number[], hi: number[],
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
 *   tables: (DataView | ArrayBuffer | ArrayBufferView)[],
 *   pipelines?: NestedGrid[], note?: string | null,
 *   accesses?: import("./grid_accesses.js").GridAccesses | null}} GridPayload
 * @typedef {{label: string, payload: GridPayload}} NestedGrid a nested `emit_pipeline`'s grid
 */

/** Per-block counts are not kept for operands with more blocks than this. */
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

  /** A grid axis's name (from the kernel's grid names), or "axis k". @param {number} k */
  axisName(k) {
    return (this.payload.grid_names && this.payload.grid_names[k]) || `axis ${k}`;
  }

  /**
   * Program ids of a step (execution order is lexicographic, last dim fastest).
   * @param {number} step @param {number[]} [out]
   */
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

  /** Block index of operand `o` at `step` along dimension `d`. @param {number} o @param {number} d @param {number} step */
  indexAt(o, d, step) {
    return this.columnAt(this.operands[o].index[d], step);
  }

  /**
   * Elements of operand `o`'s block at `step` along dimension `d`: its extent, or the
   * step's own size where it varies (pl.BoundedSlice dims).
   * @param {number} o @param {number} d @param {number} step
   */
  sizeAt(o, d, step) {
    const col = this.operands[o].size?.[d];
    return col ? this.columnAt(col, step) : this.operands[o].extent[d];
  }

  /** A per-step column's value: a shared table's entry, or affine in the program ids. */
  columnAt(/** @type {IndexColumn} */ col, /** @type {number} */ step) {
    if (col.table !== null) return this.tables[col.table][step];
    const a = /** @type {number[]} */ (col.affine);
    let v = a[0];
    for (let k = 0; k < this.rank; k++) {
      if (a[k + 1]) v += a[k + 1] * (Math.floor(step / this.strides[k]) % this.grid[k]);
    }
    return v;
  }

  /** @param {number} o @param {number} step @returns {number[]} */
  blockIndex(o, step) {
    const n = this.operands[o].index.length;
    const out = new Array(n);
    for (let d = 0; d < n; d++) out[d] = this.indexAt(o, d, step);
    return out;
  }

  /** Does a copy start at this step (its block differs from the previous step's)? @param {number} o @param {number} step */
  isFetch(o, step) {
    if (step === 0) return true;
    const n = this.operands[o].index.length;
    for (let d = 0; d < n; d++) {
      if (this.indexAt(o, d, step) !== this.indexAt(o, d, step - 1)) return true;
      if (this.sizeAt(o, d, step) !== this.sizeAt(o, d, step - 1)) return true;
    }
    return false;
  }

  /**
   * Is an output block written back to HBM after this step? On TPU the pipeline keeps an
   * output block in VMEM over a run of consecutive steps on it and writes it back once, at the
   * run's last step (the next step's block differs, or the grid ends).
   * @param {number} o @param {number} step
   */
  isWriteBack(o, step) {
    if (step >= this.programs - 1) return true;
    return this.isFetch(o, step + 1);
  }

  /** Does this step copy the operand's block: fetch an input, write back an output? @param {number} o @param {number} step */
  isCopy(o, step) {
    return this.operands[o].role === "output" ? this.isWriteBack(o, step) : this.isFetch(o, step);
  }

  /**
   * Element range [start, stop) of a block along each dimension (clipped to nothing); with a
   * step, the block as that step sees it (a pl.BoundedSlice's size varies per step).
   * @param {number} o @param {number[]} block @param {number} [step]
   * @returns {number[][]}
   */
  elementRange(o, block, step = -1) {
    const op = this.operands[o];
    return block.map((b, d) => {
      const start = b * op.scale[d] - op.offset[d];
      return [start, start + (step < 0 ? op.extent[d] : this.sizeAt(o, d, step))];
    });
  }

  /** Size of the block-index box [lo, hi] of an operand, or 0 when it is too large to count. @param {number} o */
  boxSize(o) {
    const op = this.operands[o];
    let n = 1;
    for (let d = 0; d < op.lo.length; d++) n *= op.hi[d] - op.lo[d] + 1;
    return n > MAX_COUNT_CELLS ? 0 : n;
  }

  /** Position of a block index in the operand's [lo, hi] box, or -1 outside it. @param {number} o @param {number[]} block */
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

  /** A whole column of block indices (materialised for affine columns). @param {number} o @param {number} d */
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

  /** Step at a cell, or -1 (past the end of a wrapped 1-D grid). @param {number} r @param {number} c */
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

  /** Cell of a step, or null when the step is in another slice. @param {number} step */
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
