// @ts-check
/**
 * The Lowering view: a kernel's IR for one target and stage, beside its Python source.
 * Click an IR line to light the Python line it came from; click a Python line to light its IR
 * lines. Diagnostics sit on top, resources beside them. Picking a target (or a stage whose text
 * was not sent) asks Python through `selection`; Python lowers and sends a new payload. In the
 * static report (`payload.interactive` false) only the embedded targets and stages are shown.
 * Plain ES module (anywidget `render`), no dependencies; user-derived text goes in through
 * textContent only.
 */

import { h, num, lifetime, onModel } from "./prelude.js";
import { LineMap, languageOf, tokenize } from "./lowering_ir.js";
export { toInt32 } from "./prelude.js";
export { LineMap, languageOf, tokenize } from "./lowering_ir.js";

/**
 * @typedef {{name: string, lines: number, chars: number, text: string | null,
 *   sent_lines: number, map: DataView | ArrayBuffer | ArrayBufferView}} StagePayload
 */
/** @typedef {{severity: string, code: string, message: string, operand: string | null}} DiagnosticPayload */
/**
 * @typedef {{target: string, backend: string, ok: boolean, compiled: boolean, cached: boolean,
 *   diagnostics: DiagnosticPayload[], resources: Record<string, number | null>,
 *   resource_notes?: Record<string, string>, resource_rows: string[][],
 *   resource_line: string | null, stages: StagePayload[]}}
 *   TargetLowering
 */
/**
 * @typedef {{name: string, platform: string, lowered: boolean}} TargetEntry
 * @typedef {{path: string, name: string}} SourceFile
 * @typedef {{file: number, start: number, lines: string[]}} SourceChunk
 * @typedef {{version: number, kernel: string, index: number, source: string | null,
 *   target: string, stage: string | null, default_target: string,
 *   targets: TargetEntry[], interactive: boolean,
 *   lowerings: Record<string, TargetLowering>, files: SourceFile[],
 *   sources: SourceChunk[], error: string | null,
 *   revision: number, answered?: string | null}}
 *   LoweringPayload
 */
/**
 * What the widget tells Python: the target and stage shown, the lines selected, and (with a
 * fresh `request` id) a question Python answers with a payload: lower, compile, send a stage.
 * @typedef {{target: string, stage: string | null, request?: string, ir_line?: number,
 *   py_line?: string, compile?: boolean}} LoweringSelection
 * @typedef {{payload: LoweringPayload, selection: LoweringSelection}} LoweringModel the model's keys
 * @typedef {import("./prelude.js").Model<LoweringModel>} Model
 */


const SEVERITIES = new Set(["error", "warning", "info"]);
const PRIMARY_STAGES = ["mosaic", "ttir", "mosaic-gpu"]; // as lowering.py's PRIMARY_STAGES

/**
 * The stage to show for a lowering: `keep` when it has one of that name, else its main IR.
 * @param {TargetLowering} low
 * @param {string | null} keep
 * @returns {string | null}
 */
export function stageFor(low, keep) {
  const names = low.stages.map((s) => s.name);
  if (keep && names.includes(keep)) return keep;
  return PRIMARY_STAGES.find((n) => names.includes(n)) || names[0] || null;
}

// --- the view --------------------------------------------------------------------------------

/** The Lowering view's state (what is shown, selected and asked) and drawing. */
class LoweringView {
  /** @param {Model} model @param {HTMLElement} root */
  constructor(model, root) {
    this.model = model;
    this.root = root;
    /**
     * What is shown (`target`, `stage`), what is selected (`irLine` or `pyKey`, picked `from`
     * which side), and the target Python was asked to lower and has not answered yet.
     * `request` is the id of the last question put to Python: every question gets exactly one
     * answer (a payload whose `answered` is that id), so `pending` ends with the answer to the
     * latest question, never with an older one, and a question always differs from the last.
     * @type {{target: string, stage: string | null, irLine: number | null, pyKey: string | null,
     *   from: "ir" | "py" | null, pending: string | null, asked: Set<string>,
     *   request: string | null}}
     */
    this.state = { target: "", stage: null, irLine: null, pyKey: null, from: null, pending: null,
      asked: new Set(), request: null };
    this.session = Math.random().toString(36).slice(2, 8);
    this.requests = 0;
    /** @type {LineMap | null} */
    this.lines = null;
  }

  /**
   * Tell Python (and anyone reading `selection`) what is selected; `ask` puts a question
   * (a fresh request id) that Python answers with a payload.
   * @param {{compile?: boolean}} [extra] @param {boolean} [ask]
   */
  sync(extra = {}, ask = true) {
    const { state, model } = this;
    /** @type {LoweringSelection} */
    const sel = { target: state.pending || state.target, stage: state.stage, ...extra };
    if (ask && model.get("payload").interactive) {
      state.request = `${this.session}-${++this.requests}`;
      sel.request = state.request;
    }
    if (state.irLine !== null) sel.ir_line = state.irLine;
    if (state.pyKey !== null) {
      const p = model.get("payload");
      const [f, n] = state.pyKey.split(":");
      const file = p.files[Number(f)];
      if (file) sel.py_line = `${file.path}:${n}`;
    }
    model.set("selection", sel);
    model.save_changes();
  }

  /** A payload arrived (or the view starts): show what it shows. */
  adopt() {
    const { state, model, root } = this;
    const p = model.get("payload");
    // an answer to an older question while a newer one is out: keep waiting for that one
    if (state.pending && state.request && p.answered !== state.request && p.answered) { this.build(); return; }
    if (state.target !== p.target || state.stage !== p.stage) {
      state.irLine = null; state.pyKey = null; state.from = null;
    }
    state.target = p.target;
    state.stage = p.stage;
    state.pending = null;
    root.dataset.answered = p.answered || "";
    this.build();
  }

  build() {
    const { state, model, root } = this;
    const p = model.get("payload");
    root.replaceChildren();
    root.dataset.target = state.target;
    const low = p.lowerings[state.target];
    const shown = low ? stageFor(low, state.stage) : null;
    const stage = low && low.stages.find((s) => s.name === shown);
    state.stage = stage ? stage.name : null;
    root.dataset.stage = state.stage || "";

    // header + toolbar
    const head = h("div", "pl-head");
    const title = h("div", "pl-title");
    title.append("Lowering ", h("code", "", p.kernel));
    head.append(title);
    if (p.source) head.append(h("span", "pl-dim pl-mono", p.source));
    root.append(head);

    const bar = h("div", "pl-toolbar");
    const tsel = /** @type {HTMLSelectElement} */ (h("select", "pl-target"));
    for (const platform of ["tpu", "gpu"]) {
      const group = /** @type {HTMLOptGroupElement} */ (h("optgroup"));
      group.label = platform.toUpperCase();
      for (const t of p.targets.filter((x) => x.platform === platform)) {
        const o = /** @type {HTMLOptionElement} */ (h("option", "", t.name));
        o.value = t.name;
        if (!t.lowered && !p.interactive) { o.disabled = true; o.textContent = `${t.name} (not lowered)`; }
        if (t.name === p.default_target) o.textContent += " (default)";
        group.append(o);
      }
      tsel.append(group);
    }
    tsel.value = state.pending || state.target;
    tsel.addEventListener("change", () => this.pickTarget(tsel.value));
    const group = (/** @type {string} */ label, /** @type {HTMLElement[]} */ ...items) => {
      const g = h("label", "pl-group");
      g.append(h("span", "", label), ...items);
      return g;
    };
    bar.append(group("target", tsel));
    if (low) {
      const ssel = /** @type {HTMLSelectElement} */ (h("select", "pl-stage"));
      for (const s of low.stages) {
        const o = /** @type {HTMLOptionElement} */ (h("option", "", `${s.name} (${num(s.lines)} lines)`));
        o.value = s.name;
        ssel.append(o);
      }
      ssel.value = state.stage || "";
      ssel.addEventListener("change", () => this.pickStage(ssel.value));
      bar.append(group("stage", ssel));
      const status = h("span", `pl-status ${low.ok ? "pl-ok" : "pl-failed"}`,
        `${low.backend} · ${low.ok ? "ok" : "failed"}${low.compiled ? " · compiled" : ""}${low.cached ? " · cached" : ""}`);
      bar.append(status);
      if (p.interactive && !low.compiled && low.ok && low.backend !== "mosaic-gpu") {
        const b = h("button", "pl-compile", low.backend === "triton" ? "Compile (triton)" : "Compile (libtpu)");
        b.title = "Run the real compiler: per-pass IR, diagnostics, resources";
        b.addEventListener("click", () => {
          state.pending = state.target;
          this.sync({ compile: true });
          this.build();
        });
        bar.append(b);
      }
    }
    root.append(bar);
    if (state.pending) root.append(h("p", "pl-pending pl-dim", `lowering for ${state.pending}…`));
    if (p.error) root.append(h("p", "pl-finding pl-error pl-banner", p.error));
    if (!low) {
      root.append(h("p", "pl-dim", `Not lowered for ${state.target}.`));
      return;
    }

    // diagnostics (top) and resources (beside)
    const top = h("div", "pl-top");
    const diags = h("ul", "pl-findings pl-diagnostics");
    if (!low.diagnostics.length) diags.append(h("li", "pl-ok", "no diagnostics"));
    for (const d of low.diagnostics) {
      const sev = SEVERITIES.has(d.severity) ? d.severity : "info";
      const li = h("li", `pl-finding pl-${sev}`);
      li.dataset.code = d.code;
      li.append(h("span", "pl-badge", d.severity), " ", h("code", "", d.code));
      if (d.operand) li.append(" ", h("span", "pl-operand", d.operand));
      li.append(" ", h("span", "pl-msg", d.message));
      diags.append(li);
    }
    // the resources as the static view and the text show them (Python's `resource_rows`)
    const res = low.resource_line ? h("p", "pl-dim pl-resources", low.resource_line)
      : h("table", "pl-table pl-resources");
    for (const [key, label, value, source] of low.resource_line ? [] : low.resource_rows) {
      const tr = h("tr");
      tr.dataset.resource = key;
      tr.append(h("th", "", label), h("td", "num", value));
      // where the figure comes from: the compiler, a measurement, or our estimate
      const src = h("td", "pl-dim pl-res-source", source.split(":")[0]);
      if (source) { src.title = source; tr.dataset.source = source.split(":")[0]; }
      tr.append(src);
      res.append(tr);
    }
    top.append(diags, res);
    root.append(top);

    // IR beside Python
    const main = h("div", "pl-main");
    const irPane = h("div", "pl-pane pl-ir-pane");
    const pyPane = h("div", "pl-pane pl-py-pane");
    main.append(irPane, pyPane);
    root.append(main);
    this.lines = stage ? new LineMap(stage.map) : null;
    this.drawIr(irPane, stage || null, p.interactive);
    this.drawPython(pyPane, p);
    this.applyHighlights(false);
  }

  /**
   * @param {HTMLElement} pane
   * @param {StagePayload | null} stage
   * @param {boolean} interactive
   */
  drawIr(pane, stage, interactive) {
    const { state, lines } = this;
    const head = h("div", "pl-pane-head");
    head.append(h("span", "", stage ? stage.name : "no stages"));
    pane.append(head);
    if (!stage) return;
    if (stage.text === null) {
      const key = `${state.target}/${stage.name}`;
      if (interactive && !state.asked.has(key)) {
        state.asked.add(key);
        pane.append(h("p", "pl-dim pl-pending", `loading ${stage.name} (${num(stage.lines)} lines)…`));
        this.sync();
      } else if (interactive) {
        pane.append(h("p", "pl-dim", `${stage.name} (${num(stage.lines)} lines) could not be loaded.`));
      } else {
        pane.append(h("p", "pl-dim", `${stage.name} (${num(stage.lines)} lines) is not embedded in this page: ` +
          "open the notebook, or get it from lowering.lower(...)."));
      }
      return;
    }
    const located = lines !== null && lines.toPy.size > 0;
    head.append(h("span", "pl-dim", `${num(stage.lines)} lines${located ? "" : " · no Python locations"}`));
    const code = h("div", "pl-code");
    code.dataset.role = "ir";
    const lang = languageOf(stage.name);
    const text = stage.text.split("\n");
    if (text.length && text[text.length - 1] === "") text.pop();
    const frag = document.createDocumentFragment();
    text.forEach((line, i) => {
      const n = i + 1;
      const row = h("div", "pl-line");
      row.dataset.line = String(n);
      if (lines && lines.pyFor(n).length) row.classList.add("pl-mapped");
      row.append(h("span", "pl-ln", String(n)));
      const src = h("span", "pl-src");
      for (const [cls, t] of tokenize(line, lang)) {
        if (cls) src.append(h("span", `pl-tk-${cls}`, t)); else src.append(t);
      }
      row.append(src);
      frag.append(row);
    });
    code.append(frag);
    code.addEventListener("click", (e) => {
      const row = /** @type {HTMLElement | null} */ (/** @type {HTMLElement} */ (e.target).closest(".pl-line"));
      if (!row || !row.dataset.line) return;
      this.selectIr(Number(row.dataset.line));
    });
    pane.append(code);
    if (stage.sent_lines < stage.lines) {
      pane.append(h("p", "pl-dim pl-capped", `… ${num(stage.lines - stage.sent_lines)} more lines not shown ` +
        "(the full text is in lowering.lower(...))"));
    }
  }

  /** @param {HTMLElement} pane @param {LoweringPayload} p */
  drawPython(pane, p) {
    const { lines } = this;
    const head = h("div", "pl-pane-head");
    head.append(h("span", "", "Python source"));
    pane.append(head);
    if (!p.sources.length) {
      pane.append(h("p", "pl-dim", "The kernel's Python source is not available."));
      return;
    }
    const code = h("div", "pl-code");
    code.dataset.role = "py";
    let lastFile = -1;
    for (const chunk of p.sources) {
      const file = p.files[chunk.file];
      if (chunk.file !== lastFile) {
        const fh = h("div", "pl-file", file ? file.name : "?");
        if (file) fh.title = file.path;
        code.append(fh);
        lastFile = chunk.file;
      } else code.append(h("div", "pl-gap", "⋮"));
      chunk.lines.forEach((line, i) => {
        const n = chunk.start + i;
        const key = `${chunk.file}:${n}`;
        const row = h("div", "pl-line");
        row.dataset.key = key;
        row.dataset.line = String(n);
        if (lines && lines.irFor(key).length) row.classList.add("pl-mapped");
        row.append(h("span", "pl-ln", String(n)), h("span", "pl-src", line));
        code.append(row);
      });
    }
    code.addEventListener("click", (e) => {
      const row = /** @type {HTMLElement | null} */ (/** @type {HTMLElement} */ (e.target).closest(".pl-line"));
      if (!row || !row.dataset.key) return;
      this.selectPy(row.dataset.key);
    });
    pane.append(code);
  }

  /** @param {number} n */
  selectIr(n) {
    const { state, lines } = this;
    state.irLine = n;
    const keys = lines ? lines.pyFor(n) : [];
    state.pyKey = keys.length ? keys[0] : null;
    state.from = "ir";
    this.applyHighlights(true);
    this.sync({}, false);
  }
  /** @param {string} key */
  selectPy(key) {
    const { state } = this;
    state.pyKey = key;
    state.irLine = null;
    state.from = "py";
    this.applyHighlights(true);
    this.sync({}, false);
  }

  /** Light the selected line and its counterparts. @param {boolean} scroll */
  applyHighlights(scroll) {
    const { state, root, lines } = this;
    for (const e of root.querySelectorAll(".pl-hl, .pl-sel")) e.classList.remove("pl-hl", "pl-sel");
    const irRows = root.querySelector('.pl-code[data-role="ir"]');
    const pyRows = root.querySelector('.pl-code[data-role="py"]');
    /** @type {number[]} */
    let irLit = [];
    /** @type {string[]} */
    let pyLit = [];
    if (state.from === "ir" && state.irLine !== null) {
      irRows?.querySelector(`.pl-line[data-line="${state.irLine}"]`)?.classList.add("pl-sel");
      pyLit = lines ? lines.pyFor(state.irLine) : [];
    } else if (state.pyKey !== null) {
      pyRows?.querySelector(`.pl-line[data-key="${state.pyKey}"]`)?.classList.add("pl-sel");
      irLit = lines ? lines.irFor(state.pyKey) : [];
    }
    /** @type {HTMLElement | null} */
    let firstIr = null, firstPy = null;
    for (const n of irLit) {
      const row = /** @type {HTMLElement | null} */ (irRows?.querySelector(`.pl-line[data-line="${n}"]`) || null);
      if (row) { row.classList.add("pl-hl"); firstIr = firstIr || row; }
    }
    for (const key of pyLit) {
      const row = /** @type {HTMLElement | null} */ (pyRows?.querySelector(`.pl-line[data-key="${key}"]`) || null);
      if (row) { row.classList.add("pl-hl"); firstPy = firstPy || row; }
    }
    root.dataset.irLit = irLit.join(",");
    root.dataset.pyLit = pyLit.join(",");
    if (scroll) {
      for (const row of [firstIr, firstPy]) {
        const pane = row?.closest(".pl-code");
        if (row && pane instanceof HTMLElement) {
          const top = row.offsetTop - pane.offsetTop;
          if (top < pane.scrollTop || top > pane.scrollTop + pane.clientHeight - row.offsetHeight) {
            pane.scrollTop = Math.max(0, top - pane.clientHeight / 3);
          }
        }
      }
    }
  }

  /** @param {string} target */
  pickTarget(target) {
    const { state, model } = this;
    const p = model.get("payload");
    state.irLine = null; state.pyKey = null; state.from = null;
    if (!p.interactive) {
      if (target in p.lowerings) {
        state.target = target;
        state.stage = stageFor(p.lowerings[target], state.stage);
      }
      this.build();
      return;
    }
    // the target shown, nothing asked: no question to wait for
    if (target === state.target && !state.pending && target in p.lowerings) { this.build(); return; }
    // Python lowers (or just re-sends) and answers with a new payload (see `adopt`).
    state.pending = target;
    state.stage = null;
    this.sync();
    if (state.pending) this.build();
  }

  /** @param {string} name */
  pickStage(name) {
    const { state } = this;
    state.stage = name;
    this.build(); // asks Python for the stage's text if it was not sent
    this.sync({}, false);
  }
}

/**
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void}
 */
function render({ model, el }) {
  const root = h("div", "pallaslab pl-lowering");
  // Inside a workbench tab (an ipywidgets flex box) the host element is sized by its content:
  // let it take the box's width, so long IR lines scroll inside their pane instead.
  el.style.minWidth = "0";
  el.style.maxWidth = "100%";
  el.style.flex = "1 1 100%";
  el.append(root);
  const { signal, cleanup } = lifetime(root);
  const view = new LoweringView(model, root);
  onModel(model, "change:payload", () => view.adopt(), signal);
  view.adopt();
  return cleanup;
}

export default { render };
