#!/usr/bin/env bash
# nccl-fabric-info --stats on the statistics files in tests/data/stats (docs/stats.md): the table,
# the verdict (stuck, errors, slow, ok), the exit code (0 ok, 1 flagged, 2 unreadable) and the
# message that names a bad file and what is wrong with it.
set -u
build=${NF_BUILD_DIR:-.}
src=${NF_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
info="$build/tools/nccl-fabric-info"
data="$src/tests/data/stats"
fail=0
out=$(mktemp)
tmp=$(mktemp -d)
trap 'rm -rf "$out" "$tmp"' EXIT
[ -x "$info" ] || { echo "FAIL: no $info (build it first)"; exit 1; }

# run EXPECTED_EXIT PATTERN... -- ARGS... : runs the tool with ARGS, checks the exit code and that
# every PATTERN (grep, basic regex) is in its output (stdout and stderr). A PATTERN starting with
# '!' must not be there.
run() {
  local want=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$info" "$@" >"$out" 2>&1
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL: exit $got, expected $want, with: $*"; sed 's/^/    /' "$out"; fail=1; return
  fi
  for p in "${pats[@]}"; do
    if [ "${p:0:1}" = "!" ]; then
      if grep -q -- "${p:1}" "$out"; then
        echo "FAIL: '${p:1}' in the output with: $*"; sed 's/^/    /' "$out"; fail=1; return
      fi
    elif ! grep -q -- "$p" "$out"; then
      echo "FAIL: '$p' missing from the output with: $*"; sed 's/^/    /' "$out"; fail=1; return
    fi
  done
  echo "ok: exit $got with: ${*//$data\//}"
}

d=$data
header='^host  *pid  *final  *uptime_s  *sent_msgs  *sent_GB  *recv_msgs  *recv_GB  *eagain  *cts_waits  *errors  *pending  *stalled_s$'

# Healthy: three similar nodes, unknown keys ignored; sorted by host; nothing flagged.
run 0 "== nccl-fabric stats: 3 files" "$header" "^== verdict$" "^ok: no node stands out$" \
  "^node-a  *4242  *yes  *12.5  *1907  *2.00  *1907  *2.00 " "^node-b  *4243 .* 12 " \
  "!stuck:" "!slow:" "!errors:" \
  -- --stats "$d/healthy-c.json" "$d/healthy-a.json" "$d/healthy-b.json"
if ! grep -A1 '^host' "$out" | grep -q '^node-a'; then echo "FAIL: not sorted by host"; fail=1; fi

# Stuck: node-c's worst comm (3, 75 s), not its 20 s one; node-a's 5 s stall is below 10 s.
run 1 "^stuck: node-c pid 77: comm 3 (recv from fi_sockaddr_in://10.0.0.2:4711) has 2 pending, no progress for 75.0 s; oldest: recv of 4194304 bytes, waiting for the data, 75.0 s old (1 more stuck comm)$" \
  "^node-c  *77  *no " "!stuck: node-a" "!ok: no node" \
  -- --stats "$d/stuck-a.json" "$d/stuck-b.json" "$d/stuck-c.json"
# --stall 30: only the 75 s comm is stuck; --stall 3: node-a's send comm is too.
run 1 "^stuck: node-c pid 77: comm 3 (recv .* 75.0 s old$" "!stuck: node-a" \
  -- --stats --stall 30 "$d/stuck-a.json" "$d/stuck-b.json" "$d/stuck-c.json"
run 1 "^stuck: node-a pid 4242: comm 1 (send to fi_sockaddr_in://10.0.0.2:4711) has 1 pending, no progress for 5.0 s; oldest: send of 65536 bytes, waiting for the clear-to-send, 5.0 s old$" \
  "^stuck: node-c pid 77: comm 3" \
  -- --stats --stall 3 "$d/stuck-a.json" "$d/stuck-b.json" "$d/stuck-c.json"

# Errors: node-b's device errors and its failed comm.
run 1 "^errors: node-b pid 12: 3 errors (comm 5: peer closed the connection (fi_cq_readerr: Connection reset by peer))$" \
  "^node-b  *12 .* 3  *0  *0.0$" "!errors: node-a" "!errors: node-c" "!stuck:" "!slow:" \
  -- --stats "$d/errors-a.json" "$d/errors-b.json" "$d/errors-c.json"

# Slow: of four nodes, node-d moved 0.12 GB against a median of 2 GB.
run 1 "^slow: node-d pid 9: sent+recv 0.12 GB, median 2.00 GB (below half)$" "== nccl-fabric stats: 4 files" \
  "!slow: node-[abc]" \
  -- --stats "$d/slow-a.json" "$d/slow-b.json" "$d/slow-c.json" "$d/slow-d.json"
# With two files there is no majority: nothing is slow.
run 0 "^ok: no node stands out$" -- --stats "$d/slow-a.json" "$d/slow-d.json"

# Escapes in strings: decoded (\u, surrogate pairs, \/, \"), control characters shown escaped.
run 1 "^node-escé😀  *31  *no  *125.0 " \
  '^stuck: node-escé😀 pid 31: comm 9 (recv from fi_sockaddr_in://10.0.0.9:4711) has 1 pending, no progress for 30.5 s; oldest: recv of 0 bytes, waiting for "the" data\\nback\\slash, 30.5 s old$' \
  -- --stats "$d/escapes.json"

# Bad files: exit 2, the file and what is wrong on stderr.
run 2 "bad-truncated.json: line [0-9]*: unexpected end of the file" -- --stats "$d/bad-truncated.json"
run 2 "bad-colon.json: line 3: expected ':'$" -- --stats "$d/bad-colon.json"
run 2 "bad-format.json: format is not nccl-fabric-stats$" -- --stats "$d/bad-format.json"
run 2 "bad-version.json: version 2 is not supported" -- --stats "$d/bad-version.json"
run 2 "bad-type.json: comms\[0\].stalled_s: expected a number$" -- --stats "$d/bad-type.json"
run 2 "nosuch.json: cannot open: No such file or directory" -- --stats "$tmp/nosuch.json"
: >"$tmp/empty.json"
run 2 "empty.json: empty file" -- --stats "$tmp/empty.json"
echo '[1, 2]' >"$tmp/array.json"
run 2 "array.json: not a JSON object" -- --stats "$tmp/array.json"
# A good file beside a bad one: the good one is still reported, the exit code is 2.
run 2 "nosuch.json: cannot open" "== nccl-fabric stats: 2 files (1 unreadable, not shown)" \
  "^node-a  *4242 " -- --stats "$d/healthy-a.json" "$tmp/nosuch.json"

# Hostile input: deep nesting is refused (no stack overflow), and so are JSON's traps.
head -c 200000 /dev/zero | tr '\0' '[' >"$tmp/deep.json"
run 2 "deep.json: line 1: nested deeper than 64 levels" -- --stats "$tmp/deep.json"
bad_json() {  # NAME TEXT PATTERN
  printf '%s' "$2" >"$tmp/$1.json"
  run 2 "$1.json: $3" -- --stats "$tmp/$1.json"
}
hdr='{"format": "nccl-fabric-stats", "version": 1'
bad_json dupkey "$hdr, \"pid\": 1, \"pid\": 2}" 'line 1: duplicate key "pid"'
bad_json trailing "$hdr} x" "line 1: unexpected text after the document"
bad_json comma "$hdr,}" "line 1: expected a string (a key)"
bad_json escape "$hdr, \"host\": \"a\\qb\"}" "line 1: bad escape '\\\\q' in a string"
bad_json surrogate "$hdr, \"host\": \"\\ud800x\"}" "line 1: high surrogate not followed by a low one"
bad_json ctrl "$hdr, \"host\": \"a$(printf '\t')b\"}" "line 1: control character inside a string"
bad_json leadzero "$hdr, \"pid\": 012}" "line 1: expected ',' or '}'"
bad_json float_pid "$hdr, \"pid\": 1.5}" "pid: expected an integer$"
bad_json huge "$hdr, \"uptime_s\": 1e999}" "line 1: number out of range"
bad_json nan "$hdr, \"uptime_s\": NaN}" "line 1: expected a value"
bad_json noformat '{"version": 1}' 'no "format"'
bad_json noversion '{"format": "nccl-fabric-stats"}' 'no integer "version"'
# The smallest valid file: format and version only.
printf '%s}\n' "$hdr" >"$tmp/minimal.json"
run 0 "^ok: no node stands out$" -- --stats "$tmp/minimal.json"

# JSON: one line, valid, the same verdict and exit code.
run 1 '"stats_schema": 1' '"kind": "stuck", "host": "node-c", "pid": 77' '"exit_code": 1}$' \
  -- --stats --json "$d/stuck-a.json" "$d/stuck-b.json" "$d/stuck-c.json"
[ "$(grep -c '' "$out")" = 1 ] || { echo "FAIL: JSON is not one line"; fail=1; }
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$out" || { echo "FAIL: bad JSON"; fail=1; }
fi
"$info" --stats --json "$d/escapes.json" "$tmp/nosuch.json" >"$out" 2>/dev/null
if command -v python3 >/dev/null; then
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["exit_code"] == 2 and len(d["unreadable"]) == 1, d
assert d["nodes"][0]["host"] == "node-esc\u00e9\U0001F600", d
assert "\"the\" data\nback\\slash" in d["verdict"][0]["message"], d
' "$out" || { echo "FAIL: JSON with escapes and an unreadable file"; cat "$out"; fail=1; }
fi

# The command line.
run 2 "needs at least one FILE" -- --stats
run 2 "bad argument '--stall'" -- --stats --stall abc "$d/healthy-a.json"
run 2 "bad argument '--stall'" -- --stats --stall 0 "$d/healthy-a.json"
run 2 "--stall goes with --stats" -- --stall 5
run 2 "--plugin does not go with --stats" -- --stats --plugin x.so "$d/healthy-a.json"
run 0 "^ok: no node stands out$" -- --stats -- "$d/healthy-a.json"
"$info" --help >"$out" 2>&1
grep -q -- "--stats \[--stall SEC\]" "$out" || { echo "FAIL: --help lacks --stats"; fail=1; }
exit $fail
