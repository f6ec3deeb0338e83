// @ts-check
/**
 * The Grid/BlockSpec visualizer: the kernel's grid as cells and every operand as its blocks.
 * Hover or click a program to light its blocks in every operand; the scrubber and play button
 * walk programs in execution order, marking fetches and revisits; overlays show per-block fetch
 * counts, output coverage and findings. Plain ES module (anywidget `render`), no dependencies.
 * Everything user-derived is inserted with textContent, never as HTML.
 *
 * This entry builds the view's frame and wires its parts: `grid_tiling.js` (block indices over
 * the grid), `grid_panels.js` (the canvases' panels, their geometry and the shared view state),
 * `grid_draw.js` (painting), `grid_overlays.js` (info table, legend, findings list) and
 * `grid_interaction.js` (toolbar, hover, click, play, selection).
 */

import { h, num, themeColors, lifetime, listen, onAbort } from "./prelude.js";
import { Tiling, GridLayout } from "./grid_tiling.js";
import { operandPanels } from "./grid_panels.js";
import { renderEmptyGrid } from "./grid_overlays.js";
import { makeControls, startInteraction } from "./grid_interaction.js";
export { toInt32, rgb } from "./prelude.js";
export { Tiling, GridLayout } from "./grid_tiling.js";
export { CELL_THRESHOLD } from "./grid_draw.js";

/** @typedef {import("./grid_panels.js").Model} Model */
/** @typedef {import("./grid_tiling.js").GridPayload} GridPayload */
/** @typedef {import("./grid_panels.js").GridView} GridView */

/**
 * The title line: kernel, grid, programs, semantics, source.
 * @param {GridPayload} payload
 */
function gridHeader(payload) {
  const head = h("div", "pl-head");
  const title = h("span", "pl-title");
  title.append("Grid ", h("code", "", payload.kernel));
  const gridText = payload.grid.length ? payload.grid.join(" × ") : "()";
  head.append(title, h("span", "pl-dim",
    `${gridText} = ${num(payload.programs)} programs` +
    (payload.semantics ? ` · ${payload.semantics.join(", ")}` : "") +
    (payload.source ? ` · ${payload.source}` : "")));
  return head;
}

/**
 * Mount the grid view: the kernel's own grid, and a picker for its nested `emit_pipeline`s
 * (each drawn exactly like a pallas_call grid from its own payload). A kernel with nested
 * pipelines opens on the first: the pipeline is what moves the data, the kernel's own grid
 * only runs it. The picker sits in the shown grid's header, a control like its others.
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  /** @type {GridPayload} */
  const payload = model.get("payload");
  const nested = payload.pipelines || [];
  if (!nested.length) return mountGrid(model, el, payload);
  const outer = h("div", "pallaslab pl-grid-nested");
  el.appendChild(outer);
  const select = /** @type {HTMLSelectElement} */ (h("select", "pl-pipeline-select"));
  select.setAttribute("aria-label", "grid shown");
  const own = payload.programs > 0 ? `kernel grid ${payload.grid.length ? payload.grid.join(" × ") : "()"}`
    : "kernel (no grid)";
  select.append(new Option(own, "-1"), ...nested.map((n, i) => new Option(n.label, String(i))));
  select.value = "0";
  const picker = h("label", "pl-group pl-pipeline-pick");
  picker.append(h("span", "", "show"), select);
  let cleanup = () => {};
  const pick = () => {
    cleanup();
    const i = Number(select.value);
    const shown = i < 0 ? payload : nested[i].payload;
    cleanup = mountGrid(model, outer, shown, i < 0 ? "" : `nested ${nested[i].label}`, picker);
  };
  const outerLife = lifetime(outer);
  listen(select, "change", pick, outerLife.signal);
  pick();
  onAbort(outerLife.signal, () => cleanup());
  return outerLife.cleanup;
}

/**
 * Mount one grid (the kernel's or a nested pipeline's) into `el`.
 * @param {Model} model @param {HTMLElement} el @param {GridPayload} payload
 * @param {string} [prefix] the nested pipeline shown ("" for the kernel's own grid)
 * @param {HTMLElement} [picker] the choice of grid, put in the header
 * @returns {() => void} cleanup
 */
function mountGrid(model, el, payload, prefix = "", picker = undefined) {
  const t = new Tiling(payload);
  const root = h("div", "pallaslab pl-grid");
  el.appendChild(root);
  const head = gridHeader(payload);
  if (picker) head.append(picker);
  root.appendChild(head);
  if (prefix) root.appendChild(h("div", "pl-dim pl-nested-label", prefix));
  if (payload.note) root.appendChild(h("p", "pl-dim pl-grid-note", payload.note));
  root.dataset.programs = String(t.programs);
  if (!(t.programs > 0)) {
    if (payload.note) return () => root.remove();
    return renderEmptyGrid(root, payload);
  }

  const { signal, cleanup } = lifetime(root);
  /** @type {import("./grid_panels.js").GridState} */
  const state = {
    step: 0, hover: -1, axes: payload.axes.slice(), fixed: new Array(t.rank).fill(0),
    overlay: "none", finding: null,
  };
  const colors = themeColors(root);
  const controls = makeControls(t, state, payload.findings.length);
  const legend = h("div", "pl-legend");
  // main: [left: [programs panel, side: [info, findings]], operand panels]
  const main = h("div", "pl-main");
  const left = h("div", "pl-left");
  const gridPanel = h("div", "pl-panel pl-programs");
  const operandsBox = h("div", "pl-operands");
  const side = h("div", "pl-side");
  const info = h("div", "pl-info");
  const findingsBox = h("div", "pl-findings-box");
  side.append(info, findingsBox);
  left.append(gridPanel, side);
  main.append(left, operandsBox);
  root.append(controls.bar, legend, main);

  /** @type {GridView} */
  const v = {
    payload, t, model, root, state, colors, controls,
    layout: new GridLayout(t, state.axes, state.fixed), cell: 1, gridCanvas: null,
    gridPanel, gridCaption: h("div", "pl-axislabel"),
    panels: operandPanels(payload.operands, operandsBox), blockHover: null,
    info, findingsBox, legend, signal,
    listen: (target, type, fn) => listen(target, type, fn, signal),
  };
  startInteraction(v);
  return cleanup;
}

export default { render };
