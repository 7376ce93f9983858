#!/usr/bin/env bash
# tests/gpu/run.sh's own logic, without a GPU: a fake nvidia-smi and a fake check program that
# logs like NCCL. A fabric run passes; one whose NCCL log shows a fallback to Socket fails; a
# wrong result fails; a tuner job whose log shows the rule unused fails; everything skipped is a
# skip (77).
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
src=${NF_SRC_DIR:?}
plugin=${NF_PLUGIN_LIB:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "0, Fake GPU, 1.0"\n' >"$tmp/bin/nvidia-smi"
cat >"$tmp/check" <<'FAKE'
#!/usr/bin/env bash
rank=0; while [ $# -gt 0 ]; do [ "$1" = --rank ] && rank=$2; shift; done
net=${FAKE_NET:-$NCCL_NET}
[ -n "${FAKE_SKIP:-}" ] && { echo "SKIP: fake: no NCCL"; exit 77; }
{ echo "h:1:1 [0] NCCL INFO Using network $net"
  echo "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/$net/0"
  [ "$net" = fabric ] && echo "h:1:1 [0] NCCL INFO NET/FABRIC : using libfabric 1.17 provider 'tcp;ofi_rxm'"
  if [ -n "${NCCL_FABRIC_TUNER_RULES:-}" ]; then
    echo "h:1:1 [0] NCCL INFO TUNER/Plugin: Using fabric (v5)"
    if [ -n "${FAKE_TUNER_UNUSED:-}" ]; then
      echo "h:1:1 [0] NCCL INFO NET/FABRIC tuner: 12 collective calls decided: rules none; model ring/ll x12; NCCL 0"
    else
      echo "h:1:1 [0] NCCL INFO NET/FABRIC tuner: 12 collective calls decided: rules $NCCL_FABRIC_TUNER_RULES:1 x12; model none; NCCL 0"
    fi
  fi
} >"$NCCL_DEBUG_FILE"
bw=$([ "$NCCL_NET" = fabric ] && echo 3.000 || echo 1.500)
res=OK; [ -n "${FAKE_WRONG:-}" ] && [ "$rank" = 1 ] && res=FAIL
printf '  %12d %12d %6s %6s %11.2f %11.3f %11s  ok ok ok %s\n' 1024 256 float sum 10 1 "$bw" "$res"
[ "$res" = OK ]
FAKE
chmod +x "$tmp/bin/nvidia-smi" "$tmp/check"
go() {
  env PATH="$tmp/bin:$PATH" NF_GPUCHECK="$tmp/check" NF_PLUGIN_LIB="$plugin" NF_GPU_SKIP_TORCH=1 \
    OUT="$tmp/out" "$@" bash "$src/tests/gpu/run.sh" 2>&1
}
out=$(go) || fail "fake pass run failed: $out"
grep -Eq '^ +1024 +3\.000 +1\.500 +2\.00$' <<< "$out" || fail "no summary row fabric/Socket = 2.00: $out"
grep -q 'ok: gpucheck-fabric: NCCL used network fabric' <<< "$out" || fail "no log proof line: $out"
grep -q 'ok: gpucheck-tuner: NCCL loaded our tuner' <<< "$out" || fail "no tuner proof line: $out"
out=$(go FAKE_TUNER_UNUSED=1) && fail "a tuner that never applied the rule passed: $out"
grep -q 'the tuner never applied the rule' <<< "$out" || fail "unused rule not named: $out"
out=$(go NF_GPU_SKIP_TUNER=1) || fail "NF_GPU_SKIP_TUNER=1 run failed: $out"
grep -q 'gpucheck-tuner' <<< "$out" && fail "NF_GPU_SKIP_TUNER=1 still ran the tuner job: $out"
out=$(go FAKE_NET=Socket) && fail "a fallback to Socket passed: $out"
grep -q 'NCCL used another network' <<< "$out" || fail "fallback not named: $out"
out=$(go FAKE_WRONG=1) && fail "a wrong result passed: $out"
out=$(go FAKE_SKIP=1); rc=$?
[ $rc -eq 77 ] || fail "all skipped gave $rc, not 77: $out"
echo "PASS: run.sh passes, fails on fallback and wrong results, skips when everything skips"
