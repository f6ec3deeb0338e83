// @ts-check
/**
 * The prelude every view module shares: DOM building, findings lists, formatting, binary buffers
 * from the wire, theme colours. Modules import from "./prelude.js" in source (so tsc checks the
 * types); anywidget loads each module as one string, so `pallaslab.views.base.module_source`
 * inlines this file in place of the import and drops its `export`s (see `assemble` there). Keep
 * it free of top-level side effects: it runs once per module that includes it.
 */

/**
 * The part of an anywidget model a view uses (the report's host provides the same in-page),
 * typed by the view's keys: `Keys` maps each trait the view reads or sets (`payload`,
 * `selection`) to its type.
 * @template {Record<string, any>} [Keys=Record<string, any>]
 * @typedef {{get<K extends keyof Keys & string>(key: K): Keys[K],
 *   set<K extends keyof Keys & string>(key: K, value: Keys[K]): void,
 *   save_changes(): void, on(event: string, cb: () => void): void,
 *   off(event?: string | null, cb?: (() => void) | null): void}} Model
 */
/**
 * What `render` gets: the model and the element to draw in.
 * @template {Record<string, any>} [Keys=Record<string, any>]
 * @typedef {{model: Model<Keys>, el: HTMLElement}} RenderContext
 */
/** @typedef {DataView | ArrayBuffer | ArrayBufferView} Buffer a binary buffer from the wire */

// --- DOM -------------------------------------------------------------------------------------

/**
 * An element with a class and text (text via textContent: user strings never become HTML).
 * @param {string} tag
 * @param {string} [cls]
 * @param {string} [text]
 * @returns {HTMLElement}
 */
export function h(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * A canvas of `w` x `hgt` CSS pixels backed at the device pixel ratio, its context scaled to CSS
 * pixels.
 * @param {number} w @param {number} hgt @param {string} [cls]
 * @returns {[HTMLCanvasElement, CanvasRenderingContext2D]}
 */
export function canvas(w, hgt, cls) {
  const c = /** @type {HTMLCanvasElement} */ (h("canvas", cls));
  const dpr = window.devicePixelRatio || 1;
  c.width = Math.max(1, Math.round(w * dpr)); c.height = Math.max(1, Math.round(hgt * dpr));
  c.style.width = `${w}px`; c.style.height = `${hgt}px`;
  const ctx = /** @type {CanvasRenderingContext2D} */ (c.getContext("2d"));
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return [c, ctx];
}

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * An SVG element with attributes and an optional hover title (set as text, never markup).
 * @param {string} tag @param {Record<string, string | number>} attrs @param {string} [title]
 */
export function svg(tag, attrs, title) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (title) {
    const t = document.createElementNS(SVG_NS, "title");
    t.textContent = title;
    node.append(t);
  }
  return node;
}

// --- findings --------------------------------------------------------------------------------

/** @typedef {{code: string, severity: string, message: string}} Finding */

/**
 * One finding as a list item: severity badge, code, any `extra` nodes (e.g. the executor), then
 * the message.
 * @param {Finding} f
 * @param {...(Node | string)} extra
 */
export function findingItem(f, ...extra) {
  const li = h("li", `pl-finding pl-${f.severity}`);
  li.append(h("span", "pl-badge", f.severity), " ", h("code", "", f.code), " ");
  for (const e of extra) li.append(e, " ");
  li.append(f.message);
  return li;
}

/**
 * Findings as a list (`ul.pl-findings`), or "No findings." when there are none.
 * @template {Finding} F
 * @param {F[]} findings
 * @param {(li: HTMLElement, f: F, i: number) => void} [decorate] adds data or listeners to an item
 * @returns {HTMLElement}
 */
export function findingsList(findings, decorate) {
  if (!findings.length) return h("p", "pl-ok", "No findings.");
  const ul = h("ul", "pl-findings");
  findings.forEach((f, i) => {
    const li = findingItem(f);
    if (decorate) decorate(li, f, i);
    ul.append(li);
  });
  return ul;
}

// --- lifetime: everything a view starts ends when its `render`'s cleanup runs ---------------

/**
 * One view's lifetime: its `signal` aborts when `cleanup` (what `render` returns) runs, which
 * also removes the view's root element. Listeners, observers and timers all hang off `signal`.
 * @param {HTMLElement} root
 * @returns {{signal: AbortSignal, cleanup: () => void}}
 */
export function lifetime(root) {
  const controller = new AbortController();
  return { signal: controller.signal, cleanup: () => { controller.abort(); root.remove(); } };
}

/**
 * Run `fn` once when `signal` aborts (at once when it already has).
 * @param {AbortSignal} signal @param {() => void} fn
 */
export function onAbort(signal, fn) {
  if (signal.aborted) fn();
  else signal.addEventListener("abort", fn, { once: true });
}

/**
 * `target.addEventListener(type, fn)` until `signal` aborts. (`fn` takes the event as `any`:
 * our own events, `pl-theme` and `pallaslab:program`, are in no DOM event map.)
 * @param {EventTarget} target @param {string} type @param {(e: any) => void} fn
 * @param {AbortSignal} signal @param {AddEventListenerOptions} [opts]
 */
export function listen(target, type, fn, signal, opts = {}) {
  target.addEventListener(type, /** @type {EventListener} */ (fn), { ...opts, signal });
}

/**
 * `model.on(event, fn)` until `signal` aborts (anywidget models take no signal of their own).
 * @param {Model<any>} model @param {string} event @param {() => void} fn @param {AbortSignal} signal
 */
export function onModel(model, event, fn, signal) {
  model.on(event, fn);
  onAbort(signal, () => model.off(event, fn));
}

/**
 * Call `fn` whenever the page's theme changes, until `signal` aborts: JupyterLab switches its
 * theme through attributes on <body>; the offline report toggles a class there and says so
 * with a `pl-theme` event on `window`.
 * @param {() => void} fn @param {AbortSignal} signal
 */
export function watchTheme(fn, signal) {
  const observer = new MutationObserver(() => fn());
  observer.observe(document.body,
    { attributes: true, attributeFilter: ["data-jp-theme-name", "data-jp-theme-light", "class"] });
  onAbort(signal, () => observer.disconnect());
}

// --- formatting ------------------------------------------------------------------------------

/** A Python-style tuple: (1,) (1, 2). @param {(number | string)[]} v */
export const tuple = (v) => `(${v.join(", ")}${v.length === 1 ? "," : ""})`;

/** A count with thousands separators; "-" when unknown. @param {number | null | undefined} n */
export const num = (n) => (n === null || n === undefined ? "-" : n.toLocaleString("en-US"));

// --- binary buffers (DataView in JupyterLab, revived DataView in the report) ----------------

/**
 * A buffer as a typed array of `Kind` (a view when aligned, else a copy).
 * @param {Buffer} buf
 * @param {any} Kind a typed-array constructor
 */
export function typed(buf, Kind) {
  if (buf instanceof ArrayBuffer) return new Kind(buf);
  const size = Kind.BYTES_PER_ELEMENT;
  if (buf.byteOffset % size === 0) return new Kind(buf.buffer, buf.byteOffset, buf.byteLength / size);
  return new Kind(new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength).slice().buffer);
}

/** @param {Buffer} buf @returns {Int32Array} */
export const toInt32 = (buf) => typed(buf, Int32Array);

/** @param {Buffer} buf @returns {Float32Array} */
export const float32 = (buf) => typed(buf, Float32Array);

// --- theme colours ---------------------------------------------------------------------------

/**
 * Read the theme's colours (CSS variables on the view's root) as canvas-ready strings.
 * @param {HTMLElement} el
 */
export function themeColors(el) {
  const style = getComputedStyle(el);
  /** @param {string} name @param {string} fallback */
  const get = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
  return {
    bg: get("--pl-bg", "#fff"), bg2: get("--pl-bg2", "#f4f5f7"), cell: get("--pl-cell", "#dfe3e8"),
    empty: get("--pl-empty", "#eef0f3"), fg: get("--pl-fg", "#1f2328"),
    fg2: get("--pl-fg2", "#5b6470"), border: get("--pl-border", "#d0d7de"),
    accent: get("--pl-accent", "#1a73e8"), hl: get("--pl-hl", "#f29900"),
    error: get("--pl-error", "#d93025"), warn: get("--pl-warn", "#e37400"),
    info: get("--pl-info", "#1289a7"),
  };
}
/** @typedef {ReturnType<typeof themeColors>} Colors */

/** @type {CanvasRenderingContext2D | null} */
let colorProbe = null;
/**
 * Any CSS colour -> [r, g, b] (the canvas parses it for us).
 * @param {string} css
 * @returns {number[]}
 */
export function rgb(css) {
  if (!colorProbe) colorProbe = /** @type {CanvasRenderingContext2D} */ (document.createElement("canvas").getContext("2d"));
  colorProbe.fillStyle = "#000";
  colorProbe.fillStyle = css;
  const v = String(colorProbe.fillStyle);
  if (v[0] === "#") return [1, 3, 5].map((i) => parseInt(v.slice(i, i + 2), 16));
  const m = v.match(/[\d.]+/g) || ["0", "0", "0"];
  return m.slice(0, 3).map(Number);
}

/** @type {Map<string, string>} */
const mixed = new Map();
/**
 * Mix two colours: t = 0 gives a, 1 gives b (memoised: called per pixel when aggregating).
 * @param {string} a @param {string} b @param {number} t
 */
export function mix(a, b, t) {
  const key = `${a}|${b}|${t}`;
  let out = mixed.get(key);
  if (out === undefined) {
    const x = rgb(a), y = rgb(b);
    out = `rgb(${x.map((v, i) => Math.round(v + (y[i] - v) * t)).join(",")})`;
    if (mixed.size > 4096) mixed.clear();
    mixed.set(key, out);
  }
  return out;
}

// --- heatmaps --------------------------------------------------------------------------------

/**
 * A heatmap of `rows` x `cols` cells, cell k (row-major) in colour `colorAt(k)` ([r, g, b],
 * or [r, g, b, alpha]: a transparent cell shows the canvas's CSS background),
 * drawn onto `ctx` to fill `w` x `h` CSS pixels: painted one pixel per cell, then scaled up
 * without smoothing, so cells stay sharp at any size (and fractional cell sizes cost nothing).
 * @param {CanvasRenderingContext2D} ctx @param {number} rows @param {number} cols
 * @param {number} w @param {number} hgt @param {(k: number) => number[]} colorAt
 */
export function drawHeatmap(ctx, rows, cols, w, hgt, colorAt) {
  const small = document.createElement("canvas");
  small.width = cols; small.height = rows;
  const sctx = /** @type {CanvasRenderingContext2D} */ (small.getContext("2d"));
  const img = sctx.createImageData(cols, rows);
  for (let k = 0; k < rows * cols; k++) {
    const c = colorAt(k);
    img.data[4 * k] = c[0]; img.data[4 * k + 1] = c[1]; img.data[4 * k + 2] = c[2];
    img.data[4 * k + 3] = c.length > 3 ? c[3] : 255;
  }
  sctx.putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(small, 0, 0, w, hgt);
}

/**
 * The colour `t` of the way from `from` to `to` (both [r, g, b]), rounded per channel.
 * @param {number[]} from @param {number[]} to @param {number} t
 */
export const blend = (from, to, t) => [0, 1, 2].map((j) => Math.round(from[j] + (to[j] - from[j]) * t));
