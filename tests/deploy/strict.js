// Unknown-field check for Kubernetes objects. kubernetes-models' validators check types, required
// fields, enums and formats, but its schemas (like Kubernetes' OpenAPI) accept fields they do not
// know, which is how a misspelt `resourcs:` slips through until the API server's strict field
// validation refuses it. This walks an object alongside the TypeScript declarations
// (.d.ts) that kubernetes-models ships with the same schemas, and reports every field the
// declared type does not have.
'use strict';
const fs = require('fs');
const path = require('path');

const modelsRoot = path.dirname(require.resolve('kubernetes-models/package.json'));
const nodeModules = path.dirname(modelsRoot);
const cache = new Map();

function stripComments(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
}

// The body of the first `export interface I... { ... }` of a declaration file, and its imports.
function loadDecl(file) {
  if (cache.has(file)) return cache.get(file);
  const text = stripComments(fs.readFileSync(file, 'utf8'));
  const imports = new Map();
  for (const m of text.matchAll(/import \{ ([A-Za-z0-9_]+) \} from "([^"]+)";/g)) {
    imports.set(m[1], resolveImport(file, m[2]));
  }
  let fields = null;
  const start = text.search(/export interface I[A-Za-z0-9_]* \{/);
  if (start >= 0) {
    let i = text.indexOf('{', start) + 1;
    const from = i;
    for (let depth = 1; depth > 0; i++) {
      if (text[i] === '{') depth++;
      else if (text[i] === '}') depth--;
    }
    fields = new Map();
    for (const entry of splitTop(text.slice(from, i - 1))) {
      const m = entry.match(/^\s*"([^"]+)"\??:\s*([\s\S]+?)\s*$/);
      if (m) fields.set(m[1], m[2].replace(/\s+/g, ' '));
    }
  }
  const decl = { fields, imports, file };
  cache.set(file, decl);
  return decl;
}

function splitTop(body) {
  const out = [];
  let depth = 0;
  let cur = '';
  for (const c of body) {
    if (c === '{' || c === '<') depth++;
    if (c === '}' || c === '>') depth--;
    if (c === ';' && depth === 0) {
      out.push(cur);
      cur = '';
    } else {
      cur += c;
    }
  }
  if (cur.trim()) out.push(cur);
  return out;
}

function resolveImport(from, spec) {
  const base = spec.startsWith('.') ? path.resolve(path.dirname(from), spec) : path.join(nodeModules, spec);
  return base + '.d.ts';
}

// The declaration file of a kind: kubernetes-models/<group>/<version>/<Kind>.d.ts.
function declFileFor(apiVersion, kind) {
  const gv = apiVersion.includes('/') ? apiVersion : `v1`;
  const f = path.join(modelsRoot, gv, `${kind}.d.ts`);
  return fs.existsSync(f) ? f : null;
}

// Reports unknown fields of `value` (declared as `type` in `decl`) as "path: message" strings.
function check(value, type, decl, where, errors) {
  type = type.trim();
  if (value === null || value === undefined) return;
  let m = type.match(/^Array<([\s\S]+)>$/);
  if (m) {
    if (Array.isArray(value)) value.forEach((v, i) => check(v, m[1], decl, `${where}/${i}`, errors));
    return;
  }
  m = type.match(/^\{ \[key: string\]: ([\s\S]+?);? \}$/);
  if (m) {
    if (value && typeof value === 'object') {
      for (const [k, v] of Object.entries(value)) check(v, m[1], decl, `${where}/${k}`, errors);
    }
    return;
  }
  if (/^I[A-Za-z0-9_]+$/.test(type) && decl.imports.has(type)) {
    const file = decl.imports.get(type);
    if (!fs.existsSync(file)) return;
    checkObject(value, loadDecl(file), where, errors);
  }
  // Anything else is a scalar, a literal union or an alias (Quantity, IntOrString): the
  // validators check those.
}

function checkObject(value, decl, where, errors) {
  if (!decl.fields || !value || typeof value !== 'object' || Array.isArray(value)) return;
  for (const [k, v] of Object.entries(value)) {
    if (!decl.fields.has(k)) {
      const known = [...decl.fields.keys()].join(', ');
      errors.push(`${where || '/'}: unknown field "${k}" (${path.basename(decl.file, '.d.ts')} has: ${known})`);
      continue;
    }
    check(v, decl.fields.get(k), decl, `${where}/${k}`, errors);
  }
}

// Unknown fields of a whole object of the given apiVersion/kind, or of a type named by its
// declaration file relative to kubernetes-models (e.g. 'v1/PodTemplateSpec').
function unknownFields(value, apiVersion, kind, where = '') {
  const file = declFileFor(apiVersion, kind);
  if (!file) return [`${where || '/'}: no declaration for ${apiVersion} ${kind}`];
  const errors = [];
  checkObject(value, loadDecl(file), where, errors);
  return errors;
}

module.exports = { unknownFields };
