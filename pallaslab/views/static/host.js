// @ts-check
/**
 * The report's host: mounts every view's ES module in a plain page, without a kernel, from data
 * embedded in the page (`<script type="application/json" id="pl-data">`). Each view gets a
 * small in-page model with the anywidget model's interface; binary buffers are revived as
 * DataViews exactly as JupyterLab delivers them. Nothing is fetched: modules are imported from
 * blob: URLs made from the embedded sources. The report's Content-Security-Policy runs this
 * script by its sha256 and allows `blob:` for these imports only: markup cannot make a blob:
 * URL, so nothing but this script can use it (see `csp` in pallaslab/views/report.py). Keep
 * this module free of eval, `new Function` and inline handlers: the policy refuses them.
 */

import { h } from "./prelude.js";

/** An anywidget-like model over a plain state object (no kernel behind it). */
export class StaticModel {
  /** @param {Record<string, any>} state */
  constructor(state) {
    this.state = state;
    /** @type {Map<string, Set<() => void>>} */
    this.listeners = new Map();
  }
  /** @param {string} key */
  get(key) { return this.state[key]; }
  /** @param {string} key @param {any} value */
  set(key, value) {
    this.state[key] = value;
    for (const cb of this.listeners.get(`change:${key}`) || []) cb();
  }
  save_changes() {}
  send() {}
  /** @param {string} event @param {() => void} cb */
  on(event, cb) {
    if (!this.listeners.has(event)) this.listeners.set(event, new Set());
    /** @type {Set<() => void>} */ (this.listeners.get(event)).add(cb);
  }
  /** @param {string | null} [event] @param {(() => void) | null} [cb] */
  off(event, cb) {
    if (!event) { this.listeners.clear(); return; }
    if (!cb) { this.listeners.delete(event); return; }
    this.listeners.get(event)?.delete(cb);
  }
}

/** @param {string} b64 @returns {Uint8Array} */
export function fromBase64(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * Replace every {"$b64": "..."} in a JSON value by a DataView over its bytes.
 * @param {any} v
 * @returns {any}
 */
export function revive(v) {
  if (Array.isArray(v)) return v.map(revive);
  if (v && typeof v === "object") {
    if (typeof v.$b64 === "string") { const b = fromBase64(v.$b64); return new DataView(b.buffer); }
    /** @type {Record<string, any>} */
    const o = {};
    for (const [k, x] of Object.entries(v)) o[k] = revive(x);
    return o;
  }
  return v;
}

/** @type {Map<string, Promise<any>>} */
const modules = new Map();

/**
 * @param {Record<string, string>} sources module name -> base64 source
 * @param {string} name
 */
function loadModule(sources, name) {
  let m = modules.get(name);
  if (!m) {
    const text = new TextDecoder().decode(fromBase64(sources[name]));
    const url = URL.createObjectURL(new Blob([text], { type: "text/javascript" }));
    m = import(url).then((mod) => mod.default);
    modules.set(name, m);
  }
  return m;
}

/**
 * Mount the report: one section per kernel, a tab bar per section.
 * @param {HTMLElement} root
 * @param {{modules: Record<string, string>, kernels: {title: string, subtitle: string,
 *   tabs: {name: string, title: string, module: string | null, payload: any,
 *   error?: string}[]}[]}} data
 */
export async function mountReport(root, data) {
  /** @type {(() => void)[]} */
  const mounted = [];
  for (const kernel of data.kernels) {
    const section = h("section", "pl-kernel");
    const title = h("h2");
    title.append(h("span", "", kernel.title), " ", h("span", "pl-dim", kernel.subtitle));
    section.append(title);
    const bar = h("div", "pl-tabs");
    bar.setAttribute("role", "tablist");
    section.append(bar);
    const panes = kernel.tabs.map((tab) => {
      const pane = h("div", "pl-pane");
      pane.dataset.tab = tab.name;
      section.append(pane);
      return pane;
    });
    root.append(section);
    /** @type {boolean[]} */
    const done = kernel.tabs.map(() => false);
    const buttons = kernel.tabs.map((tab, i) => {
      const b = h("button", "", tab.title);
      b.dataset.tab = tab.name;
      b.setAttribute("role", "tab");
      b.addEventListener("click", () => select(i));
      bar.append(b);
      return b;
    });
    const select = async (/** @type {number} */ i) => {
      buttons.forEach((b, j) => b.setAttribute("aria-selected", String(i === j)));
      panes.forEach((p, j) => { p.hidden = i !== j; });
      if (!done[i]) {
        done[i] = true;
        const tab = kernel.tabs[i];
        if (tab.error || !tab.module) {
          panes[i].append(h("p", "pl-finding pl-error", tab.error || "this view is unavailable"));
          return;
        }
        const view = await loadModule(data.modules, tab.module);
        const model = new StaticModel({ payload: revive(tab.payload), selection: {} });
        mounted.push(view.render({ model, el: panes[i] }));
      }
    };
    const first = Math.max(0, kernel.tabs.findIndex((t) => t.name === "grid"));
    if (kernel.tabs.length) await select(first);
  }
  root.dataset.ready = "true";
  return mounted;
}

const dataEl = document.getElementById("pl-data");
const rootEl = document.getElementById("pl-root");
if (dataEl && rootEl) {
  mountReport(rootEl, JSON.parse(dataEl.textContent || "{}"));
  const toggle = document.getElementById("pl-theme");
  if (toggle) {
    toggle.addEventListener("click", () => {
      const dark = document.body.classList.contains("pl-dark") ||
        (!document.body.classList.contains("pl-light") && matchMedia("(prefers-color-scheme: dark)").matches);
      document.body.classList.toggle("pl-dark", !dark);
      document.body.classList.toggle("pl-light", dark);
      window.dispatchEvent(new Event("pl-theme"));
    });
  }
}
