// @ts-check
/**
 * The Compare view: executors side by side. Per output a heatmap of |a - b| over the array
 * (log colour scale; mismatched cells in the error colour), block boundaries, mismatched blocks
 * outlined; click a block to see the programs that wrote it and open one in the stepper (the
 * widget sets `selection = {action: "open", program, nonce}`; Python runs the stepper to it,
 * switches the workbench to the Step tab, selects it in the Grid tab and says which happened). A table gives max abs/rel error, ULP, NaN counts and allclose per pair.
 * The verdict is the comparison's own (pass / MISMATCH / errors found / INCOMPLETE when fewer
 * than two executors ran), with each executor's status (ran / unavailable / failed /
 * timed-out, and why) and what the runs found (unwritten output, races, ...).
 * Plain ES module (anywidget `render`), no dependencies; user-derived text via textContent only.
 */

import {
  h, tuple, typed, float32, rgb, themeColors, findingItem, canvas, drawHeatmap, blend, lifetime, onModel,
  watchTheme,
} from "./prelude.js";
export { tuple, rgb } from "./prelude.js";

/**
 * @typedef {{block: number[], window: number[], programs: number[][], steps: number[],
 *   more_programs: number}} MismatchedBlock
 * @typedef {{a: string, b: string, max_abs_err: number | null, max_rel_err: number | null,
 *   max_ulp: number, mismatched_elements: number, allclose: boolean, rtol: number, atol: number,
 *   error: string | null, heat: number | null, mask: number | null, blocks: MismatchedBlock[],
 *   more_blocks: number, nan_a?: number, nan_b?: number, rounding_note?: string | null,
 *   writers?: CompareWriters | null}} ComparePair
 * @typedef {{element: number, program: number, line: number, programs: number[][],
 *   lines: string[], reads: string[], complete: boolean}} CompareWriters who last wrote each
 *   heatmap cell's first wrong element (tables: int32 per cell)
 * @typedef {{kind: string, operand: string | null, line: string | null, programs: number[][],
 *   message: string}} CompareCause why an output is wrong
 * @typedef {{origin: string, kernel: number | null, shape: number[], dtype: string,
 *   floating?: boolean, block: number[] | null, rows: number, cols: number, shape2: number[], factor: number[],
 *   note: string | null, causes?: CompareCause[], pairs: ComparePair[]}} CompareOutput
 * @typedef {{executor: string, ok: boolean, wall_time: number, error: string | null,
 *   unavailable: string | null, status?: string, reason?: string | null,
 *   timed_out?: string | null, notes?: string[]}} CompareRun
 * @typedef {{executor: string, code: string, severity: string, message: string,
 *   operand: string | null, programs: number[][]}} CompareFinding
 * @typedef {{version: number, kernel: string, index: number, grid: number[], programs: number,
 *   executors: string[], runs: CompareRun[], allclose: boolean, complete?: boolean,
 *   passed?: boolean, outcome?: string, verdict?: string, findings?: CompareFinding[],
 *   warnings?: string[], outputs: CompareOutput[],
 *   selected: number[], opened: number[] | null, opened_note?: string | null,
 *   interactive: boolean, revision: number,
 *   error: string | null, tables: (DataView | ArrayBuffer | ArrayBufferView)[]}} ComparePayload
 */
/**
 * What the widget asks Python: open a program in the stepper (`nonce` tells requests apart).
 * @typedef {{action?: "open", program?: number[], nonce?: number}} CompareSelection
 * @typedef {{payload: ComparePayload, selection: CompareSelection}} CompareModel the model's keys
 * @typedef {import("./prelude.js").Model<CompareModel>} Model
 * @typedef {import("./prelude.js").Colors} Colors
 * @typedef {{output: number, block: MismatchedBlock | null, row: number, col: number}} Picked
 */

const MAX_W = 520;  // heatmap canvas size (CSS pixels)
const MAX_H = 420;
const MAX_CELL = 24;


/**
 * max abs, max rel, ULP and NaN counts as shown: "nan" where a NaN made the error infinite,
 * "-" for the ULP of integers (their |a - b| is max abs) or of a NaN.
 * @param {CompareOutput} out @param {ComparePair} pr
 * @returns {string[]}
 */
export function pairCells(out, pr) {
  if (pr.error) return ["-", "-", "-", "-"];
  const nan = Boolean(pr.nan_a || pr.nan_b);
  /** @param {number | null} x */
  const fig = (x) => (x === null && nan ? "nan" : sci(x));
  const ulp = out.floating === false || (nan && pr.max_abs_err === null) ? "-" : pr.max_ulp.toLocaleString("en-US");
  const nans = nan ? `${(pr.nan_a || 0).toLocaleString("en-US")} / ${(pr.nan_b || 0).toLocaleString("en-US")}` : "-";
  return [fig(pr.max_abs_err), fig(pr.max_rel_err), ulp, nans];
}

/** @param {number | null} x */
const sci = (x) => (x === null ? "inf/NaN" : x === 0 ? "0" : Math.abs(x) >= 1e-3 && Math.abs(x) < 1e5 ? x.toPrecision(4) : x.toExponential(3));

/**
 * Which mismatched blocks contain element (row, col) of the output's 2-D view.
 * @param {CompareOutput} out @param {ComparePair} pair @param {number} row @param {number} col
 * @returns {MismatchedBlock[]}
 */
export function blocksAt(out, pair, row, col) {
  return pair.blocks.filter((b) => row >= b.window[0] && row < b.window[1] && col >= b.window[2] && col < b.window[3]);
}

/**
 * The block index (in the 2-D view) holding element (row, col), or null without blocks.
 * @param {CompareOutput} out @param {number} row @param {number} col
 */
export function blockOf(out, row, col) {
  if (!out.block) return null;
  return [Math.floor(row / Math.max(1, out.block[0])), Math.floor(col / Math.max(1, out.block[1]))];
}

/**
 * Each executor: its status (ran / unavailable / failed / timed-out), time, why and notes.
 * @param {ComparePayload} p
 */
function runsTable(p) {
  const table = h("table", "pl-table pl-cmp-runs");
  const hr = h("tr");
  ["executor", "status", "time (s)", "reason / notes"].forEach((c, i) => hr.append(h("th", i === 2 ? "num" : "", c)));
  table.append(hr);
  for (const r of p.runs) {
    const status = r.status || (r.ok ? "ran" : r.unavailable ? "unavailable" : "failed");
    const tr = h("tr", "pl-cmp-run");
    tr.dataset.executor = r.executor;
    tr.dataset.status = status;
    const reason = r.reason !== undefined ? r.reason : (r.unavailable || r.error);
    const why = [reason || "", ...(r.notes || [])].filter((x) => x).join("; ");
    tr.append(h("td", "pl-mono", r.executor), h("td", status === "ran" ? "pl-ok" : "pl-cmp-bad", status),
      h("td", "num", status === "ran" ? sci(r.wall_time) : "-"), h("td", "pl-cmp-reason", why || "-"));
    table.append(tr);
  }
  return table;
}

/** @param {CompareFinding[]} findings */
function runFindingsList(findings) {
  const ul = h("ul", "pl-findings pl-cmp-findings");
  for (const f of findings) {
    const li = findingItem(f, h("span", "pl-dim", f.executor));
    li.dataset.code = f.code;
    li.dataset.executor = f.executor;
    ul.append(li);
  }
  return ul;
}

/**
 * The title line: kernel, executors and the verdict.
 * @param {ComparePayload} p @param {string} outcome
 */
function header(p, outcome) {
  const head = h("div", "pl-head");
  const title = h("span", "pl-title");
  title.append("Compare ", h("code", "", p.kernel));
  const verdict = h("span", outcome === "pass" ? "pl-ok pl-cmp-verdict" : "pl-cmp-bad pl-cmp-verdict",
    p.verdict || (p.allclose ? "all close" : "MISMATCH"));
  verdict.dataset.outcome = outcome;
  head.append(title, h("span", "pl-dim", p.executors.join(" · ")), verdict);
  return head;
}

/**
 * An output's caption: origin, dtype and shape, blocks, cell size, the pair shown, the legend.
 * @param {CompareOutput} out @param {ComparePair | undefined} pair
 */
function caption(out, pair) {
  const cap = h("figcaption");
  cap.append(h("code", "", out.origin), " ",
    h("span", "pl-dim", `${out.dtype}${tuple(out.shape)}` + (out.block ? ` · blocks ${out.block.join("×")}` : "") +
      (out.factor[0] > 1 || out.factor[1] > 1 ? ` · cell = ${out.factor.join("×")} elements (max)` : "") +
      (out.note ? ` · ${out.note}` : "") + (pair ? ` · ${pair.a} vs ${pair.b}` : "")),
    h("div", "pl-dim pl-cmp-legend", "shade: |a − b| (log scale) · red: beyond tolerance · outlined: mismatched blocks"));
  return cap;
}

/**
 * Cell colours of an error map: transparent where equal (the canvas's CSS background, the
 * theme's "empty" colour, resolved by the browser: right in both themes even when the view
 * was drawn before it was attached), accent (log scale) for errors within tolerance, error
 * colour (log scale) where mismatched.
 * @param {Float32Array} heat @param {Uint8Array} mask @param {Colors} colors
 * @returns {(k: number) => number[]}
 */
function errorColors(heat, mask, colors) {
  let top = 0, low = Infinity;
  for (let k = 0; k < heat.length; k++) {
    const v = heat[k];
    if (v > 0 && Number.isFinite(v)) { if (v > top) top = v; if (v < low) low = v; }
  }
  const span = top > 0 ? Math.max(1e-12, Math.log10(top) - Math.log10(low)) : 1;
  const empty = [0, 0, 0, 0], bg = rgb(colors.bg), acc = rgb(colors.accent), bad = rgb(colors.error);
  return (k) => {
    const v = heat[k];
    if (!(v > 0 || !Number.isFinite(v))) return empty;
    const t = Number.isFinite(v) ? 0.3 + 0.7 * ((Math.log10(v) - Math.log10(low)) / span || 0) : 1;
    return blend(bg, mask[k] ? bad : acc, Math.min(1, Math.max(0.3, t)));
  };
}

/**
 * Block boundaries (when they are at least 4 px apart) over a W x H error map.
 * @param {CanvasRenderingContext2D} ctx @param {number[]} block @param {number} sx @param {number} sy
 * @param {number} W @param {number} H @param {Colors} colors
 */
function drawBlockLines(ctx, block, sx, sy, W, H, colors) {
  const bx = block[1] * sx, by = block[0] * sy;
  ctx.strokeStyle = colors.border; ctx.lineWidth = 1; ctx.globalAlpha = 0.9;
  ctx.beginPath();
  if (bx >= 4) for (let x = bx; x < W - 0.5; x += bx) { ctx.moveTo(Math.round(x) + 0.5, 0); ctx.lineTo(Math.round(x) + 0.5, H); }
  if (by >= 4) for (let y = by; y < H - 0.5; y += by) { ctx.moveTo(0, Math.round(y) + 0.5); ctx.lineTo(W, Math.round(y) + 0.5); }
  ctx.stroke();
  ctx.globalAlpha = 1;
}

/** The Compare view's state and drawing: one per `render`. */
class CompareView {
  /** @param {Model} model @param {HTMLElement} root @param {AbortSignal} signal */
  constructor(model, root, signal) {
    this.model = model;
    this.root = root;
    this.signal = signal;
    this.nonce = 0;
    /** @type {{output: number, pair: number, picked: Picked | null}} */
    this.state = { output: 0, pair: 0, picked: null };
    this.firstPayload = true;
  }

  /** @param {number[]} program */
  openProgram(program) {
    this.model.set("selection", { action: "open", program, nonce: ++this.nonce });
    this.model.save_changes();
  }

  draw() {
    const { root, state } = this;
    const p = this.model.get("payload");
    if (this.firstPayload) {
      state.output = p.selected[0] || 0;
      state.pair = p.selected[1] || 0;
      this.firstPayload = false;
    }
    const colors = themeColors(root);
    root.replaceChildren();
    root.dataset.revision = String(p.revision);
    const outcome = p.outcome || (p.allclose ? "pass" : "mismatch");
    root.append(header(p, outcome));
    root.dataset.outcome = outcome;
    root.append(runsTable(p));
    if (p.findings && p.findings.length) root.append(runFindingsList(p.findings));
    for (const w of p.warnings || []) root.append(h("p", "pl-finding pl-warning pl-cmp-warning", w));
    if (p.complete === false) root.append(h("p", "pl-finding pl-warning pl-cmp-incomplete", "Nothing compared: fewer than two executors ran."));
    if (p.error) root.append(h("p", "pl-finding pl-error", p.error));
    root.append(this.pairsTable(p));
    const causes = causesList(p);
    if (causes) root.append(causes);

    // one heatmap per output (the selected pair)
    const maps = h("div", "pl-cmp-maps");
    root.append(maps);
    const info = h("div", "pl-cmp-info");
    p.outputs.forEach((out, i) => {
      const pairIndex = Math.min(state.pair, out.pairs.length - 1);
      maps.append(this.panel(p, out, i, out.pairs[pairIndex], colors));
    });
    root.append(info);
    this.showPicked(p, info);
    if (p.opened) {
      // what opening it really did (Python says: stepped, tab switched, Grid selected)
      root.append(h("p", "pl-cmp-opened", p.opened_note || `stepper at program ${tuple(p.opened)}`));
    }
  }

  /** The table of pairs: click a row to show its error maps. @param {ComparePayload} p */
  pairsTable(p) {
    const { state } = this;
    const table = h("table", "pl-table pl-cmp-table");
    const hr = h("tr");
    // (NaN counts last: the columns before keep their places)
    ["output", "pair", "max abs err", "max rel err", "ULP", "mismatched", "allclose", "NaN (a / b)"].forEach((c, i) => hr.append(h("th", i >= 2 && i !== 6 ? "num" : "", c)));
    table.append(hr);
    p.outputs.forEach((out, i) => out.pairs.forEach((pr, j) => {
      const tr = h("tr", "pl-cmp-row");
      tr.dataset.output = String(i); tr.dataset.pair = String(j);
      if (i === state.output && j === state.pair) tr.classList.add("pl-selected");
      const [abs, rel, ulp, nans] = pairCells(out, pr);
      const cells = [out.origin, `${pr.a} vs ${pr.b}`, abs, rel, ulp,
        pr.mismatched_elements.toLocaleString("en-US"), pr.error ? pr.error : pr.allclose ? "yes" : "no", nans];
      cells.forEach((c, k) => tr.append(h("td", k >= 2 && k !== 6 ? "num" : k === 6 ? (pr.allclose ? "pl-ok" : "pl-cmp-bad") : "", String(c))));
      tr.title = `allclose: |a - b| <= atol + rtol·|b| with rtol ${sci(pr.rtol)}, atol ${sci(pr.atol)}`;
      tr.addEventListener("click", () => { state.output = i; state.pair = j; state.picked = null; this.draw(); });
      table.append(tr);
    }));
    return table;
  }

  /**
   * One output's error map, its mismatched blocks outlined, and the list of those blocks.
   * @param {ComparePayload} p @param {CompareOutput} out @param {number} i
   * @param {ComparePair | undefined} pair @param {Colors} colors
   */
  panel(p, out, i, pair, colors) {
    const fig = h("figure", "pl-cmp-panel");
    fig.dataset.origin = out.origin;
    const cap = caption(out, pair);
    fig.append(cap);
    if (!pair || pair.heat === null || pair.mask === null) {
      fig.append(h("p", "pl-dim", pair && pair.error ? pair.error : "no error map"));
      return fig;
    }
    const heat = /** @type {Float32Array} */ (float32(p.tables[pair.heat]));
    const mask = typed(p.tables[pair.mask], Uint8Array);
    const { rows, cols } = out;
    // square cells as large as the box allows (fractional: the image is scaled, not tiled)
    const cw = Math.min(MAX_CELL, MAX_W / cols, rows === 1 ? MAX_W : MAX_H / rows);
    const ch = rows === 1 ? Math.max(cw, 24) : cw;
    const W = Math.round(cols * cw), H = Math.round(rows * ch);
    const [cv, ctx] = canvas(W, H, "pl-cmp-heat");
    cv.dataset.cellW = String(cw); cv.dataset.cellH = String(ch);
    cv.dataset.output = String(i);
    fig.insertBefore(cv, cap);
    drawHeatmap(ctx, rows, cols, W, H, errorColors(heat, mask, colors));
    const sx = cw / out.factor[1], sy = ch / out.factor[0];  // CSS px per element
    if (out.block) drawBlockLines(ctx, out.block, sx, sy, W, H, colors);
    // mismatched blocks outlined; the picked one in the highlight colour
    for (const b of pair.blocks) {
      const picked = this.state.picked && this.state.picked.output === i && this.state.picked.block === b;
      ctx.strokeStyle = picked ? colors.hl : colors.error;
      ctx.lineWidth = picked ? 3 : 2;
      const x = b.window[2] * sx, y = b.window[0] * sy;
      ctx.strokeRect(x + 1, y + 1, Math.max(2, (b.window[3] - b.window[2]) * sx - 2), Math.max(2, (b.window[1] - b.window[0]) * sy - 2));
    }
    this.bindMap(cv, out, i, pair, heat, mask, sx, sy);
    if (pair.blocks.length) fig.append(this.blockList(i, pair));
    return fig;
  }

  /**
   * Hover an error map for the element under the pointer; click it to pick its block.
   * @param {HTMLCanvasElement} cv @param {CompareOutput} out @param {number} i
   * @param {ComparePair} pair @param {Float32Array} heat @param {Uint8Array} mask
   * @param {number} sx @param {number} sy CSS px per element
   */
  bindMap(cv, out, i, pair, heat, mask, sx, sy) {
    /** @param {MouseEvent} e */
    const at = (e) => {
      const box = cv.getBoundingClientRect();
      const col = Math.min(out.shape2[1] - 1, Math.max(0, Math.floor((e.clientX - box.left) / sx)));
      const row = Math.min(out.shape2[0] - 1, Math.max(0, Math.floor((e.clientY - box.top) / sy)));
      return { row, col, cell: Math.floor(row / out.factor[0]) * out.cols + Math.floor(col / out.factor[1]) };
    };
    cv.addEventListener("mousemove", (e) => {
      const { row, col, cell } = at(e);
      const blk = blockOf(out, row, col);
      cv.title = `element (${row}, ${col})${blk ? ` · block ${tuple(blk)}` : ""} · |a - b| ${sci(Number.isFinite(heat[cell]) ? heat[cell] : null)}${mask[cell] ? " · mismatch" : ""}`;
    });
    cv.addEventListener("click", (e) => {
      const { row, col } = at(e);
      const hits = blocksAt(out, pair, row, col);
      this.state.output = i;
      this.state.picked = { output: i, block: hits.length ? hits[0] : null, row, col };
      this.draw();
    });
  }

  /** The mismatched blocks as buttons (the first 32). @param {number} i @param {ComparePair} pair */
  blockList(i, pair) {
    const list = h("ul", "pl-cmp-blocks");
    for (const b of pair.blocks.slice(0, 32)) {
      const li = h("li");
      const btn = /** @type {HTMLButtonElement} */ (h("button", "pl-cmp-block", `block ${tuple(b.block)}`));
      btn.dataset.block = b.block.join(",");
      btn.addEventListener("click", () => {
        this.state.output = i; this.state.picked = { output: i, block: b, row: b.window[0], col: b.window[2] }; this.draw();
      });
      li.append(btn, " ", h("span", "pl-dim", `written by ${b.programs.map(tuple).join(", ") || "no program"}`));
      list.append(li);
    }
    if (pair.blocks.length > 32 || pair.more_blocks) list.append(h("li", "pl-dim", `… ${pair.blocks.length - 32 + pair.more_blocks} more`));
    return list;
  }

  /** @param {ComparePayload} p @param {HTMLElement} info */
  showPicked(p, info) {
    info.replaceChildren();
    const pk = this.state.picked;
    if (!pk) {
      info.append(h("span", "pl-dim", "Click a block (outlined: mismatched) to see the programs that wrote it."));
      return;
    }
    const out = p.outputs[pk.output];
    const b = pk.block;
    const who = writerLine(p, out, out.pairs[Math.min(this.state.pair, out.pairs.length - 1)], pk.row, pk.col);
    if (who) info.append(who);
    if (!b) {
      const blk = blockOf(out, pk.row, pk.col);
      info.append(h("span", "pl-cmp-picked", `${out.origin} element (${pk.row}, ${pk.col})` + (blk ? ` · block ${tuple(blk)}` : "") + ": no mismatch"));
      return;
    }
    const line = h("div", "pl-cmp-picked");
    line.dataset.block = b.block.join(",");
    line.append(`${out.origin} block ${tuple(b.block)} mismatches; written by `);
    info.append(line);
    const progs = h("div", "pl-cmp-programs");
    if (!b.programs.length) progs.append(h("span", "pl-dim", "no program (never written)"));
    b.programs.forEach((prog, k) => {
      const chip = h("span", "pl-cmp-program");
      chip.dataset.program = prog.join(",");
      chip.append(h("code", "", `program ${tuple(prog)}`), h("span", "pl-dim", ` step ${b.steps[k]}`));
      if (p.interactive) {
        const btn = /** @type {HTMLButtonElement} */ (h("button", "pl-cmp-open", "open in stepper"));
        btn.dataset.program = prog.join(",");
        btn.addEventListener("click", () => this.openProgram(prog));
        chip.append(" ", btn);
      }
      progs.append(chip);
    });
    if (b.more_programs) progs.append(h("span", "pl-dim", ` … ${b.more_programs} more`));
    info.append(progs);
    if (!p.interactive) info.append(h("p", "pl-dim", "Static report: open the notebook to step these programs."));
  }
}

/**
 * Why each output is wrong (the comparison's causes), one item per cause.
 * @param {ComparePayload} p
 * @returns {HTMLElement | null}
 */
function causesList(p) {
  const withCauses = p.outputs.filter((o) => o.causes && o.causes.length);
  if (!withCauses.length) return null;
  const box = h("div", "pl-cmp-causes");
  for (const out of withCauses) {
    // "output" before the name: it reads right whatever the output is called ("outputs")
    const heading = h("h4", "pl-cmp-h", "Why output ");
    heading.append(h("code", "", out.origin), " is wrong");
    box.append(heading);
    const list = h("ul", "pl-findings");
    for (const c of out.causes || []) {
      const li = h("li", "pl-finding pl-error pl-cmp-cause");
      li.dataset.kind = c.kind;
      li.append(h("span", "pl-badge", c.kind), " ", c.message);
      list.append(li);
    }
    box.append(list);
  }
  return box;
}

/**
 * The last writer of the wrong element in the clicked element's heatmap cell: its program and
 * line, and what that program read inside its blocks (null without provenance).
 * @param {ComparePayload} p @param {CompareOutput} out @param {ComparePair | undefined} pair
 * @param {number} row @param {number} col
 * @returns {HTMLElement | null}
 */
export function writerLine(p, out, pair, row, col) {
  const w = pair && pair.writers;
  if (!w) return null;
  const cell = Math.floor(row / out.factor[0]) * out.cols + Math.floor(col / out.factor[1]);
  const element = typed(p.tables[w.element], Int32Array)[cell];
  const prog = typed(p.tables[w.program], Int32Array)[cell];
  const line = typed(p.tables[w.line], Int32Array)[cell];
  const r = Math.floor(element / out.shape2[1]), c = element % out.shape2[1];
  const mask = pair && pair.mask !== null ? typed(p.tables[pair.mask], Uint8Array)[cell] : 0;
  const div = h("div", "pl-cmp-writer");
  div.dataset.element = `${r},${c}`;
  const what = `${out.origin} element (${r}, ${c})${mask ? " is wrong" : ""}`;
  if (prog < 0) {
    div.append(`${what}: no program wrote it${w.complete ? "" : " (before the recording stopped)"}`);
    return div;
  }
  div.dataset.program = w.programs[prog].join(",");
  div.append(`${what}: last written by program ${tuple(w.programs[prog])}`,
    line >= 0 ? ` at ${w.lines[line]}` : "");
  if (w.reads[prog]) div.append(h("div", "pl-dim pl-cmp-reads", `that program read ${w.reads[prog]}`));
  return div;
}

/**
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void}
 */
function render({ model, el }) {
  const root = h("div", "pallaslab pl-compare");
  el.appendChild(root);
  const { signal, cleanup } = lifetime(root);
  const view = new CompareView(model, root, signal);
  view.draw();
  // Drawn before the host attached it (JupyterLab does): the theme's colours were not
  // readable yet, so draw again once it is in the document.
  const redrawWhenAttached = () => {
    if (signal.aborted) return;
    if (root.isConnected) view.draw(); else requestAnimationFrame(redrawWhenAttached);
  };
  if (!root.isConnected) requestAnimationFrame(redrawWhenAttached);
  onModel(model, "change:payload", () => view.draw(), signal);
  watchTheme(() => view.draw(), signal);
  return cleanup;
}

export default { render };
