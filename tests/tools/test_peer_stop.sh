#!/usr/bin/env bash
# A peer that stops in the middle of a busy transfer is declared dead within
# NCCL_FABRIC_PEER_TIMEOUT, at whatever moment it stops. Two nccl-fabric-perf processes stream
# 1 MiB messages both ways over loopback (tcp;ofi_rxm, every byte checked); rank 1 stops itself
# (SIGSTOP, --stop-self-after N) after its Nth send, N drawn from a seed. Rank 0 must fail with
# "no answer to a liveness probe" while rank 1 is still stopped, and rank 1, woken, must fail too
# rather than hang.
#
# Why random stop points: with both directions busy, a stopped peer's socket buffers fill, so the
# last ping may never leave, while data that was in flight goes on arriving for a moment. Before
# the fix of 2026-11-29 that data reset the probe clock while the ping was still out, no new ping
# was sent while it was, and the stopped peer was never declared dead (CI's network-fault test
# saw it as a 6 s SIGSTOP both ranks survived; over loopback about half the stops after send 50).
# tests/unit/test_liveness.cpp plays the clock such schedules deterministically; this runs the
# real thing.
#
# The same on the mock EFA provider between the two processes (MOCKEFA_NET=udp, issue 35) when
# FI_PROVIDER_PATH names the mock's folder, as make check sets it: EFA's shape, where a stopped
# peer is silence only (nothing resets a connection) and the liveness probe alone finds it.
#
# Replay: NF_TEST_SEED=<seed printed below>; NF_PEER_STOP_RUNS (default: one per provider and
# protocol) stops per run; NF_PEER_STOP_PROTOCOLS (default "rdma sendrecv") and
# NF_PEER_STOP_PROVIDERS (default "tcp;ofi_rxm mockefa") taken in turn.
# By hand: NF_PERF_TOOL=build/tools/nccl-fabric-perf NF_PLUGIN_LIB=build/.libs/libnccl-net-fabric.so
# tests/tools/test_peer_stop.sh
set -u

TOOL=${NF_PERF_TOOL:-$PWD/tools/nccl-fabric-perf}
PLUGIN=${NF_PLUGIN_LIB:-$PWD/.libs/libnccl-net-fabric.so}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
SEED=${NF_TEST_SEED:-$(( ($(date +%s%N) / 1000) % 1000000 ))}
read -r -a PROTOCOLS <<< "${NF_PEER_STOP_PROTOCOLS:-rdma sendrecv}"
read -r -a PROVIDERS <<< "${NF_PEER_STOP_PROVIDERS:-tcp;ofi_rxm mockefa}"
if [ -z "${FI_PROVIDER_PATH:-}" ] || [ ! -e "$FI_PROVIDER_PATH/libmockefa-fi.so" ]; then
  kept=()
  for p in "${PROVIDERS[@]}"; do [ "$p" = mockefa ] || kept+=("$p"); done
  [ "${#kept[@]}" -lt "${#PROVIDERS[@]}" ] && echo "(no mock in FI_PROVIDER_PATH: mockefa not run)"
  PROVIDERS=("${kept[@]}")
fi
RUNS=${NF_PEER_STOP_RUNS:-$(( ${#PROVIDERS[@]} * ${#PROTOCOLS[@]} ))}
BOUND=2      # NCCL_FABRIC_PEER_TIMEOUT
STOP_S=6     # how long rank 1 stays stopped: the bound, a probe interval and slack for ASan
ITERS=400    # per round; 2 warm-up, 3 rounds: about 1,200 sends per rank

for f in "$TOOL" "$PLUGIN"; do
  [ -e "$f" ] || { echo "FAIL: $f not built (set NF_PERF_TOOL, NF_PLUGIN_LIB)"; exit 1; }
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_peer_stop.XXXXXX")
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2> /dev/null; kill -9 "$p" 2> /dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
failures=0
echo "seed $SEED (replay: NF_TEST_SEED=$SEED)"
RANDOM=$SEED

state() { awk '{print $3}' "/proc/$1/stat" 2> /dev/null; }
show() { sed 's/^/    | /' "$1" | grep -v '^    | #' | head -n 30; }

# Waits up to $2 tenths of a second until pid $1 (a child) is gone or, with $3=T, stopped.
wait_state() {
  local n=0
  while [ "$n" -lt "$2" ]; do
    if [ "${3:-}" = T ]; then
      [ "$(state "$1")" = T ] && return 0
    fi
    kill -0 "$1" 2> /dev/null || return 0
    sleep 0.1; n=$((n + 1))
  done
  return 1
}

for ((run = 1; run <= RUNS; ++run)); do
  proto=${PROTOCOLS[$(( (run - 1) % ${#PROTOCOLS[@]} ))]}
  PROVIDER=${PROVIDERS[$(( (run - 1) / ${#PROTOCOLS[@]} % ${#PROVIDERS[@]} ))]}
  penv=()
  [ "$PROVIDER" = mockefa ] && penv=(MOCKEFA_NET=udp MOCKEFA_NET_IP=127.0.0.1)
  # The first stop comes early, around the keeper's first ping of the run (where the old clock
  # missed it most); the others anywhere in the run.
  if [ "$run" -eq 1 ]; then n=$(( 10 + RANDOM % 100 )); else n=$(( 10 + RANDOM % 1000 )); fi
  name="stop $run of $RUNS ($PROVIDER, $proto, rank 1 stops after send $n)"
  a="$TMP/a$run.log" b="$TMP/b$run.log"
  started=0
  for _ in 1 2 3; do
    # Below the kernel's ephemeral range (32768 up), where the providers' own listeners live.
    port=$(( 20000 + (RANDOM % 12000) ))
    env "${penv[@]}" NCCL_FABRIC_PEER_TIMEOUT=$BOUND "$TOOL" --plugin "$PLUGIN" --listen "$port" --protocol "$proto" \
      --provider "$PROVIDER" -t bibw -b 1M -e 1M -n "$ITERS" -w 2 -r 3 -c --no-raw --timeout 30 \
      > "$a" 2>&1 &
    ra=$!
    sleep 0.5
    if ! kill -0 "$ra" 2> /dev/null && grep -q 'cannot listen on port' "$a"; then
      wait "$ra"
      continue  # port taken: another one
    fi
    env "${penv[@]}" NCCL_FABRIC_PEER_TIMEOUT=$BOUND "$TOOL" --plugin "$PLUGIN" --peer "127.0.0.1:$port" \
      --provider "$PROVIDER" --timeout 30 --stop-self-after "$n" > "$b" 2>&1 &
    rb=$!
    PIDS=("$ra" "$rb")
    started=1
    break
  done
  if [ "$started" -eq 0 ]; then
    echo "FAIL: $name: no free port in 3 tries"; failures=$((failures + 1)); continue
  fi
  if ! wait_state "$rb" 600 T || [ "$(state "$rb")" != T ]; then
    echo "FAIL: $name: rank 1 did not stop itself (it exited or ran 60 s)"
    echo "    rank 0:"; show "$a"; echo "    rank 1:"; show "$b"
    failures=$((failures + 1)); kill -9 "$ra" "$rb" 2> /dev/null; wait; continue
  fi
  t0=$(date +%s%N)
  # Rank 0 must be done (failed) before rank 1 wakes.
  wait_state "$ra" $((STOP_S * 10))
  ra_alive=0
  kill -0 "$ra" 2> /dev/null && ra_alive=1
  t_a=$(( ($(date +%s%N) - t0) / 1000000 ))
  kill -CONT "$rb"
  # Woken, rank 1 finds a peer that gave up on it (or that is still there, if rank 0 missed it):
  # either way it must end within its bounds.
  wait_state "$rb" 300 || kill -9 "$rb" 2> /dev/null
  wait_state "$ra" 300 || kill -9 "$ra" 2> /dev/null
  wait "$ra"; rca=$?
  wait "$rb"; rcb=$?
  PIDS=()
  seen=$(grep -m1 -o 'peer [^ ]* failed: [^;]*' "$a")
  lf_major=$(sed -n 's/^# libfabric \([0-9]*\)\..*/\1/p' "$a" | head -1)
  # libfabric 2.1.0's rxm dereferences the NULL op_context its tcp provider gives a remote write
  # (with CQ data) cut by the connection's end: rank 1, woken to a rank 0 that died in the middle
  # of its RDMA writes, crashes in fi_cq_read (docs/troubleshooting.md#rxm-null-context). Not
  # ours to fix; named, not hidden: rank 0's detection, the point here, must still hold.
  known_crash=0
  [ "$rcb" -eq 139 ] && [ "$proto" = rdma ] && [ "$PROVIDER" = 'tcp;ofi_rxm' ] &&
    [ "${lf_major:-0}" -ge 2 ] && known_crash=1
  if [ "$ra_alive" -eq 0 ] && [ "$rca" -eq 1 ] && grep -q 'no answer to a liveness probe' <<< "$seen" &&
     [ "$known_crash" -eq 1 ]; then
    echo "PASS: $name: rank 0 failed ${t_a} ms after the stop ($seen); rank 1, woken, crashed" \
      "inside libfabric $lf_major.x's rxm (SIGSEGV, a libfabric bug: docs/troubleshooting.md#rxm-null-context)"
  elif [ "$ra_alive" -eq 0 ] && [ "$rca" -eq 1 ] && grep -q 'no answer to a liveness probe' <<< "$seen" &&
     [ "$rcb" -ne 0 ] && [ "$rcb" -lt 128 ]; then
    echo "PASS: $name: rank 0 failed ${t_a} ms after the stop ($seen); rank 1, woken, exit $rcb"
  else
    if [ "$ra_alive" -eq 1 ]; then
      echo "FAIL: $name: rank 0 still ran ${STOP_S} s after rank 1 stopped (exit $rca once it woke)"
    else
      echo "FAIL: $name: rank 0 exit $rca after ${t_a} ms${seen:+ ($seen)}, rank 1 exit $rcb"
    fi
    echo "    rank 0:"; show "$a"; echo "    rank 1:"; show "$b"
    failures=$((failures + 1))
  fi
done

if [ "$failures" -gt 0 ]; then
  echo "test_peer_stop: $failures of $RUNS stop(s) failed (replay: NF_TEST_SEED=$SEED)"
  exit 1
fi
echo "test_peer_stop: all $RUNS stop(s) detected"
