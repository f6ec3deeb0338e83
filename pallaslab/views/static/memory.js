// @ts-check
/**
 * The Memory view: per TPU chip, a stacked bar of every operand's scoped VMEM (buffers x padded
 * block, scratch) against the limit and the chip's capacity, overflow marked; SMEM; the
 * kernel's VMEM findings (those the header counts) and the spill note; the what-if table of
 * candidate block sizes (best first); for a Triton kernel compiled on request, shared memory, registers, spills and blocks per SM per GPU. Hover a segment: the operand's
 * numbers, and the same operand lit on every chip. Plain ES module (anywidget `render`), no
 * dependencies; user-derived strings go in through textContent only.
 */

import { h, num, lifetime, onModel } from "./prelude.js";

/**
 * @typedef {{origin: string, label?: string, role: string, space: string, dtype: string, shape: number[],
 *   padded_shape: number[], buffers: number, buffer_bytes: number, bytes: number,
 *   padding_bytes: number}} MemoryOperand
 */
/**
 * @typedef {{chip: string, target: string, bytes: number, limit: number, limit_source: string,
 *   capacity: number, fits: boolean, over: number, smem_bytes: number, smem_capacity: number,
 *   semaphores: number, shared: number, spill_note: string | null,
 *   operands: MemoryOperand[]}} ChipMemory
 */
/**
 * @typedef {{chip: string, vmem_bytes: number, body_bytes: number, need_bytes: number,
 *   limit: number, fits: boolean, predicted_time: number | null, compiles: boolean | null,
 *   compiler: string | null}} WhatIfChip
 */
/**
 * @typedef {{block_sizes: string, kernel: string, programs: number | null,
 *   fetches: number | null, hbm_bytes: number | null, fits: boolean, compiles: boolean | null,
 *   error: string | null, chips: WhatIfChip[]}} WhatIfRowPayload
 */
/** @typedef {{chips: string[], rows: WhatIfRowPayload[], best: number | null}} WhatIfPayload */
/**
 * @typedef {{gpu: string, target: string, error: string | null, shared_bytes: number | null,
 *   registers: number | null, spills: number | null, num_warps: number,
 *   blocks_per_sm: number | null, limited_by: string | null, warps_per_sm: number | null,
 *   occupancy: number | null}} GpuMemory
 */
/**
 * @typedef {{origin: string, label: string, shape: number[], dtype: string, bytes: number}}
 *   SharedBufferEntry
 */
/**
 * @typedef {{gpus: GpuMemory[], error: string | null, title?: string,
 *   buffers?: SharedBufferEntry[], note?: string | null}} GpuSection
 */
/** @typedef {{code: string, severity: string, message: string}} MemoryFinding */
/**
 * @typedef {{version: number, kernel: string, index: number, chips: ChipMemory[],
 *   what_if: WhatIfPayload | null, note: string | null, gpu?: GpuSection | null,
 *   findings: MemoryFinding[]}} MemoryPayload
 */
/**
 * @typedef {{payload: MemoryPayload, selection: Record<string, never>}} MemoryModel the model's keys
 * @typedef {import("./prelude.js").Model<MemoryModel>} Model
 */


/** @param {number} n */
export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toLocaleString("en-US", { maximumFractionDigits: 1 })} KiB`;
  return `${(n / (1 << 20)).toLocaleString("en-US", { maximumFractionDigits: 2 })} MiB`;
}
/** @param {number | null} t */
const us = (t) => (t === null ? "-" : (t * 1e6).toLocaleString("en-US", { maximumFractionDigits: 2 }));

/** In "usage" mode the largest need fills this much of the bar (room for the limit label). */
const USAGE_FILL = 0.82;

/**
 * Bytes the full bar width stands for, per scale mode.
 * @param {ChipMemory[]} chips
 * @param {string} mode "limit" | "capacity" | "usage"
 */
export function barScale(chips, mode) {
  let s = 1;
  for (const c of chips) {
    if (mode === "capacity") s = Math.max(s, c.capacity, c.bytes, c.limit);
    else if (mode === "usage") s = Math.max(s, Math.ceil(c.bytes / USAGE_FILL));
    else s = Math.max(s, c.limit, c.bytes);
  }
  return s;
}

/**
 * The bar width shown first: the chip's VMEM, so that a bar's fill is the kernel's share of it
 * (a zoom to the largest need made 0.8% of VMEM look full); "usage" zooms in on request.
 */
export const DEFAULT_SCALE = "capacity";

/** What the bar's width stands for, in the legend. @type {Record<string, string>} */
const SCALE_NAMES = { capacity: "the chip's VMEM", limit: "the largest scoped-VMEM limit", usage: "the largest need, zoomed in" };

/** @param {number} n @param {number} scale */
const pct = (n, scale) => `${Math.min(100, (100 * n) / scale)}%`;

/** The view an element of it is in (its root, `.pl-memory`). @param {HTMLElement} e */
const viewOf = (e) => /** @type {HTMLElement} */ (e.closest(".pl-memory") ?? e);

/**
 * @param {ChipMemory} c
 * @param {number} scale
 * @param {HTMLElement} info
 */
function chipRow(c, scale, info) {
  const row = h("div", "pl-mem-row");
  row.dataset.chip = c.chip;
  row.dataset.fits = String(c.fits);
  const track = h("div", "pl-mem-track");
  const vmem = c.operands.filter((o) => o.space === "vmem");
  vmem.forEach((o, i) => {
    const seg = h("div", `pl-seg pl-mem-${o.role} pl-shade${i % 3}`);
    seg.style.width = pct(o.bytes, scale);
    seg.dataset.origin = o.origin;
    seg.dataset.bytes = String(o.bytes);
    seg.addEventListener("mouseenter", () => showOperand(c, o, info));
    seg.addEventListener("mouseleave", () => clearHover(info));
    track.append(seg);
  });
  if (c.bytes > c.limit) {
    const zone = h("div", "pl-mem-overzone");
    zone.style.left = pct(c.limit, scale);
    zone.style.width = pct(c.bytes - c.limit, scale);
    zone.title = `${bytes(c.over)} over the limit`;
    track.append(zone);
  }
  if (c.limit <= scale) {
    const mark = h("div", "pl-mem-limit");
    mark.style.left = pct(c.limit, scale);
    mark.title = `scoped-VMEM limit ${bytes(c.limit)} (${c.limit_source})`;
    track.append(mark);
  }
  else {
    const off = h("span", "pl-mem-offscale", `limit ${bytes(c.limit)} →`);
    off.title = "the limit is beyond the bar: choose another bar width to see it";
    track.append(off);
  }
  if (c.capacity <= scale) {
    const cap = h("div", "pl-mem-capacity");
    cap.style.left = pct(c.capacity, scale);
    cap.title = `VMEM capacity ${bytes(c.capacity)}`;
    track.append(cap);
  }
  const total = h("span", "pl-mem-total");
  total.append(`${bytes(c.bytes)} of ${bytes(c.limit)} `,
    h("span", "pl-dim", `(${((100 * c.bytes) / Math.max(1, c.limit)).toFixed(1)}%, ${c.limit_source}; capacity ${bytes(c.capacity)})`), " ");
  let verdict;
  if (c.fits) verdict = h("span", "pl-mem-fits", "fits");
  else if (c.smem_bytes > c.smem_capacity) verdict = h("span", "pl-mem-over", "SMEM overflow");
  else if (c.limit > c.capacity) verdict = h("span", "pl-mem-over", "limit exceeds VMEM");
  else verdict = h("span", "pl-mem-over", `overflow by ${bytes(c.over)}`);
  total.append(verdict);
  row.append(h("span", "pl-mem-label", c.chip), track, total);
  const wrap = h("div", "pl-mem-chip");
  wrap.append(row);
  if (c.smem_bytes > 0 || c.semaphores > 0) {
    const srow = h("div", "pl-mem-row pl-mem-smem");
    const strack = h("div", "pl-mem-track");
    const seg = h("div", "pl-seg pl-mem-smemseg");
    seg.style.width = pct(c.smem_bytes, Math.max(1, c.smem_capacity));
    strack.append(seg);
    const smem = c.operands.filter((o) => o.space === "smem").map((o) => o.origin).join(", ");
    srow.append(h("span", "pl-mem-label pl-dim", "SMEM"), strack,
      h("span", "pl-mem-total pl-dim", `${bytes(c.smem_bytes)} of ${bytes(c.smem_capacity)}` +
        (smem ? ` (${smem})` : "") + (c.semaphores ? `, ${c.semaphores} semaphore(s)` : "")));
    wrap.append(srow);
  }
  return wrap;
}

/** @param {ChipMemory} c @param {MemoryOperand} o @param {HTMLElement} info */
function showOperand(c, o, info) {
  info.className = "pl-mem-info";
  info.replaceChildren(h("code", "", o.origin), ` ${o.role} on ${c.chip}: ${o.buffers} x `,
    h("code", "", `${o.padded_shape.join("x") || "()"} ${o.dtype}`),
    ` = ${bytes(o.bytes)} (${((100 * o.bytes) / Math.max(1, c.limit)).toFixed(1)}% of the limit)`);
  if (o.padding_bytes > 0) info.append(h("span", "pl-dim", `; block ${o.shape.join("x")} padded to the chip's tiling adds ${bytes(o.padding_bytes)}`));
  info.dataset.origin = o.origin;
  for (const s of viewOf(info).querySelectorAll(".pl-seg[data-origin]")) {
    s.classList.toggle("pl-lit", /** @type {HTMLElement} */ (s).dataset.origin === o.origin);
  }
}

/** @param {HTMLElement} info */
function clearHover(info) {
  for (const s of viewOf(info).querySelectorAll(".pl-seg.pl-lit")) s.classList.remove("pl-lit");
  delete info.dataset.origin;
}

/** @param {ChipMemory[]} chips */
function operandTable(chips) {
  const table = h("table", "pl-table pl-mem-table");
  const head = h("tr");
  ["operand", "role", "space", "block", "padded", "buffers"].forEach((c, i) => head.append(h("th", i >= 5 ? "num" : "", c)));
  for (const c of chips) head.append(h("th", "num", `${c.chip} bytes`));
  table.append(head);
  /** @type {Map<string, MemoryOperand>} */
  const seen = new Map();
  for (const c of chips) for (const o of c.operands) if (!seen.has(o.origin)) seen.set(o.origin, o);
  for (const [origin, o] of seen) {
    const tr = h("tr");
    tr.dataset.origin = origin;
    tr.append(h("td", "pl-mono", o.label || origin), h("td", "", o.role), h("td", "", o.space),
      h("td", "pl-mono", `${o.shape.join("x") || "()"} ${o.dtype}`),
      h("td", "pl-mono", o.padded_shape.join("x") || "()"), h("td", "num", String(o.buffers)));
    for (const c of chips) {
      const x = c.operands.find((q) => q.origin === origin);
      tr.append(h("td", "num", x ? num(x.bytes) : "-"));
    }
    table.append(tr);
  }
  /** @param {string} label @param {(c: ChipMemory) => string} f @param {(c: ChipMemory) => string} [cls] */
  const foot = (label, f, cls) => {
    const tr = h("tr", "pl-mem-foot");
    tr.append(h("td", "", label), h("td"), h("td"), h("td"), h("td"), h("td"));
    for (const c of chips) tr.append(h("td", `num ${cls ? cls(c) : ""}`, f(c)));
    table.append(tr);
  };
  // sequential run_scoped regions reuse memory: the rows above add up to more than the total
  if (chips.some((c) => c.shared)) foot("shared by sequential run_scoped regions", (c) => `-${num(c.shared)}`);
  foot("total VMEM", (c) => num(c.bytes));
  foot("limit", (c) => `${num(c.limit)} (${c.limit_source})`);
  foot("SMEM", (c) => num(c.smem_bytes));
  foot("fits", (c) => (c.fits ? "yes" : "NO"), (c) => (c.fits ? "pl-mem-fits" : "pl-mem-over"));
  return table;
}

/** @param {GpuSection} g */
function gpuTable(g) {
  const box = h("div", "pl-mem-gpu");
  box.append(h("div", "pl-title", g.title ?? "GPU: shared memory, registers, blocks per SM (Triton)"));
  if (g.error) {
    box.append(h("p", "pl-dim", g.error));
    return box;
  }
  if (g.buffers?.length) box.append(sharedBuffers(g.buffers));
  if (g.note) box.append(h("p", "pl-dim", g.note));
  const table = h("table", "pl-table pl-mem-gputable");
  const head = h("tr");
  ["GPU", "shared memory", "registers/thread", "spills", "num_warps", "blocks/SM", "limited by", "occupancy"]
    .forEach((c, i) => head.append(h("th", i === 0 || i === 6 ? "" : "num", c)));
  table.append(head);
  for (const r of g.gpus) {
    const tr = h("tr");
    tr.dataset.gpu = r.gpu;
    tr.append(h("td", "", r.gpu));
    if (r.error) {
      const td = h("td", "pl-mem-over", r.error);
      td.setAttribute("colspan", "7");
      tr.append(td);
    } else {
      tr.append(h("td", "num", r.shared_bytes === null ? "-" : `${num(r.shared_bytes)} B`),  // exact: the note explains its padding
        h("td", "num", num(r.registers)),
        h("td", `num${r.spills ? " pl-mem-over" : ""}`, r.spills === null ? "-" : bytes(r.spills)),
        h("td", "num", String(r.num_warps)),
        h("td", `num ${r.blocks_per_sm ? "pl-mem-fits" : "pl-mem-over"}`, num(r.blocks_per_sm)),
        h("td", "", r.limited_by ?? "-"),
        h("td", "num", r.occupancy === null ? "-" : `${Math.round(100 * r.occupancy)}%`));
    }
    table.append(tr);
  }
  box.append(table);
  return box;
}

/** @param {SharedBufferEntry[]} buffers */
function sharedBuffers(buffers) {
  const table = h("table", "pl-table pl-mem-smem");
  const head = h("tr");
  ["shared memory", "shape", "dtype", "bytes"].forEach((c, i) => head.append(h("th", i === 3 ? "num" : "", c)));
  table.append(head);
  for (const b of buffers) {
    const tr = h("tr");
    tr.dataset.origin = b.origin;
    tr.append(h("td", "", b.label), h("td", "", `(${b.shape.join(", ")})`), h("td", "", b.dtype),
      h("td", "num", bytes(b.bytes)));
    table.append(tr);
  }
  return table;
}

/**
 * One chip's cells: buffers + the body's matrix product against the limit, libtpu's verdict
 * (when compiled), the predicted time.
 * @param {WhatIfChip} c
 * @param {boolean} compiled
 */
function whatIfCells(c, compiled) {
  const need = bytes(c.vmem_bytes) + (c.body_bytes ? ` + ${bytes(c.body_bytes)}` : "");
  const cell = h("td", `num${c.fits ? "" : " pl-mem-over"}`, `${need}${c.fits ? "" : " ✗"}`);
  cell.title = `limit ${bytes(c.limit)}`;
  const cells = [cell];
  if (compiled) cells.push(h("td", `num${c.compiles === false ? " pl-mem-over" : ""}`, c.compiler ?? "-"));
  cells.push(h("td", "num", us(c.predicted_time)));
  return cells;
}

/**
 * The row's verdict naming the chips it fails on (a block too big for v5e may be v6e's fastest).
 * @param {WhatIfRowPayload} r
 */
function rowVerdict(r) {
  if (r.compiles !== null) {
    const refused = r.chips.filter((c) => c.compiles === false).map((c) => c.chip);
    return refused.length ? `libtpu refuses it on ${refused.join(", ")}` : "libtpu compiles it";
  }
  const over = r.chips.filter((c) => !c.fits).map((c) => c.chip);
  if (!over.length) return "fits";
  return over.length === r.chips.length ? "fits no chip" : `does not fit ${over.join(", ")}`;
}

/** @param {WhatIfPayload} w */
function whatIfTable(w) {
  const box = h("div", "pl-whatif-box");
  box.append(h("div", "pl-title", "What-if: block sizes, best first"));
  const table = h("table", "pl-table pl-whatif");
  const compiled = w.rows.some((r) => r.compiles !== null);
  const head = h("tr");
  ["block sizes", "verdict", "programs", "fetches", "HBM bytes"].forEach((c, i) => head.append(h("th", i >= 2 ? "num" : "", c)));
  for (const c of w.chips) {
    head.append(h("th", "num", `${c} VMEM (buffers + body)`));
    if (compiled) head.append(h("th", "num", `${c} libtpu`));
    head.append(h("th", "num", `${c} µs`));
  }
  table.append(head);
  w.rows.forEach((r, i) => {
    const accepted = r.compiles === null ? r.fits : r.compiles;
    const tr = h("tr", i === w.best ? "pl-best" : accepted ? "" : "pl-nofit");
    tr.dataset.fits = String(r.fits);
    tr.append(h("td", "pl-mono", r.block_sizes));
    if (r.error) {
      const td = h("td", "pl-mem-over", `error: ${r.error}`);
      td.setAttribute("colspan", String(4 + (compiled ? 3 : 2) * w.chips.length));
      tr.append(td);
    } else {
      tr.append(h("td", accepted ? "pl-mem-fits" : "pl-mem-over", i === w.best ? "★ best" : rowVerdict(r)),
        h("td", "num", num(r.programs)), h("td", "num", num(r.fetches)), h("td", "num", num(r.hbm_bytes)));
      for (const c of r.chips) tr.append(...whatIfCells(c, compiled));
    }
    table.append(tr);
  });
  box.append(table);
  return box;
}


/**
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void}
 */
function render({ model, el }) {
  const root = h("div", "pallaslab pl-memory");
  el.append(root);
  /** @type {string | null} null: chosen from the payload (see defaultScale) */
  let scaleMode = null;

  function draw() {
    const p = model.get("payload");
    root.replaceChildren();
    const title = h("div", "pl-title");
    title.append("Memory ", h("code", "", p.kernel), " ",
      h("span", "pl-dim", p.chips.map((c) => c.chip).join(", ")));
    root.append(title);
    if (p.note) root.append(h("p", "pl-dim", p.note));
    if (p.chips.length) drawChips(p);
    if (p.gpu) root.append(gpuTable(p.gpu));
    if (p.what_if) root.append(whatIfTable(p.what_if));
  }

  /** @param {MemoryPayload} p */
  function drawChips(p) {
    const bar = h("div", "pl-toolbar");
    const label = h("label", "pl-dim", "bar width: ");
    const select = /** @type {HTMLSelectElement} */ (h("select", "pl-mem-scale"));
    for (const [v, t] of [["capacity", "VMEM capacity"], ["limit", "the largest limit"], ["usage", "the largest need (zoom)"]]) {
      const o = /** @type {HTMLOptionElement} */ (h("option", "", t));
      o.value = v;
      select.append(o);
    }
    const mode = scaleMode ?? DEFAULT_SCALE;
    select.value = mode;
    select.addEventListener("change", () => { scaleMode = select.value; draw(); });
    label.append(select);
    bar.append(label);
    root.append(bar);

    const scale = barScale(p.chips, mode);
    root.dataset.scale = mode;
    const bars = h("div", "pl-mem-bars");
    const info = h("div", "pl-mem-info pl-dim", "Hover a segment for its operand.");
    for (const c of p.chips) bars.append(chipRow(c, scale, info));
    const legend = h("div", "pl-mem-legend pl-dim");
    for (const role of ["input", "output", "scratch"]) legend.append(h("span", `pl-key pl-mem-${role}`), ` ${role} `);
    legend.append(h("span", "pl-key pl-mem-overzone"), " over the limit · ",
      `bar = ${bytes(scale)} (${SCALE_NAMES[mode]}); the solid mark is the scoped-VMEM limit, the dashed one the chip's VMEM`);
    bars.append(legend);
    root.append(bars, info);
    // the kernel's VMEM findings, with the severity the header and `check` count them with
    for (const f of p.findings) {
      const item = h("p", `pl-finding pl-${f.severity}`);
      item.append(h("span", "pl-badge", f.severity), " ", h("code", "", f.code), ` ${f.message}`);
      root.append(item);
    }
    for (const c of p.chips) {
      if (c.spill_note) root.append(h("p", "pl-dim pl-mem-note", `note · ${c.chip}: ${c.spill_note}`));
    }
    root.append(operandTable(p.chips));
  }

  const { signal, cleanup } = lifetime(root);
  draw();
  onModel(model, "change:payload", draw, signal);
  return cleanup;
}

export default { render, barScale, bytes, DEFAULT_SCALE };
