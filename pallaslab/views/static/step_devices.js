// @ts-check
/**
 * The Step tab of a kernel inside shard_map on N simulated devices. Controls ("step all
 * devices", "step device d", "run to end", "restart") set `selection = {action, device, nonce}`;
 * Python steps the DeviceStepper and sends a new payload. Shows each device's programs and
 * status (waiting / blocked / busy / finished), a lane per device with the DMAs landed (arrows),
 * the DMAs in flight (dashed arrows) and the semaphore events (ticks), the DMAs in flight and
 * landed as tables, and at the end the run's status and findings (a deadlock).
 * Plain ES module (anywidget `render`); user-derived text via textContent only.
 */

import { h, num, findingsList, svg, lifetime, onModel } from "./prelude.js";

/** @typedef {import("./prelude.js").Model<StepDevicesModel>} Model */
/**
 * @typedef {{seq: number, src: number, dst: number, bytes: number, step: number,
 *   remote: boolean, source: string | null, buffers: string}} TransferEntry
 * @typedef {{seq: number, kind: string, device: number, semaphore: number, name: string, amount: number,
 *   source: string | null}} SemaphoreEntry
 * @typedef {{device: number, programs: number, total: number | null, status: string,
 *   detail: string, sent: number, received: number, in_flight: number, signals: number,
 *   waits: number}} DeviceRow
 * @typedef {{version: number, kind: string, kernel: string, index: number, devices: number,
 *   started: boolean, position: number, done: boolean, last: string | null, rows: DeviceRow[],
 *   in_flight: TransferEntry[], transfers: TransferEntry[], transfers_total: number,
 *   new_transfers: number, semaphores: SemaphoreEntry[], semaphores_total: number,
 *   events: number, start?: number, status: string | null, findings: any[], error: string | null,
 *   notes: string[], interactive: boolean, revision: number}} StepDevicesPayload
 */

const LANE = 28, LEFT = 70, WIDTH = 640;
/** The status colours (CSS variables of the theme). @type {Record<string, string>} */
const STATUS_COLOR = { blocked: "var(--pl-error)", busy: "var(--pl-warn)", finished: "var(--pl-ok)",
  stopped: "var(--pl-error)", waiting: "var(--pl-accent)" };

/** "device 3", or "device ?" while a DMA's destination is not known. @param {number} d */
const dev = (d) => (d >= 0 ? `device ${d}` : "device ?");

/**
 * A lane per device: landed DMAs as arrows from sender to receiver, in-flight ones dashed at
 * their send time (to the receiver's lane when known), semaphore events as ticks.
 * @param {StepDevicesPayload} p
 */
export function stepLanes(p) {
  const start = Math.min(p.start ?? 0, p.events - 1);
  const span = Math.max(p.events - start, 1);
  const x = (/** @type {number} */ seq) => LEFT + 10 + ((WIDTH - LEFT - 20) * (seq - start)) / span;
  const y = (/** @type {number} */ d) => LANE * d + LANE / 2 + 4;
  const height = LANE * p.devices + 8;
  const root = svg("svg", { class: "pl-devices-lanes pl-sd-lanes", width: WIDTH, height, viewBox: `0 0 ${WIDTH} ${height}` });
  const marker = svg("marker", { id: "pl-sd-arrow", viewBox: "0 0 6 6", refX: 5, refY: 3, markerWidth: 6, markerHeight: 6, orient: "auto" });
  marker.append(svg("path", { d: "M0,0 L6,3 L0,6 z", fill: "currentColor" }));
  const defs = svg("defs", {});
  defs.append(marker);
  root.append(defs);
  for (let d = 0; d < p.devices; d++) {
    const label = svg("text", { x: 4, y: y(d) + 4, class: "pl-dim", fill: "currentColor" });
    label.textContent = `device ${d}`;
    root.append(label, svg("line", { x1: LEFT, x2: WIDTH - 10, y1: y(d), y2: y(d), stroke: "currentColor", "stroke-opacity": 0.2 }));
  }
  for (const s of p.semaphores) {
    root.append(svg("line", { x1: x(s.seq), x2: x(s.seq), y1: y(s.device) - 5, y2: y(s.device) + 5, stroke: "currentColor", class: `pl-dev-${s.kind}` },
      `${s.kind} semaphore ${s.name} (${s.amount}) ${s.source ?? ""}`));
  }
  const fresh = p.transfers.length - p.new_transfers;
  p.transfers.forEach((t, i) => {
    const line = svg("line", { x1: x(t.seq) - 6, y1: y(t.src), x2: x(t.seq), y2: y(t.dst), stroke: "currentColor",
      "stroke-width": i >= fresh ? 2.5 : 1.5, "marker-end": "url(#pl-sd-arrow)", class: "pl-sd-dma" },
    `step ${t.step}: device ${t.src} -> device ${t.dst}, ${t.bytes} B, ${t.buffers} ${t.source ?? ""}`);
    line.dataset.step = String(t.step);
    root.append(line);
  });
  for (const t of p.in_flight) {
    const to = t.dst >= 0 ? y(t.dst) : y(t.src) + LANE / 3;
    const line = svg("line", { x1: x(t.seq) - 6, y1: y(t.src), x2: x(t.seq), y2: to, stroke: "var(--pl-warn, currentColor)",
      "stroke-width": 2, "stroke-dasharray": "3 2", "marker-end": "url(#pl-sd-arrow)", class: "pl-sd-inflight-arrow" },
    `in flight: device ${t.src} -> ${dev(t.dst)}, ${t.bytes} B (${t.source ?? "?"})`);
    root.append(line);
  }
  return root;
}

/**
 * A table: header cells, then rows of cells (text via textContent).
 * @param {string} cls @param {string[]} head @param {number[]} numeric column indices
 * @param {{cells: string[], data?: Record<string, string>, cls?: string}[]} rows
 */
function table(cls, head, numeric, rows) {
  const t = h("table", `pl-table ${cls}`);
  const tr = h("tr");
  head.forEach((c, i) => tr.append(h("th", numeric.includes(i) ? "num" : "", c)));
  t.append(tr);
  for (const r of rows) {
    const row = h("tr", r.cls);
    Object.assign(row.dataset, r.data ?? {});
    r.cells.forEach((c, i) => row.append(h("td", numeric.includes(i) ? "num" : "", c)));
    t.append(row);
  }
  return t;
}

/**
 * What the widget asks Python: reset, step (all devices), step_device (one), run; `nonce`
 * tells requests apart.
 * @typedef {{action?: string, device?: number, nonce?: number}} StepDevicesSelection
 * @typedef {{payload: StepDevicesPayload, selection: StepDevicesSelection}} StepDevicesModel the model's keys
 */

/** @param {StepDevicesPayload} p */
function where(p) {
  if (!p.started) return `on ${p.devices} devices · not stepped yet`;
  return `on ${p.devices} devices · ${p.done ? "the run ended" : `lockstep step ${p.position}`} · ` +
    `${num(p.transfers_total)} DMAs landed · ${p.in_flight.length} in flight`;
}

/**
 * The DMAs in flight and landed, and the semaphore events, as tables appended to `root`.
 * @param {StepDevicesPayload} p @param {HTMLElement} root
 */
function dmaTables(p, root) {
  if (p.in_flight.length) {
    root.append(h("div", "pl-step-h", `In flight: ${p.in_flight.length} DMA(s) sent, not landed`),
      table("pl-sd-inflight", ["step", "from", "to", "bytes", "source"], [0, 3],
        p.in_flight.map((t) => ({ data: { src: String(t.src), dst: String(t.dst) },
          cells: [String(t.step), `device ${t.src}`, dev(t.dst), num(t.bytes), t.source ?? "?"] }))));
  }
  if (p.transfers.length) {
    const shown = p.transfers_total > p.transfers.length ? ` (the latest ${p.transfers.length} shown)` : "";
    const fresh = p.transfers.length - p.new_transfers;
    root.append(h("div", "pl-step-h", `Landed: ${num(p.transfers_total)} DMA(s)${shown}` +
      (p.new_transfers ? ` · ${p.new_transfers} in the last step (bold)` : "")),
    table("pl-sd-transfers", ["step", "from", "to", "bytes", "buffers", "source"], [0, 3],
      p.transfers.map((t, i) => ({ cls: i >= fresh ? "pl-sd-new" : "", data: { src: String(t.src), dst: String(t.dst), step: String(t.step) },
        cells: [String(t.step), `device ${t.src}`, dev(t.dst), num(t.bytes), t.buffers, t.source ?? "?"] }))));
    root.querySelectorAll("tr.pl-sd-new").forEach((tr) => { /** @type {HTMLElement} */ (tr).style.fontWeight = "600"; });
  }
  if (p.semaphores.length) {
    const box = h("details", "pl-sd-semaphores-box");
    const shown = p.semaphores_total > p.semaphores.length ? ` (the latest ${p.semaphores.length} shown)` : "";
    box.append(h("summary", "pl-step-h", `Semaphore events: ${num(p.semaphores_total)}${shown}`),
      table("pl-sd-semaphores", ["#", "device", "event", "semaphore", "amount", "source"], [0, 4],
        p.semaphores.map((s) => ({ data: { device: String(s.device), kind: s.kind },
          cells: [String(s.seq), `device ${s.device}`, s.kind === "wait" ? "wait (completed)" : "signal", s.name, String(s.amount), s.source ?? "?"] }))));
    root.append(box);
  }
}

/**
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void}
 */
function render({ model, el }) {
  const root = h("div", "pallaslab pl-step pl-step-devices");
  el.appendChild(root);
  let nonce = 0;
  let busy = false;
  let picked = 0;

  /** @param {StepDevicesSelection} msg */
  function send(msg) {
    busy = true;
    root.dataset.busy = "true";
    root.querySelectorAll("button, select").forEach((b) => { /** @type {HTMLButtonElement} */ (b).disabled = true; });
    model.set("selection", { ...msg, nonce: ++nonce });
    model.save_changes();
  }

  function draw() {
    const p = model.get("payload");
    root.replaceChildren();
    root.dataset.revision = String(p.revision);
    root.dataset.position = String(p.position);
    root.dataset.done = String(p.done);
    root.dataset.busy = String(busy);
    picked = Math.min(picked, Math.max(0, p.devices - 1));

    const head = h("div", "pl-head");
    const title = h("span", "pl-title");
    title.append("Step ", h("code", "", p.kernel));
    head.append(title, h("span", "pl-step-where pl-sd-where", where(p)));
    root.append(head);

    // ---- controls ----
    const bar = h("div", "pl-toolbar pl-step-controls pl-sd-controls");
    /** @param {string} label @param {string} cls @param {string} tip @param {boolean} enabled @param {() => void} fn */
    const button = (label, cls, tip, enabled, fn) => {
      const b = /** @type {HTMLButtonElement} */ (h("button", cls, label));
      b.title = tip;
      b.disabled = busy || !p.interactive || !enabled;
      b.addEventListener("click", fn);
      bar.append(b);
      return b;
    };
    button("restart", "pl-sd-reset", "end this run; the next step starts a new one", p.started, () => send({ action: "reset" }));
    button("▶ step all devices", "pl-sd-step", "every device runs one more program (lockstep)", !p.done, () => send({ action: "step" }));
    const select = /** @type {HTMLSelectElement} */ (h("select", "pl-sd-device"));
    for (let d = 0; d < p.devices; d++) {
      const o = /** @type {HTMLOptionElement} */ (h("option", "", `device ${d}`));
      o.value = String(d);
      select.append(o);
    }
    select.value = String(picked);
    const first = p.position > 0;
    select.disabled = busy || !p.interactive || p.done || !first;
    select.addEventListener("change", () => { picked = Number(select.value); });
    bar.append(select);
    button("▶ step device", "pl-sd-step-device", first ? "the chosen device alone runs one more program" : "step all devices once first",
      first && !p.done, () => send({ action: "step_device", device: picked }));
    button("▶▶ run to end", "pl-sd-run", "every device runs to the end of the run", !p.done, () => send({ action: "run" }));
    root.append(bar);

    if (!p.interactive) root.append(h("p", "pl-dim", "Static snapshot: run the notebook to step the devices."));
    for (const n of p.notes) root.append(h("p", "pl-dim pl-step-note", n));
    if (p.last) root.append(h("p", "pl-dim pl-sd-last", `Last step: ${p.last}.`));
    if (p.error) root.append(h("p", "pl-finding pl-error pl-step-error pl-sd-error", p.error));
    if (p.status !== null) {
      const res = h("p", "pl-sd-result");
      res.dataset.status = p.status;
      const b = h("b", p.status === "ran" ? "pl-ok" : "pl-cmp-bad", p.status);
      res.append("Result: ", b);
      root.append(res, findingsList(p.findings));
    }

    // ---- devices ----
    const devices = table("pl-sd-devices", ["device", "programs", "status", "", "sent", "received", "in flight", "signals", "waits"], [0, 4, 5, 6, 7, 8],
      p.rows.map((r) => ({ data: { device: String(r.device), status: r.status },
        cells: [String(r.device), r.total === null ? String(r.programs) : `${r.programs}/${r.total}`, r.status, r.detail,
          String(r.sent), String(r.received), String(r.in_flight), String(r.signals), String(r.waits)] })));
    devices.querySelectorAll("tr[data-status]").forEach((tr) => {
      const cell = /** @type {HTMLElement} */ (tr.children[2]);
      cell.style.color = STATUS_COLOR[/** @type {HTMLElement} */ (tr).dataset.status ?? ""] ?? "";
      cell.style.fontWeight = "600";
      /** @type {HTMLElement} */ (tr.children[3]).className = "pl-dim";
    });
    root.append(devices);
    if (p.started && p.devices && p.events > 0) root.append(stepLanes(p));
    else if (p.started) root.append(h("p", "pl-dim pl-sd-quiet", "No DMA or semaphore event so far."));

    dmaTables(p, root);
  }

  const { signal, cleanup } = lifetime(root);
  draw();
  onModel(model, "change:payload", () => { busy = false; draw(); }, signal);
  return cleanup;
}

export default { render };
