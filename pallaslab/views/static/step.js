// @ts-check
/**
 * The Step view: run a kernel program by program. Controls (reset, back, step, play, go to a
 * program, run to the next mismatch) set `selection = {action, n, program, nonce}`; Python runs
 * the stepper and sends a new payload. Shows the current program on a small grid (programs run
 * shaded, mismatching programs outlined), each operand's block as read and as written
 * (heatmaps), and the program's equations with their source lines and values.
 * Plain ES module (anywidget `render`), no dependencies; user-derived text via textContent only.
 */

import {
  h, tuple, float32, rgb, themeColors, canvas, drawHeatmap, blend, lifetime, onAbort, onModel, watchTheme,
} from "./prelude.js";
export { tuple, float32 } from "./prelude.js";

/**
 * @typedef {{rows: number, cols: number, shape: number[], factor: number[], note: string | null}} HeatMap
 * @typedef {{origin: string, param: string | null, role: string, dtype: string, block_index: number[], start: number[],
 *   block_shape: number[], changed: boolean, heat: HeatMap, before: number, after: number,
 *   lo: number | null, hi: number | null, summary_before: string, summary_after: string,
 *   label?: string}} StepBlock
 * @typedef {{index: number, primitive: string, text: string, source: string | null,
 *   values: string[]}} StepEquation
 * @typedef {{version: number, kernel: string, index: number, grid: number[], programs: number,
 *   position: number, step: number | null, program: number[] | null, blocks: StepBlock[],
 *   equations: StepEquation[], equations_total: number, mismatch_steps: number[],
 *   has_comparison: boolean, interactive: boolean, revision: number, error: string | null,
 *   tables: (DataView | ArrayBuffer | ArrayBufferView)[], notes?: string[]}} StepPayload
 */
/**
 * What the widget asks Python: an action (reset, back, step, goto, run_to_mismatch) with its
 * count or program; `nonce` tells requests apart.
 * @typedef {{action?: string, n?: number, program?: number[], nonce?: number}} StepSelection
 * @typedef {{payload: StepPayload, selection: StepSelection}} StepModel the model's keys
 * @typedef {import("./prelude.js").Model<StepModel>} Model
 * @typedef {import("./prelude.js").Colors} Colors
 */

const GRID_PX = 240;  // the small grid's larger side (CSS pixels)
const BLOCK_PX = 200;  // a block heatmap's larger side
const PLAY_GAP_MS = 150;



/**
 * Program ids of a step (execution order is row-major over the grid).
 * @param {number[]} grid @param {number} step
 */
export function programAt(grid, step) {
  const ids = new Array(grid.length).fill(0);
  for (let k = grid.length - 1; k >= 0; k--) { ids[k] = step % grid[k]; step = Math.floor(step / grid[k]); }
  return ids;
}

/**
 * "1, 2" / "(1, 2)" / "[1,2]" -> [1, 2]; null unless it names a program of the grid.
 * @param {string} text @param {number[]} grid
 */
export function parseProgram(text, grid) {
  const parts = text.replace(/[()[\]\s]/g, "").split(",").filter((s) => s !== "");
  if (parts.length !== grid.length || !parts.every((s) => /^\d+$/.test(s))) return null;
  const ids = parts.map(Number);
  return ids.every((v, k) => v < grid[k]) ? ids : null;
}

/**
 * The small grid: programs run shaded, mismatching ones outlined, the current one highlighted.
 * @param {StepPayload} p @param {Colors} colors
 */
function gridPanel(p, colors) {
  const fig = h("figure", "pl-step-grid");
  const g = p.grid;
  const rows = g.length >= 2 ? g[g.length - 2] : 1;
  const cols = g.length >= 1 ? g[g.length - 1] : 1;
  const cell = Math.min(32, GRID_PX / Math.max(rows, cols));
  const W = Math.max(1, cols * cell), H = Math.max(1, rows * cell);
  const [c, ctx] = canvas(W, H, "pl-step-gridcanvas");
  c.dataset.cell = String(cell);
  const cur = p.step === null ? null : programAt(g, p.step);
  // the slice drawn: leading dims fixed at the current program's (0 before any)
  const slice = rows * cols;
  let base = 0;
  if (cur && p.step !== null && g.length > 2) base = Math.floor(p.step / slice) * slice;
  ctx.fillStyle = colors.empty; ctx.fillRect(0, 0, W, H);
  const done = Math.max(0, Math.min(slice, p.position - base));
  ctx.fillStyle = colors.cell;
  const fullRows = Math.floor(done / cols);
  ctx.fillRect(0, 0, W, fullRows * cell);
  ctx.fillRect(0, fullRows * cell, (done % cols) * cell, cell);
  if (cell >= 4) {
    ctx.strokeStyle = colors.bg; ctx.lineWidth = 1;
    ctx.beginPath();
    for (let x = 1; x < cols; x++) { ctx.moveTo(x * cell, 0); ctx.lineTo(x * cell, H); }
    for (let y = 1; y < rows; y++) { ctx.moveTo(0, y * cell); ctx.lineTo(W, y * cell); }
    ctx.stroke();
  }
  ctx.strokeStyle = colors.error; ctx.lineWidth = Math.max(1, Math.min(2, cell / 6));
  for (const s of p.mismatch_steps) {
    if (s < base || s >= base + slice) continue;
    const r = Math.floor((s - base) / cols), q = (s - base) % cols;
    ctx.strokeRect(q * cell + 1, r * cell + 1, Math.max(1, cell - 2), Math.max(1, cell - 2));
  }
  if (cur && p.step !== null) {
    const r = Math.floor((p.step - base) / cols), q = (p.step - base) % cols;
    ctx.fillStyle = colors.hl;
    const m = Math.max(3, cell);
    ctx.fillRect(q * cell + (cell - m) / 2, r * cell + (cell - m) / 2, m, m);
  }
  fig.append(c);
  const label = g.length > 2 && cur ? `grid ${g.join("×")} · slice ${tuple(cur.slice(0, g.length - 2))}` : `grid ${g.join("×") || "()"}`;
  fig.append(h("figcaption", "pl-dim", `${label} · run: shaded · current: highlighted` + (p.mismatch_steps.length ? " · mismatching: outlined" : "")));
  return fig;
}

/**
 * One operand's block as read and as written: two heatmaps on one linear colour scale, NaN
 * (unwritten) tinted.
 * @param {StepPayload} p @param {StepBlock} b @param {Colors} colors
 */
function blockPanel(p, b, colors) {
  const fig = h("figure", "pl-step-block");
  fig.dataset.origin = b.origin;
  fig.dataset.changed = String(b.changed);
  const cap = h("figcaption");
  cap.append(h("code", "", b.label || b.origin), " ", h("span", "pl-dim", `${b.role} · block ${tuple(b.block_index)} · ${b.dtype}${tuple(b.block_shape)}`),
    " ", h("span", b.changed ? "pl-step-changed" : "pl-dim", b.changed ? "written" : "unchanged"));
  fig.append(cap);
  const pair = h("div", "pl-step-pair");
  const { rows, cols } = b.heat;
  const cell = Math.max(1, Math.min(16, BLOCK_PX / Math.max(rows, cols)));
  const W = Math.max(1, cols * cell), H = Math.max(rows === 1 ? 16 : 1, rows * cell);
  const lo = b.lo ?? 0, hi = b.hi ?? 0;
  const bg = rgb(colors.bg), acc = rgb(colors.accent), nan = rgb(colors.error);
  for (const [which, index, summary] of /** @type {[string, number, string][]} */ ([["as read", b.before, b.summary_before], ["as written", b.after, b.summary_after]])) {
    const box = h("div", "pl-step-heat");
    box.dataset.which = which === "as read" ? "before" : "after";
    const vals = float32(p.tables[index]);
    const [cv, ctx] = canvas(W, H, "pl-step-heatcanvas");
    drawHeatmap(ctx, rows, cols, W, H, (k) => {
      const v = vals[k];
      if (Number.isNaN(v)) return blend(bg, nan, 0.25);
      const t = hi > lo ? (Math.min(hi, Math.max(lo, v)) - lo) / (hi - lo) : 0.5;
      return blend(bg, acc, 0.08 + 0.92 * t);
    });
    box.append(h("div", "pl-dim", which), cv, h("div", "pl-mono pl-step-summary", summary));
    pair.append(box);
  }
  fig.append(pair);
  const scale = b.lo === null ? "no finite values" : `colour: ${b.lo.toPrecision(4)} … ${(b.hi ?? 0).toPrecision(4)}` +
    (b.heat.factor[0] > 1 || b.heat.factor[1] > 1 ? ` · cell = ${b.heat.factor.join("×")} elements (mean)` : "") +
    (b.heat.note ? ` · ${b.heat.note}` : "") + " · NaN (unwritten): tinted";
  fig.append(h("div", "pl-dim pl-step-scale", scale));
  return fig;
}

/** The program's equations with their source lines and values. @param {StepPayload} p */
function equationsBox(p) {
  const table = h("table", "pl-table pl-step-eqns");
  const hr = h("tr");
  ["#", "equation", "source", "value"].forEach((c) => hr.append(h("th", "", c)));
  table.append(hr);
  for (const e of p.equations) {
    const tr = h("tr");
    tr.dataset.index = String(e.index);
    tr.append(h("td", "num", String(e.index)), h("td", "pl-mono", e.text), h("td", "pl-mono pl-dim", e.source || "?"),
      h("td", "pl-mono", e.values.join("; ")));
    table.append(tr);
  }
  const sec = h("div", "pl-step-eqn-box");
  sec.append(h("div", "pl-step-h", `Program ${p.program ? tuple(p.program) : ""}: ${p.equations_total} equation(s)` +
    (p.equations_total > p.equations.length ? ` (first ${p.equations.length} shown)` : "")), table);
  return sec;
}

/** The Step view's state (playing, waiting for Python, the go-to text) and drawing. */
class StepView {
  /** @param {Model} model @param {HTMLElement} root */
  constructor(model, root) {
    this.model = model;
    this.root = root;
    this.nonce = 0;
    this.playing = false;
    this.busy = false;
    /** @type {ReturnType<typeof setTimeout> | 0} */
    this.timer = 0;
    this.gotoText = "";
  }

  /** @param {StepSelection} msg */
  send(msg) {
    this.busy = true;
    this.root.dataset.busy = "true";
    this.model.set("selection", { ...msg, nonce: ++this.nonce });
    this.model.save_changes();
  }

  stopPlay() {
    this.playing = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = 0;
  }

  /** A payload arrived: draw it, and while playing ask for the next program after a pause. */
  onPayload() {
    this.busy = false;
    this.draw();
    const p = this.model.get("payload");
    if (this.playing) {
      if (p.position >= p.programs || p.error) { this.stopPlay(); this.draw(); return; }
      this.timer = setTimeout(() => { this.timer = 0; if (this.playing) this.send({ action: "step", n: 1 }); }, PLAY_GAP_MS);
    }
  }

  draw() {
    const { root } = this;
    const p = this.model.get("payload");
    const colors = themeColors(root);
    root.replaceChildren();
    root.dataset.revision = String(p.revision);
    root.dataset.position = String(p.position);
    root.dataset.busy = String(this.busy);

    const head = h("div", "pl-head");
    const title = h("span", "pl-title");
    title.append("Step ", h("code", "", p.kernel));
    const where = h("span", "pl-step-where");
    where.append(`${p.position.toLocaleString("en-US")} / ${p.programs.toLocaleString("en-US")} programs run`);
    if (p.program) where.append(" · last ", h("code", "pl-step-program", `program ${tuple(p.program)}`), ` (step ${p.step})`);
    head.append(title, where);
    root.append(head, this.controls(p));
    if (!p.interactive) root.append(h("p", "pl-dim", "Static snapshot: run the notebook to step programs."));
    for (const n of p.notes ?? []) root.append(h("p", "pl-dim pl-step-note", n));
    if (p.error) root.append(h("p", "pl-finding pl-error pl-step-error", p.error));

    const body = h("div", "pl-step-body");
    root.append(body);
    if (p.programs > 0) body.append(gridPanel(p, colors));
    const blocks = h("div", "pl-step-blocks");
    body.append(blocks);
    if (!(p.programs > 0)) {
      blocks.append(h("p", "pl-dim pl-step-empty", `The grid ${tuple(p.grid)} has no programs: there is nothing to step.`));
    } else if (!p.blocks.length && !p.position) {
      blocks.append(h("p", "pl-dim", "No program has run yet: press ▶ to run the first."));
    }
    for (const b of p.blocks) blocks.append(blockPanel(p, b, colors));
    if (p.equations.length) root.append(equationsBox(p));
  }

  /** The toolbar: reset, back, step, play, go to a program, run to the next mismatch. @param {StepPayload} p */
  controls(p) {
    const bar = h("div", "pl-toolbar pl-step-controls");
    /** @param {string} label @param {string} action @param {string} tip @param {boolean} enabled @param {() => void} [fn] */
    const button = (label, action, tip, enabled, fn) => {
      const b = /** @type {HTMLButtonElement} */ (h("button", `pl-step-${action}`, label));
      b.title = tip;
      b.disabled = !p.interactive || !enabled;
      b.addEventListener("click", fn || (() => this.send({ action, n: 1 })));
      bar.append(b);
      return b;
    };
    const atEnd = p.position >= p.programs;
    button("reset", "reset", "undo every program", p.position > 0);
    button("◀", "back", "undo the last program", p.position > 0);
    button("▶", "step", "run the next program", !atEnd);
    const play = button(this.playing ? "❚❚" : "▶▶", "play", this.playing ? "pause" : "run programs one after another", !atEnd || this.playing, () => {
      if (this.playing) { this.stopPlay(); this.draw(); return; }
      this.playing = true;
      this.send({ action: "step", n: 1 });
    });
    play.classList.add("pl-step-play");
    const input = /** @type {HTMLInputElement} */ (h("input", "pl-step-goto-input"));
    input.placeholder = p.grid.map(() => "0").join(", ");
    input.value = this.gotoText;
    input.size = Math.max(6, p.grid.length * 4);
    input.disabled = !p.interactive || !(p.programs > 0);
    input.addEventListener("input", () => { this.gotoText = input.value; });
    const go = button("go to", "goto", p.programs > 0 ? "run or undo up to this program" : "the grid has no programs", p.programs > 0, () => {
      const ids = parseProgram(input.value, p.grid);
      if (!ids) { input.classList.add("pl-invalid"); return; }
      this.send({ action: "goto", program: ids });
    });
    bar.insertBefore(input, go);
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") go.click(); });
    const next = p.mismatch_steps.find((s) => s >= p.position);
    button("next mismatch", "run_to_mismatch",
      p.has_comparison ? (next === undefined ? "no later program writes a mismatched block" : `run to program ${tuple(programAt(p.grid, next))}`) : "needs a comparison (the Compare tab)",
      p.has_comparison && next !== undefined);
    return bar;
  }
}

/**
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void}
 */
function render({ model, el }) {
  const root = h("div", "pallaslab pl-step");
  el.appendChild(root);
  const { signal, cleanup } = lifetime(root);
  const view = new StepView(model, root);
  view.draw();
  onModel(model, "change:payload", () => view.onPayload(), signal);
  onAbort(signal, () => view.stopPlay());
  watchTheme(() => view.draw(), signal);
  return cleanup;
}

export default { render };
