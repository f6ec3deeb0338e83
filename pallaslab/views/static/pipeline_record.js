// @ts-check
/**
 * The Pipeline view's recorded run: what TPU interpret mode logged of a kernel's manual DMAs
 * and semaphore operations, in the order they happened (each DMA with the region it wrote and
 * which time its line ran; each signal and completed wait). User-derived strings are inserted
 * with textContent only.
 */

import { h } from "./prelude.js";

/**
 * @typedef {{seq: number, op: string, src: string | null, dst: string | null,
 *   region: string | null, bytes: number | null, semaphore: number | null,
 *   semaphore_name: string | null, source: string | null, iteration: number | null}} RecordedOp
 * @typedef {{executor: string, ops: RecordedOp[], lines: string[], truncated: boolean,
 *   note?: string | null}} RunRecord
 */

/** Rows of a long table shown before it is unfolded. */
export const FOLDED_ROWS = 12;

/**
 * Fold a long table: its first `FOLDED_ROWS` rows, and a button that shows all (a run of a
 * few hundred events would otherwise fill the notebook). Nothing for a short table.
 * @param {HTMLElement} table rows after its header row @param {number} count @param {string} what
 * @returns {HTMLElement | string}
 */
export function foldRows(table, count, what) {
  if (count <= FOLDED_ROWS) return "";
  const rows = /** @type {HTMLTableRowElement[]} */ (Array.from(table.querySelectorAll("tr"))).slice(1);
  const button = /** @type {HTMLButtonElement} */ (h("button", "pl-fold-toggle"));
  const show = (/** @type {boolean} */ all) => {
    rows.forEach((r, i) => { r.hidden = !all && i >= FOLDED_ROWS; });
    button.textContent = all ? `show the first ${FOLDED_ROWS} ${what}` : `show all ${count.toLocaleString("en-US")} ${what}`;
    button.setAttribute("aria-expanded", String(all));
    table.dataset.folded = String(!all);
  };
  button.addEventListener("click", () => show(table.dataset.folded === "true"));
  show(false);
  return button;
}

/**
 * The recorded run's section (empty when there is neither a record nor a note).
 * @param {{recorded?: RunRecord | null, recorded_note?: string | null}} p
 */
export function recordSection(p) {
  const box = h("div", "pl-recorded");
  if (p.recorded_note) box.append(h("p", "pl-dim pl-recorded-note", p.recorded_note));
  const rec = p.recorded;
  if (!rec) return box;
  box.append(h("h4", "", `Recorded run (${rec.executor}): ${rec.ops.length} events`));
  const perLine = h("ul", "pl-recorded-lines");
  for (const line of rec.lines) perLine.append(h("li", "pl-mono", line));
  box.append(perLine);
  if (rec.note) box.append(h("p", "pl-dim pl-recorded-note", rec.note));
  const table = h("table", "pl-table pl-recorded-ops");
  const head = h("tr");
  for (const c of ["#", "event", "src → dst", "region", "bytes / count", "semaphore", "line", "nth of line"]) {
    head.append(h("th", "", c));
  }
  table.append(head);
  // Mosaic GPU: copies are TMA copies, signals a barrier's completed phase
  /** @type {Record<string, string>} */
  const names = rec.executor === "gpu-interpret"
    ? { dma: "TMA copy", signal: "barrier phase", wait: "barrier wait" }
    : { dma: "dma", signal: "signal", wait: "wait" };
  for (const o of rec.ops) {
    const tr = h("tr");
    tr.dataset.op = o.op;
    tr.append(h("td", "num", String(o.seq)), h("td", "", names[o.op] || o.op),
      h("td", "", o.src ? `${o.src} → ${o.dst}` : ""), h("td", "pl-mono", o.region || ""),
      h("td", "num", o.bytes === null ? "" : o.bytes.toLocaleString("en-US")),
      h("td", "", o.semaphore === null ? "" : o.semaphore_name || `#${o.semaphore}`), h("td", "", o.source || ""),
      h("td", "num", o.iteration === null ? "" : String(o.iteration + 1)));
    table.append(tr);
  }
  box.append(table, foldRows(table, rec.ops.length, "events"));
  if (rec.truncated) box.append(h("p", "pl-dim", "The record stopped at its size limit."));
  return box;
}
