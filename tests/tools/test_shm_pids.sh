#!/usr/bin/env bash
# shm addresses carry the process id ("fi_shm://998:0:0"), so two processes whose pids have a
# different number of digits have addresses of different lengths. The handshake must not take
# that for a provider mismatch (it did: found by CI on a fresh machine, pids 300 and 32767).
# Needs root to steer the next pid through /proc/sys/kernel/ns_last_pid; skips (77) otherwise.
set -uo pipefail
tool=${NF_PERF_TOOL:?}
last=/proc/sys/kernel/ns_last_pid
[ -w "$last" ] || { echo "SKIP: $last is not writable (needs root)"; exit 77; }
fi_info -p shm >/dev/null 2>&1 || { echo "SKIP: no shm provider"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kill "$lpid" 2>/dev/null' EXIT
port=$((20000 + RANDOM % 20000))
"$tool" --provider shm --listen "$port" -t lat -b 8 -e 8 -n 50 >"$tmp/listener" 2>&1 &
lpid=$!
# The peer gets a pid with fewer digits than the listener's (or more, when the listener's is short).
if [ "${#lpid}" -gt 3 ]; then target=500; else target=20000; fi
sleep 1
echo "$target" > "$last" 2>/dev/null
timeout 60 "$tool" --provider shm --peer "127.0.0.1:$port" -t lat -b 8 -e 8 -n 50 >"$tmp/peer" 2>&1 &
ppid_=$!
wait "$ppid_"; prc=$?
wait "$lpid"; lrc=$?
echo "listener pid $lpid, peer pid $ppid_"
if [ "${#lpid}" -eq "${#ppid_}" ]; then
  echo "SKIP: could not give the two processes pids of different lengths"; exit 77
fi
if [ $prc -ne 0 ] || [ $lrc -ne 0 ]; then
  echo "FAIL: shm between pids of different lengths: exit $lrc / $prc"
  cat "$tmp/listener" "$tmp/peer"
  exit 1
fi
grep -qE '^ +lat +8 B' "$tmp/listener" || { echo "FAIL: no latency row"; cat "$tmp/listener"; exit 1; }
echo "PASS: shm connects between pids $lpid and $ppid_"
