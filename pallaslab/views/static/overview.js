// @ts-check
/**
 * The Overview view: kernel facts, the operand table and the findings.
 * Plain ES module (anywidget `render`); user-derived strings go in through textContent only.
 */

import { h, num, findingsList } from "./prelude.js";

/**
 * The kernel's `inspect --json` object (its schema is the CLI's), its compiler params by
 * backend, its cost estimate, and why there is no grid view when there is none.
 * @typedef {{kernel: Record<string, any>, compiler_params: Record<string, Record<string, string>>,
 *   cost: Record<string, number> | null, note: string | null,
 *   devices_note?: string | null}} OverviewPayload
 * @typedef {{payload: OverviewPayload, selection: Record<string, never>}} OverviewModel the model's keys
 * @typedef {import("./prelude.js").Model<OverviewModel>} Model
 */


/** @param {(number | null)[] | null} v */
const shape = (v) => (v === null ? "-" : `(${v.map((x) => (x === null ? "None" : x)).join(", ")}${v.length === 1 ? "," : ""})`);

/**
 * @typedef {{role: string, operand: string, jaxpr: string, sources: string[]}} FusedFunction
 * @typedef {{functions: FusedFunction[], operand_arrays: Record<string, string>}} Fusion
 */

/**
 * "Fused into this kernel": each prologue/epilogue `fuser.fuse` pulled in, with the operand it
 * feeds (or is applied to), the user's lines and its jaxpr.
 * @param {Fusion} fusion
 * @returns {HTMLElement}
 */
function fusedSection(fusion) {
  const box = h("div", "pl-fusion");
  box.append(h("div", "pl-title", "Fused into this kernel"));
  const ul = h("ul", "pl-findings");
  for (const f of fusion.functions) {
    const li = h("li");
    li.dataset.role = f.role;
    const arrow = f.role === "prologue" ? "->" : "applied to";
    li.append(h("span", "pl-badge", f.role), ` ${arrow} `, h("code", "", f.operand), "  ",
      h("span", "pl-dim", `(${f.sources.join(", ") || "?"})`), h("pre", "pl-mono", f.jaxpr));
    ul.append(li);
  }
  box.append(ul);
  return box;
}

/**
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void}
 */
function render({ model, el }) {
  const p = model.get("payload");
  const k = p.kernel;
  const root = h("div", "pallaslab pl-overview");
  const title = h("div", "pl-title");
  title.append(`Kernel ${k.index ?? ""} `, h("code", "", k.name));
  root.append(title);
  const dl = h("dl", "pl-facts");
  const grid = k.grid.length ? k.grid.map((/** @type {number | null} */ g) => (g === null ? "?" : g)).join(" × ") : "()";
  const facts = [
    ["source", k.source || "?"], ["call site", k.call_site || "?"],
    ["grid", `${grid} = ${num(k.programs)} programs`],
    ["semantics", (k.dimension_semantics || []).join(", ") || "-"],
    ["backend", k.backend || "unspecified"], ["inside", (k.context || []).join(" > ") || "-"],
  ];
  if (p.cost) facts.push(["cost estimate", `${num(p.cost.flops)} flops, ${num(p.cost.bytes_accessed)} bytes`]);
  for (const [backend, fields] of Object.entries(p.compiler_params || {})) {
    facts.push([`${backend} params`, Object.entries(fields).map(([a, b]) => `${a}=${b}`).join(", ")]);
  }
  for (const [a, b] of facts) dl.append(h("dt", "", a), h("dd", "", String(b)));
  root.append(dl);
  if (p.note) root.append(h("p", "pl-dim", p.note));
  if (p.devices_note) {
    const note = h("p", "pl-dim", p.devices_note);
    note.dataset.role = "devices-note";
    root.append(note);
  }

  const table = h("table", "pl-table");
  const head = h("tr");
  const cols = ["operand", "role", "shape", "dtype", "block", "memory", "buffers", "fetches", "HBM bytes"];
  cols.forEach((c, i) => head.append(h("th", i >= 6 ? "num" : "", c)));
  table.append(head);
  for (const o of k.operands) {
    const tr = h("tr");
    tr.dataset.origin = o.origin;
    const cells = [o.label || o.origin, o.role + (o.scalar_prefetch ? " (prefetch)" : ""), shape(o.shape), o.dtype,
      shape(o.block_shape), o.memory_space, num(o.buffer_count), num(o.fetches), num(o.hbm_bytes)];
    cells.forEach((c, i) => tr.append(h("td", i >= 6 ? "num" : i === 0 ? "pl-mono" : "", String(c))));
    table.append(tr);
  }
  root.append(table);
  if (k.fusion) root.append(fusedSection(k.fusion));

  root.append(findingsList(k.findings));
  el.append(root);
  return () => root.remove();
}

export default { render };
