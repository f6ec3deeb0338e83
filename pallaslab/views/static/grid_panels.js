// @ts-check
/**
 * The grid view's panels and the state they share: the programs panel and one panel per
 * operand (each a canvas pair sized to fit, a title and a caption), where a block or a program
 * lies in them, and the `GridView` every grid module takes. What is painted on the canvases is
 * `grid_draw.js`'s.
 */

import { h, tuple, num, canvas } from "./prelude.js";

/**
 * What the grid tells Python (and other views tell it): the program selected.
 * @typedef {{step?: number, program?: number[]}} GridSelection
 * @typedef {{payload: GridPayload, selection: GridSelection}} GridModel the model's keys
 * @typedef {import("./prelude.js").Model<GridModel>} Model
 */
/** @typedef {import("./prelude.js").Colors} Colors */
/** @typedef {import("./grid_tiling.js").GridPayload} GridPayload */
/** @typedef {import("./grid_tiling.js").GridOperand} GridOperand */
/** @typedef {import("./grid_tiling.js").GridFinding} GridFinding */
/** @typedef {import("./grid_tiling.js").Tiling} Tiling */
/** @typedef {{canvas: HTMLCanvasElement, ctx: CanvasRenderingContext2D}} Layer */
/** @typedef {{stack: HTMLElement, base: Layer, top: Layer, w: number, h: number, dpr: number}} CanvasStack */
/**
 * An operand's panel: its drawn dims (rows, cols; -1 = none), the element box shown along them,
 * CSS pixels per element, its canvases and its caption.
 * @typedef {{o: number, op: GridOperand, dims: number[], spans: number[][], sx: number,
 *   sy: number, cv: CanvasStack, info: HTMLElement}} OperandPanel
 */
/** @typedef {{o: number, block: number[], steps: number[]}} BlockHover a hovered operand block */
/**
 * @typedef {{step: number, hover: number, axes: number[], fixed: number[], overlay: string,
 *   finding: GridFinding | null}} GridState the current program (scrubber / click), the
 *   hovered one (-1 when none), the drawn axes and the program id of every other axis, the
 *   overlay, and the finding hovered in the list
 */
/**
 * The toolbar's controls (made by `grid_interaction.js`).
 * @typedef {{bar: HTMLElement, rowSel: HTMLSelectElement | null, colSel: HTMLSelectElement | null,
 *   sliders: HTMLElement, sliderInputs: HTMLInputElement[], overlay: HTMLSelectElement,
 *   play: HTMLButtonElement, prev: HTMLButtonElement, next: HTMLButtonElement,
 *   range: HTMLInputElement, stepNum: HTMLElement}} Controls
 */
/**
 * One mounted grid view: made by `render` (grid.js); the drawing, overlay and interaction
 * functions all take it. `layout`, `cell` and `gridCanvas` change when the drawn axes do.
 * @typedef {{payload: GridPayload, t: Tiling, model: Model, root: HTMLElement,
 *   state: GridState, colors: Colors, controls: Controls,
 *   layout: import("./grid_tiling.js").GridLayout, cell: number, gridCanvas: CanvasStack | null,
 *   gridPanel: HTMLElement, gridCaption: HTMLElement,
 *   panels: OperandPanel[], blockHover: BlockHover | null,
 *   info: HTMLElement, findingsBox: HTMLElement, legend: HTMLElement,
 *   listen: (target: EventTarget, type: string, fn: (e: any) => void) => void,
 *   signal: AbortSignal}} GridView
 */

const MAX_GRID_W = 440;
const MAX_GRID_H = 380;
const MAX_OP_W = 260;
const MAX_OP_H = 220;

// ---- canvases and panels --------------------------------------------------------------------

/**
 * A canvas pair (base drawing + highlight layer) sized in CSS pixels.
 * @param {HTMLElement} parent
 * @param {number} w
 * @param {number} hgt
 * @returns {CanvasStack}
 */
function canvasStack(parent, w, hgt) {
  const stack = h("div", "pl-stack");
  const dpr = window.devicePixelRatio || 1;
  const make = () => {
    const [c, ctx] = canvas(w, hgt);
    stack.appendChild(c);
    return { canvas: c, ctx };
  };
  const base = make();
  const top = make();
  top.canvas.classList.add("pl-hit");
  parent.appendChild(stack);
  return { stack, base, top, w, h: hgt, dpr };
}

/** The two array dimensions of an operand that are drawn (rows, cols); -1 = none. @param {GridOperand} op */
function drawnDims(op) {
  const n = op.shape.length;
  if (n === 0) return [-1, -1];
  if (n === 1) return [-1, 0];
  return [n - 2, n - 1];
}

/**
 * The element-space box an operand panel shows along one dimension: the array plus any block
 * that sticks out of it.
 * @param {GridOperand} op @param {number} d
 */
function dimSpan(op, d) {
  if (d < 0) return [0, 1];
  const lo = Math.min(0, op.lo[d] * op.scale[d] - op.offset[d]);
  const hi = Math.max(op.shape[d], op.hi[d] * op.scale[d] - op.offset[d] + op.extent[d]);
  return [lo, Math.max(hi, lo + 1)];
}

/**
 * Pixel size of a panel for an element box, keeping the aspect ratio within 1:6.
 * @param {number} rowsEl @param {number} colsEl @param {number} maxW @param {number} maxH
 */
function fitBox(rowsEl, colsEl, maxW, maxH) {
  const ratio = Math.min(6, Math.max(1 / 6, rowsEl / colsEl));
  let w = maxW, hh = w * ratio;
  if (hh > maxH) { hh = maxH; w = hh / ratio; }
  return [Math.max(24, Math.round(w)), Math.max(14, Math.round(hh))];
}

/**
 * (Re)build the programs panel for the drawn axes: its title, canvases and caption. Sets
 * `v.layout`, `v.cell` and `v.gridCanvas`; the caller binds the new canvas's events.
 * @param {GridView} v
 * @param {import("./grid_tiling.js").GridLayout} layout
 * @returns {CanvasStack}
 */
export function layoutGridPanel(v, layout) {
  const { t, state } = v;
  v.layout = layout;
  v.cell = Math.min(44, MAX_GRID_W / layout.cols, MAX_GRID_H / layout.rows);
  const w = Math.max(1, Math.ceil(layout.cols * v.cell)), hh = Math.max(1, Math.ceil(layout.rows * v.cell));
  v.gridPanel.replaceChildren();
  const title = h("h4", "", "programs");
  title.append(h("span", "pl-dim", t.rank >= 2
    ? `rows: ${t.axisName(state.axes[0])}, cols: ${t.axisName(state.axes[1])}`
    : t.rank === 1 ? `${num(t.programs)} in execution order, ${layout.cols} per row` : "one program"));
  v.gridPanel.append(title);
  const gc = canvasStack(v.gridPanel, w, hh);
  v.gridPanel.append(v.gridCaption);
  gc.top.canvas.dataset.role = "grid";
  Object.assign(gc.top.canvas.dataset, { cell: String(v.cell), rows: String(layout.rows), cols: String(layout.cols) });
  v.gridCanvas = gc;
  return gc;
}

/**
 * A panel for every operand with at least one drawn dimension, appended to `box`.
 * @param {import("./grid_tiling.js").GridOperand[]} operands
 * @param {HTMLElement} box
 * @returns {OperandPanel[]}
 */
export function operandPanels(operands, box) {
  /** @type {OperandPanel[]} */
  const panels = [];
  operands.forEach((op, o) => {
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
    box.append(panel);
    panels.push({ o, op, dims, spans, sx: w / colsEl, sy: hh / rowsEl, cv, info });
  });
  return panels;
}

// ---- geometry -------------------------------------------------------------------------------

/** The program shown: the hovered one, else the current one. @param {GridView} v */
export function displayed(v) { return v.state.hover >= 0 ? v.state.hover : v.state.step; }

/**
 * The slice of an operand's leading dims shown: those of the displayed program's block.
 * @param {GridView} v @param {OperandPanel} p
 */
export function operandSlice(v, p) {
  return v.t.blockIndex(p.o, displayed(v));
}

/**
 * Does a block of the operand lie in the shown slice (its leading dims match)?
 * @param {OperandPanel} p @param {number[]} block @param {number[]} slice
 */
export function inSlice(p, block, slice) {
  for (let d = 0; d < block.length; d++) {
    if (d === p.dims[0] || d === p.dims[1]) continue;
    if (block[d] !== slice[d]) return false;
  }
  return true;
}

/**
 * Rectangle (CSS px) of a block in an operand panel (as `step` sees it, when given).
 * @param {Tiling} t @param {OperandPanel} p @param {number[]} block @param {number} [step]
 */
export function blockRect(t, p, block, step = -1) {
  const rg = t.elementRange(p.o, block, step);
  const [r0, r1] = p.dims[0] < 0 ? [p.spans[0][0], p.spans[0][1]] : rg[p.dims[0]];
  const [c0, c1] = rg[p.dims[1]];
  return {
    x: (c0 - p.spans[1][0]) * p.sx, y: (r0 - p.spans[0][0]) * p.sy,
    w: (c1 - c0) * p.sx, h: (r1 - r0) * p.sy,
  };
}
