// @ts-check
/**
 * The Pipeline view's tracks: a timeline's event columns decoded from the wire, the layout
 * constants and the time formatting the timeline draws with. No DOM here.
 */

import { typed } from "./prelude.js";

/**
 * @typedef {DataView | ArrayBuffer | ArrayBufferView} Buffer
 * @typedef {{name: string, source: string, lanes: string[], kinds: string[], duration: number,
 *   count: number, step_kind: number, window: number[], lane_offsets: number[],
 *   max_duration: number[], lane: Buffer, kind: Buffer, start: Buffer, end: Buffer,
 *   program: Buffer, bins: number, busy: Buffer | null, bin_step: Buffer | null}} TrackPayload
 */

export const LABEL_W = 132;
export const LANE_H = 24;
export const AXIS_H = 20;
export const MIN_SPAN = 1e-7;

/** A track's columns decoded from the wire. */
export class Track {
  /** @param {TrackPayload} p */
  constructor(p) {
    this.p = p;
    this.lane = /** @type {Uint8Array} */ (typed(p.lane, Uint8Array));
    this.kind = /** @type {Uint8Array} */ (typed(p.kind, Uint8Array));
    this.start = /** @type {Float64Array} */ (typed(p.start, Float64Array));
    this.end = /** @type {Float64Array} */ (typed(p.end, Float64Array));
    this.program = /** @type {Int32Array} */ (typed(p.program, Int32Array));
    this.busy = p.busy ? /** @type {Float32Array} */ (typed(p.busy, Float32Array)) : null;
    this.binStep = p.bin_step ? /** @type {Int32Array} */ (typed(p.bin_step, Int32Array)) : null;
  }

  /** First row of `lane` whose start is >= t (rows of a lane are sorted by start). @param {number} lane @param {number} t */
  lowerBound(lane, t) {
    let lo = this.p.lane_offsets[lane];
    let hi = this.p.lane_offsets[lane + 1];
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.start[mid] < t) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  /** Is [t0, t1] inside the window whose events were all sent? @param {number} t0 @param {number} t1 */
  covers(t0, t1) {
    return !this.p.bins || (t0 >= this.p.window[0] && t1 <= this.p.window[1]);
  }

  /**
   * The event of `lane` under time t (within `tol` seconds), the shortest containing one.
   * @param {number} lane @param {number} t @param {number} tol
   * @returns {number} row, or -1
   */
  find(lane, t, tol) {
    const lo = this.p.lane_offsets[lane];
    let i = this.lowerBound(lane, t + tol) - 1;
    const stop = t - this.p.max_duration[lane] - tol;
    let best = -1;
    let bestLen = Infinity;
    for (let n = 0; i >= lo && this.start[i] >= stop && n < 4096; i--, n++) {
      if (this.end[i] + tol >= t) {
        const len = this.end[i] - this.start[i];
        if (len < bestLen) { best = i; bestLen = len; }
      }
    }
    return best;
  }

  /** Rows of one step in every lane. @param {number} step */
  stepRows(step) {
    const rows = [];
    for (let i = 0; i < this.program.length; i++) if (this.program[i] === step) rows.push(i);
    return rows;
  }
}

/**
 * Program ids of a step (execution order is lexicographic, last grid dimension fastest).
 * @param {number[]} grid
 * @param {number} step
 */
export function programIds(grid, step) {
  const out = new Array(grid.length);
  let s = step;
  for (let k = grid.length - 1; k >= 0; k--) { out[k] = s % grid[k]; s = Math.floor(s / grid[k]); }
  return out;
}

/** @param {number} t seconds */
export function fmtTime(t) {
  const a = Math.abs(t);
  /** @param {number} v @param {number} d */
  const f = (v, d) => v.toLocaleString("en-US", { maximumFractionDigits: d });
  if (a === 0) return "0";
  if (a < 1e-6) return `${f(t * 1e9, 1)} ns`;
  if (a < 1e-3) return `${f(t * 1e6, 3)} µs`;
  if (a < 1) return `${f(t * 1e3, 3)} ms`;
  return `${f(t, 3)} s`;
}

/** A 1-2-5 tick step giving about `n` ticks over `span`. @param {number} span @param {number} n */
export function tickStep(span, n) {
  const raw = span / n;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

/** @type {Record<string, string>} */
export const KIND_COLOR = { "copy-in": "--pl-info", compute: "--pl-accent", "write-back": "--pl-ok",
  kernel: "--pl-fg2", step: "--pl-accent", op: "--pl-info" };
