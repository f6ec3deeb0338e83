// @ts-check
/**
 * The Devices view: a lane per device; each DMA an arrow from the sending device to the
 * receiving one, each semaphore signal / completed wait a tick, in the order they ran.
 * Plain ES module (anywidget `render`); user-derived strings go in through textContent only.
 */

import { h, num, findingsList, svg } from "./prelude.js";

/**
 * @typedef {{payload: DevicesPayload, selection: Record<string, never>}} DevicesModel the model's keys
 * @typedef {import("./prelude.js").Model<DevicesModel>} Model
 */
/**
 * @typedef {{seq: number, src: number, dst: number, bytes: number, step: number,
 *   remote: boolean, source: string | null, buffers: string}} TransferEntry
 * @typedef {{seq: number, kind: string, device: number, semaphore: number, name: string, amount: number,
 *   source: string | null}} SemaphoreEntry
 * @typedef {{version: number, kernel: string, index: number, devices: number, transfers: TransferEntry[],
 *   semaphores: SemaphoreEntry[], events: number, remote_bytes: number, summary: string,
 *   status: string | null, error: string | null, findings: any[], note: string | null}} DevicesPayload
 */

const LANE = 28, LEFT = 70, WIDTH = 640;

/** @param {DevicesPayload} p */
function lanes(p) {
  const events = Math.max(p.events, 1);
  const x = (/** @type {number} */ seq) => LEFT + ((WIDTH - LEFT - 10) * seq) / events;
  const y = (/** @type {number} */ d) => LANE * d + LANE / 2 + 4;
  const root = svg("svg", { class: "pl-devices-lanes", width: WIDTH, height: LANE * p.devices + 8,
    viewBox: `0 0 ${WIDTH} ${LANE * p.devices + 8}` });
  const marker = svg("marker", { id: "pl-arrow-live", viewBox: "0 0 6 6", refX: 5, refY: 3,
    markerWidth: 6, markerHeight: 6, orient: "auto" });
  marker.append(svg("path", { d: "M0,0 L6,3 L0,6 z", fill: "currentColor" }));
  const defs = svg("defs", {});
  defs.append(marker);
  root.append(defs);
  for (let d = 0; d < p.devices; d++) {
    const label = svg("text", { x: 4, y: y(d) + 4, class: "pl-dim" });
    label.textContent = `device ${d}`;
    root.append(label, svg("line", { x1: LEFT, x2: WIDTH - 10, y1: y(d), y2: y(d),
      stroke: "currentColor", "stroke-opacity": 0.2 }));
  }
  for (const s of p.semaphores) {
    root.append(svg("line", { x1: x(s.seq), x2: x(s.seq), y1: y(s.device) - 5, y2: y(s.device) + 5,
      stroke: "currentColor", class: `pl-dev-${s.kind}` },
    `${s.kind} semaphore ${s.name} (${s.amount}) ${s.source ?? ""}`));
  }
  for (const t of p.transfers) {
    const line = svg("line", { x1: x(t.seq) - 6, y1: y(t.src), x2: x(t.seq), y2: y(t.dst),
      stroke: "currentColor", "stroke-width": 1.5, "marker-end": "url(#pl-arrow-live)",
      class: "pl-dev-dma" },
    `step ${t.step}: device ${t.src} -> device ${t.dst}, ${t.bytes} B, ${t.buffers} ${t.source ?? ""}`);
    line.dataset.step = String(t.step);
    root.append(line);
  }
  return root;
}

/**
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void}
 */
function render({ model, el }) {
  const p = model.get("payload");
  const root = h("div", "pallaslab pl-devices");
  const title = h("div", "pl-title");
  title.append("Devices ", h("code", "", p.kernel), " ",
    h("span", "pl-dim", `${p.devices} devices, ${p.summary}`));
  root.append(title);
  for (const m of [p.note, p.error]) if (m) root.append(h("p", "pl-dim", m));
  if (p.findings.length) root.append(findingsList(p.findings));
  if (p.devices) root.append(lanes(p));
  const table = h("table", "pl-table pl-devices-table");
  const head = h("tr");
  ["step", "from", "to", "bytes", "buffers", "source"].forEach((c, i) => head.append(h("th", i === 0 || i === 3 ? "num" : "", c)));
  table.append(head);
  for (const t of p.transfers) {
    const tr = h("tr");
    tr.dataset.step = String(t.step);
    tr.append(h("td", "num", String(t.step)), h("td", "", `device ${t.src}`), h("td", "", `device ${t.dst}${t.remote ? "" : " (local)"}`),
      h("td", "num", num(t.bytes)), h("td", "", t.buffers), h("td", "pl-dim", t.source ?? "?"));
    table.append(tr);
  }
  if (p.transfers.length) root.append(table);
  el.append(root);
  return () => root.remove();
}

export default { render };
