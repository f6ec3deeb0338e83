// @ts-check
/**
 * The grid view's interaction: the toolbar (drawn axes, sliders for the other axes, overlay,
 * play / step / scrub), hovering and clicking programs and operand blocks, the findings list's
 * hover and click, and following the outside world (the theme, a program selected from Python
 * or pointed at in another view). Every state change ends in a redraw here.
 */

import { h, tuple, num, themeColors, onAbort, onModel, watchTheme } from "./prelude.js";
import { GridLayout } from "./grid_tiling.js";
import { layoutGridPanel, displayed, operandSlice } from "./grid_panels.js";
import { drawGrid, drawOperand, drawHighlights } from "./grid_draw.js";
import { describeProgram, drawLegend, drawFindings } from "./grid_overlays.js";

/** @typedef {import("./grid_panels.js").GridView} GridView */
/** @typedef {import("./grid_panels.js").GridState} GridState */
/** @typedef {import("./grid_panels.js").Controls} Controls */
/** @typedef {import("./grid_tiling.js").Tiling} Tiling */

// ---- the toolbar ----------------------------------------------------------------------------

/**
 * The toolbar's elements (not yet bound: `startInteraction` does that).
 * @param {Tiling} t @param {GridState} state @param {number} findings how many findings
 * @returns {Controls}
 */
export function makeControls(t, state, findings) {
  const bar = h("div", "pl-toolbar");
  const sliders = h("span", "pl-group pl-sliders");
  /** @type {HTMLSelectElement | null} */
  let rowSel = null;
  /** @type {HTMLSelectElement | null} */
  let colSel = null;
  if (t.rank >= 2) {
    const grp = h("span", "pl-group");
    rowSel = axisSelect(t, "pl-axis-row", state.axes[0]);
    colSel = axisSelect(t, "pl-axis-col", state.axes[1]);
    grp.append(h("span", "", "rows"), rowSel, h("span", "", "cols"), colSel);
    bar.append(grp, sliders);
  }

  const ovGroup = h("label", "pl-group");
  const overlay = /** @type {HTMLSelectElement} */ (h("select", "pl-overlay"));
  for (const [value, label] of [["none", "none"], ["fetches", "fetch counts"],
    ["coverage", "coverage"], ["findings", `findings (${findings})`]]) {
    const o = /** @type {HTMLOptionElement} */ (h("option", "", label)); o.value = value; overlay.append(o);
  }
  ovGroup.append(h("span", "", "overlay"), overlay);
  bar.append(ovGroup);

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
  return { bar, rowSel, colSel, sliders, sliderInputs: [], overlay, play, prev, next, range, stepNum };
}

/** A select of every grid axis. @param {Tiling} t @param {string} cls @param {number} value */
function axisSelect(t, cls, value) {
  const sel = /** @type {HTMLSelectElement} */ (h("select", cls));
  for (let k = 0; k < t.rank; k++) {
    const o = /** @type {HTMLOptionElement} */ (h("option", "", `${t.axisName(k)} (${t.grid[k]})`));
    o.value = String(k);
    sel.append(o);
  }
  sel.value = String(value);
  return sel;
}

/** A slider for every grid axis not drawn (it picks the slice shown). @param {GridView} v */
function buildSliders(v) {
  const { t, state, controls } = v;
  controls.sliders.replaceChildren();
  controls.sliderInputs = [];
  for (let k = 0; k < t.rank; k++) {
    if (k === state.axes[0] || k === state.axes[1]) continue;
    const lab = h("label", "pl-group");
    const inp = /** @type {HTMLInputElement} */ (h("input", "pl-slider"));
    inp.type = "range"; inp.min = "0"; inp.max = String(t.grid[k] - 1);
    inp.value = String(state.fixed[k]); inp.dataset.axis = String(k);
    const val = h("span", "pl-mono", `${state.fixed[k]}`);
    lab.append(h("span", "", `${t.axisName(k)}`), inp, val);
    inp.addEventListener("input", () => {
      state.fixed[k] = Number(inp.value);
      val.textContent = inp.value;
      redraw(v);
    });
    controls.sliders.append(lab);
    controls.sliderInputs.push(inp);
  }
}

/** The sliders follow `state.fixed` (after a step into another slice). @param {GridView} v */
function syncSliders(v) {
  for (const inp of v.controls.sliderInputs) {
    inp.value = String(v.state.fixed[Number(inp.dataset.axis)]);
    const val = inp.nextElementSibling;
    if (val) val.textContent = inp.value;
  }
}

/** @param {GridView} v */
function bindToolbar(v) {
  const { t, state, controls, listen } = v;
  const { rowSel, colSel, overlay, range, prev, next } = controls;
  if (rowSel && colSel) {
    const onAxes = (/** @type {number} */ which) => () => {
      let r = Number(rowSel.value), c = Number(colSel.value);
      if (r === c) {  // keep the two axes distinct: the other one takes the old value (swap)
        if (which === 0) { c = state.axes[0]; colSel.value = String(c); }
        else { r = state.axes[1]; rowSel.value = String(r); }
      }
      state.axes = [r, c];
      buildSliders(v); relayoutGrid(v); redraw(v);
    };
    listen(rowSel, "change", onAxes(0));
    listen(colSel, "change", onAxes(1));
  }
  listen(overlay, "change", () => { state.overlay = overlay.value; redraw(v); });
  listen(range, "input", () => setStep(v, Number(range.value), false));
  listen(range, "change", () => setStep(v, Number(range.value), true));
  listen(prev, "click", () => setStep(v, state.step - 1, true));
  listen(next, "click", () => setStep(v, state.step + 1, true));
  bindPlay(v, t);
}

/**
 * Play walks the programs in execution order: about ten seconds for the whole grid, at least
 * one step per frame, at most 8 per second for small grids so each step can be read.
 * @param {GridView} v @param {Tiling} t
 */
function bindPlay(v, t) {
  const { state, controls: { play } } = v;
  let raf = 0;
  const stop = () => {
    if (raf) cancelAnimationFrame(raf);
    raf = 0;
    play.textContent = "▶";
    selectInPython(v, state.step);
  };
  v.listen(play, "click", () => {
    if (raf) { stop(); return; }
    if (state.step >= t.programs - 1) setStep(v, 0, false);
    const perFrame = Math.max(1, Math.ceil(t.programs / 600));
    const minGap = t.programs <= 80 ? 125 : 0;
    let last = 0;
    play.textContent = "❚❚";
    const tick = (/** @type {number} */ now) => {
      if (now - last >= minGap) {
        last = now;
        if (state.step >= t.programs - 1) { stop(); return; }
        setStep(v, state.step + perFrame, false);
      }
      raf = requestAnimationFrame(tick);
    };
    raf = requestAnimationFrame(tick);
  });
  onAbort(v.signal, () => { if (raf) cancelAnimationFrame(raf); });
}

// ---- the canvases ---------------------------------------------------------------------------

/**
 * (Re)build the programs panel for the drawn axes and bind its canvas: hover shows a program,
 * click makes it the current one.
 * @param {GridView} v
 */
function relayoutGrid(v) {
  const top = layoutGridPanel(v, new GridLayout(v.t, v.state.axes, v.state.fixed)).top.canvas;
  v.listen(top, "mousemove", (e) => setHover(v, stepAtEvent(v, e)));
  v.listen(top, "mouseleave", () => setHover(v, -1));
  v.listen(top, "click", (e) => {
    const s = stepAtEvent(v, e);
    if (s >= 0) setStep(v, s, true);
  });
}

/** The step under the pointer on the programs canvas, or -1. @param {GridView} v @param {MouseEvent} e */
function stepAtEvent(v, e) {
  const rect = /** @type {HTMLCanvasElement} */ (e.target).getBoundingClientRect();
  const c = Math.floor((e.clientX - rect.left) / v.cell);
  const r = Math.floor((e.clientY - rect.top) / v.cell);
  if (r < 0 || c < 0 || r >= v.layout.rows || c >= v.layout.cols) return -1;
  return v.layout.stepAt(r, c);
}

/** @param {GridView} v */
function bindOperandPanels(v) {
  for (const p of v.panels) {
    v.listen(p.cv.top.canvas, "mousemove", (e) => onOperandMove(v, p, e));
    v.listen(p.cv.top.canvas, "mouseleave", () => { v.blockHover = null; showProgram(v); });
  }
}

/**
 * Hovering a block of an operand: outline every program of the shown grid slice whose block
 * for that operand it is (which programs touch this block?).
 * @param {GridView} v @param {import("./grid_panels.js").OperandPanel} p @param {MouseEvent} e
 */
function onOperandMove(v, p, e) {
  const { t, layout } = v;
  const o = p.o;
  const rect = /** @type {HTMLCanvasElement} */ (e.target).getBoundingClientRect();
  const ex = p.spans[1][0] + (e.clientX - rect.left) / p.sx;
  const ey = p.spans[0][0] + (e.clientY - rect.top) / p.sy;
  const target = operandSlice(v, p);
  const [dr, dc] = p.dims;
  target[dc] = Math.floor((ex + p.op.offset[dc]) / p.op.scale[dc]);
  if (dr >= 0) target[dr] = Math.floor((ey + p.op.offset[dr]) / p.op.scale[dr]);
  if (v.blockHover && v.blockHover.o === o && v.blockHover.block.join() === target.join()) return;
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
  v.blockHover = { o, block: target, steps };
  p.info.textContent = `block ${tuple(target)}: ${steps.length ? `${num(steps.length)} program(s) in this slice use it` : "no program in this slice uses it"}`;
  showProgram(v);
}

// ---- state changes --------------------------------------------------------------------------

/** Redraw everything: the programs, every operand, the highlights and the legend. @param {GridView} v */
function redraw(v) {
  v.layout.fixed = v.state.fixed;
  drawGrid(v);
  for (const p of v.panels) drawOperand(v, p);
  showProgram(v);
  drawLegend(v);
}

/** Light the shown program and its blocks, and describe it. @param {GridView} v */
function showProgram(v) {
  drawHighlights(v);
  describeProgram(v, displayed(v));
}

/** Show the hovered program (-1: none, show the current one). @param {GridView} v @param {number} s */
function setHover(v, s) {
  const { state, panels } = v;
  if (s === state.hover) return;
  const before = displayed(v);
  state.hover = s;
  // operand slices can change with the program: redraw bases only when they do
  if (panels.some((p) => p.op.shape.length > 2) && before !== displayed(v)) { for (const p of panels) drawOperand(v, p); }
  showProgram(v);
}

/**
 * Move the current program; bring its slice into view. `sync`: tell Python (`selection`).
 * @param {GridView} v @param {number} s @param {boolean} sync
 */
function setStep(v, s, sync) {
  const { t, state } = v;
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
    if (moved) syncSliders(v);
  }
  if (prevStep !== s) redraw(v);
  else showProgram(v);
  if (sync) selectInPython(v, s);
}

/** @param {GridView} v @param {number} s */
function selectInPython(v, s) {
  v.model.set("selection", { step: s, program: v.t.programIds(s) });
  v.model.save_changes();
}

// ---- the outside world ----------------------------------------------------------------------

/**
 * Follow the theme, selections made in Python and programs pointed at in other views.
 * @param {GridView} v
 * @returns {() => void} applies the selection already made (before this view was drawn)
 */
function followOutside(v) {
  const { model, state, payload } = v;
  // theme changes (JupyterLab switches variables on <body>): re-read colours and redraw
  const retheme = () => { v.colors = themeColors(v.root); redraw(v); };
  watchTheme(retheme, v.signal);
  // Drawn detached (JupyterLab renders outputs before attaching them), the colours were the
  // light fallbacks: read the theme's once the view is in the document.
  const whenAttached = () => {
    if (v.signal.aborted) return;
    if (v.root.isConnected) retheme(); else requestAnimationFrame(whenAttached);
  };
  if (!v.root.isConnected) requestAnimationFrame(whenAttached);

  // Other views (Compare, Step, Pipeline) select a program by setting `selection` in Python.
  const onSelection = () => {
    const sel = model.get("selection");
    if (sel && typeof sel.step === "number" && sel.step !== state.step) setStep(v, sel.step, false);
  };
  onModel(model, "change:selection", onSelection, v.signal);
  // A program pointed at in another view of this kernel (the pipeline timeline) lights up here.
  v.listen(window, "pallaslab:program", (e) => {
    const d = e.detail;
    if (d && d.source !== "grid" && d.kernel === payload.kernel && d.index === payload.index) {
      setHover(v, typeof d.step === "number" ? d.step : -1);
    }
  });
  return onSelection;
}

/**
 * Bind every control and canvas, draw the view, then apply a program selected before it was
 * drawn (Compare's "open in stepper").
 * @param {GridView} v
 */
export function startInteraction(v) {
  bindToolbar(v);
  bindOperandPanels(v);
  const applySelection = followOutside(v);
  buildSliders(v);
  relayoutGrid(v);
  drawFindings(v, {
    onHover: (f) => { v.state.finding = f; showProgram(v); },
    onPick: (f) => {
      if (f.steps.length) setStep(v, f.steps[0], true);
      v.state.overlay = "findings"; v.controls.overlay.value = "findings"; redraw(v);
    },
  });
  redraw(v);
  applySelection();
}
