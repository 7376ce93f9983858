#!/usr/bin/env bash
# nccl-fabric-perf between two processes on the mock EFA provider (issue 35, point 1): with
# MOCKEFA_NET=udp every mock endpoint talks over a UDP channel of its own, so the plugin and the
# raw reference run between two processes with EFA's semantics (4-byte CQ data, MR keys checked
# at the target, receiver-not-ready). Every byte checked (-c), both protocols.
# By hand: NF_PERF_TOOL=build/tools/nccl-fabric-perf NF_PLUGIN_LIB=build/.libs/libnccl-net-fabric.so
# FI_PROVIDER_PATH=build/tests/mockprov/.libs tests/tools/test_perf_mockefa.sh
set -u
TOOL=${NF_PERF_TOOL:-$PWD/tools/nccl-fabric-perf}
PLUGIN=${NF_PLUGIN_LIB:-$PWD/.libs/libnccl-net-fabric.so}
for f in "$TOOL" "$PLUGIN"; do
  [ -e "$f" ] || { echo "FAIL: $f not built (set NF_PERF_TOOL, NF_PLUGIN_LIB)"; exit 1; }
done
[ -n "${FI_PROVIDER_PATH:-}" ] || { echo "FAIL: FI_PROVIDER_PATH must name the mock's folder"; exit 1; }
export MOCKEFA_NET=udp MOCKEFA_NET_IP=127.0.0.1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_perf_mockefa.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0
for proto in rdma sendrecv; do
  ok=0
  for _ in 1 2 3; do
    port=$(( 20000 + (RANDOM % 12000) ))
    timeout 120 "$TOOL" --plugin "$PLUGIN" --listen "$port" --provider mockefa --protocol "$proto" \
      -t lat,bw,bibw -b 8 -e 4M -f 16 -n 40 -w 2 -r 1 -c --timeout 30 > "$TMP/a.log" 2>&1 &
    ra=$!
    sleep 0.5
    if ! kill -0 "$ra" 2> /dev/null && grep -q 'cannot listen on port' "$TMP/a.log"; then
      wait "$ra"
      continue
    fi
    timeout 120 "$TOOL" --plugin "$PLUGIN" --peer "127.0.0.1:$port" --provider mockefa \
      --timeout 30 > "$TMP/b.log" 2>&1
    rb=$?
    wait "$ra"
    rc=$?
    rows=$(grep -cE '^  (lat|bw|bibw) ' "$TMP/a.log")
    if [ "$rc" -eq 0 ] && [ "$rb" -eq 0 ] && [ "$rows" -eq 15 ] &&
       grep -q '^# nccl-fabric-perf: provider mockefa' "$TMP/a.log"; then
      ok=1
      echo "PASS: $proto between two processes on the mock over UDP: $rows rows, data checked"
      grep -E '^  (bw|bibw) +512 KiB' "$TMP/a.log" | sed 's/^/    /'
    else
      echo "FAIL: $proto: rank 0 exit $rc, rank 1 exit $rb, $rows rows"
      sed 's/^/    | /' "$TMP/a.log" | tail -n 30
      sed 's/^/    | /' "$TMP/b.log" | tail -n 15
    fi
    break
  done
  [ "$ok" -eq 1 ] || failures=$((failures + 1))
done
[ "$failures" -eq 0 ] || { echo "test_perf_mockefa: $failures protocol(s) failed"; exit 1; }
echo "test_perf_mockefa: both protocols between two processes on the mock"
