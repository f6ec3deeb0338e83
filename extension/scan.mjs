// The widgets' ES modules as data, for the Python tests (tests/test_js_structure.py,
// tests/test_payload_types.py): every function with its line span, and every JSDoc @typedef
// with the keys of its object type. Parsed by TypeScript's own parser (the one `tsc` checks
// these files with), so nothing here guesses at JavaScript syntax.
//
//   node extension/scan.mjs FILE.js...   ->   one JSON object on stdout
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { basename } from "node:path";

const require = createRequire(import.meta.url);
const ts = require("typescript");

/** A name for a function: its own, or the variable, property or method it is assigned to. */
function functionName(node) {
  if (node.name && ts.isIdentifier(node.name)) return node.name.text;
  if (node.name && ts.isPrivateIdentifier?.(node.name)) return node.name.text;
  const parent = node.parent;
  if (parent && (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) ||
      ts.isPropertyDeclaration(parent)) && parent.name && "text" in parent.name) {
    return parent.name.text;
  }
  if (ts.isConstructorDeclaration(node)) return "constructor";
  return "<anonymous>";
}

const FUNCTION_KINDS = [
  ts.SyntaxKind.FunctionDeclaration, ts.SyntaxKind.FunctionExpression, ts.SyntaxKind.ArrowFunction,
  ts.SyntaxKind.MethodDeclaration, ts.SyntaxKind.Constructor, ts.SyntaxKind.GetAccessor,
  ts.SyntaxKind.SetAccessor,
];

/** Keys of a type: a literal's members, an intersection's parts (references by name). */
function typeKeys(type) {
  if (!type) return { keys: [], refs: [], literal: false };
  if (ts.isParenthesizedTypeNode(type)) return typeKeys(type.type);
  if (ts.isTypeLiteralNode(type)) {
    const keys = type.members.filter((m) => m.name).map((m) => m.name.text ?? m.name.getText());
    return { keys, refs: [], literal: true };
  }
  if (ts.isIntersectionTypeNode(type)) {
    const parts = type.types.map(typeKeys);
    return {
      keys: parts.flatMap((p) => p.keys), refs: parts.flatMap((p) => p.refs),
      literal: parts.some((p) => p.literal),
    };
  }
  if (ts.isImportTypeNode(type) && type.qualifier) {
    return { keys: [], refs: [type.qualifier.getText()], literal: false };
  }
  if (ts.isTypeReferenceNode(type)) return { keys: [], refs: [type.typeName.getText()], literal: false };
  return { keys: [], refs: [], literal: false };
}

function scan(path) {
  const text = readFileSync(path, "utf8");
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
  const line = (pos) => source.getLineAndCharacterOfPosition(pos).line + 1;
  const functions = [];
  const typedefs = {};
  const visit = (node) => {
    if (FUNCTION_KINDS.includes(node.kind)) {
      const start = line(node.getStart(source));
      const end = line(node.getEnd());
      functions.push({ name: functionName(node), start, end, lines: end - start + 1 });
    }
    for (const doc of node.jsDoc ?? []) {
      for (const tag of doc.tags ?? []) {
        if (tag.kind !== ts.SyntaxKind.JSDocTypedefTag || !tag.fullName) continue;
        const type = tag.typeExpression && tag.typeExpression.type;
        typedefs[tag.fullName.getText()] = { line: line(tag.getStart(source)), ...typeKeys(type) };
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return { file: basename(path), functions, typedefs };
}

const files = process.argv.slice(2).map(scan);
process.stdout.write(JSON.stringify({ typescript: ts.version, files }));
