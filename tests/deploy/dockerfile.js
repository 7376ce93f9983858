// Checks of a Dockerfile under docs/deploy/ without a container engine:
//  - it parses, and dockerfile-utils' linter has nothing to say (unknown instructions, bad flags,
//    missing arguments, ...);
//  - the base image and the EFA installer version are build arguments;
//  - it has named stages; COPY --from and FROM name earlier stages;
//  - what COPY takes from the build context (the top of the source tree) exists and is not
//    left out by .dockerignore, nor are the files the build needs;
//  - every path of the source tree a RUN line uses exists (executable when it is run), and the
//    install script accepts the arguments given (install-plugin.sh --dry-run);
//  - every nccl-fabric tool a RUN line calls is one `make install` installs, and every option
//    given to it is in its man page;
//  - nothing selects a plugin for NCCL (NCCL_NET_PLUGIN, NCCL_NET, NCCL_TUNER_PLUGIN): the image
//    runs with NCCL's default plugin unless a job says otherwise; the final stage puts the
//    installed tools and libraries on PATH and LD_LIBRARY_PATH.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { DockerfileParser } = require('dockerfile-ast');
const utils = require('dockerfile-utils');

const NEEDED_IN_CONTEXT = ['configure.ac', 'Makefile.am', 'autogen.sh', 'm4/nf_deps.m4', 'src/api/net_v12.cpp',
  'docs/deploy/install-plugin.sh', 'man/nccl-fabric-perf.1'];

function globToRegex(pattern) {
  let p = pattern.replace(/^\/+/, '').replace(/\/+$/, '');
  let re = '';
  for (let i = 0; i < p.length; i++) {
    const c = p[i];
    if (c === '*' && p[i + 1] === '*') {
      re += '.*';
      i++;
      if (p[i + 1] === '/') i++;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  // A pattern that matches a folder leaves out everything in it.
  return new RegExp(`^${re}(/.*)?$`);
}

function dockerignore(root) {
  const f = path.join(root, '.dockerignore');
  if (!fs.existsSync(f)) return [];
  return fs.readFileSync(f, 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'))
    .map((l) => ({ neg: l.startsWith('!'), re: globToRegex(l.replace(/^!/, '')) }));
}

function ignored(rules, rel) {
  let out = false;
  for (const r of rules) if (r.re.test(rel)) out = !r.neg;
  return out;
}

// Options a tool's man page documents: every -x and --long-option in it.
function manOptions(root, tool) {
  const f = path.join(root, 'man', `${tool}.1`);
  if (!fs.existsSync(f)) return null;
  const text = fs.readFileSync(f, 'utf8').replace(/\\-/g, '-').replace(/\\f[BIRP]/g, '');
  return new Set(text.match(/(?<![\w-])--?[A-Za-z][A-Za-z0-9-]*/g) || []);
}

function installedTools(root) {
  const am = fs.readFileSync(path.join(root, 'Makefile.am'), 'utf8');
  return new Set([...am.matchAll(/^bin_PROGRAMS \+= tools\/(\S+)$/gm)].map((m) => m[1]));
}

// The simple commands of a shell line: split at &&, ||, ;, | outside quotes.
function segments(cmd) {
  const out = [];
  let cur = '';
  let q = null;
  for (let i = 0; i < cmd.length; i++) {
    const c = cmd[i];
    if (q) {
      if (c === q) q = null;
      else if (c === '\\' && q === '"') cur += cmd[i++];
      cur += c;
      continue;
    }
    if (c === '"' || c === "'") q = c;
    else if (c === ';' || c === '|' || (c === '&' && cmd[i + 1] === '&')) {
      out.push(cur);
      cur = '';
      if ((c === '|' || c === '&') && cmd[i + 1] === c) i++;
      continue;
    }
    cur += c;
  }
  out.push(cur);
  return out.map((x) => x.trim()).filter(Boolean);
}

// Shell-like split of a command line: quotes removed, no expansion.
function words(cmd) {
  const out = [];
  const re = /"((?:[^"\\]|\\.)*)"|'([^']*)'|(\S+)/g;
  for (const m of cmd.matchAll(re)) out.push(m[1] !== undefined ? m[1] : m[2] !== undefined ? m[2] : m[3]);
  return out;
}

function checkDockerfile(file, root) {
  const problems = [];
  const text = fs.readFileSync(file, 'utf8');
  for (const d of utils.validate(text)) {
    problems.push(`line ${d.range.start.line + 1}: ${d.message}`);
  }
  const df = DockerfileParser.parse(text);
  const args = new Map(); // name -> default (global ARGs, before the first FROM)
  for (const a of df.getInitialARGs()) {
    const p = a.getProperty();
    if (p) args.set(p.getName(), p.getValue());
  }
  for (const need of ['BASE_IMAGE', 'EFA_INSTALLER_VERSION']) {
    if (!args.has(need)) problems.push(`no build argument ${need} before the first FROM`);
  }
  const froms = df.getFROMs();
  if (froms.length < 2) problems.push(`${froms.length} stage(s): a multi-stage build is expected`);
  if (froms.length && !/\$\{?BASE_IMAGE\}?/.test(froms[0].getImage() || '')) {
    problems.push(`the first stage is FROM ${froms[0].getImage()}, not FROM \${BASE_IMAGE}`);
  }
  const expand = (s) => s.replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, (m, n) => (args.has(n) && args.get(n) !== null ? args.get(n) : m));
  const stages = [];
  froms.forEach((f, i) => {
    const name = f.getBuildStage();
    const image = f.getImage() || '';
    if (!name) problems.push(`line ${f.getRange().start.line + 1}: stage ${i + 1} has no name (FROM ... AS name)`);
    if (!/\$/.test(image) && stages.length && !stages.includes(image) && !image.includes('/') && !image.includes(':')) {
      problems.push(`line ${f.getRange().start.line + 1}: FROM ${image}: no earlier stage of that name`);
    }
    if (name) stages.push(name);
  });
  const rules = dockerignore(root);
  for (const rel of NEEDED_IN_CONTEXT) {
    if (!fs.existsSync(path.join(root, rel))) problems.push(`${rel}: not in the source tree`);
    else if (ignored(rules, rel)) problems.push(`${rel}: left out of the build context by .dockerignore`);
  }
  const tools = installedTools(root);
  const copyDests = [];
  const instrs = df.getInstructions();
  for (const ins of instrs) {
    const kw = ins.getKeyword();
    const line = ins.getRange().start.line + 1;
    if (kw === 'COPY' || kw === 'ADD') {
      const flags = ins.getFlags ? ins.getFlags() : [];
      const from = flags.find((f) => f.getName() === 'from');
      const argv = ins.getArguments().map((a) => a.getValue());
      const dest = argv[argv.length - 1];
      if (from) {
        const st = from.getValue();
        const upto = froms.filter((f) => f.getRange().start.line < ins.getRange().start.line).map((f) => f.getBuildStage());
        if (!upto.includes(st)) problems.push(`line ${line}: COPY --from=${st}: no earlier stage of that name`);
      } else {
        for (const src of argv.slice(0, -1)) {
          const rel = path.normalize(src).replace(/^\.?\/?/, '');
          if (rel !== '' && rel !== '.' && !fs.existsSync(path.join(root, rel))) problems.push(`line ${line}: ${kw} ${src}: not in the build context`);
          if (rel !== '' && rel !== '.' && ignored(rules, rel)) problems.push(`line ${line}: ${kw} ${src}: left out by .dockerignore`);
        }
        if (argv.slice(0, -1).some((s) => s === '.' || s === './')) copyDests.push(dest.replace(/\/+$/, ''));
      }
    }
    if (kw === 'ENV' || kw === 'ARG') {
      for (const p of ins.getProperties ? ins.getProperties() : []) {
        if (['NCCL_NET_PLUGIN', 'NCCL_NET', 'NCCL_TUNER_PLUGIN'].includes(p.getName())) {
          problems.push(`line ${line}: ${kw} ${p.getName()}: the image must not choose NCCL's plugin (jobs set it; the reference plugin must keep working)`);
        }
      }
    }
    if (kw === 'RUN') {
      const cmd = ins.getArgumentsContent() || '';
      if (/\bNCCL_NET_PLUGIN=/.test(cmd) && /\/etc\/(environment|profile)|\.bashrc/.test(cmd)) {
        problems.push(`line ${line}: RUN writes NCCL_NET_PLUGIN into the image's environment`);
      }
      // Paths in the source tree, as the image sees them (under a COPY . DEST).
      for (const dest of copyDests) {
        const re = new RegExp(`${dest.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}/([A-Za-z0-9_./-]+)`, 'g');
        for (const m of cmd.matchAll(re)) {
          const rel = m[1];
          const p = path.join(root, rel);
          if (!fs.existsSync(p)) problems.push(`line ${line}: ${dest}/${rel}: not in the source tree`);
          else if (/\.sh$/.test(rel) && !(fs.statSync(p).mode & 0o111)) problems.push(`line ${line}: ${dest}/${rel} is not executable`);
        }
      }
      for (const seg of segments(cmd)) {
        const w = words(seg).filter((x) => !/^[A-Z_][A-Z0-9_]*=/.test(x));
        if (!w.length) continue;
        const exe = expand(w[0]);
        const base = path.basename(exe);
        if (base === 'install-plugin.sh') {
          const dargs = w.slice(1).map(expand).map((a) => (copyDests.includes(a) ? root : a));
          try {
            execFileSync(path.join(root, 'docs/deploy/install-plugin.sh'), [...dargs, '--dry-run'], { stdio: 'pipe' });
          } catch (e) {
            const err = `${e.stderr || ''}`.split('\n').filter(Boolean)[0] || `exit ${e.status}`;
            problems.push(`line ${line}: install-plugin.sh ${dargs.join(' ')}: refused (${err})`);
          }
        }
        if (/^nccl-fabric-/.test(base)) {
          if (!tools.has(base)) {
            problems.push(`line ${line}: ${base}: not a tool make install installs (${[...tools].join(', ')})`);
            continue;
          }
          const opts = manOptions(root, base);
          for (const o of w.slice(1).filter((x) => /^--?[A-Za-z]/.test(x))) {
            if (opts && !opts.has(o.split('=')[0])) problems.push(`line ${line}: ${base} ${o}: not an option of ${base} (man/${base}.1)`);
          }
        }
      }
    }
  }
  // The image (the last stage) finds the tools and the plugin.
  const last = froms[froms.length - 1];
  if (last) {
    const envs = instrs.filter((i) => i.getKeyword() === 'ENV' && i.getRange().start.line > last.getRange().start.line)
      .flatMap((i) => i.getProperties()).reduce((m, p) => m.set(p.getName(), p.getValue() || ''), new Map());
    const prefix = args.get('PREFIX') ? '${PREFIX}' : null;
    const lib = envs.get('LD_LIBRARY_PATH') || '';
    const bin = envs.get('PATH') || '';
    if (!prefix || !lib.includes(`${prefix}/lib`)) problems.push(`the final stage's LD_LIBRARY_PATH does not hold \${PREFIX}/lib (NCCL_NET_PLUGIN=fabric would not resolve)`);
    if (!prefix || !bin.includes(`${prefix}/bin`)) problems.push(`the final stage's PATH does not hold \${PREFIX}/bin`);
  }
  return problems;
}

module.exports = { checkDockerfile };
