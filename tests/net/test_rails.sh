#!/usr/bin/env bash
# Two rails between two hosts (issue 37's test bed): two network namespaces joined by two veth
# pairs, each pair one rail, each rate-limited with tbf (this kernel has no netem) so that striping
# shows in the numbers. The plugin runs on tcp;ofi_rxm, which offers one domain per interface, and
# NCCL_FABRIC_RAILS=2 makes the two interfaces the two NICs of one NCCL device.
#
# usage: tests/net/test_rails.sh BUILD_DIR [--rate RATE] [--sizes MIN MAX]
#   Needs root, ip netns, tc; skips (exit 77) with a message where it cannot run.
#   --rate RATE   each rail's rate, both directions, as tc takes it (default 400mbit)
#   --sizes A B   the bandwidth sweep, -b A -e B -f 4 (default 1M 16M)
#
# What it runs, each between the namespaces with nccl-fabric-perf --listen / --peer:
#   1. striping: one-way bandwidth of the plugin's RDMA protocol over both rails next to raw
#      libfabric over one rail (the same run alternates them); prints each size's ratio and the
#      smallest one ("striping ratio", issue 37 asks for at least 1.8). Timings are reported, not
#      asserted: a loaded host may show less.
#   2. every byte checked: a bidirectional stream of 1 and 4 MiB messages over both rails, on both
#      protocols (SENDRECV uses rail 0 only), -c. This must pass.
set -u
BUILD=${1:?usage: test_rails.sh BUILD_DIR [--rate RATE] [--sizes MIN MAX]}
shift
RATE=400mbit
MIN=1M MAX=16M
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) RATE=${2:?}; shift 2 ;;
    --sizes) MIN=${2:?}; MAX=${3:?}; shift 3 ;;
    *) echo "test_rails.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
BUILD=$(cd "$BUILD" && pwd)
PERF=$BUILD/tools/nccl-fabric-perf
PLUGIN=$BUILD/.libs/libnccl-net-fabric.so

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "not root: network namespaces need CAP_NET_ADMIN"
command -v ip > /dev/null || skip "no ip (iproute2)"
command -v tc > /dev/null || skip "no tc (iproute2)"
[ -x "$PERF" ] || skip "no $PERF (build first)"
fi_info -p tcp > /dev/null 2>&1 || skip "libfabric has no tcp provider"

ID=$$
NA=nra$ID NB=nrb$ID
NET0=10.78.$((ID % 200)) NET1=10.79.$((ID % 200))
PORT=$((20000 + (ID + 7) % 20000))
WORK=$(mktemp -d)
PIDS=()
VA=() VB=()
for r in 0 1; do
  VA[r]=nr${r}a$ID VB[r]=nr${r}b$ID
  VA[r]=${VA[r]:0:15} VB[r]=${VB[r]:0:15}
done

cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2> /dev/null; done
  ip netns del "$NA" 2> /dev/null
  ip netns del "$NB" 2> /dev/null
  if [ "${FAILS:-0}" -gt 0 ]; then
    keep="${NF_RAILS_LOGS:-$PWD/rails-logs}"
    rm -rf "$keep" && mv "$WORK" "$keep" && echo "test_rails: the logs are kept in $keep"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

if ! ip netns add "$NA" || ! ip netns add "$NB"; then skip "cannot create network namespaces"; fi
for r in 0 1; do
  net=$NET0
  [ "$r" = 1 ] && net=$NET1
  ip link add "${VA[r]}" type veth peer name "${VB[r]}" || skip "cannot create a veth pair"
  ip link set "${VA[r]}" netns "$NA" && ip link set "${VB[r]}" netns "$NB"
  ip -n "$NA" addr add "$net.1/24" dev "${VA[r]}"
  ip -n "$NB" addr add "$net.2/24" dev "${VB[r]}"
  ip -n "$NA" link set "${VA[r]}" up
  ip -n "$NB" link set "${VB[r]}" up
  # Egress on both ends: each direction of each rail is limited.
  ip netns exec "$NA" tc qdisc add dev "${VA[r]}" root tbf rate "$RATE" burst 256kb latency 50ms ||
    skip "tc tbf refused"
  ip netns exec "$NB" tc qdisc add dev "${VB[r]}" root tbf rate "$RATE" burst 256kb latency 50ms
done
for ns in "$NA" "$NB"; do ip -n "$ns" link set lo up; done

# tcp;ofi_rxm lists one domain per interface: the plugin groups the namespace's two veths into one
# device (nccl-fabric-info, below, shows it).
ENV=(NCCL_FABRIC_PROVIDER='tcp;ofi_rxm' NCCL_FABRIC_RAILS=2 FI_PROVIDER_PATH= NCCL_FABRIC_PEER_TIMEOUT=5)
FAILS=0

# Runs rank 0 in A (--listen) and rank 1 in B (--peer over rail 0's address); rank 0's table goes
# to $WORK/$1.log. Succeeds when both ranks do. Each rank is killed after 400 s (its own --timeout
# bounds each phase; this bounds the whole).
run_pair() {  # name [perf args...]
  local name=$1 rc_a rc_b
  shift
  PORT=$((PORT + 1))
  ip netns exec "$NA" env "${ENV[@]}" timeout -s KILL 400 "$PERF" --plugin "$PLUGIN" --listen "$PORT" \
    --provider 'tcp;ofi_rxm' "$@" > "$WORK/$name.log" 2>&1 &
  local ra=$!
  ip netns exec "$NB" env "${ENV[@]}" timeout -s KILL 400 "$PERF" --plugin "$PLUGIN" --peer "$NET0.1:$PORT" \
    --provider 'tcp;ofi_rxm' --timeout 300 > "$WORK/$name.peer.log" 2>&1 &
  local rb=$!
  PIDS=("$ra" "$rb")
  wait "$ra"
  rc_a=$?
  wait "$rb"
  rc_b=$?
  PIDS=()
  [ "$rc_a" = 0 ] && [ "$rc_b" = 0 ]
}

echo "test_rails: two rails of $RATE each between namespaces $NA and $NB (tcp;ofi_rxm)"
ip netns exec "$NA" env "${ENV[@]}" "$BUILD/tools/nccl-fabric-info" 2> /dev/null | grep -E '^  [0-9]+: ' |
  sed 's/^/  NCCL device /'

# 1. Striping.
if run_pair stripe -t bw -b "$MIN" -e "$MAX" -f 4 --protocol rdma --timeout 300; then
  awk '$1 == "bw" {
         printf "  striping %-4s %-3s plugin %.1f MB/s, raw one rail %.1f MB/s: %.2fx\n",
                $2, $3, $6 * 1000, $10 * 1000, $NF
         if (min == "" || $NF < min) min = $NF
       }
       END { if (min != "") printf "  striping ratio (smallest): %.2f\n", min }' "$WORK/stripe.log"
else
  echo "FAIL: the striping run did not complete"
  tail -n 20 "$WORK/stripe.log" "$WORK/stripe.peer.log"
  FAILS=$((FAILS + 1))
fi

# 2. Every byte checked, both protocols.
for proto in rdma sendrecv; do
  t0=$(date +%s%N)
  if run_pair "check-$proto" -t bibw -b 1M -e 4M -f 4 -w 2 -n 20 -c --no-raw --protocol "$proto" \
    --timeout 300; then
    t1=$(date +%s%N)
    echo "  checked bibw 1-4 MiB, $proto: completed in $(((t1 - t0) / 1000000)) ms, every byte right"
  else
    echo "FAIL: the checked run on $proto did not complete"
    tail -n 20 "$WORK/check-$proto.log" "$WORK/check-$proto.peer.log"
    FAILS=$((FAILS + 1))
  fi
done

[ "$FAILS" -eq 0 ] || { echo "test_rails: $FAILS failure(s)"; exit 1; }
echo "test_rails: passed"
