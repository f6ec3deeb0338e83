// @ts-check
/**
 * The grid view's text around the canvases: the shown program's info table (its block, element
 * range and copy in every operand) and each operand panel's caption, the legend of the current
 * overlay, and the findings list (hover lights a finding's programs and blocks, click goes
 * there). What a hover or click does is passed in by `grid_interaction.js`.
 */

import { h, tuple, num, mix, findingsList } from "./prelude.js";
import { accessText, accessColors } from "./grid_accesses.js";

/** @typedef {import("./grid_panels.js").GridView} GridView */
/** @typedef {import("./grid_tiling.js").GridFinding} GridFinding */
/** @typedef {import("./grid_tiling.js").GridPayload} GridPayload */

/**
 * Describe the shown program: the info table, the operand panels' captions, the scrubber's
 * position and the slice caption; the root's data attributes say what is shown (for tests).
 * @param {GridView} v @param {number} s the shown step
 */
export function describeProgram(v, s) {
  const { t, state, controls } = v;
  v.info.replaceChildren(programLine(v, s), blocksTable(v, s));
  const said = accessText(v, s);
  if (said) v.info.append(h("div", "pl-accesses-line", said));
  for (const p of v.panels) {
    if (v.blockHover && v.blockHover.o === p.o) continue;  // the hovered block's caption stays
    const block = t.blockIndex(p.o, s);
    const lead = p.op.shape.length > 2 ? ` · slice ${tuple(block.slice(0, p.op.shape.length - 2))}` : "";
    p.info.textContent = `block ${tuple(block)}${lead}`;
  }
  v.root.dataset.step = String(state.step);
  v.root.dataset.hover = String(state.hover);
  v.root.dataset.shown = String(s);
  controls.range.value = String(state.step);
  controls.stepNum.textContent = `${num(state.step + 1)} / ${num(t.programs)}`;
  v.gridCaption.textContent = t.rank > 2
    ? `slice ${t.grid.map((g, k) => (k === state.axes[0] || k === state.axes[1] ? ":" : String(state.fixed[k]))).join(", ")}`
    : "";
}

/** "program (i, j)  step n (n+1 of N)". @param {GridView} v @param {number} s */
function programLine(v, s) {
  const { t } = v;
  const line = h("div");
  line.append(h("span", "pl-program", `program ${tuple(t.programIds(s))}`),
    h("span", "pl-dim", `  step ${num(s)} (${num(s + 1)} of ${num(t.programs)})${v.state.hover >= 0 ? " · hover" : ""}`));
  return line;
}

/**
 * Every operand's block at step `s`: its index, element range and whether it is copied.
 * @param {GridView} v @param {number} s
 */
function blocksTable(v, s) {
  const { t } = v;
  const tbl = h("table", "pl-table pl-blocks");
  const thead = h("tr");
  for (const c of ["operand", "block index", "elements", "copy"]) thead.append(h("th", "", c));
  tbl.append(thead);
  t.operands.forEach((op, o) => {
    const tr = h("tr");
    tr.dataset.origin = op.origin;
    const block = t.blockIndex(o, s);
    const ranges = t.elementRange(o, block, s).map(([a, b], d) =>
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
  return tbl;
}

/** The legend of the current overlay's colours. @param {GridView} v */
export function drawLegend(v) {
  const { colors, state, legend } = v;
  legend.replaceChildren();
  /** @param {string} color @param {string} text */
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
  if (v.t.operands.some((op) => op.role === "output" && op.windowed)) {
    legend.append(h("span", "pl-legend-note",
      "in VMEM: the output block stays in VMEM across consecutive programs, with no copy back until its block index changes or the last program ends (then: write-back)"));
  }
  if (v.payload.accesses && v.payload.accesses.steps.length) {
    const c = accessColors(v);
    item(c.read, "inside its block: read"); item(c.write, "written"); item(c.both, "read and written");
    item(c.masked, "masked off (not touched)");
  }
}

/**
 * The findings list: hovering an item calls `onHover(f)` (`null` on leaving), clicking calls
 * `onPick(f)`.
 * @param {GridView} v
 * @param {{onHover: (f: GridFinding | null) => void, onPick: (f: GridFinding) => void}} on
 */
export function drawFindings(v, on) {
  v.findingsBox.replaceChildren(findingsList(v.payload.findings, (li, f, i) => {
    li.dataset.index = String(i);
    li.title = f.steps.length ? "click: go to the first program concerned" : "";
    li.addEventListener("mouseenter", () => on.onHover(f));
    li.addEventListener("mouseleave", () => on.onHover(null));
    li.addEventListener("click", () => on.onPick(f));
  }));
}

/**
 * A grid with no programs (a zero dimension): nothing to lay out, step or play. Say so, and
 * list the findings (`empty-grid`, output left unwritten).
 * @param {HTMLElement} root @param {GridPayload} payload
 * @returns {() => void}
 */
export function renderEmptyGrid(root, payload) {
  root.append(h("p", "pl-dim pl-empty-grid",
    `no programs: grid ${tuple(payload.grid)} has a zero dimension, so the kernel body never runs and no block is copied`));
  const box = h("div", "pl-panel pl-findings-box");
  box.append(h("h4", "", "findings"), findingsList(payload.findings));
  root.append(box);
  return () => root.remove();
}
