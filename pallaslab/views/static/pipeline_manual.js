// @ts-check
/**
 * The Pipeline view beyond BlockSpecs: nested pipelines' models, the manual DMAs and
 * semaphore operations in program order, and the interpreter's recorded run of them.
 * User-derived strings are inserted with textContent only.
 */

import { h } from "./prelude.js";
import { recordSection } from "./pipeline_record.js";

/**
 * @typedef {{label: string, lines: string[]}} NestedPipeline a nested pipeline's model, summarised
 * @typedef {{op: string, src: string | null, dst: string | null, bytes: number | null,
 *   semaphore: string | null, source: string | null, repeated: boolean}} ManualOp
 * @typedef {{manual?: ManualOp[], manual_note?: string | null,
 *   nested?: NestedPipeline[],
 *   recorded?: import("./pipeline_record.js").RunRecord | null,
 *   recorded_note?: string | null, dma_traffic?: DmaTraffic | null}} BeyondBlockSpecs
 * @typedef {{bytes: number, dmas: number, lower_bound: boolean, recorded: boolean,
 *   text: string, exposed: string}} DmaTraffic what a kernel's own DMAs move (the headline)
 */

/**
 * Nested pipelines' models and the manual DMAs / semaphore operations in program order.
 * @param {BeyondBlockSpecs} p
 */
export function manualSection(p) {
  const box = h("div", "pl-manual");
  for (const n of p.nested || []) {
    box.append(h("h4", "pl-nested", n.label), h("p", "pl-dim", n.lines.join("; ")));
  }
  const ops = p.manual || [];
  if (!ops.length) return box;
  box.append(h("h4", "", `Manual DMAs and semaphores (${ops.length}, program order)`));
  const table = h("table", "pl-table pl-dmas");
  const head = h("tr");
  for (const c of ["operation", "src → dst", "bytes", "semaphore", "line", ""]) head.append(h("th", "", c));
  table.append(head);
  for (const o of ops) {
    const tr = h("tr");
    tr.dataset.op = o.op;
    tr.append(h("td", "", o.op), h("td", "", o.src ? `${o.src} → ${o.dst}` : ""),
      h("td", "num", o.bytes === null ? "" : o.bytes.toLocaleString("en-US")),
      h("td", "", o.semaphore || ""), h("td", "", o.source || ""),
      h("td", "pl-dim", o.repeated ? "in a loop: once per iteration" : ""));
    table.append(tr);
  }
  box.append(table);
  if (p.manual_note) box.append(h("p", "pl-dim pl-manual-note", p.manual_note));
  box.append(recordSection(p));
  return box;
}
