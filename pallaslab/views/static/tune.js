// @ts-check
/**
 * The Tune view: a heatmap of predicted time over two chosen parameters (cells whose configs
 * are all out marked, their reasons on hover), a sortable table of every candidate, the chosen
 * config to copy, and a roofline of the candidates per chip. Plain ES module (anywidget
 * `render`), drawn as SVG; user-derived strings go in through textContent only.
 */

import { h, svg, lifetime, listen } from "./prelude.js";
import { roofline } from "./tune_roofline.js";

/**
 * @typedef {{us: number | null, bound: string | null, vmem_kib: number, fits: boolean, model: string,
 *   flops: number | null, hbm_bytes: number | null}} ChipCell
 * @typedef {{keys: Record<string, string>, label: string, rank: number | null, out: boolean,
 *   reason: string | null, us: number | null, chips: Record<string, ChipCell>,
 *   verdicts: Record<string, string>}} TuneCandidate
 * @typedef {{version: number, params: string[], varied: string[], axes: string[] | null, chips: string[],
 *   targets: string[], stopped: string | null, values: Record<string, string[]>,
 *   best: {text: string, label: string, rank: number} | null,
 *   peaks: Record<string, {flops: number, hbm: number}>, candidates: TuneCandidate[],
 *   plotly?: boolean, part?: string}} TunePayload
 * @typedef {{payload: TunePayload, selection: Record<string, any>}} TuneModel the model's keys
 * @typedef {import("./prelude.js").Model<TuneModel>} Model
 */

const CELL_W = 64, CELL_H = 30, LEFT = 70, TOP = 10;
const fmt = (/** @type {number | null} */ us) => (us === null ? "?" : us.toFixed(2));

/**
 * A colour from fast (0: green) to slow (1: red) by hue.
 * @param {number} t
 */
const shade = (t) => `hsl(${Math.round(120 * (1 - t))}, 60%, 55%)`;

/**
 * The heatmap for one chip over axes x and y: one cell per pair of values, holding the fastest
 * config in there; a cell whose configs are all out is crossed, its reasons in its title.
 * @param {TunePayload} p @param {string} chip @param {string} x @param {string} y
 */
function heatmap(p, chip, x, y) {
  const xs = p.values[x], ys = p.values[y];
  /** @type {Map<string, TuneCandidate[]>} */
  const cells = new Map();
  for (const c of p.candidates) {
    const k = `${c.keys[x]}\u0000${c.keys[y]}`;
    cells.set(k, [...(cells.get(k) ?? []), c]);
  }
  const times = p.candidates.filter((c) => !c.out).map((c) => c.chips[chip]?.us)
    .filter((t) => t !== null && t !== undefined).map(Number);
  const lo = Math.min(...times), hi = Math.max(...times);
  const width = LEFT + CELL_W * xs.length + 10, height = TOP + CELL_H * ys.length + 22;
  const root = svg("svg", { class: "pl-tune-heatmap", width, height, viewBox: `0 0 ${width} ${height}` });
  let crossed = false; // some cell's configs are all out: the legend says what the cross means
  ys.forEach((yv, i) => {
    const row = TOP + CELL_H * (ys.length - 1 - i);
    const label = svg("text", { x: LEFT - 6, y: row + CELL_H / 2 + 4, "text-anchor": "end", class: "pl-dim" });
    label.textContent = `${y}=${yv}`;
    root.append(label);
    xs.forEach((xv, j) => {
      const all = cells.get(`${xv}\u0000${yv}`) ?? [];
      const inn = all.filter((c) => !c.out && c.chips[chip]?.us !== null && c.chips[chip]?.us !== undefined);
      inn.sort((a, b) => Number(a.chips[chip].us) - Number(b.chips[chip].us));
      const best = inn[0];
      crossed ||= !best && all.length > 0;
      const t = best ? Number(best.chips[chip].us) : null;
      const title = best
        ? `${best.label}: ${fmt(t)} us on ${chip} (${best.chips[chip].bound ?? "?"})`
        : all.length ? all.map((c) => `${c.label}: out, ${c.reason ?? "not modelled"}`).join("\n") : "no config";
      const g = svg("g", { class: `pl-tune-cell${best ? "" : " pl-tune-out"}` }, title);
      g.dataset.x = xv; g.dataset.y = yv;
      const fill = t === null ? "none" : shade(hi > lo ? (t - lo) / (hi - lo) : 0);
      g.append(svg("rect", { x: LEFT + CELL_W * j, y: row, width: CELL_W - 2, height: CELL_H - 2, fill,
        stroke: "currentColor", "stroke-opacity": 0.3 }));
      const text = svg("text", { x: LEFT + CELL_W * j + CELL_W / 2 - 1, y: row + CELL_H / 2 + 4, "text-anchor": "middle",
        fill: best ? "#000" : "#c00" });
      text.textContent = best ? fmt(t) : all.length ? "\u00d7" : "";
      g.append(text);
      root.append(g);
    });
  });
  xs.forEach((xv, j) => {
    const label = svg("text", { x: LEFT + CELL_W * j + CELL_W / 2, y: TOP + CELL_H * ys.length + 14,
      "text-anchor": "middle", class: "pl-dim" });
    label.textContent = xv;
    root.append(label);
  });
  const legend = crossed ? "; \u00d7: every config there is out (hover for why)" : "";
  const box = h("div", "pl-tune-heatmap-box");
  box.append(root, h("div", "pl-dim",
    `x: ${x}, y: ${y}; predicted us on ${chip}, the fastest config per cell${legend}`));
  return box;
}

/**
 * A select over `options` that calls `onChange` with the picked one.
 * @param {string} label @param {string[]} options @param {string} value
 * @param {(v: string) => void} onChange @param {AbortSignal} signal
 */
function picker(label, options, value, onChange, signal) {
  const wrap = h("label", "pl-tune-pick", `${label} `);
  const sel = /** @type {HTMLSelectElement} */ (h("select"));
  sel.dataset.axis = label;
  for (const o of options) {
    const opt = /** @type {HTMLOptionElement} */ (h("option", "", o));
    opt.value = o;
    opt.selected = o === value;
    sel.append(opt);
  }
  listen(sel, "change", () => onChange(sel.value), signal);
  wrap.append(sel);
  return wrap;
}

/**
 * The heatmap section: a chip select when several, an axis select each when more than two
 * parameters vary; redrawn on change (where plotly draws it beside this module, `onPick`
 * tells Python the chip and axes picked and only the selects are drawn here).
 * @param {TunePayload} p @param {AbortSignal} signal
 * @param {(state: {x: string, y: string, chip: string}) => void} onPick
 */
function heatmapSection(p, signal, onPick) {
  const box = h("div", "pl-tune-heat");
  if (!p.axes) {
    box.append(h("p", "pl-dim", "heatmap: it needs two parameters with several values"));
    return box;
  }
  const state = { x: p.axes[0], y: p.axes[1], chip: p.chips[0] };
  const controls = h("div", "pl-tune-controls"), drawing = h("div");
  const draw = () => {
    if (p.plotly) return onPick({ ...state });
    drawing.replaceChildren(state.x === state.y
      ? h("p", "pl-dim", "pick two different parameters")
      : heatmap(p, state.chip, state.x, state.y));
  };
  if (p.chips.length > 1) controls.append(picker("chip", p.chips, state.chip, (v) => { state.chip = v; draw(); }, signal));
  if (p.varied.length > 2) {
    controls.append(picker("x", p.varied, state.x, (v) => { state.x = v; draw(); }, signal), " ",
      picker("y", p.varied, state.y, (v) => { state.y = v; draw(); }, signal));
  }
  box.append(controls, drawing);
  draw();
  return box;
}

/**
 * @typedef {{name: string, num: boolean, get: (c: TuneCandidate) => string | number | null}} Column
 * @param {TunePayload} p
 * @returns {Column[]}
 */
function columns(p) {
  /** @type {Column[]} */
  const cols = [{ name: "rank", num: true, get: (c) => c.rank },
    { name: "config", num: false, get: (c) => c.label }];
  for (const chip of p.chips) cols.push({ name: `${chip} us`, num: true, get: (c) => c.chips[chip]?.us ?? null });
  cols.push({ name: "bound", num: false, get: (c) => p.chips.map((k) => c.chips[k]?.bound ?? "?").join(" / ") },
    { name: "VMEM KiB", num: true, get: (c) => Math.round(Math.max(0, ...Object.values(c.chips).map((e) => e.vmem_kib))) });
  for (const t of p.targets) cols.push({ name: `${t} compiler`, num: false, get: (c) => c.verdicts[t] ?? "-" });
  cols.push({ name: "out", num: false, get: (c) => c.reason ?? "" });
  return cols;
}

/**
 * The table of every candidate; clicking a header sorts by it (again: the other way).
 * @param {TunePayload} p @param {AbortSignal} signal
 */
function table(p, signal) {
  const cols = columns(p);
  const el = h("table", "pl-table pl-tune-table");
  const head = h("tr"), body = h("tbody");
  const sort = { col: 0, dir: 1 };
  const fill = () => {
    const col = cols[sort.col];
    const rows = [...p.candidates].sort((a, b) => {
      const u = col.get(a), v = col.get(b);
      if (u === v) return 0;
      if (u === null || u === "") return 1;  // missing values last either way
      if (v === null || v === "") return -1;
      return (col.num ? Number(u) - Number(v) : String(u).localeCompare(String(v))) * sort.dir;
    });
    body.replaceChildren(...rows.map((c) => {
      const tr = h("tr", c.out ? "pl-tune-row-out" : "");
      tr.dataset.config = c.label;
      for (const k of cols) {
        const v = k.get(c);
        tr.append(h("td", k.num ? "num" : "", v === null ? "-" : typeof v === "number" && k.name.endsWith(" us") ? v.toFixed(2) : String(v)));
      }
      return tr;
    }));
    [...head.children].forEach((th, i) => {
      th.setAttribute("aria-sort", i === sort.col ? (sort.dir > 0 ? "ascending" : "descending") : "none");
    });
  };
  cols.forEach((k, i) => {
    const th = h("th", `${k.num ? "num " : ""}pl-sortable`, k.name);
    th.dataset.col = k.name;
    th.style.cursor = "pointer";
    th.title = `sort by ${k.name} (again: the other way)`;
    listen(th, "click", () => { sort.dir = sort.col === i ? -sort.dir : 1; sort.col = i; fill(); }, signal);
    head.append(th);
  });
  const thead = h("thead");
  thead.append(head);
  el.append(thead, body);
  fill();
  return el;
}

/**
 * The chosen config as a dict to copy: a button (the clipboard) and the text in a field
 * (selected for a manual copy where the clipboard is refused).
 * @param {TunePayload} p @param {AbortSignal} signal
 */
function chosen(p, signal) {
  const box = h("div", "pl-tune-best");
  if (!p.best) {
    box.append(h("p", "pl-bad", "no config is in: see why in the table"));
    return box;
  }
  const field = /** @type {HTMLInputElement} */ (h("input", "pl-tune-copy-field"));
  field.readOnly = true;
  field.value = p.best.text;
  field.size = Math.max(20, p.best.text.length + 2);
  const button = /** @type {HTMLButtonElement} */ (h("button", "pl-tune-copy", "copy"));
  const said = h("span", "pl-dim");
  listen(field, "focus", () => field.select(), signal);
  listen(button, "click", () => {
    field.select();
    const fallback = () => { said.textContent = "select and copy the field"; };
    if (navigator.clipboard?.writeText) {
      navigator.clipboard.writeText(field.value).then(() => { said.textContent = "copied"; }, fallback);
    } else fallback();
  }, signal);
  box.append("chosen: ", field, " ", button, " ", said);
  return box;
}

/**
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void}
 */
function render({ model, el }) {
  const p = model.get("payload");
  const root = h("div", "pallaslab pl-tune");
  const { signal, cleanup } = lifetime(root);
  const ranked = p.candidates.filter((c) => !c.out).length;
  const title = h("div", "pl-title");
  title.append("Tune ", h("span", "pl-dim",
    `${p.candidates.length} candidate(s): ${ranked} ranked, ${p.candidates.length - ranked} out; modelled on ${p.chips.join(", ")}`));
  const pick = (/** @type {Record<string, string>} */ state) => { model.set("selection", state); model.save_changes(); };
  // part "head" and "body": plotly's heatmap widget sits between the two (see tuning/widget.py)
  if (p.part !== "body") {
    root.append(title, chosen(p, signal));
    if (p.stopped) root.append(h("p", "pl-warning", `stopped: ${p.stopped}`));
    root.append(heatmapSection(p, signal, pick));
  }
  if (p.part !== "head") root.append(table(p, signal), roofline(p));
  el.append(root);
  return cleanup;
}

export default { render };
