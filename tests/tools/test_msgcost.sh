#!/usr/bin/env bash
# tools/msgcost, the program tools/callgrind-msg.sh counts instructions of, run natively (make
# check does not need valgrind): 100 messages from the plugin to itself on shm and the mock
# provider, both protocols, every byte checked by the program; a bad command line is refused.
set -euo pipefail
: "${NF_BUILD_DIR:?run from make check}"
prog=$NF_BUILD_DIR/tools/msgcost
fail=0

run() {
  local what=$1 out rc
  shift
  rc=0
  out=$(env "$@" timeout 60 "$prog" 100 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q '^msgcost: 100 messages of 8 bytes, intact' <<<"$out"; then
    echo "FAIL: $what: exit $rc"
    echo "$out"
    fail=1
  else
    echo "PASS: $what: $out"
  fi
}

for proto in sendrecv rdma; do
  if fi_info -p shm >/dev/null 2>&1; then
    run "shm $proto" NCCL_FABRIC_PROVIDER=shm NCCL_FABRIC_PROTOCOL=$proto
  else
    echo "SKIP: shm $proto: no shm provider"
  fi
  run "mock $proto" FI_PROVIDER=mockefa NCCL_FABRIC_PROVIDER=mockefa NCCL_FABRIC_PROTOCOL=$proto
done

rc=0
"$prog" >/dev/null 2>&1 || rc=$?
if [ "$rc" -ne 2 ]; then
  echo "FAIL: msgcost without N exits $rc, not 2"
  fail=1
fi
exit "$fail"
