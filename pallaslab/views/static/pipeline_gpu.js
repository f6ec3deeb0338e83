// @ts-check
/**
 * The Pipeline view of a GPU kernel (Triton, Mosaic GPU): the GPU time model's lead line and
 * facts (per GPU: time and bound, waves of blocks over the SMs, the compute / memory / latency
 * terms; flops, bytes moved, per-block overhead; the measured run and published timings), as
 * Python words them (`pallaslab/views/pipeline_gpu.py`), then the manual DMAs where the body
 * issues its own. User-derived strings are inserted with textContent only.
 */

import { h, lifetime, onModel } from "./prelude.js";
import { manualSection } from "./pipeline_manual.js";

/**
 * @typedef {{gpus: string[], lead: string, facts: string[][]}} GpuPayload
 * @typedef {{kernel: string, gpu?: GpuPayload | null} & import("./pipeline_manual.js").BeyondBlockSpecs} GpuPipelinePayload
 */

/**
 * The title, lead line, facts and manual DMAs of one payload.
 * @param {GpuPipelinePayload} p
 * @returns {HTMLElement[]}
 */
export function gpuParts(p) {
  const gpu = /** @type {GpuPayload} */ (p.gpu);
  const title = h("div", "pl-title");
  title.append("Pipeline ", h("code", "", p.kernel), " ",
    h("span", "pl-dim", `GPU ${gpu.gpus.map((g) => g.toUpperCase()).join(", ")}, model`));
  const facts = h("dl", "pl-facts pl-pipe-facts pl-gpu-facts");
  for (const [fact, value] of gpu.facts) facts.append(h("dt", "", fact), h("dd", "", value));
  return [title, h("div", "pl-lead", gpu.lead), facts, manualSection(p)];
}

/**
 * Draw a GPU kernel's Pipeline tab; redrawn when Python sends a new payload (a profile taken).
 * @param {{model: import("./prelude.js").Model<{payload: GpuPipelinePayload}>, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
export function renderGpu({ model, el }) {
  const root = h("div", "pallaslab pl-pipeline pl-pipeline-gpu");
  const draw = () => root.replaceChildren(...gpuParts(model.get("payload")));
  el.append(root);
  const { signal, cleanup } = lifetime(root);
  onModel(model, "change:payload", draw, signal);
  draw();
  return cleanup;
}
