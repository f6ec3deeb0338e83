// @ts-check
/**
 * The Lowering view's IR text: IR line <-> Python line maps and a small tokenizer for the
 * IR dialects shown (Mosaic/MLIR, PTX, SASS, jaxpr). No DOM here.
 */

import { toInt32 } from "./prelude.js";

/**
 * IR line <-> Python line maps of one stage, from its (ir_line, file, py_line) triples.
 * Python lines are keyed "file:line" (file = index into payload.files).
 */
export class LineMap {
  /** @param {DataView | ArrayBuffer | ArrayBufferView} buf */
  constructor(buf) {
    const t = toInt32(buf);
    /** @type {Map<number, string[]>} */
    this.toPy = new Map();
    /** @type {Map<string, number[]>} */
    this.toIr = new Map();
    for (let i = 0; i + 2 < t.length; i += 3) {
      const ir = t[i], key = `${t[i + 1]}:${t[i + 2]}`;
      const py = this.toPy.get(ir);
      if (py) { if (!py.includes(key)) py.push(key); } else this.toPy.set(ir, [key]);
      const irs = this.toIr.get(key);
      if (irs) irs.push(ir); else this.toIr.set(key, [ir]);
    }
  }
  /** @param {number} irLine @returns {string[]} */
  pyFor(irLine) { return this.toPy.get(irLine) || []; }
  /** @param {string} key @returns {number[]} */
  irFor(key) { return this.toIr.get(key) || []; }
}

// --- syntax highlighting ---------------------------------------------------------------------

const KEYWORDS = new Set([
  "module", "func", "return", "attributes", "loc", "to", "step", "iter_args", "affine_map",
  "dense", "true", "false", "lambda", "let", "in", "define", "declare", "ret", "br", "call",
  "private", "public", "external", "internal", "global", "label", "entry",
]);
const TYPE_RE = /^(?:[isuf]\d+|bf16|f8\w*|index|memref|vector|tensor|ptr|pred|b\d+)$/;

/**
 * The language a stage is written in, for the tokenizer.
 * @param {string} stage
 * @returns {"jaxpr" | "mlir" | "llvm" | "asm"}
 */
export function languageOf(stage) {
  if (stage === "jaxpr") return "jaxpr";
  if (stage === "llir") return "llvm";
  if (stage === "ptx" || stage === "sass") return "asm";
  return "mlir";
}

const TOKEN_RE = {
  mlir: /(\/\/.*$)|("(?:[^"\\]|\\.)*")|(%[\w.$#-]+)|(@[\w.$-]+|@"(?:[^"\\]|\\.)*")|(\^[\w.$-]+)|([#!][\w.$-]+)|(\b[a-z_][\w]*(?:\.[\w]+)+\b)|(-?\b(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\b)|(\b[A-Za-z_]\w*\b)/g,
  llvm: /(;.*$)|("(?:[^"\\]|\\.)*")|(%[\w.$-]+)|(@[\w.$-]+)|(\^[\w.$-]+)|([#!][\w.$-]+)|(\b[a-z_][\w]*(?:\.[\w]+)+\b)|(-?\b(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\b)|(\b[A-Za-z_]\w*\b)/g,
  asm: /(\/\/.*$|\/\*.*?\*\/)|("(?:[^"\\]|\\.)*")|(%[\w.$]+|\bR\d+\b|\bP\d\b|\bUR\d+\b)|(@!?%?[\w.$]+)|(\$[\w.$]+)|(\.[a-z_][\w]*)|(\b[A-Za-z_][\w]*(?:\.[\w]+)+\b)|(-?\b(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\b)|(\b[A-Za-z_]\w*\b)/g,
  jaxpr: /(#.*$)|("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|((?<!= )\b[a-z]{1,3}\d*\b(?![\[(=\w]))|((?!))|((?!))|((?!))|((?<== )[a-z_]\w*|\b[a-z_]\w*(?=\[))|(-?\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b)|(\b[A-Za-z_]\w*\b)/g,
};
/** Token classes, in the order of TOKEN_RE's groups. */
const GROUPS = ["comment", "string", "var", "sym", "label", "attr", "op", "num", "word"];

/**
 * Split one line of IR into [class, text] tokens ("" class = plain text).
 * @param {string} line
 * @param {"jaxpr" | "mlir" | "llvm" | "asm"} lang
 * @returns {[string, string][]}
 */
export function tokenize(line, lang) {
  const re = new RegExp(TOKEN_RE[lang].source, "g");
  /** @type {[string, string][]} */
  const out = [];
  let last = 0;
  for (let m = re.exec(line); m; m = re.exec(line)) {
    if (m[0] === "") { re.lastIndex++; continue; }
    if (m.index > last) out.push(["", line.slice(last, m.index)]);
    let g = 1;
    while (m[g] === undefined || m[g] === "") g++;
    let cls = GROUPS[g - 1];
    if (cls === "word") cls = KEYWORDS.has(m[0]) ? "kw" : TYPE_RE.test(m[0]) ? "type" : "";
    else if (lang === "jaxpr" && (cls === "var" || cls === "op")) {
      // jaxpr: `c:f32[8,128] = add a b`; types and short primitives look like variables
      cls = TYPE_RE.test(m[0]) ? "type" : KEYWORDS.has(m[0]) ? "kw" : cls;
    }
    if (cls === "label" && lang === "asm") cls = "var";
    if (cls === "attr" && lang === "asm") cls = "op";
    out.push([cls, m[0]]);
    last = m.index + m[0].length;
  }
  if (last < line.length) out.push(["", line.slice(last)]);
  return out;
}

// --- formatting ------------------------------------------------------------------------------
