#!/usr/bin/env bash
# nccl-fabric-info on this machine (real providers) and on the mock: text, JSON, and the exit code
# of each trap (0 ok, 1 warnings, 2 errors).
set -u
build=${NF_BUILD_DIR:-.}
info="$build/tools/nccl-fabric-info"
plugin="$build/.libs/libnccl-net-fabric.so"
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# run EXPECTED_EXIT PATTERN... -- ENV... : runs the tool with ENV, checks the exit code and that
# every PATTERN is in its output.
run() {
  local want=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  env "$@" "$info" --no-cuda --plugin "$plugin" >"$out" 2>&1
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL: exit $got, expected $want, with: $*"; sed 's/^/    /' "$out"; fail=1; return
  fi
  for p in "${pats[@]}"; do
    if ! grep -q -- "$p" "$out"; then
      echo "FAIL: '$p' missing from the output with: $*"; sed 's/^/    /' "$out"; fail=1; return
    fi
  done
  echo "ok: exit $got with: $*"
}

base=(NCCL_NET_PLUGIN="$plugin" FI_TCP_IFACE=lo)

# This machine: the sections are there; warnings at most (memlock may be limited here).
env "${base[@]}" "$info" --no-cuda --plugin "$plugin" >"$out" 2>&1
rc=$?
if [ $rc -gt 1 ]; then echo "FAIL: exit $rc on this machine"; cat "$out"; fail=1; fi
for p in "== platform" "== libfabric" "== NICs" "== NCCL devices" "ptrSupport=HOST" \
         "railId=-1 planeId=-1" \
         "GPUDirect RDMA off" "== limits" "== environment" "NCCL_NET_PLUGIN=$plugin  \[user\]" \
         "== checks"; do
  grep -q -- "$p" "$out" || { echo "FAIL: '$p' missing"; cat "$out"; fail=1; }
done
# JSON: one document, the same facts, the exit code inside.
env "${base[@]}" "$info" --no-cuda --plugin "$plugin" --json >"$out" 2>/dev/null
for p in '"schema": 1' '"libfabric": {' '"devices": \[{' '"ptr_support": "HOST"' \
         "\"exit_code\": $rc}"; do
  grep -q -- "$p" "$out" || { echo "FAIL: JSON lacks $p"; cat "$out"; fail=1; }
done
[ "$(grep -c '' "$out")" = 1 ] || { echo "FAIL: JSON is not one line"; fail=1; }
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$out" || { echo "FAIL: bad JSON"; fail=1; }
fi

# Traps.
run 2 "\[nccl-net\]" "NCCL_NET=Socket makes NCCL use its own Socket" -- "${base[@]}" NCCL_NET=Socket
run 2 "\[bad-parameter\]" "NCCL_FABRIC_MAX_RECVS" -- "${base[@]}" NCCL_FABRIC_MAX_RECVS=99
run 2 "\[net-plugin-none\]" -- "${base[@]}" NCCL_NET_PLUGIN=none
run 2 "\[net-plugin-unresolved\]" -- "${base[@]}" NCCL_NET_PLUGIN=nosuchplugin
run 2 "\[plugin-failed\]" -- "${base[@]}" NCCL_FABRIC_PROVIDER=nosuchprovider
# A p5 without EFA: the warning, its cost, exit 1; the row's NCCL defaults show as the platform's.
run 1 "\[efa-expected\]" "EFA was expected; expect 20-30x" \
  "NCCL_BUFFSIZE=8388608  \[platform default (set by the plugin)\]" \
  -- "${base[@]}" NCCL_FABRIC_PLATFORM=p5.48xlarge
# ... unless the user set that variable.
run 1 "NCCL_BUFFSIZE=4194304  \[user\]" -- "${base[@]}" NCCL_FABRIC_PLATFORM=p5.48xlarge NCCL_BUFFSIZE=4194304
# A g5 expects no EFA: nothing about it.
env "${base[@]}" NCCL_FABRIC_PLATFORM=g5.48xlarge "$info" --no-cuda --plugin "$plugin" >"$out" 2>&1
if grep -q "efa-expected" "$out"; then echo "FAIL: EFA expected on g5"; cat "$out"; fail=1; fi
run 2 "\[platform\]" -- "${base[@]}" NCCL_FABRIC_PLATFORM=p99.bogus

# The mock EFA provider (make check sets FI_PROVIDER_PATH): one device, no trap but memlock.
if [ -n "${NF_MOCKPROV_LIB:-}" ]; then
  env "${base[@]}" FI_PROVIDER=mockefa NCCL_FABRIC_PROVIDER=mockefa MOCKEFA_NDOMAINS=2 \
    "$info" --no-cuda --plugin "$plugin" >"$out" 2>&1
  grep -q "provider: mockefa" "$out" && grep -q "rdmap32s27-rdm" "$out" ||
    { echo "FAIL: mock NICs not shown"; cat "$out"; fail=1; }
fi
# Which EFA fabric each NIC would use (NCCL_FABRIC_EFA_FABRIC, issue 21). The mock lists an
# efa-direct fabric only when built against libfabric 2.x headers, as the tool says it was.
# shows PATTERN... -- ENV...: the tool's output with ENV has every PATTERN (exit code not judged).
shows() {
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  env "$@" "$info" --no-cuda --plugin "$plugin" >"$out" 2>&1
  for p in "${pats[@]}"; do
    if ! grep -q -- "$p" "$out"; then
      echo "FAIL: '$p' missing from the output with: $*"; sed 's/^/    /' "$out"; fail=1; return
    fi
  done
  echo "ok: shown with: $*"
}
if [ -n "${NF_MOCKPROV_LIB:-}" ]; then
  mock=("${base[@]}" FI_PROVIDER=mockefa NCCL_FABRIC_PROVIDER=mockefa MOCKEFA_NDOMAINS=2)
  env "${mock[@]}" "$info" --no-cuda --plugin "$plugin" >"$out" 2>&1
  headers=$(sed -n 's/.*built against \([0-9]*\)\.[0-9]* headers.*/\1/p' "$out" | head -n 1)
  run 2 "\[bad-parameter\]" "NCCL_FABRIC_EFA_FABRIC='direct' is not one of: auto, efa, efa-direct" \
    -- "${mock[@]}" NCCL_FABRIC_EFA_FABRIC=direct
  if [ "${headers:-1}" -ge 2 ]; then
    shows "fabric: efa-direct (NCCL_FABRIC_EFA_FABRIC=auto)" \
      "rdmap16s27-rdm .*rma=yes hmem=no fabric=efa-direct tagged=no" \
      "fabric: efa-direct: offered with device RMA writes (auto) (writes with CQ data consume" \
      -- "${mock[@]}" MOCKEFA_RMA=device
    shows "rdmap32s27-rdm .*fabric=efa tagged=yes" "fabric: efa: efa-direct offered without RMA writes" \
      -- "${mock[@]}" MOCKEFA_RMA=emulated
    shows "fabric=efa tagged=yes" \
      "fabric: efa: NCCL_FABRIC_PROTOCOL=sendrecv needs tagged messages, which efa-direct lacks" \
      -- "${mock[@]}" MOCKEFA_RMA=device NCCL_FABRIC_PROTOCOL=sendrecv
    shows "fabric: efa (NCCL_FABRIC_EFA_FABRIC=efa)" "fabric: efa: NCCL_FABRIC_EFA_FABRIC=efa" \
      -- "${mock[@]}" MOCKEFA_RMA=device NCCL_FABRIC_EFA_FABRIC=efa
    # Forced without device RDMA: no NIC, and the tool says why.
    shows "fabric: (none) (NCCL_FABRIC_EFA_FABRIC=efa-direct)" \
      "NCCL_FABRIC_EFA_FABRIC=efa-direct, but efa-direct is offered without RMA writes" \
      -- "${mock[@]}" MOCKEFA_RMA=emulated NCCL_FABRIC_EFA_FABRIC=efa-direct
    env "${mock[@]}" MOCKEFA_RMA=device "$info" --no-cuda --plugin "$plugin" --json >"$out" 2>/dev/null
    for p in '"fabric": "efa-direct", "efa_fabric": "auto"' \
             '"fabric_why": "efa-direct: offered with device RMA writes (auto)"' \
             '"tagged": false, "rx_cq_data": true}'; do
      grep -q -- "$p" "$out" || { echo "FAIL: JSON lacks $p"; cat "$out"; fail=1; }
    done
  else
    shows "fabric: efa (NCCL_FABRIC_EFA_FABRIC=auto)" "rdmap16s27-rdm .*fabric=efa tagged=yes" \
      "fabric: efa: efa-direct not offered (libfabric 1." -- "${mock[@]}" MOCKEFA_RMA=device
    # Forced where there is none: the plugin does not start, and the tool says why.
    run 2 "\[plugin-failed\]" "fabric: (none) (NCCL_FABRIC_EFA_FABRIC=efa-direct)" \
      "NCCL_FABRIC_EFA_FABRIC=efa-direct, but efa-direct not offered" \
      -- "${mock[@]}" NCCL_FABRIC_EFA_FABRIC=efa-direct
    env "${mock[@]}" "$info" --no-cuda --plugin "$plugin" --json >"$out" 2>/dev/null
    for p in '"fabric": "efa", "efa_fabric": "auto"' '"fabric_why": "efa: efa-direct not offered' \
             '"tagged": true, "rx_cq_data": false}'; do
      grep -q -- "$p" "$out" || { echo "FAIL: JSON lacks $p"; cat "$out"; fail=1; }
    done
  fi
fi
# --listen / --peer: a short transfer through the plugin between two processes on loopback.
port=$((20000 + $$ % 20000))
env "${base[@]}" "$info" --no-cuda --plugin "$plugin" --listen $port --timeout 60 >"$out.l" 2>&1 &
lpid=$!
env "${base[@]}" "$info" --no-cuda --plugin "$plugin" --peer 127.0.0.1:$port --timeout 60 >"$out" 2>&1
prc=$?
wait $lpid
lrc=$?
if [ $prc -gt 1 ] || [ $lrc -gt 1 ] || ! grep -q "transfer with the peer: ok" "$out.l" ||
   ! grep -q "  bw " "$out.l" || ! grep -q "transfer with the peer: ok" "$out"; then
  echo "FAIL: --listen/--peer (exit $lrc/$prc)"; cat "$out.l" "$out"; fail=1
else
  echo "ok: --listen/--peer transfer"
fi
rm -f "$out.l"
# Nobody listens there: an error, with the hint.
env "${base[@]}" "$info" --no-cuda --plugin "$plugin" --peer 127.0.0.1:1 --timeout 3 >"$out" 2>&1
prc=$?
if [ $prc != 2 ] || ! grep -q "\[peer\]" "$out" || ! grep -q "security group" "$out"; then
  echo "FAIL: --peer to nobody (exit $prc)"; cat "$out"; fail=1
else
  echo "ok: --peer to nobody: exit 2 with the security-group hint"
fi
# The mock shaped like a p5.48xlarge (hwloc XML, 32 NICs at the XML's PCI addresses): 8 devices of
# 4 rails at 400 Gb/s, each NIC with its GPU.
if [ -n "${NF_MOCKPROV_LIB:-}" ] && [ -n "${NF_SRC_DIR:-}" ]; then
  addrs=""
  for g in 0x53 0x64 0x75 0x86 0x97 0xa8 0xb9 0xca; do
    for k in 0 1 2 3; do addrs+="${addrs:+,}$(printf '0000:%02x:00.0' $((g - 4 + k)))"; done
  done
  env "${base[@]}" FI_PROVIDER=mockefa NCCL_FABRIC_PROVIDER=mockefa MOCKEFA_NDOMAINS=32 \
    MOCKEFA_PCI_ADDRS="$addrs" HWLOC_XMLFILE="$NF_SRC_DIR/tests/topo/p5.48xlarge.xml" \
    NCCL_FABRIC_PLATFORM=p5.48xlarge "$info" --no-cuda --plugin "$plugin" >"$out" 2>&1
  rc=$?
  n=$(grep -c 'rails=4 speed=400000 Mb/s' "$out")
  if [ "$n" != 8 ] || ! grep -q 'rdmap79s0-rdm .*gpus=0000:53:00.0' "$out" ||
     ! grep -q 'topology: 52 PCI devices, 8 GPU(s)' "$out" || [ $rc != 1 ] ||
     ! grep -q '\[efa-expected\]' "$out"; then
    echo "FAIL: p5-shaped mock (exit $rc, $n devices of 4 rails)"; cat "$out"; fail=1
  else
    echo "ok: p5-shaped mock: 8 devices of 4 rails, exit 1 (mockefa is not efa)"
  fi
  # The same in JSON.
  env "${base[@]}" FI_PROVIDER=mockefa NCCL_FABRIC_PROVIDER=mockefa MOCKEFA_NDOMAINS=32 \
    MOCKEFA_PCI_ADDRS="$addrs" HWLOC_XMLFILE="$NF_SRC_DIR/tests/topo/p5.48xlarge.xml" \
    NCCL_FABRIC_PLATFORM=p5.48xlarge "$info" --no-cuda --plugin "$plugin" --json >"$out" 2>/dev/null
  n=$(grep -o '"rails": 4, "speed_mbps": 400000' "$out" | wc -l)
  if [ "$n" != 8 ] || ! grep -q '"name": "p5.48xlarge"' "$out" ||
     ! grep -q '"efa_expected": true' "$out" || ! grep -q '"id": "efa-expected"' "$out" ||
     ! grep -q '"nearest_gpus": "0000:53:00.0"' "$out" || ! grep -q '"exit_code": 1}' "$out"; then
    echo "FAIL: p5-shaped mock, JSON ($n devices of 4 rails)"; cat "$out"; fail=1
  else
    echo "ok: p5-shaped mock, JSON"
  fi
fi
exit $fail
