#!/usr/bin/env node
// Offline checks of docs/deploy/ (issue 20), without a cluster or a container engine:
//  - every YAML document parses (strict: no duplicate keys) and is a Kubernetes object that
//    kubernetes-models' schemas accept (types, required fields, enums, quantities), with no field
//    its type does not declare (strict.js); MPIJob and PyTorchJob against our schemas of their
//    CRDs (schemas/*.json), their pod templates against Kubernetes' PodTemplateSpec;
//  - every pod template that asks for GPUs asks for what EFA needs (EFA devices, hugepages,
//    memory, IPC_LOCK, /dev/shm) and runs nccl-fabric-info first in an init container whose
//    failure fails the pod, and the job selects the plugin;
//  - the Dockerfile (dockerfile.js).
// usage: node validate.js [--root DIR]   DIR holds docs/deploy/ (default: this source tree)
// Exit status: 0 all good, 1 something refused (each reason printed), 2 bad usage.
'use strict';
const fs = require('fs');
const path = require('path');
const YAML = require('yaml');
const Ajv = require('ajv');
const { unknownFields } = require('./strict');
const { PodTemplateSpec } = require('kubernetes-models/v1/PodTemplateSpec');
const { ObjectMeta } = require('@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta');
const { checkDockerfile } = require('./dockerfile');

let root = path.resolve(__dirname, '..', '..');
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--root' && i + 1 < argv.length) root = path.resolve(argv[++i]);
  else {
    console.error('usage: node validate.js [--root DIR]');
    process.exit(2);
  }
}
const deployDir = path.join(root, 'docs', 'deploy');
if (!fs.existsSync(deployDir)) {
  console.error(`validate.js: ${deployDir}: no such folder`);
  process.exit(2);
}

const problems = [];
const report = (file, msg) => problems.push(`${path.relative(root, file)}: ${msg}`);

const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false, allowUnionTypes: true });
const crdSchemas = {
  'kubeflow.org/v2beta1 MPIJob': {
    validate: ajv.compile(require('./schemas/mpijob-v2beta1.schema.json')),
    replicas: 'mpiReplicaSpecs',
  },
  'kubeflow.org/v1 PyTorchJob': {
    validate: ajv.compile(require('./schemas/pytorchjob-v1.schema.json')),
    replicas: 'pytorchReplicaSpecs',
  },
};

function walk(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? walk(p) : [p];
  });
}

function modelsError(e) {
  return (e && e.message ? e.message : String(e)).replace(/\s+/g, ' ');
}

// kubernetes-models' validators throw with every error in the message.
function validateModel(file, where, Cls, value) {
  try {
    new Cls(value).validate();
  } catch (e) {
    report(file, `${where}: ${modelsError(e)}`);
  }
}

// A Kubernetes object of a built-in kind: its kubernetes-models class.
function builtinClass(apiVersion, kind) {
  const gv = apiVersion.includes('/') ? apiVersion : 'v1';
  try {
    return require(`kubernetes-models/${gv}/${kind}`)[kind];
  } catch (e) {
    return null;
  }
}

const podTemplates = [];

function checkObject(file, doc, idx) {
  const where = `document ${idx + 1}`;
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) return report(file, `${where}: not an object`);
  const { apiVersion, kind } = doc;
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') {
    return report(file, `${where}: apiVersion and kind are required`);
  }
  const name = doc.metadata && doc.metadata.name;
  if (typeof name !== 'string' || !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(name) || name.length > 253) {
    report(file, `${where} (${kind}): metadata.name "${name}" is not a DNS subdomain name`);
  }
  const label = `${where} (${kind} ${name})`;
  const crd = crdSchemas[`${apiVersion} ${kind}`];
  if (crd) {
    if (!crd.validate(doc)) {
      for (const e of crd.validate.errors) {
        const extra = e.params && e.params.additionalProperty ? ` "${e.params.additionalProperty}"` : '';
        const allowed = e.params && e.params.allowedValues ? ` (${e.params.allowedValues.join(', ')})` : '';
        report(file, `${label}: ${e.instancePath || '/'} ${e.message}${extra}${allowed}`);
      }
    }
    validateModel(file, `${label} metadata`, ObjectMeta, doc.metadata || {});
    const specs = (doc.spec && doc.spec[crd.replicas]) || {};
    for (const [role, rs] of Object.entries(specs)) {
      if (!rs || typeof rs.template !== 'object') continue;
      const tw = `${label} ${crd.replicas}.${role}.template`;
      validateModel(file, tw, PodTemplateSpec, rs.template);
      for (const u of unknownFields(rs.template, 'v1', 'PodTemplateSpec', `/spec/${crd.replicas}/${role}/template`)) report(file, `${label}: ${u}`);
      podTemplates.push({ file, label: `${label} ${role}`, doc, template: rs.template, role });
    }
    return;
  }
  const Cls = builtinClass(apiVersion, kind);
  if (!Cls) return report(file, `${label}: no schema for ${apiVersion} ${kind} (kubernetes-models has none, and it is not MPIJob or PyTorchJob)`);
  validateModel(file, label, Cls, doc);
  for (const u of unknownFields(doc, apiVersion, kind)) report(file, `${label}: ${u}`);
  if (kind === 'Pod') podTemplates.push({ file, label, doc, template: { spec: doc.spec }, role: 'Pod' });
  const t = doc.spec && doc.spec.template;
  if (t && typeof t === 'object' && t.spec) podTemplates.push({ file, label, doc, template: t, role: kind });
}

// What EFA and the plugin need from a pod that uses GPUs (docs/deploy.md, "What each line is for").
const GPU = 'nvidia.com/gpu';
const EFA = 'vpc.amazonaws.com/efa';
function checkEfaPod({ file, label, doc, template }) {
  const spec = template.spec || {};
  const apps = spec.containers || [];
  const inits = spec.initContainers || [];
  const gpuContainers = [...inits, ...apps].filter((c) => c.resources && c.resources.limits && c.resources.limits[GPU]);
  if (gpuContainers.length === 0) return;
  for (const c of gpuContainers) {
    const cl = `${label} container ${c.name}`;
    const lim = c.resources.limits || {};
    const req = c.resources.requests || {};
    if (!(Number(lim[EFA]) >= 1)) report(file, `${cl}: asks for GPUs but not for ${EFA} devices (limits)`);
    if (!Object.keys(lim).some((k) => k.startsWith('hugepages-'))) {
      report(file, `${cl}: no hugepages-2Mi limit (libfabric's EFA provider uses huge pages for its buffers)`);
    }
    if (!lim.memory) report(file, `${cl}: no memory limit (a pod with huge pages needs one)`);
    for (const k of [GPU, EFA, 'hugepages-2Mi', 'hugepages-1Gi']) {
      if (k in lim && k in req && String(lim[k]) !== String(req[k])) {
        report(file, `${cl}: requests.${k} (${req[k]}) differs from limits.${k} (${lim[k]}); Kubernetes needs them equal`);
      }
    }
    const caps = (c.securityContext && c.securityContext.capabilities && c.securityContext.capabilities.add) || [];
    if (!caps.includes('IPC_LOCK')) report(file, `${cl}: no IPC_LOCK capability (EFA registers and locks memory)`);
  }
  // nccl-fabric-info run as a command (not merely named in a message).
  const runsInfo = (c) => /(^|[\s;&|(])(\S*\/)?nccl-fabric-info(\s|;|$)/.test([...(c.command || []), ...(c.args || [])].join(' '));
  const info = inits.find(runsInfo);
  if (!info) {
    report(file, `${label}: no init container runs nccl-fabric-info (it fails the pod on the traps it finds)`);
  } else {
    const cmd = [...(info.command || []), ...(info.args || [])].join(' ');
    if (/\|\|\s*(true|:)\b|;\s*(true|exit 0)\s*$/.test(cmd)) {
      report(file, `${label}: init container ${info.name} ignores nccl-fabric-info's exit status`);
    }
    const app = apps.find((c) => c.resources && c.resources.limits && c.resources.limits[GPU]);
    const il = (info.resources && info.resources.limits) || {};
    if (app) {
      for (const k of [GPU, EFA]) {
        if (String(il[k]) !== String(app.resources.limits[k])) {
          report(file, `${label}: init container ${info.name} limits.${k} (${il[k]}) differ from ${app.name}'s (${app.resources.limits[k]}): it would not see the devices the job uses`);
        }
      }
    }
  }
  const shm = (spec.volumes || []).find((v) => v.emptyDir && v.emptyDir.medium === 'Memory');
  for (const c of apps.filter((a) => a.resources && a.resources.limits && a.resources.limits[GPU])) {
    const m = (c.volumeMounts || []).find((vm) => vm.mountPath === '/dev/shm');
    if (!m || !shm || m.name !== shm.name) {
      report(file, `${label} container ${c.name}: /dev/shm is not a memory emptyDir (the container default, 64 MiB, is too small for NCCL)`);
    }
  }
  // The job selects the plugin where its ranks start: MPIJob, the launcher's mpirun passes
  // -x NCCL_NET_PLUGIN=fabric; otherwise every GPU container's env sets it.
  if (doc.kind === 'MPIJob') {
    const launcher = (((doc.spec.mpiReplicaSpecs || {}).Launcher || {}).template || {}).spec || {};
    const argv = (launcher.containers || []).flatMap((c) => [...(c.command || []), ...(c.args || [])]);
    const i = argv.indexOf('NCCL_NET_PLUGIN=fabric');
    if (i < 1 || argv[i - 1] !== '-x') report(file, `${label}: the launcher's mpirun does not pass -x NCCL_NET_PLUGIN=fabric (NCCL would load its default plugin)`);
  } else {
    for (const c of apps.filter((a) => a.resources && a.resources.limits && a.resources.limits[GPU])) {
      if (!(c.env || []).some((e) => e.name === 'NCCL_NET_PLUGIN' && e.value === 'fabric')) {
        report(file, `${label} container ${c.name}: env does not set NCCL_NET_PLUGIN=fabric (NCCL would load its default plugin)`);
      }
    }
  }
}

for (const file of walk(deployDir).sort()) {
  const base = path.basename(file);
  if (/\.ya?ml$/.test(base)) {
    const text = fs.readFileSync(file, 'utf8');
    const docs = YAML.parseAllDocuments(text, { uniqueKeys: true, prettyErrors: true });
    docs.forEach((d, i) => {
      for (const e of [...d.errors, ...d.warnings]) report(file, `YAML: ${e.message.split('\n')[0]}`);
      if (d.errors.length) return;
      const value = d.toJS({ maxAliasCount: 100 });
      if (value === null) return;
      checkObject(file, value, i);
    });
  } else if (/^Dockerfile/.test(base)) {
    for (const p of checkDockerfile(file, root)) report(file, p);
  }
}
for (const t of podTemplates) checkEfaPod(t);

const nfiles = walk(deployDir).filter((f) => /\.ya?ml$|\/Dockerfile[^/]*$/.test(f)).length;
if (problems.length) {
  for (const p of problems) console.log(`REFUSED ${p}`);
  console.log(`validate.js: ${problems.length} problem(s) in ${path.relative(process.cwd(), deployDir) || deployDir}`);
  process.exit(1);
}
console.log(`validate.js: ${nfiles} file(s) under ${deployDir}: manifests, pod templates (${podTemplates.length}) and Dockerfile all pass`);
