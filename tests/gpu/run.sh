#!/usr/bin/env bash
# NCCL and PyTorch through nccl-fabric on a real GPU (docs/gpu-testing.md).
#
# Two processes on GPU 0 with different NCCL_HOSTID values are two "hosts" to NCCL, so every byte
# between them goes through the network plugin. For NET in (fabric, NCCL's built-in Socket) it
# runs nccl-fabric-gpucheck and torch_check.py as such a two-rank job, checks the results, checks
# in NCCL's log that the fabric runs really used our plugin, and prints all-reduce bus bandwidth
# side by side. Exit: 0 all passed, 1 a failure, 77 skipped (no GPU, as in CI).
#
# From a bundle (make bundle):  source BUNDLE/env.sh && BUNDLE/gpu/run.sh
# From a build tree:            make check TESTS=tests/gpu/run.sh (or NF_BUILD_DIR=... run.sh)
#
# Environment (all optional):
#   OUT                folder for the logs (default: a new temporary folder, kept)
#   NF_PLUGIN_LIB      the plugin (default: $NCCL_NET_PLUGIN when it is a file, else the bundle's)
#   NF_GPUCHECK        nccl-fabric-gpucheck (default: next to this script, else the build tree)
#   NF_NCCL_LIB        libnccl.so.2 for nccl-fabric-gpucheck (default: PyTorch's, else the system's)
#   NF_PYTHON          python for torch_check.py (default python3)
#   NF_GPU_MIN_BYTES, NF_GPU_MAX_BYTES, NF_GPU_ITERS, NF_GPU_WARMUP   sizes and repetitions
#   NF_GPU_TIMEOUT     seconds one two-rank job may take (default 300)
#   NF_GPU_PROVIDER    libfabric provider for the plugin (default 'tcp;ofi_rxm')
#   NF_GPU_IFACE       interface for the plugin and for Socket (default lo)
#   NF_GPU_SKIP_TORCH=1  run only nccl-fabric-gpucheck
#   NF_GPU_SKIP_TUNER=1  skip the tuner job (NCCL finds our tuner in the net library and applies a
#                      rules-file choice: ring/simple for every all-reduce, which NCCL alone never
#                      picks for small sizes)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SKIP=77

say() { printf '%s\n' "$*"; }
skip() { say "SKIP: tests/gpu/run.sh: $*"; exit $SKIP; }

# --- Is there a GPU at all? ------------------------------------------------------------------
command -v nvidia-smi >/dev/null 2>&1 || skip "no nvidia-smi: no NVIDIA GPU or driver on this machine"
gpus=$(nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1) ||
  skip "nvidia-smi fails: ${gpus//$'\n'/ }"
[ -n "$gpus" ] || skip "nvidia-smi lists no GPU"

# --- What to run ---------------------------------------------------------------------------
plugin=${NF_PLUGIN_LIB:-}
if [ -z "$plugin" ]; then
  case "${NCCL_NET_PLUGIN:-}" in /*) [ -f "$NCCL_NET_PLUGIN" ] && plugin=$NCCL_NET_PLUGIN ;; esac
fi
[ -n "$plugin" ] || plugin="$here/../lib/libnccl-net-fabric.so"
[ -f "$plugin" ] || { say "FAIL: the plugin $plugin is missing (source BUNDLE/env.sh, or set NF_PLUGIN_LIB)"; exit 1; }
plugin=$(cd "$(dirname "$plugin")" && pwd)/$(basename "$plugin")  # NCCL needs a full path

gpucheck=${NF_GPUCHECK:-}
for c in "$here/nccl-fabric-gpucheck" "${NF_BUILD_DIR:-}/tests/gpu/nccl-fabric-gpucheck"; do
  [ -z "$gpucheck" ] && [ -x "$c" ] && gpucheck=$c
done
if [ -z "$gpucheck" ] || [ ! -x "$gpucheck" ]; then
  say "FAIL: nccl-fabric-gpucheck not found (set NF_GPUCHECK)"; exit 1
fi
torch_check="$here/torch_check.py"
[ -f "$torch_check" ] || torch_check="${NF_SRC_DIR:-$here/../..}/tests/gpu/torch_check.py"
python=${NF_PYTHON:-python3}

# NCCL for the C++ check: the one PyTorch brings (pip's nvidia-nccl-cu*), so that both checks
# test the same NCCL, else whatever the system has.
find_nccl() {
  if command -v "$python" >/dev/null 2>&1; then
    "$python" - <<'PY' 2>/dev/null && return 0
import glob, os, sys
try:
    import nvidia.nccl as m
except ImportError:
    sys.exit(1)
for d in list(getattr(m, "__path__", [])):
    for c in sorted(glob.glob(os.path.join(d, "lib", "libnccl.so*"))):
        print(c)
        sys.exit(0)
sys.exit(1)
PY
  fi
  local p
  p=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
  [ -n "$p" ] && { echo "$p"; return 0; }
  for p in /usr/local/cuda/lib/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2 \
           /usr/lib/x86_64-linux-gnu/libnccl.so.2; do
    [ -f "$p" ] && { echo "$p"; return 0; }
  done
  echo libnccl.so.2
}
nccl_lib=${NF_NCCL_LIB:-$(find_nccl)}

out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/nf-gpu.XXXXXX")}
mkdir -p "$out" || { say "FAIL: cannot create $out"; exit 1; }
out=$(cd "$out" && pwd)
job_timeout=${NF_GPU_TIMEOUT:-300}
provider=${NF_GPU_PROVIDER:-tcp;ofi_rxm}
iface=${NF_GPU_IFACE:-lo}
sizes=(--min-bytes "${NF_GPU_MIN_BYTES:-8}" --max-bytes "${NF_GPU_MAX_BYTES:-256M}"
       --iters "${NF_GPU_ITERS:-20}" --warmup "${NF_GPU_WARMUP:-5}")

say "# GPU: ${gpus%%$'\n'*}"
say "# plugin: $plugin"
say "# nccl-fabric-gpucheck: $gpucheck (NCCL: $nccl_lib)"
say "# logs: $out"

# --- One two-rank job ----------------------------------------------------------------------
# run_job NAME NET KIND: NET is fabric or Socket, KIND is gpucheck or torch. Writes
# $out/NAME.rankR.out (the program's output) and $out/NAME.rankR.nccl.log (NCCL's log).
# Returns the worst rank status (77 when every rank skipped).
run_job() {
  local name=$1 net=$2 kind=$3 r pids=() rcs=()
  local id="$out/$name.id"  # ncclUniqueId (gpucheck) or torch's FileStore: fresh per job
  rm -f "$id" "$out/$name".rank*
  local hosts=(nf-host-a nf-host-b)
  for r in 0 1; do
    # shellcheck disable=SC2054  # the commas are NCCL_DEBUG_SUBSYS's
    local -a envs=(CUDA_VISIBLE_DEVICES=0 NCCL_HOSTID="${hosts[$r]}"
                   NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET
                   NCCL_DEBUG_FILE="$out/$name.rank$r.nccl.log"
                   NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME="$iface"
                   "${job_env[@]}")
    if [ "$net" = fabric ]; then
      # REF_COUNT: NCCL 2.28.9 forgets the plugin's name when its last communicator goes away.
      envs+=(NCCL_NET_PLUGIN="$plugin" NCCL_NET=fabric NCCL_FABRIC_PROVIDER="$provider"
             FI_TCP_IFACE="$iface" NCCL_NET_PLUGIN_REF_COUNT=1)
    else
      envs+=(NCCL_NET_PLUGIN=none NCCL_NET=Socket)
    fi
    local -a cmd
    if [ "$kind" = gpucheck ]; then
      cmd=("$gpucheck" --rank "$r" --nranks 2 --id-file "$id" --nccl-lib "$nccl_lib"
           --timeout-s $((job_timeout - 10)) "${sizes[@]}")
    else
      cmd=("$python" "$torch_check" --rank "$r" --world-size 2
           --init-method "file://$id" --timeout-s $((job_timeout - 10)) "${sizes[@]}")
    fi
    env "${envs[@]}" timeout -k 10 "$job_timeout" "${cmd[@]}" >"$out/$name.rank$r.out" 2>&1 &
    pids+=($!)
  done
  local worst=0 skipped=0
  for r in 0 1; do
    wait "${pids[r]}"; rcs[r]=$?
    case ${rcs[$r]} in
      0) ;;
      77) skipped=$((skipped + 1)) ;;
      *) worst=${rcs[$r]} ;;
    esac
  done
  [ "$worst" -eq 0 ] && [ $skipped -eq 2 ] && return $SKIP
  [ "$worst" -eq 0 ] && [ $skipped -ne 0 ] && worst=1  # one rank skipped, the other not: broken
  if [ "$worst" -ne 0 ]; then
    say "FAIL: $name: exit status rank 0: ${rcs[0]}, rank 1: ${rcs[1]}$( [ "${rcs[0]}" = 124 ] || [ "${rcs[1]}" = 124 ] && echo ' (124: timed out)')"
    for r in 0 1; do
      say "--- $out/$name.rank$r.out (last lines)"; tail -n 15 "$out/$name.rank$r.out"
      [ -f "$out/$name.rank$r.nccl.log" ] && { say "--- $out/$name.rank$r.nccl.log (WARN lines)"; grep -m 10 'WARN' "$out/$name.rank$r.nccl.log"; }
    done
  fi
  return "$worst"
}

# NCCL's log must show that the fabric runs used our plugin and the Socket runs used Socket.
# NCCL 2.19-2.28 say "Using network <name>" (INIT) and name the net in every channel,
# "... via NET/<name>/<dev>"; 2.2x also "Assigned NET plugin <name> to comm" and, for a plugin,
# "NET/Plugin: Loaded net plugin <name> (vN)" or "Successfully loaded external network plugin".
check_log() {
  local name=$1 net=$2 r log ok=0 other
  other=$([ "$net" = fabric ] && echo 'Socket|IB' || echo 'fabric|IB')
  for r in 0 1; do
    log=$(cat "$out/$name.rank$r.nccl.log" "$out/$name.rank$r.out" 2>/dev/null)
    if ! grep -Eqi "Using network $net\b|Assigned NET plugin $net to comm" <<<"$log"; then
      say "FAIL: $name rank $r: NCCL's log never says 'Using network $net' ($out/$name.rank$r.nccl.log)"
      ok=1
    fi
    if grep -Eq "Using network ($other)\b|via NET/($other)/" <<<"$log"; then
      say "FAIL: $name rank $r: NCCL used another network:"
      grep -Em 3 "Using network ($other)\b|via NET/($other)/" <<<"$log"
      ok=1
    fi
    if [ "$net" = fabric ]; then
      grep -Eq "via NET/fabric/|NET/FABRIC" <<<"$log" ||
        { say "FAIL: $name rank $r: no channel 'via NET/fabric' and no NET/FABRIC line in NCCL's log"; ok=1; }
      grep -Eq "Loaded net plugin fabric|Successfully loaded external network plugin" <<<"$log" ||
        say "note: $name rank $r: NCCL's log has no 'Loaded net plugin fabric' line (older or newer NCCL wording?)"
    fi
  done
  if [ $ok -eq 0 ] && [ "$net" = fabric ]; then
    local seen
    seen=$(grep -Ehom1 "provider '[^']*'" "$out/$name.rank0.nccl.log" 2>/dev/null)
    say "ok: $name: NCCL used network fabric on both ranks${seen:+ ($seen)}"
  fi
  return $ok
}

# Rows "size busbw" from rank 0's output; FAIL rows count as failures already (exit status).
busbw_rows() { awk '$1 ~ /^[0-9]+$/ && ($NF == "OK" || $NF == "FAIL") {print $1, $7}' "$1" 2>/dev/null; }

summary() {
  local label=$1 a=$2 b=$3
  [ -f "$a" ] && [ -f "$b" ] || return 0
  say ""
  say "$label: all-reduce bus bandwidth, 2 ranks on one GPU, GB/s (rank 0)"
  printf '%14s %12s %12s %10s\n' "size(B)" "fabric" "Socket" "ratio"
  join <(busbw_rows "$a" | sort -k1,1) <(busbw_rows "$b" | sort -k1,1) | sort -n -k1,1 |
    awk '{ r = ($3 > 0) ? sprintf("%.2f", $2 / $3) : "-"; printf "%14s %12s %12s %10s\n", $1, $2, $3, r }'
}

failed=0
ran=0
declare -A status
job_env=()
kinds=(gpucheck)
[ "${NF_GPU_SKIP_TORCH:-0}" = 1 ] || kinds+=(torch)
for kind in "${kinds[@]}"; do
  for net in fabric Socket; do
    name="$kind-$net"
    say "== $name"
    run_job "$name" "$net" "$kind"; rc=$?
    if [ $rc -eq $SKIP ]; then
      status[$name]=SKIP
      say "skipped: $(grep -h -m1 '^SKIP' "$out/$name.rank0.out" "$out/$name.rank1.out" | head -n1)"
      continue
    fi
    ran=$((ran + 1))
    if [ $rc -eq 0 ] && check_log "$name" "$net"; then
      status[$name]=PASS
      grep -h -m1 'NCCL version' "$out/$name.rank0.out"
      grep -E '^ *[0-9]+ ' "$out/$name.rank0.out"
    else
      status[$name]=FAIL
      failed=1
    fi
  done
done

# The tuner: NCCL 2.21+ looks for a tuner in the net plugin's library. A rules file makes every
# all-reduce ring/simple; NCCL's log (TUNING) must show our tuner loaded and that choice taken at
# a small size, where NCCL alone picks LL.
if [ "${NF_GPU_SKIP_TUNER:-0}" != 1 ] && [ "${status[gpucheck-fabric]:-}" = PASS ]; then
  name=gpucheck-tuner
  say "== $name"
  printf 'allreduce * * * * ring simple * *\n' > "$out/tuner-rules.txt"
  # shellcheck disable=SC2054
  job_env=(NCCL_DEBUG_SUBSYS=INIT,ENV,NET,TUNING NCCL_FABRIC_TUNER_RULES="$out/tuner-rules.txt")
  run_job "$name" fabric gpucheck; rc=$?
  job_env=()
  ran=$((ran + 1))
  log0="$out/$name.rank0.nccl.log"
  if [ $rc -ne 0 ]; then
    status[$name]=FAIL; failed=1
  elif ! grep -Eq "TUNER/Plugin: Using fabric|Successfully loaded external tuner plugin" "$log0"; then
    say "FAIL: $name: NCCL's log does not show our tuner loaded ($log0)"
    status[$name]=FAIL; failed=1
  elif ! grep -Eq "collective calls decided: rules [^;]*tuner-rules.txt:1 x[1-9]" "$log0"; then
    # NCCL 2.28 logs its per-call choice only at TRACE; the tuner counts what decided each call
    # and logs it when NCCL finalizes the tuner.
    say "FAIL: $name: the tuner never applied the rule ($log0):"
    grep -Eh "tuner:" "$log0" | head -n 10
    status[$name]=FAIL; failed=1
  else
    status[$name]=PASS
    grep -Eh -m3 "TUNER/Plugin|Successfully loaded external tuner|tuner: mode" "$log0"
    grep -Eh -m2 "collective calls decided" "$log0"
    say "ok: $name: NCCL loaded our tuner from the net library and took the rule's ring/simple"
  fi
fi

summary "nccl-fabric-gpucheck" "$out/gpucheck-fabric.rank0.out" "$out/gpucheck-Socket.rank0.out"
[ "${status[torch-fabric]:-}" = PASS ] &&
  summary "torch_check.py (torch.distributed)" "$out/torch-fabric.rank0.out" "$out/torch-Socket.rank0.out"

say ""
for name in gpucheck-fabric gpucheck-Socket gpucheck-tuner torch-fabric torch-Socket; do
  [ -n "${status[$name]:-}" ] && printf '%-18s %s\n' "$name" "${status[$name]}"
done
say "logs: $out"
[ $failed -ne 0 ] && { say "FAIL: tests/gpu/run.sh"; exit 1; }
[ $ran -eq 0 ] && skip "every job skipped (see the lines above)"
say "PASS: tests/gpu/run.sh"
exit 0
