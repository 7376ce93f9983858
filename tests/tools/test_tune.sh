#!/usr/bin/env bash
# nccl-fabric-tune's command line: show, calibrate, compare and bench on the shipped and synthetic
# logs (docs/tuning.md). What the tuner decides is tested through its ABI in tests/tuner.
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
tool=${NF_BUILD_DIR:?}/tools/nccl-fabric-tune
data=${NF_SRC_DIR:?}/tests/tuner/data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export NCCL_FABRIC_TEST_DMI_FILE=/dev/null

# Usage errors are 2 and say what is wrong.
"$tool" >/dev/null 2>&1; [ $? -eq 2 ] || fail "no command: not 2"
"$tool" frobnicate >"$tmp/e" 2>&1; [ $? -eq 2 ] && grep -q "unknown command 'frobnicate'" "$tmp/e" || fail "unknown command: $(cat "$tmp/e")"
"$tool" show --platform p5.48xlarge --nodes 2 >"$tmp/e" 2>&1; [ $? -eq 2 ] || fail "show without --ranks-per-node: not 2"
"$tool" show --platform nosuch.machine --nodes 2 --ranks-per-node 1 >"$tmp/e" 2>&1; [ $? -eq 2 ] || fail "unknown platform: not 2: $(cat "$tmp/e")"
"$tool" show --platform p5.48xlarge --nodes 2 --ranks-per-node 8 --coll alltoall >"$tmp/e" 2>&1; [ $? -eq 2 ] || fail "unknown collective: not 2"

# show: one row per power of two from 8 B to 16 GiB, both choices named.
"$tool" show --platform p5.48xlarge --nodes 16 --ranks-per-node 8 >"$tmp/show" 2>&1 || fail "show failed: $(cat "$tmp/show")"
rows=$(grep -cE '^ +[0-9.]+ (B|KiB|MiB|GiB) +[a-z_]+/[a-z0-9]+ ' "$tmp/show")
[ "$rows" -eq 32 ] || fail "show printed $rows size rows, not 32: $(cat "$tmp/show")"
grep -q 'hwLatencies\[NET\]\[ring\]\[ll\] 2.70 -> 20.00' "$tmp/show" || fail "show does not list the corrected latency: $(cat "$tmp/show")"

# calibrate: labels where the log has no NCCL INFO lines; the rules read back and drive show.
"$tool" calibrate "$data/synthetic-2nodes-4ranks-all_reduce-ring-simple.log" >"$tmp/e" 2>&1
[ $? -eq 1 ] && grep -q 'put --label ALGO/PROTO before it' "$tmp/e" || fail "unlabelled log: $(cat "$tmp/e")"
"$tool" calibrate --label ring/bogus "$data/synthetic-2nodes-4ranks-all_reduce-ring-simple.log" >"$tmp/e" 2>&1
[ $? -eq 2 ] || fail "bad label: not 2: $(cat "$tmp/e")"
"$tool" calibrate "$data"/synthetic-2nodes-4ranks-all_reduce-ring-ll.log \
  "$data"/synthetic-2nodes-4ranks-all_reduce-ring-ll128.log \
  --label ring/simple "$data"/synthetic-2nodes-4ranks-all_reduce-ring-simple.log \
  "$data"/synthetic-2nodes-4ranks-all_reduce-tree-ll.log \
  "$data"/synthetic-2nodes-4ranks-all_reduce-tree-simple.log -o "$tmp/rules" 2>"$tmp/e" || fail "calibrate: $(cat "$tmp/e")"
grep -qE '^allreduce +\[0,4K\) +2 +4 +2 +tree +ll ' "$tmp/rules" || fail "first rule: $(cat "$tmp/rules")"
grep -qE '^allreduce +\[256K,\*\) +2 +4 +2 +ring +simple ' "$tmp/rules" || fail "last rule: $(cat "$tmp/rules")"
"$tool" show --platform p5.48xlarge --nodes 2 --ranks-per-node 2 --rules "$tmp/rules" >"$tmp/show2" 2>&1 || fail "show --rules: $(cat "$tmp/show2")"
grep -qE '^ +8 B +[a-z_]+/[a-z0-9]+ +[0-9.]+ +tree/ll ' "$tmp/show2" || fail "the rule's tree/ll at 8 B is not what NCCL gets: $(cat "$tmp/show2")"
grep -qE '^ +1 MiB +[a-z_]+/[a-z0-9]+ +[0-9.]+ +ring/simple ' "$tmp/show2" || fail "the rule's ring/simple at 1 MiB: $(cat "$tmp/show2")"

# compare: the shipped log against the model, one row per size and a summary.
"$tool" compare --platform g5.8xlarge "$data/g5.8xlarge-2nodes-efa-nogdr-all_reduce.log" >"$tmp/cmp" 2>&1 || fail "compare: $(cat "$tmp/cmp")"
[ "$(grep -cE '^ +[0-9.]+ (B|KiB|MiB|GiB) ' "$tmp/cmp")" -eq 30 ] || fail "compare rows: $(cat "$tmp/cmp")"
grep -q 'geometric mean of measured/model bandwidth' "$tmp/cmp" || fail "compare summary: $(cat "$tmp/cmp")"

# bench: a median in ns.
"$tool" bench --calls 2000 --repeat 3 >"$tmp/b" 2>&1 || fail "bench: $(cat "$tmp/b")"
grep -qE 'median [0-9.]+ ns per call' "$tmp/b" || fail "bench output: $(cat "$tmp/b")"
echo "PASS: nccl-fabric-tune show, calibrate, compare, bench"
