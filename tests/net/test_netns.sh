#!/usr/bin/env bash
# Two hosts with real network faults (issue 16): two network namespaces joined by a veth pair,
# the plugin on tcp;ofi_rxm over it, driven by nccl-fabric-perf --listen / --peer with every byte
# checked (-c). Faults come from iptables rules in the namespaces (loss, duplication, a firewall
# at connect time), from nfq_fault (tests/net/nfq_fault.cpp, NFQUEUE: delay, jitter, reordering,
# corruption) where the kernel has no netem qdisc, from `ip link` (flap, link down) and from
# signals (kill -9, SIGSTOP).
#
# usage: tests/net/test_netns.sh BUILD_DIR [--table FILE]
#   Needs root, ip netns, iptables; skips (exit 77) with a message where it cannot run.
#   --table FILE: also write the fault table (markdown rows) there. Its time column is the run's
#   length for runs that complete, and the time from the fault to the plugin's WARN on rank 0 for
#   runs that fail.
# Every scenario must end as expected (complete with the right bytes, or fail on both sides with a
# WARN that names the peer) within its bound; the script prints one line per scenario with the
# time and, for completed runs, the slowdown against the run without faults.
set -u
BUILD=${1:?usage: test_netns.sh BUILD_DIR [--table FILE]}
TABLE=""
[ "${2:-}" = "--table" ] && TABLE=${3:?}
BUILD=$(cd "$BUILD" && pwd)
PERF=$BUILD/tools/nccl-fabric-perf
NFQ=$BUILD/tests/net/nfq_fault
PLUGIN=$BUILD/.libs/libnccl-net-fabric.so

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "not root: network namespaces need CAP_NET_ADMIN"
command -v ip > /dev/null || skip "no ip (iproute2)"
command -v iptables > /dev/null || skip "no iptables"
[ -x "$PERF" ] || skip "no $PERF (build first)"
fi_info -p tcp > /dev/null 2>&1 || skip "libfabric has no tcp provider"

ID=$$
NA=nfa$ID NB=nfb$ID VA=nfva$ID VB=nfvb$ID
VA=${VA:0:15} VB=${VB:0:15}
ADDR_A=10.77.$((ID % 200)).1 ADDR_B=10.77.$((ID % 200)).2
PORT=$((20000 + ID % 20000))
WORK=$(mktemp -d)
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2> /dev/null; kill -9 "$p" 2> /dev/null; done
  ip netns del "$NA" 2> /dev/null
  ip netns del "$NB" 2> /dev/null
  if [ "${FAILS:-0}" -gt 0 ] || [ "${STALLS:-0}" -gt 0 ]; then
    # Whatever failed keeps its logs (issue 32): every rank's and fault helper's, per scenario.
    keep="${NF_NETNS_LOGS:-$PWD/netns-logs}"
    rm -rf "$keep" && mv "$WORK" "$keep" && echo "test_netns: the logs are kept in $keep"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

if ! ip netns add "$NA" || ! ip netns add "$NB"; then skip "cannot create network namespaces"; fi
ip link add "$VA" type veth peer name "$VB" || skip "cannot create a veth pair"
ip link set "$VA" netns "$NA" && ip link set "$VB" netns "$NB"
ip -n "$NA" addr add "$ADDR_A/24" dev "$VA"
ip -n "$NB" addr add "$ADDR_B/24" dev "$VB"
for ns in "$NA" "$NB"; do ip -n "$ns" link set lo up; done
ip -n "$NA" link set "$VA" up
ip -n "$NB" link set "$VB" up
ip netns exec "$NA" iptables -L > /dev/null 2>&1 || skip "iptables does not work in a namespace here"

# tc netem where the kernel has it (this project's CI kernel does not: CONFIG_NET_SCH_NETEM unset).
HAVE_NETEM=0
if ip netns exec "$NA" tc qdisc add dev "$VA" root netem delay 0ms 2> /dev/null; then
  HAVE_NETEM=1
  ip netns exec "$NA" tc qdisc del dev "$VA" root
fi
netem() {
  ip netns exec "$NA" tc qdisc replace dev "$VA" root netem "$@" &&
    ip netns exec "$NB" tc qdisc replace dev "$VB" root netem "$@"
}
netem_off() {
  ip netns exec "$NA" tc qdisc del dev "$VA" root 2> /dev/null
  ip netns exec "$NB" tc qdisc del dev "$VB" root 2> /dev/null
}

PEER_TIMEOUT=3
# A transfer of 1 and 4 MiB messages each way (bibw), every byte checked. Runs with a fault that
# starts before the run are short (-n 60); runs that are hit mid-transfer are long enough (-n 600,
# about 4 s here without faults) for the fault to land in the middle.
# PROV: the provider of the rows (tcp;ofi_rxm, then the mock EFA provider over its UDP wire).
PROV='tcp;ofi_rxm'
RUN_ARGS=(-t bibw -b 1M -e 4M -f 4 -w 2 -c --no-raw --timeout 60)
ITERS=60
MOCK_DIR=$BUILD/tests/mockprov/.libs

ns_env() {  # ns iface
  if [ "$PROV" = mockefa ]; then
    # The mock's endpoints bind their UDP channel to the namespace's own address.
    local ip=$ADDR_A
    [ "$1" = "$NB" ] && ip=$ADDR_B
    echo "MOCKEFA_NET=udp MOCKEFA_NET_IP=$ip FI_PROVIDER_PATH=$MOCK_DIR NCCL_FABRIC_PEER_TIMEOUT=$PEER_TIMEOUT"
  else
    echo "FI_TCP_IFACE=$2 FI_PROVIDER_PATH= NCCL_FABRIC_PEER_TIMEOUT=$PEER_TIMEOUT"
  fi
}

# A failed scenario's logs, under its own names (the next scenario overwrites a.log and b.log).
keep_logs() {  # scenario protocol
  local tag
  tag="failed-$FAILS-$(tr -c 'a-zA-Z0-9\n' '_' <<< "$1-$2")"
  for f in a b nfq_a nfq_b; do [ -f "$WORK/$f.log" ] && cp "$WORK/$f.log" "$WORK/$tag-$f.log"; done
  return 0
}

# Starts both ranks; sets RA RB (pids) and their logs $WORK/a.log $WORK/b.log. B_ARGS: rank 1's
# own extra options.
B_ARGS=()
start_pair() {  # protocol [extra env]
  local proto=$1 extra=${2:-}
  PORT=$((PORT + 1))
  # Emptied here, before the ranks start: the `> file` of a background job truncates in the child,
  # some time after `&` returns, and until then started() read the previous scenario's table
  # header and went on at once (issue 32: the network-fault flake; a fault then landed before the
  # pair had connected, and the 'stall' stacks showed the ranks at their first instructions).
  : > "$WORK/a.log"
  : > "$WORK/b.log"
  # shellcheck disable=SC2046,SC2086  # word splitting of the env lists is intended
  ip netns exec "$NA" env $(ns_env "$NA" "$VA") $extra "$PERF" --plugin "$PLUGIN" --listen "$PORT" \
    --protocol "$proto" --provider "$PROV" "${RUN_ARGS[@]}" -n "$ITERS" > "$WORK/a.log" 2>&1 &
  RA=$!
  # shellcheck disable=SC2046,SC2086
  ip netns exec "$NB" env $(ns_env "$NB" "$VB") $extra "$PERF" --plugin "$PLUGIN" \
    --peer "$ADDR_A:$PORT" --provider "$PROV" --timeout 60 "${B_ARGS[@]}" > "$WORK/b.log" 2>&1 &
  RB=$!
  PIDS=("$RA" "$RB")
  T0=$(date +%s.%N)
}

# Waits (up to 30 s) until rank 0 has printed its table header, which it does once both sides
# are connected and registered, right before the first transfer, then 0.5 s more: a fault meant
# for the middle of a transfer lands there however long the start took. (A fixed 1.5 s after the
# start was not enough on a loaded 2-core machine: the plugins' start alone takes about 1.2 s.)
# If the header never comes, the fault would land before the connection exists and the scenario
# would fail for that reason: say so, and keep where each rank's threads are (gdb, when there is
# one) among the logs CI prints. (Issue 32's flake looked like such a stall: it was this function
# reading the previous scenario's a.log, which start_pair now empties first.)
started() {
  local n=0
  while ! grep -q '^# test ' "$WORK/a.log" 2> /dev/null && [ "$n" -lt 300 ] && kill -0 "$RA" 2> /dev/null; do
    sleep 0.1; n=$((n + 1))
  done
  if ! grep -q '^# test ' "$WORK/a.log" 2> /dev/null; then
    echo "(rank 0 printed no table header within 30 s of its start: the pair is not connected)"
    local f="$WORK/failed-stall-$PORT-stacks.log" p
    if command -v gdb > /dev/null; then
      for p in $(pgrep -f -- "--listen $PORT") $(pgrep -f -- "--peer $ADDR_A:$PORT"); do
        echo "==== pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null)"
        timeout 20 gdb -p "$p" -batch -ex "thread apply all bt" 2>&1 | grep -v '^\[New LWP'
      done > "$f" 2>&1
    else
      echo "(no gdb here: no stacks)" > "$f"
    fi
    STALLS=$((STALLS + 1))
    # Shown at once too: the scenario may still end as expected (a kill, a fault it outlasts).
    grep -E '^(====|#[0-9]+ )' "$f" | head -n 60
  fi
  sleep 0.5
}

# After the link came back up: the next scenario starts once both ends reach each other again
# (up to 10 s): the scenarios test faults during a transfer, not a start during a link flap.
# (It was added for the flake start_pair's log truncation fixed; it stays for that reason.)
link_ready() {
  local n=0
  if ! command -v ping > /dev/null; then
    # Without ping: both ends report the link up.
    while { ! ip -n "$NA" link show "$VA" | grep -q 'state UP' ||
            ! ip -n "$NB" link show "$VB" | grep -q 'state UP'; } && [ "$n" -lt 100 ]; do
      sleep 0.1; n=$((n + 1))
    done
    return 0
  fi
  while ! ip netns exec "$NA" ping -c 1 -W 1 "$ADDR_B" > /dev/null 2>&1 && [ "$n" -lt 10 ]; do
    n=$((n + 1))
  done
  [ "$n" -lt 10 ] || echo "(the link did not carry a ping within 10 s of coming up)"
}

# Waits for pid (a child of this shell) up to $2 seconds; sets WF_RC to its exit status (124 on
# timeout, after killing it). Not run in $( ): a subshell cannot wait for its parent's children.
wait_for() {
  local pid=$1 limit=$2 waited=0
  while kill -0 "$pid" 2> /dev/null; do
    sleep 0.1
    waited=$((waited + 1))
    if [ "$waited" -ge $((limit * 10)) ]; then
      kill -CONT "$pid" 2> /dev/null; kill -9 "$pid" 2> /dev/null; wait "$pid" 2> /dev/null
      WF_RC=124
      return
    fi
  done
  wait "$pid"
  WF_RC=$?
}

# Waits until process pid is stopped (state T), up to $2 seconds.
stopped_within() {  # pid seconds
  local n=0
  while [ "$n" -lt $(($2 * 10)) ]; do
    [ "$(awk '{print $3}' "/proc/$1/stat" 2> /dev/null)" = T ] && return 0
    kill -0 "$1" 2> /dev/null || return 1
    sleep 0.1; n=$((n + 1))
  done
  return 1
}

# `ip netns exec` and `env` exec the tool: the pid of the background job is the tool's.
tool_pid() { echo "$1"; }

FAILS=0
STALLS=0  # pairs that did not connect within 30 s (started)
BASE=""
row() {
  echo "$*"
  [ -n "$TABLE" ] && echo "$*" >> "$TABLE"
}

# The time column of a failure row counts from the fault, not from the start.
mark_fault() { T0=$(date +%s.%N); }
elapsed() { awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN { printf "%.3f", a - b }'; }

# expect: ok (both complete, bytes checked) or fail (both exit non-zero within the bound, a WARN
# names the peer on the survivor's side).
finish() {  # name proto expect bound_s
  local name=$1 proto=$2 expect=$3 bound=$4
  local ra rb t outcome t_warn="" ok=1
  if [ "$expect" = fail ]; then
    # When the plugin's WARN appears on rank 0 (the tool may exit later: after a failure it still
    # talks to its peer over its own socket, which a stopped peer does not answer).
    local n=0
    while kill -0 "$RA" 2> /dev/null && [ "$n" -lt $((bound * 10)) ]; do
      if grep -q "peer [^ ]* failed\|no answer within" "$WORK/a.log"; then t_warn=$(elapsed); break; fi
      sleep 0.1; n=$((n + 1))
    done
  fi
  wait_for "$RA" "$bound"; ra=$WF_RC
  t=$(elapsed)  # rank 0's time: the survivor's, for the failure rows
  [ -n "$t_warn" ] && t=$t_warn
  wait_for "$RB" "$bound"; rb=$WF_RC
  [ "$expect" = ok ] && t=$(elapsed)
  # "either": a fault the job may survive or fail on (a link down for a few seconds): both
  # complete, or both fail with the WARN; never a hang.
  if [ "$expect" = either ]; then
    if [ "$ra" = 0 ] && [ "$rb" = 0 ]; then expect=ok; else expect=fail; fi
  fi
  # A crash is never expected (128 + signal), only rank 1's SIGKILL where the test sends it.
  if { [ "$ra" -ge 128 ] && [ "$ra" != 124 ]; } || { [ "$rb" -ge 128 ] && [ "$rb" != 124 ] && [ "$rb" != "${VICTIM_RC:-none}" ]; }; then
    ok=0
  fi
  if [ "$expect" = ok ]; then
    [ "$ra" = 0 ] && [ "$rb" = 0 ] || ok=0
    outcome="completed, data checked"
    [ "$ok" = 1 ] || outcome="rank 0 exit $ra, rank 1 exit $rb"
  else
    # Non-zero on the surviving side(s), within the bound, never a hang (124).
    [ "$ra" != 0 ] && [ "$ra" != 124 ] && [ "$rb" != 124 ] || ok=0
    grep -q "failed\|error\|Error\|ncclTimeout" "$WORK/a.log" || ok=0
    local seen
    seen=$(grep -m1 -o "peer [^ ]* failed: [^;]*\|no answer within [A-Z_]*\|connect to [^ ]*: [^;]*" "$WORK/a.log" | head -1)
    outcome="rank 0 exit $ra, rank 1 exit $rb${seen:+: $seen}"
  fi
  local slow=""
  if [ "$expect" = ok ] && [ -n "$BASE" ]; then slow=$(awk -v a="$t" -v b="$BASE" 'BEGIN { printf "%.2f", a / b }'); fi
  if [ "$ok" = 1 ]; then
    row "| $name | $proto | $outcome | $(printf '%.1f' "$t") s | ${slow:--} |"
  else
    row "| $name | $proto | **UNEXPECTED**: $outcome (wanted $expect) | $(printf '%.1f' "$t") s | - |"
    echo "---- rank 0 log"; tail -n 30 "$WORK/a.log"; echo "---- rank 1 log"; tail -n 30 "$WORK/b.log"
    FAILS=$((FAILS + 1))
    keep_logs "$name" "$proto"
  fi
}

both() { ip netns exec "$NA" "$@"; ip netns exec "$NB" "$@"; }
clear_rules() { both iptables -F; both iptables -t mangle -F; }

NFQ_PIDS=()
WIRE=tcp  # the plugin's packets: tcp, or udp for the mock's wire
start_nfq() {  # args for nfq_fault (after the queue number)
  [ -x "$NFQ" ] || return 1
  both iptables -A INPUT -p "$WIRE" -j NFQUEUE --queue-num 7 --queue-bypass
  ip netns exec "$NA" "$NFQ" 7 "$@" > "$WORK/nfq_a.log" 2>&1 &
  NFQ_PIDS=($!)
  ip netns exec "$NB" "$NFQ" 7 "$@" > "$WORK/nfq_b.log" 2>&1 &
  NFQ_PIDS+=($!)
  sleep 0.3
  if ! kill -0 "${NFQ_PIDS[0]}" 2> /dev/null || ! kill -0 "${NFQ_PIDS[1]}" 2> /dev/null; then
    # No queue reader (no nfnetlink_queue here): say so and leave no rule behind, or the
    # bypassed NFQUEUE rule would accept packets ahead of later rows' rules.
    echo "(nfq_fault could not run: $(cat "$WORK/nfq_a.log" "$WORK/nfq_b.log" | tr '\n' ' '))"
    stop_nfq
    return 1
  fi
}
stop_nfq() {
  for p in "${NFQ_PIDS[@]}"; do kill "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
  NFQ_PIDS=()
  clear_rules
}

row "| fault | protocol | outcome | time | slowdown |"
row "|---|---|---|---|---|"
# NF_NETNS_ONLY=mockefa: the mock's rows only (debugging).
TCP_PROTOS="sendrecv rdma"
[ "${NF_NETNS_ONLY:-}" = mockefa ] && TCP_PROTOS=""
for proto in $TCP_PROTOS; do
  BASE=""
  ITERS=60
  start_pair "$proto"; finish "none (baseline)" "$proto" ok 120
  BASE=$(elapsed); BASE60=$BASE
  ITERS=20
  if start_nfq delay 0 0; then
    # Every packet through the user-space queue, unchanged: the baseline of the NFQUEUE rows.
    BASE=""
    start_pair "$proto"; finish "NFQUEUE, no fault (baseline of the rows below)" "$proto" ok 120
    BASE20=$(elapsed); stop_nfq
  fi

  ITERS=20  # NFQUEUE runs are slow: each packet goes through user space
  BASE=${BASE20:-}
  # (A fixed 5 ms delay each way was a row of its own until session 19: the jitter row below
  # delays every packet by 1-5 ms and reorders too; dropped for CI's 40 minutes.)
  if start_nfq delay 1 4; then
    start_pair "$proto"; finish "jitter 1-5 ms, reordering (NFQUEUE)" "$proto" ok 180; stop_nfq
  fi
  if start_nfq reorder 0.05; then
    start_pair "$proto"; finish "5 % of packets 10 ms late (NFQUEUE)" "$proto" ok 180; stop_nfq
  fi
  if start_nfq corrupt 0.01; then
    start_pair "$proto"; finish "1 % of packets corrupted (NFQUEUE)" "$proto" ok 180; stop_nfq
  fi
  ITERS=60; BASE=$BASE60
  if [ "$HAVE_NETEM" = 1 ]; then
    for spec in "delay 5ms" "delay 1ms 4ms" "loss 2%" "delay 1ms reorder 25% 50%" "duplicate 5%" \
        "corrupt 1%"; do
      # shellcheck disable=SC2086  # spec is netem's argument list
      netem $spec
      start_pair "$proto"; finish "netem $spec" "$proto" ok 180
      netem_off
    done
  else
    echo "(no netem qdisc in this kernel: NFQUEUE and iptables faults only)"
  fi
  for loss in 0.01 0.05; do
    both iptables -A INPUT -p tcp -m statistic --mode random --probability "$loss" -j DROP
    # With the default peer timeout (10 s): under 5 % loss TCP's retransmission backoff alone can
    # hold a connection silent for 3 s (0.2+0.4+0.8+1.6 s), which the 3 s used elsewhere here
    # rightly reports as a dead peer (seen once in CI).
    start_pair "$proto" NCCL_FABRIC_PEER_TIMEOUT=10
    finish "$(awk -v l="$loss" 'BEGIN { print l * 100 }') % loss (iptables)" "$proto" ok 180
    clear_rules
  done
  if ip netns exec "$NA" iptables -t mangle -A POSTROUTING -o "$VA" -p tcp -m statistic --mode random \
      --probability 0.05 -j TEE --gateway "$ADDR_B" 2> /dev/null; then
    ip netns exec "$NB" iptables -t mangle -A POSTROUTING -o "$VB" -p tcp -m statistic --mode random \
      --probability 0.05 -j TEE --gateway "$ADDR_A"
    start_pair "$proto"; finish "5 % duplicated (iptables TEE)" "$proto" ok 180
    clear_rules
  fi

  ITERS=600
  BASE=""
  start_pair "$proto"; finish "none (long run, the baseline of the rows below)" "$proto" ok 120
  BASE=$(elapsed)
  # Link down for 3 s mid-transfer: TCP retransmits; the job recovers.
  start_pair "$proto"; started
  ip -n "$NA" link set "$VA" down; sleep 3; ip -n "$NA" link set "$VA" up
  finish "link down 3 s mid-transfer" "$proto" either 180
  link_ready

  # Link down for good: both sides fail within the bound (peer timeout, detection, exit).
  start_pair "$proto"; started
  ip -n "$NA" link set "$VA" down; mark_fault
  finish "link down for good" "$proto" fail $((PEER_TIMEOUT + 20))
  ip -n "$NA" link set "$VA" up
  link_ready

  start_pair "$proto"; started; kill -9 "$(tool_pid "$RB")"; mark_fault
  VICTIM_RC=137 finish "kill -9 of rank 1" "$proto" fail $((PEER_TIMEOUT + 20))

  start_pair "$proto"; started; kill -9 "$(tool_pid "$RA")"; mark_fault
  # Rank 0 is the one killed: the survivor is rank 1.
  wait_for "$RB" $((PEER_TIMEOUT + 20)); rb=$WF_RC; t=$(elapsed); wait "$RA" 2> /dev/null
  if [ "$rb" != 0 ] && [ "$rb" -lt 128 ]; then
    seen=$(grep -m1 -o "peer [^ ]* failed: [^;]*" "$WORK/b.log" | head -1)
    row "| kill -9 of rank 0 | $proto | rank 1 exit $rb${seen:+: $seen} | $(printf '%.1f' "$t") s | - |"
  else
    row "| kill -9 of rank 0 | $proto | **UNEXPECTED**: rank 1 exit $rb | $(printf '%.1f' "$t") s | - |"
    tail -n 30 "$WORK/b.log"; FAILS=$((FAILS + 1)); keep_logs "peer death" "$proto"
  fi

  # Rank 1 stops itself after its 300th send (of 1,200 in the first row's warm-up and 3 rounds of
  # 600), so rank 0's requests toward it are pending. A SIGSTOP sent from here at a moment of its
  # choosing could land where rank 0 waits for rank 1's results on the tool's socket with nothing
  # pending in its plugin (the end of a round): nothing is probed then, as in NCCL between
  # collectives, and both completed once rank 1 woke (the CI failure of 2026-11-29, reproduced
  # here 1 in 24 over loopback).
  B_ARGS=(--stop-self-after 300)
  start_pair "$proto"; B_ARGS=(); P1=$(tool_pid "$RB")
  if stopped_within "$P1" 30; then
    mark_fault; sleep $((PEER_TIMEOUT + 3))
  else
    echo "(rank 1 did not stop itself within 30 s)"
  fi
  kill -CONT "$P1"  # it wakes to a peer that gave up on it: it must fail too, not hang
  finish "SIGSTOP of rank 1 for $((PEER_TIMEOUT + 3)) s" "$proto" fail $((PEER_TIMEOUT + 20))

  start_pair "$proto"; started; P1=$(tool_pid "$RB"); kill -STOP "$P1"; sleep 1; kill -CONT "$P1"
  finish "SIGSTOP of rank 1 for 1 s" "$proto" ok 180

  ITERS=60
  # The plugin's packets dropped before its connection exists (the tool's own socket, on PORT,
  # still passes): connect fails at NCCL_FABRIC_CONNECT_TIMEOUT, not a hang.
  both iptables -A INPUT -p tcp -m multiport ! --ports "$((PORT + 1))" -j DROP
  start_pair "$proto" "NCCL_FABRIC_CONNECT_TIMEOUT=5"
  mark_fault
  finish "all packets dropped at connect time" "$proto" fail 40
  clear_rules
done

# The mock EFA provider between the namespaces (issue 35): its endpoints talk over UDP on the
# veth addresses, with EFA's shape (unordered reliable delivery repaired by the mock's own
# retransmission, 4-byte CQ data, no connection to reset: a dead or stopped peer is silence that
# only the plugin's liveness probe finds). A subset of the faults above, each where it says most.
# The first rows of the table name the provider tcp;ofi_rxm; these name mockefa.
if [ -e "$MOCK_DIR/libmockefa-fi.so" ]; then
  PROV=mockefa WIRE=udp
  ITERS=60
  for proto in sendrecv rdma; do
    BASE=""
    start_pair "$proto"; finish "mockefa: none (baseline)" "$proto" ok 120
    BASE=$(elapsed)
  done
  both iptables -A INPUT -p udp -m statistic --mode random --probability 0.05 -j DROP
  start_pair rdma NCCL_FABRIC_PEER_TIMEOUT=10
  finish "mockefa: 5 % of datagrams lost (iptables)" rdma ok 180
  clear_rules
  if ip netns exec "$NA" iptables -t mangle -A POSTROUTING -o "$VA" -p udp -m statistic --mode random \
      --probability 0.05 -j TEE --gateway "$ADDR_B" 2> /dev/null; then
    ip netns exec "$NB" iptables -t mangle -A POSTROUTING -o "$VB" -p udp -m statistic --mode random \
      --probability 0.05 -j TEE --gateway "$ADDR_A"
    start_pair sendrecv; finish "mockefa: 5 % of datagrams duplicated (iptables TEE)" sendrecv ok 180
    clear_rules
  fi
  ITERS=20
  BASE=""
  if start_nfq delay 1 4; then
    start_pair rdma; finish "mockefa: jitter 1-5 ms, reordering (NFQUEUE)" rdma ok 180; stop_nfq
  fi
  ITERS=600
  start_pair rdma; started
  ip -n "$NA" link set "$VA" down; mark_fault
  finish "mockefa: link down for good" rdma fail $((PEER_TIMEOUT + 20))
  ip -n "$NA" link set "$VA" up
  link_ready
  start_pair sendrecv; started; kill -9 "$(tool_pid "$RB")"; mark_fault
  VICTIM_RC=137 finish "mockefa: kill -9 of rank 1" sendrecv fail $((PEER_TIMEOUT + 20))
  B_ARGS=(--stop-self-after 300)
  start_pair rdma; B_ARGS=(); P1=$(tool_pid "$RB")
  if stopped_within "$P1" 30; then
    mark_fault; sleep $((PEER_TIMEOUT + 3))
  else
    echo "(rank 1 did not stop itself within 30 s)"
  fi
  kill -CONT "$P1"
  finish "mockefa: SIGSTOP of rank 1 for $((PEER_TIMEOUT + 3)) s" rdma fail $((PEER_TIMEOUT + 20))
  ITERS=200  # long enough for a 1 s stop in the middle (600 took 27 s in CI)
  start_pair sendrecv; started; P1=$(tool_pid "$RB"); kill -STOP "$P1"; sleep 1; kill -CONT "$P1"
  finish "mockefa: SIGSTOP of rank 1 for 1 s" sendrecv ok 180
  ITERS=60
  # The mock's datagrams dropped from the start (the tool's own TCP socket passes): the plugin's
  # connect fails at NCCL_FABRIC_CONNECT_TIMEOUT or when the wire gives up, never hangs.
  both iptables -A INPUT -p udp -j DROP
  start_pair rdma "NCCL_FABRIC_CONNECT_TIMEOUT=5"
  mark_fault
  finish "mockefa: all datagrams dropped at connect time" rdma fail 40
  clear_rules
else
  echo "(no mock provider in $MOCK_DIR: the mockefa rows are not run)"
fi

if [ "$FAILS" -gt 0 ]; then
  echo "test_netns: $FAILS scenario(s) ended unexpectedly"
  exit 1
fi
echo "test_netns: every scenario ended as expected"
