// @ts-check
/**
 * The Pipeline view: a Gantt timeline of the TPU software pipeline model (copy-in, compute and
 * write-back lanes) and, when the kernel was profiled, the measured timeline beside it (its own
 * time axis). Wheel zooms around the cursor, drag pans, double-click resets; both tracks zoom
 * together (as fractions of their own durations). Hover a step: its program ids and durations,
 * the same step lit in every lane and track, and a `pallaslab:program` event on `window`
 * (detail: {kernel, index, step, program, source}) that other views (the grid) can follow;
 * click a step to set `selection` {step, program}. Long timelines arrive as busy bins plus the
 * events of one window; zooming elsewhere asks Python for that window (`selection.window`).
 * Plain ES module (anywidget `render`), canvas drawing, no dependencies; user-derived strings
 * are drawn as canvas text or inserted with textContent only.
 */

import { h, lifetime, listen, onAbort, onModel, watchTheme } from "./prelude.js";
import { renderGpu } from "./pipeline_gpu.js";
import { manualSection } from "./pipeline_manual.js";
import {
  AXIS_H, KIND_COLOR, LABEL_W, LANE_H, MIN_SPAN, Track, fmtTime, programIds, tickStep,
} from "./pipeline_track.js";

/**
 * @typedef {import("./pipeline_track.js").TrackPayload} TrackPayload
 * @typedef {{version: number, kernel: string, index: number, chip: string, grid: number[],
 *   programs: number, summary: Record<string, any>, stall_time: number | null,
 *   measured: Record<string, any> | null, tracks: TrackPayload[], chips: string[],
 *   live: boolean, published?: string[], facts?: string[][],
 *   gpu?: import("./pipeline_gpu.js").GpuPayload | null}
 *   & import("./pipeline_manual.js").BeyondBlockSpecs} PipelinePayload
 */
/**
 * What the widget tells Python: another chip's model, the step clicked, the window zoomed to.
 * @typedef {{chip?: string, step?: number, program?: number[], window?: number[]}} PipelineSelection
 * @typedef {{payload: PipelinePayload, selection: PipelineSelection}} PipelineModel the model's keys
 * @typedef {import("./prelude.js").Model<PipelineModel>} Model
 * @typedef {{row: number, step: number, lane: number, time: number, bin: number}} Hit
 */

/**
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void}
 */
function render({ model, el }) {
  /** @type {PipelinePayload} */
  const first = model.get("payload");
  if (first.gpu) return renderGpu({ model, el });  // a GPU kernel: the GPU time model's facts
  if (!first.tracks.length) {  // a mesh kernel: no BlockSpec pipeline, its manual DMAs only
    const root = h("div", "pallaslab pl-pipeline");
    const title = h("div", "pl-title");
    title.append("Pipeline ", h("code", "", first.kernel), " ",
      h("span", "pl-dim", "no BlockSpec pipeline"));
    const facts = h("dl", "pl-facts pl-pipe-facts");
    if (first.dma_traffic) facts.append(h("dt", "", "moved by its DMAs"), h("dd", "", first.dma_traffic.text));
    root.append(title, facts, manualSection(first));
    el.append(root);
    return () => root.remove();
  }
  const cleanup = renderTimeline({ model, el });
  const extra = manualSection(first);
  el.querySelector(".pl-pipeline")?.append(extra);
  return () => { cleanup(); extra.remove(); };
}

/** @param {HTMLCanvasElement} canvas @param {MouseEvent} e */
function local(canvas, e) {
  const r = canvas.getBoundingClientRect();
  return { x: e.clientX - r.left, y: e.clientY - r.top, w: r.width };
}

/**
 * The facts above the timelines, worded in Python as the text and static HTML show them
 * (steps, predicted time, compute, exposed copies, stall, traffic, measured, published).
 * @param {PipelinePayload} p
 * @returns {string[][]}
 */
function factRows(p) {
  return p.facts || [];
}

/** The BlockSpec pipeline's timelines: their state (zoom window, hover), drawing and input. */
class Timeline {
  /** @param {Model} model @param {HTMLElement} root @param {AbortSignal} signal */
  constructor(model, root, signal) {
    this.model = model;
    this.root = root;
    this.signal = signal;
    this.state = { f0: 0, f1: 1, hoverStep: -1, hoverTrack: -1, hoverRow: -1 };
    this.p = model.get("payload");
    /** @type {Track[]} */
    this.tracks = [];
    /** @type {{canvas: HTMLCanvasElement, head: HTMLElement}[]} */
    this.panels = [];
    /** @type {Record<string, string>} */
    this.colors = {};
    /** Whether `colors` were read from the live theme (a detached element has no styles). */
    this.themed = false;
    this.requestTimer = 0;
    onAbort(signal, () => clearTimeout(this.requestTimer));
    this.title = h("div", "pl-title");
    this.facts = h("dl", "pl-facts pl-pipe-facts");
    this.span = h("span", "pl-dim pl-pipe-span");
    this.chipBox = h("label", "pl-dim pl-pipe-chip", "chip ");
    this.chipSelect = /** @type {HTMLSelectElement} */ (h("select", "pl-chip"));
    this.body = h("div", "pl-pipe-tracks");
    this.info = h("div", "pl-pipe-info pl-dim", "Hover a step for its program and durations.");
    this.tip = h("div", "pl-pipe-tip");
    this.tip.hidden = true;
    root.append(this.title, this.facts, this.toolbar(), this.body, this.info, this.tip);
  }

  /** The chip picker, zoom buttons and the span shown. */
  toolbar() {
    const { model, chipSelect, signal } = this;
    const toolbar = h("div", "pl-toolbar");
    const zoomOut = h("button", "pl-zoom-out", "−");
    const zoomIn = h("button", "pl-zoom-in", "+");
    const reset = h("button", "pl-zoom-reset", "reset");
    zoomOut.title = "zoom out"; zoomIn.title = "zoom in"; reset.title = "show everything";
    this.chipBox.append(chipSelect);
    listen(chipSelect, "change", () => {
      chipSelect.disabled = true; // until Python sends the new model
      model.set("selection", { ...(model.get("selection") || {}), chip: chipSelect.value });
      model.save_changes();
    }, signal);
    toolbar.append(this.chipBox, zoomOut, zoomIn, reset, this.span,
      h("span", "pl-dim", "wheel: zoom · drag: pan · double-click: reset · click a step: select it"));
    listen(zoomIn, "click", () => this.zoom(0.5, 0.5), signal);
    listen(zoomOut, "click", () => this.zoom(2, 0.5), signal);
    listen(reset, "click", () => { this.state.f0 = 0; this.state.f1 = 1; this.drawAll(); }, signal);
    return toolbar;
  }

  readColors() {
    const { root } = this;
    const cs = getComputedStyle(root);
    /** @type {Record<string, string>} */
    const colors = {};
    this.themed = root.isConnected && cs.getPropertyValue("--pl-bg2").trim() !== "";
    const fallback = { "--pl-bg": "#ffffff", "--pl-bg2": "#f4f5f7", "--pl-border": "#d0d7de", "--pl-fg": "#1f2328", "--pl-fg2": "#5b6470" };
    for (const v of ["--pl-accent", "--pl-info", "--pl-ok", "--pl-fg", "--pl-fg2", "--pl-hl", "--pl-error", "--pl-border", "--pl-bg2", "--pl-bg"]) {
      colors[v] = cs.getPropertyValue(v).trim() || /** @type {Record<string, string>} */ (fallback)[v] || "#1a73e8";
    }
    this.colors = colors;
  }

  build() {
    const { chipBox, chipSelect, facts, body } = this;
    const p = this.p = this.model.get("payload");
    const tracks = this.tracks = p.tracks.map((t) => new Track(t));
    this.title.replaceChildren("Pipeline ", h("code", "", p.kernel), " ",
      h("span", "pl-dim", `model on TPU ${p.chip}${p.measured ? `, measured on ${p.measured.device}` : ""}`));
    // another chip's model needs Python: offered in the live widget only
    chipBox.hidden = !p.live || (p.chips || []).length < 2;
    chipSelect.replaceChildren(...(p.chips || [p.chip]).map((c) => {
      const o = /** @type {HTMLOptionElement} */ (h("option", "", `TPU ${c}`));
      o.value = c;
      return o;
    }));
    chipSelect.value = p.chip;
    chipSelect.disabled = false;
    facts.replaceChildren();
    for (const [a, b] of factRows(p)) facts.append(h("dt", "", a), h("dd", "", b));
    body.replaceChildren();
    this.panels = tracks.map((t, i) => {
      const box = h("div", "pl-pipe-track");
      box.dataset.source = t.p.source;
      const head = h("div", "pl-pipe-head");
      head.append(h("span", "pl-pipe-name", t.p.name), " ", h("span", "pl-dim",
        `${fmtTime(t.p.duration)} · ${t.p.count.toLocaleString("en-US")} events` +
        (t.p.bins ? ` · aggregated in ${t.p.bins.toLocaleString("en-US")} bins, exact events from ${fmtTime(t.p.window[0])} to ${fmtTime(t.p.window[1])}` : "")));
      const canvas = /** @type {HTMLCanvasElement} */ (h("canvas", "pl-pipe-canvas"));
      canvas.dataset.role = "timeline";
      canvas.dataset.track = String(i);
      canvas.dataset.labelWidth = String(LABEL_W);
      box.append(head, canvas);
      body.append(box);
      this.attach(canvas, i);
      return { canvas, head };
    });
    this.layout();
  }

  /**
   * The canvases' width: the tracks box's, which CSS keeps out of the view's own intrinsic
   * width (`contain: inline-size`), so drawing wider never makes the box wider (no feedback
   * loop with the ResizeObserver below).
   */
  width() { return Math.max(320, Math.floor(this.body.clientWidth || 0) || 900); }

  layout() {
    const { panels, tracks } = this;
    const W = this.width();
    const dpr = window.devicePixelRatio || 1;
    panels.forEach(({ canvas }, i) => {
      const H = AXIS_H + tracks[i].p.lanes.length * LANE_H + 4;
      canvas.style.width = `${W}px`;
      canvas.style.height = `${H}px`;
      canvas.width = Math.round(W * dpr);
      canvas.height = Math.round(H * dpr);
      canvas.dataset.plotWidth = String(W - LABEL_W);
    });
    this.drawAll();
  }

  drawAll() {
    const { state, tracks, span, root } = this;
    // drawn before the page attached the view (JupyterLab renders outputs detached first):
    // the theme's colours are only readable now
    if (!this.themed) this.readColors();
    tracks.forEach((_, i) => this.drawTrack(i));
    const t = tracks[0];
    if (t) span.textContent = `showing ${fmtTime(state.f0 * t.p.duration)} – ${fmtTime(state.f1 * t.p.duration)} of the model`;
    root.dataset.f0 = String(state.f0);
    root.dataset.f1 = String(state.f1);
  }

  /** @param {number} i */
  drawTrack(i) {
    const { state, tracks, panels, colors, p } = this;
    const t = tracks[i];
    const { canvas } = panels[i];
    const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
    const dpr = window.devicePixelRatio || 1;
    const W = canvas.width / dpr;
    const H = canvas.height / dpr;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    const plotW = W - LABEL_W;
    const dur = t.p.duration || 1;
    const a = state.f0 * dur;
    const b = state.f1 * dur;
    const k = plotW / Math.max(b - a, 1e-300);
    const X = (/** @type {number} */ time) => LABEL_W + (time - a) * k;

    // axis
    ctx.font = "11px sans-serif";
    ctx.fillStyle = colors["--pl-fg2"];
    ctx.strokeStyle = colors["--pl-border"];
    ctx.lineWidth = 1;
    const step = tickStep(b - a, Math.max(2, Math.floor(plotW / 110)));
    ctx.textBaseline = "middle";
    for (let v = Math.ceil(a / step) * step; v <= b + step * 1e-9; v += step) {
      const x = Math.round(X(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, AXIS_H - 5); ctx.lineTo(x, H); ctx.globalAlpha = 0.35; ctx.stroke(); ctx.globalAlpha = 1;
      ctx.fillText(fmtTime(v), Math.min(x + 3, W - 60), AXIS_H / 2 - 1);
    }
    if (t.p.bins) { // where the exact events are
      const x0 = Math.max(LABEL_W, X(t.p.window[0]));
      const x1 = Math.min(W, X(t.p.window[1]));
      if (x1 > x0) { ctx.fillStyle = colors["--pl-accent"]; ctx.fillRect(x0, AXIS_H - 3, x1 - x0, 2); }
    }

    t.p.lanes.forEach((name, lane) => {
      const y = AXIS_H + lane * LANE_H;
      ctx.fillStyle = colors["--pl-bg2"];
      ctx.fillRect(LABEL_W, y + 1, plotW, LANE_H - 2);
      ctx.fillStyle = colors["--pl-fg"];
      ctx.save();
      ctx.beginPath(); ctx.rect(0, y, LABEL_W - 6, LANE_H); ctx.clip();
      ctx.fillText(name, 4, y + LANE_H / 2);
      ctx.restore();
      const o = t.p.lane_offsets[lane];
      const kindName = (o < t.p.lane_offsets[lane + 1] ? t.p.kinds[t.kind[o]] : t.p.kinds[lane]) ?? "";
      const color = colors[KIND_COLOR[kindName] || "--pl-accent"];
      const cover = new Float32Array(Math.ceil(plotW) + 1);
      // aggregated bins, outside the window of exact events
      if (t.busy && t.p.bins) {
        const nb = t.p.bins;
        for (let px = 0; px < plotW; px++) {
          const ta = a + px / k;
          const tb = ta + 1 / k;
          if (ta >= t.p.window[0] && tb <= t.p.window[1]) continue;
          const i0 = Math.max(0, Math.floor((ta / dur) * nb));
          const i1 = Math.min(nb, Math.max(i0 + 1, Math.ceil((tb / dur) * nb)));
          let s = 0;
          for (let q = i0; q < i1; q++) s += t.busy[lane * nb + q];
          cover[px] = Math.max(cover[px], s / Math.max(1, i1 - i0));
        }
      }
      // exact events
      const first = t.lowerBound(lane, a - t.p.max_duration[lane]);
      const stop = t.p.lane_offsets[lane + 1];
      ctx.fillStyle = color;
      /** @type {number[]} */
      const lit = [];
      for (let r = first; r < stop && t.start[r] <= b; r++) {
        if (t.end[r] < a) continue;
        const x0 = X(t.start[r]);
        const x1 = X(t.end[r]);
        if (t.program[r] === state.hoverStep && state.hoverStep >= 0) lit.push(r);
        if (x1 - x0 < 2) {
          const c0 = Math.max(0, Math.floor(x0 - LABEL_W));
          const c1 = Math.min(cover.length - 1, Math.floor(x1 - LABEL_W));
          for (let c = c0; c <= c1; c++) cover[c] = Math.min(1, cover[c] + Math.max(x1 - x0, 0.2));
        } else {
          const l = Math.max(LABEL_W, x0);
          ctx.fillRect(l, y + 3, Math.max(1, Math.min(W, x1) - l - (x1 - x0 > 4 ? 1 : 0)), LANE_H - 6);
        }
      }
      for (let c = 0; c < cover.length; c++) {
        if (cover[c] <= 0) continue;
        ctx.globalAlpha = 0.25 + 0.75 * Math.min(1, cover[c]);
        ctx.fillRect(LABEL_W + c, y + 3, 1, LANE_H - 6);
      }
      ctx.globalAlpha = 1;
      for (const r of lit) {
        const x0 = Math.max(LABEL_W, X(t.start[r]));
        const x1 = Math.max(x0 + 2, Math.min(W, X(t.end[r])));
        ctx.fillStyle = colors["--pl-hl"];
        ctx.fillRect(x0, y + 2, x1 - x0, LANE_H - 4);
        ctx.strokeStyle = colors["--pl-fg"];
        ctx.strokeRect(x0 + 0.5, y + 2.5, Math.max(1, x1 - x0 - 1), LANE_H - 5);
      }
    });
    if (t.p.source === "model" && p.stall_time !== null) { // where the pipeline waits longest
      const x = Math.round(X(p.stall_time)) + 0.5;
      if (x >= LABEL_W && x <= W) {
        ctx.strokeStyle = colors["--pl-error"];
        ctx.setLineDash([3, 3]);
        ctx.beginPath(); ctx.moveTo(x, AXIS_H); ctx.lineTo(x, H); ctx.stroke();
        ctx.setLineDash([]);
        ctx.fillStyle = colors["--pl-error"];
        ctx.fillText("stall", Math.min(x + 3, W - 30), AXIS_H + 8);
      }
    }
  }

  // ---- hover, click, zoom, pan ----
  /**
   * What is under (x, y) of track i: an event row, or a bin.
   * @param {number} i @param {number} x @param {number} y @param {number} w
   * @returns {Hit}
   */
  pick(i, x, y, w) {
    const { state, tracks } = this;
    const t = tracks[i];
    const lane = Math.floor((y - AXIS_H) / LANE_H);
    const none = { row: -1, step: -1, lane, time: 0, bin: -1 };
    if (x < LABEL_W || lane < 0 || lane >= t.p.lanes.length) return none;
    const dur = t.p.duration || 1;
    const k = (w - LABEL_W) / ((state.f1 - state.f0) * dur);
    const time = state.f0 * dur + (x - LABEL_W) / k;
    const tol = 3 / k;
    if (t.covers(time - tol, time + tol) || !t.binStep) {
      const row = t.find(lane, time, tol);
      return { row, step: row >= 0 ? t.program[row] : -1, lane, time, bin: -1 };
    }
    const bin = Math.min(t.p.bins - 1, Math.max(0, Math.floor((time / dur) * t.p.bins)));
    return { row: -1, step: t.binStep[bin], lane, time, bin };
  }

  /** @param {number} i @param {Hit} hit @param {MouseEvent} e */
  showHover(i, hit, e) {
    const { state, tracks, p, info, root, tip } = this;
    const t = tracks[i];
    const changed = hit.step !== state.hoverStep;
    state.hoverStep = hit.step;
    state.hoverTrack = i;
    state.hoverRow = hit.row;
    if (hit.step < 0 && hit.row < 0 && hit.bin < 0) { this.clearHover(); return; }
    const parts = [];
    if (hit.row >= 0) {
      const kind = t.p.kinds[t.kind[hit.row]];
      parts.push(`${kind}: ${fmtTime(t.start[hit.row])} → ${fmtTime(t.end[hit.row])} (${fmtTime(t.end[hit.row] - t.start[hit.row])})`);
    } else if (hit.bin >= 0 && t.busy) {
      const nb = t.p.bins;
      const d = t.p.duration;
      parts.push(`${t.p.lanes[hit.lane]} ${fmtTime((hit.bin * d) / nb)} – ${fmtTime(((hit.bin + 1) * d) / nb)}: ${Math.round(100 * t.busy[hit.lane * nb + hit.bin])}% busy (aggregated; zoom in for single steps)`);
    }
    let program = "";
    if (hit.step >= 0) {
      program = `(${programIds(p.grid, hit.step).join(", ")})`;
      const same = hit.row >= 0 ? t.stepRows(hit.step).filter((r) => r !== hit.row && t.p.kinds[t.kind[r]] !== "op") : [];
      const others = same.map((r) => `${t.p.kinds[t.kind[r]]} ${fmtTime(t.end[r] - t.start[r])}`);
      parts.unshift(`step ${hit.step.toLocaleString("en-US")} · program ${program}`);
      if (others.length) parts.push(`same step: ${others.slice(0, 6).join(", ")}${others.length > 6 ? ", …" : ""}`);
    }
    const text = `${t.p.source === "model" ? "model" : "measured"} · ${parts.join(" · ")}`;
    info.className = "pl-pipe-info";
    info.textContent = text;
    root.dataset.hoverStep = String(hit.step);
    root.dataset.hoverProgram = program;
    tip.textContent = parts.join("\n");
    tip.hidden = false;
    const r = root.getBoundingClientRect();
    tip.style.left = `${Math.max(0, Math.min(e.clientX - r.left + 14, r.width - tip.offsetWidth - 4))}px`;
    tip.style.top = `${e.clientY - r.top + 16}px`;
    if (changed) {
      this.drawAll();
      if (hit.step >= 0) this.announce(hit.step, "hover");
    }
  }

  clearHover() {
    const { state, root, tip } = this;
    tip.hidden = true;
    if (state.hoverStep !== -1) { state.hoverStep = -1; this.drawAll(); }
    delete root.dataset.hoverStep;
    delete root.dataset.hoverProgram;
  }

  /**
   * Tell the page (the grid view, a notebook's own script) which program is pointed at.
   * @param {number} step @param {string} how
   */
  announce(step, how) {
    const { p } = this;
    window.dispatchEvent(new CustomEvent("pallaslab:program", {
      detail: { kernel: p.kernel, index: p.index, step, program: programIds(p.grid, step), source: "pipeline", how },
    }));
  }

  /** Ask Python for the exact events of the visible window when a track only has bins there. */
  requestWindow() {
    const { state, tracks, model } = this;
    clearTimeout(this.requestTimer);
    this.requestTimer = window.setTimeout(() => {
      const need = tracks.some((t) => !t.covers(state.f0 * t.p.duration, state.f1 * t.p.duration));
      if (!need) return;
      model.set("selection", { ...(model.get("selection") || {}), window: [state.f0, state.f1] });
      model.save_changes();
    }, 250);
  }

  /**
   * Zoom by `factor` (<1 in) around fraction `at` of the visible span.
   * @param {number} factor @param {number} at
   */
  zoom(factor, at) {
    const { state } = this;
    const spanNow = state.f1 - state.f0;
    const next = Math.min(1, Math.max(MIN_SPAN, spanNow * factor));
    const c = state.f0 + at * spanNow;
    let f0 = c - at * next;
    f0 = Math.min(Math.max(0, f0), 1 - next);
    state.f0 = f0;
    state.f1 = f0 + next;
    this.drawAll();
    this.requestWindow();
  }

  /** @param {HTMLCanvasElement} canvas @param {number} i */
  attach(canvas, i) {
    const { state, model, tip, signal } = this;
    let drag = /** @type {{x: number, f0: number, moved: boolean} | null} */ (null);
    listen(canvas, "wheel", (e) => {
      e.preventDefault();
      const { x, w } = local(canvas, e);
      const at = Math.min(1, Math.max(0, (x - LABEL_W) / (w - LABEL_W)));
      this.zoom(Math.exp(e.deltaY * 0.0015), at);
    }, signal, { passive: false });
    listen(canvas, "pointerdown", (e) => {
      drag = { x: e.clientX, f0: state.f0, moved: false };
      if (canvas.setPointerCapture && e.pointerId !== undefined) {
        try { canvas.setPointerCapture(e.pointerId); } catch { /* synthetic events */ }
      }
    }, signal);
    listen(canvas, "pointermove", (e) => {
      const { x, y, w } = local(canvas, e);
      if (drag && (e.buttons & 1)) {
        const dx = e.clientX - drag.x;
        if (Math.abs(dx) > 3) drag.moved = true;
        if (drag.moved) {
          const spanNow = state.f1 - state.f0;
          const f0 = Math.min(Math.max(0, drag.f0 - (dx / (w - LABEL_W)) * spanNow), 1 - spanNow);
          state.f0 = f0;
          state.f1 = f0 + spanNow;
          tip.hidden = true;
          this.drawAll();
          return;
        }
      }
      this.showHover(i, this.pick(i, x, y, w), e);
    }, signal);
    listen(canvas, "pointerup", (e) => {
      const wasDrag = drag && drag.moved;
      drag = null;
      if (wasDrag) { this.requestWindow(); return; }
      const { x, y, w } = local(canvas, e);
      const hit = this.pick(i, x, y, w);
      if (hit.step >= 0) {
        model.set("selection", { ...(model.get("selection") || {}), step: hit.step, program: programIds(this.p.grid, hit.step) });
        model.save_changes();
        this.announce(hit.step, "click");
      }
    }, signal);
    listen(canvas, "pointerleave", () => { if (!drag) this.clearHover(); }, signal);
    listen(canvas, "dblclick", () => { state.f0 = 0; state.f1 = 1; this.drawAll(); }, signal);
  }

  /** Redraw on theme changes; lay out again when the tracks box changes width. */
  follow() {
    const { signal } = this;
    watchTheme(() => { this.readColors(); this.drawAll(); }, signal);
    listen(window, "pl-theme", () => { this.readColors(); this.drawAll(); }, signal);
    let lastW = 0;
    let frame = 0;
    const resize = new ResizeObserver(() => {
      cancelAnimationFrame(frame);
      frame = requestAnimationFrame(() => {
        const w = this.width();
        if (w !== lastW) { lastW = w; if (!this.themed) this.readColors(); this.layout(); }
      });
    });
    resize.observe(this.body);
    onAbort(signal, () => cancelAnimationFrame(frame));
    onAbort(signal, () => resize.disconnect());
  }
}

/**
 * The BlockSpec pipeline's timelines.
 * @param {{model: Model, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function renderTimeline({ model, el }) {
  const root = h("div", "pallaslab pl-pipeline");
  // Inside a workbench tab (an ipywidgets flex box) the host element is sized by its content:
  // let it take the box's width instead, so the canvases can follow the notebook's width.
  el.style.minWidth = "0";
  el.style.maxWidth = "100%";
  el.style.flex = "1 1 100%";
  el.append(root);
  const { signal, cleanup } = lifetime(root);
  const view = new Timeline(model, root, signal);
  onModel(model, "change:payload", () => view.build(), signal);
  view.follow();
  view.readColors();
  view.build();
  return cleanup;
}

export default { render, Track, programIds, fmtTime, LABEL_W, LANE_H, AXIS_H };
