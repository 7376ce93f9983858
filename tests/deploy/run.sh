#!/usr/bin/env bash
# Validation of everything under docs/deploy/ (issue 20), offline, as CI runs it (.ci/run):
#  1. shellcheck on every script (*.sh, *.sbatch) there and here;
#  2. the Python DDP step parses;
#  3. validate.js: the YAML against Kubernetes' schemas (kubernetes-models) and ours for MPIJob and
#     PyTorchJob, the EFA needs of each GPU pod, the Dockerfile;
#  4. the same checks refuse deliberately broken copies, one fault each (a check that cannot fail
#     is not a check): each copy must be refused, for the reason expected.
# Needs node >= 18, npm (the first run installs tests/deploy/node_modules from package-lock.json,
# from the npm registry), shellcheck, python3.
# usage: tests/deploy/run.sh
# The perl expressions below are single-quoted on purpose: perl, not the shell, reads their $1, \$.
# shellcheck disable=SC2016
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"

for t in node npm shellcheck python3; do
  command -v "$t" > /dev/null || { echo "tests/deploy/run.sh: $t not found (Debian: apt-get install nodejs npm shellcheck python3)"; exit 1; }
done
if [ ! -d "$HERE/node_modules" ] || [ "$HERE/package-lock.json" -nt "$HERE/node_modules/.package-lock.json" ]; then
  echo "== npm ci (tests/deploy/package-lock.json)"
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "  node $(node --version); $(cd "$HERE" && node -e 'const p=require("./package.json").dependencies; console.log(Object.entries(p).map(([k,v])=>k+" "+v).join(", "))')"

echo "== shellcheck"
mapfile -t scripts < <(find docs/deploy tests/deploy -path '*/node_modules' -prune -o -type f \( -name '*.sh' -o -name '*.sbatch' \) -print | sort)
shellcheck -x "${scripts[@]}"
echo "  ${#scripts[@]} scripts: ${scripts[*]}"

echo "== python"
while IFS= read -r f; do
  python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f"
  echo "  $f parses"
done < <(find docs/deploy -type f -name '*.py' | sort)

echo "== validate.js (docs/deploy as committed)"
node "$HERE/validate.js" --root "$ROOT"

echo "== broken copies: each must be refused"
WORK=$(mktemp -d /tmp/nf-deploy.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# What validate.js reads: docs/deploy, the files the Dockerfile's checks look at.
FILES=(docs/deploy .dockerignore Makefile.am configure.ac autogen.sh m4/nf_deps.m4 src/api/net_v12.cpp man)
copy() {
  rm -rf "$WORK/tree"
  mkdir -p "$WORK/tree"
  tar -C "$ROOT" -cf - "${FILES[@]}" | tar -C "$WORK/tree" -xf -
}
copy
node "$HERE/validate.js" --root "$WORK/tree" > "$WORK/out" || { cat "$WORK/out"; echo "the unchanged copy was refused"; exit 1; }
echo "  the unchanged copy passes"

n=0
fail=0
# break FILE PERL-SUBSTITUTION EXPECTED-TEXT [shellcheck]
break_one() {
  local file=$1 expr=$2 want=$3 how=${4:-validate}
  n=$((n + 1))
  copy
  perl -0pi -e "$expr" "$WORK/tree/$file"
  if cmp -s "$ROOT/$file" "$WORK/tree/$file"; then
    echo "  FAIL $n: $file: the change ($expr) changed nothing"; fail=1; return
  fi
  local rc=0
  if [ "$how" = shellcheck ]; then
    shellcheck -x "$WORK/tree/$file" > "$WORK/out" 2>&1 || rc=$?
  else
    node "$HERE/validate.js" --root "$WORK/tree" > "$WORK/out" 2>&1 || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then
    echo "  FAIL $n: $file ($expr) was accepted"; fail=1
  elif ! grep -qF -- "$want" "$WORK/out"; then
    echo "  FAIL $n: $file ($expr) refused, but not for \"$want\":"; sed 's/^/      /' "$WORK/out"; fail=1
  else
    echo "  ok $n: $file: $(grep -F -m1 -- "$want" "$WORK/out" | cut -c1-150)"
  fi
}

M=docs/deploy/eks/mpijob-nccl-tests.yaml
P=docs/deploy/eks/pytorchjob-ddp.yaml
D=docs/deploy/Dockerfile
# The CRD schemas (ours, from the operators' CRDs).
break_one $M 's/mpiReplicaSpecs:/mpiReplicaSpec:/' 'additional properties "mpiReplicaSpec"'
break_one $M 's/cleanPodPolicy: Running/cleanPodPolicy: Sometimes/' 'must be equal to one of the allowed values'
break_one $M 's/slotsPerWorker: 8/slotsPerWorker: "8"/' '/spec/slotsPerWorker must be integer'
break_one $M 's/    Worker:/    Workers:/' 'must be equal to one of the allowed values'
break_one $P 's/nprocPerNode: "8"/nprocPerNode: 8/' '/spec/nprocPerNode must be string'
break_one $P 's/kind: PyTorchJob/kind: PytorchJob/' 'no schema for kubeflow.org/v1 PytorchJob'
# Kubernetes' own schemas, in the pod templates.
break_one $M 's/vpc.amazonaws.com\/efa: 32/vpc.amazonaws.com\/efa: lots/' 'must match format "quantity"'
break_one $M 's/args: \["-De"\]/args: "-De"/' 'args must be array'
break_one $P 's/imagePullPolicy: IfNotPresent/imagePullPolicy: Sometimes/' 'imagePullPolicy must be equal to one of the allowed values'
break_one $P 's/            - name: pytorch\n              image: /            - image: /' "must have required property name"
# Fields Kubernetes does not have (the API server's strict validation would refuse them).
break_one $P 's/imagePullPolicy: IfNotPresent/imagePullPolicey: IfNotPresent/' 'unknown field "imagePullPolicey"'
break_one $M 's/securityContext:/securityContex:/' 'unknown field "securityContex"'
# YAML itself.
break_one $P 's/(      restartPolicy: Never\n)/$1$1/' 'YAML: Map keys must be unique'
# What EFA and the plugin need.
break_one $M 's/add: \["IPC_LOCK"\]/add: ["NET_ADMIN"]/g' 'no IPC_LOCK capability'
break_one $P 's/ *vpc.amazonaws.com\/efa: 32\n//' 'not for vpc.amazonaws.com/efa devices'
break_one $M 's/ *hugepages-2Mi: 5120Mi\n//g' 'no hugepages-2Mi limit'
break_one $P 's/mountPath: \/dev\/shm/mountPath: \/dev\/shmem/' '/dev/shm is not a memory emptyDir'
break_one $P 's/\[ \$rc -lt 2 \]/true/' "ignores nccl-fabric-info's exit status"
break_one $M 's/nccl-fabric-info; rc/nccl-fabric-inf; rc/' 'no init container runs nccl-fabric-info'
break_one $M 's/- NCCL_NET_PLUGIN=fabric/- NCCL_NET_PLUGIN=ofi/' 'does not pass -x NCCL_NET_PLUGIN=fabric'
break_one $P 's/(command: \["torchrun".*\n *env:\n *- name: NCCL_NET_PLUGIN\n *value:) fabric/$1 ofi/' 'env does not set NCCL_NET_PLUGIN=fabric'
# The Dockerfile.
break_one $D 's/ARG EFA_INSTALLER_VERSION=/ARG EFA_VERSION=/' 'no build argument EFA_INSTALLER_VERSION'
break_one $D 's/COPY --from=build \/opt\/nccl-tests/COPY --from=builder \/opt\/nccl-tests/' 'COPY --from=builder: no earlier stage'
break_one $D 's/^RUN git clone/RUNN git clone/m' 'Unknown instruction: RUNN'
break_one $D 's/docs\/deploy\/install-plugin.sh --src/docs\/deploy\/install.sh --src/' '/src/docs/deploy/install.sh: not in the source tree'
break_one $D 's/--libfabric \/opt\/amazon\/efa --prefix/--libfabrik \/opt\/amazon\/efa --prefix/' "unknown argument '--libfabrik'"
break_one $D 's/(FROM efa AS runtime\n)/$1ENV NCCL_NET_PLUGIN=fabric\n/' 'must not choose'
break_one $D 's/ -n 100 -r 1/ --iterations 100 -r 1/' 'not an option of nccl-fabric-perf'
break_one $D 's/nccl-fabric-perf"/nccl-fabric-bench"/' 'not a tool make install installs'
break_one $D 's/LD_LIBRARY_PATH=\$\{PREFIX\}\/lib:/LD_LIBRARY_PATH=/' 'LD_LIBRARY_PATH does not hold'
break_one .dockerignore 's/\z/src\n/' 'src/api/net_v12.cpp: left out of the build context'
# A careless edit of a script: shellcheck finds it.
break_one docs/deploy/slurm/prolog.sh 's/"\$INFO" > "\$LOG"/\$INFO > \$LOG/' 'SC2086' shellcheck
break_one docs/deploy/install-plugin.sh 's/ldd "\$f" \| grep/ldd \$f | grep/' 'SC2086' shellcheck

[ "$fail" -eq 0 ] || { echo "tests/deploy/run.sh: a broken copy was not refused as expected"; exit 1; }
echo "tests/deploy/run.sh: all of docs/deploy passes, and all $n broken copies were refused"
