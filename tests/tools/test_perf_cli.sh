#!/usr/bin/env bash
# nccl-fabric-perf: argument handling, a short real run over loopback (two processes and two
# "hosts", tcp;ofi_rxm, a small sweep with -c), its CSV and JSON parsed, and --plot when gnuplot
# is installed. Run by `make check`; by hand: NF_PERF_TOOL=build/tools/nccl-fabric-perf
# NF_PLUGIN_LIB=build/.libs/libnccl-net-fabric.so FI_TCP_IFACE=lo tests/tools/test_perf_cli.sh
set -u
. "$(dirname "$0")/csv_check.sh"

TOOL=${NF_PERF_TOOL:-$PWD/tools/nccl-fabric-perf}
PLUGIN=${NF_PLUGIN_LIB:-$PWD/.libs/libnccl-net-fabric.so}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
PROVIDER='tcp;ofi_rxm'

if [ ! -x "$TOOL" ]; then
  echo "FAIL: $TOOL not built (set NF_PERF_TOOL)"
  exit 1
fi
if [ ! -r "$PLUGIN" ]; then
  echo "FAIL: plugin $PLUGIN not built (set NF_PLUGIN_LIB)"
  exit 1
fi

TIMEOUT=$(command -v timeout)
if [ -z "$TIMEOUT" ]; then
  echo "FAIL: timeout(1) not found (coreutils)"
  exit 1
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_perf_cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0
pass() { echo "PASS: $*"; }
failed() { echo "FAIL: $*"; failures=$((failures + 1)); }
show() { sed 's/^/    | /' "$1" | head -n 40; }

# run NAME EXPECTED_RC PATTERN ARGS...: runs the tool (bounded), checks the exit status and that
# stdout+stderr match PATTERN (an extended regex; '' for any). RUN_PATH, when set, is the tool's
# PATH; RUN_ENV, when set, NAME=VALUE words added to its environment.
run() {
  local name=$1 want=$2 pattern=$3
  shift 3
  local out="$TMP/out.txt" rc
  "$TIMEOUT" 120 env ${RUN_PATH:+"PATH=$RUN_PATH"} ${RUN_ENV:+$RUN_ENV} "$TOOL" "$@" > "$out" 2>&1
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    failed "$name: exit status $rc, expected $want ($TOOL $*)"
    show "$out"
    return 1
  fi
  if [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$out"; then
    failed "$name: output does not match /$pattern/ ($TOOL $*)"
    show "$out"
    return 1
  fi
  pass "$name"
}

# ---------------------------------------------------------------------------------------------
# Argument handling
# ---------------------------------------------------------------------------------------------
run "--help exits 0" 0 '^usage: nccl-fabric-perf' --help
for opt in --plugin --abi --device --provider --protocol --no-raw --raw-only -t -b -e -f -i -n -w \
           --window --comms --group -r -c --timeout --stop-self-after --listen --peer --mpi --csv --json --plot; do
  grep -Eq -- "(^|[ ,])$opt([ ,=[]|$)" "$TMP/out.txt" || failed "--help does not document $opt"
done
run "unknown option" 2 "unknown option '--bogus'" --bogus
run "stray argument" 2 "unexpected argument" results.csv
run "bad size suffix" 2 "bad size '12Q'" -b 12Q
run "zero size" 2 "bad size '0'" -e 0
run "size above 1 GiB" 2 "bad size '2G'" -e 2G
run "min above max" 2 "larger than -e" -b 1M -e 1K
run "bad factor" 2 "-f needs" -f 1
run "bad iteration count" 2 "-n needs" -n 0
run "bad window" 2 "--window must be" --window 33
run "bad --stop-self-after" 2 "--stop-self-after needs a count" --stop-self-after 0
run "bad test name" 2 "unknown test 'foo'" -t foo
run "--abi out of range" 2 "--abi needs" --abi 13
run "--plugin without a path" 2 "--plugin needs a path" --plugin
run "--no-raw with --raw-only" 2 "exclude each other" --no-raw --raw-only
run "bad --protocol value" 2 "unknown protocol 'tcp' for --protocol" --protocol sendrecv,tcp
run "--protocol with an empty item" 2 "has an empty item" --protocol sendrecv,,rdma
run "--protocol without a list" 2 "--protocol needs a list" --protocol
run "--protocol with --raw-only" 2 "--protocol and --raw-only exclude each other" \
    --protocol rdma --raw-only
run "two protocols need ncclNet v11" 2 "needs ncclNet v11" --protocol sendrecv,rdma --abi 9
run "--listen with --peer" 2 "exclude each other" --listen 5000 --peer localhost:5000
run "--peer without a port" 2 "HOST:PORT" --peer localhost
if "$TOOL" --help | grep -q 'This build has MPI'; then
  # One process is no pair (test_perf_mpi.sh runs it under mpirun); Open MPI's allocations are
  # not this tool's leaks.
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    run "--mpi without mpirun: 2 ranks needed" 2 "exactly 2 ranks.*has 1" --mpi
else
  run "--mpi not supported" 2 "not supported in this build" --mpi
fi
run "missing plugin file" 1 "No such file or directory" --plugin "$TMP/no-such-plugin.so"
echo "not a library" > "$TMP/not-a-plugin.so"
run "plugin path that is not a library" 1 "cannot load .*not-a-plugin.so" \
    --plugin "$TMP/not-a-plugin.so" --provider "$PROVIDER" --timeout 20
# A real shared object without ncclNetPlugin_vN: the mock provider, else libc.
NOT_PLUGIN=${NF_MOCKPROV_LIB:-}
if [ -z "$NOT_PLUGIN" ] || [ ! -r "$NOT_PLUGIN" ]; then
  NOT_PLUGIN=$(ldd "$TOOL" | awk '/libc\.so/ {print $3; exit}')
fi
run "shared object that is not a plugin" 1 "exports no ncclNetPlugin_v6..v12" \
    --plugin "$NOT_PLUGIN" --provider "$PROVIDER" --timeout 20
run "plugin init failing" 1 "init returned" --plugin "$PLUGIN" --provider no-such-provider \
    --no-raw -n 1 --timeout 20
start=$(date +%s)
run "peer that does not answer" 1 "cannot reach 127.0.0.1:1 " --peer 127.0.0.1:1 --timeout 1
[ $(( $(date +%s) - start )) -le 10 ] || failed "the unreachable peer took more than 10 s"

# ---------------------------------------------------------------------------------------------
# A short real run: two processes over loopback, a sweep with every test and the data checked
# ---------------------------------------------------------------------------------------------
CSV="$TMP/sweep.csv"
if run "sweep over loopback with -c (--csv)" 0 '' --plugin "$PLUGIN" --provider "$PROVIDER" \
    -b 8 -e 64K -f 8 -n 20 -w 2 -r 1 -c -t all --csv --timeout 30; then
  cp "$TMP/out.txt" "$CSV"
  header='test,mode,size,iters,group,comms,window,time_us,gb_per_s,cpu_s_per_gb_rank0,cpu_s_per_gb_rank1,cpu_s_rank0,cpu_s_rank1,plugin_vs_raw,plugin,abi,provider,check'
  [ "$(head -n 1 "$CSV")" = "$header" ] || failed "CSV header is '$(head -n 1 "$CSV")'"
  # 3 tests x 5 sizes (8, 64, 512, 4K, 32K) x 2 modes, each with a time, a bandwidth, CPU
  # figures, the data check on, and plugin rows with their ratio to raw.
  bad=$(check_csv "$CSV" "lat bw bibw" 30 12)
  if [ -z "$bad" ]; then pass "CSV: 30 rows, every test, mode and size, all fields sane"
  else failed "CSV content:"; echo "$bad" | head -n 10; fi
fi

# Many comms on one endpoint (NCCL opens channels x peers of them): 64 send and 64 receive comms,
# every message checked. The RDMA protocol keeps receives posted per connection; before they were
# budgeted (half the provider's receive queue, then SENDRECV), tcp;ofi_rxm's 2048-entry queue
# filled past 42 comms and the transfers stalled for good, and shm's 1024 failed connect at 22.
# The raw reference runs too: it once opened an endpoint per comm, which on libfabric 2.1.0's
# tcp;ofi_rxm zeroes about 80 MB of pre-posted receive buffers each at fi_enable (5 GB per rank
# at 64 comms: a setup of a minute or a hang, then ~100 ms per message); it now has one endpoint
# for all comms, as the plugin has, and this case takes about a second.
run "64 comms on tcp;ofi_rxm, data checked" 0 '^  lat ' --plugin "$PLUGIN" --provider "$PROVIDER" \
  --comms 64 -t lat -b 8 -e 4K -f 512 -n 20 -w 2 -r 1 -c --timeout 60
run "64 comms on shm, data checked" 0 '^  lat ' --plugin "$PLUGIN" --provider shm \
  --comms 64 -t lat -b 8 -e 4K -f 512 -n 20 -w 2 -r 1 -c --timeout 60

# --protocol: one plugin context per protocol (NCCL_FABRIC_PROTOCOL set before its init), each
# with its own rows (mode plugin:PROTO) and ratio to the raw row of the same run. The plugin may
# or may not honour the variable; the tool's part is the rows, which are checked here.
PCSV="$TMP/protocols.csv"
if run "--protocol sendrecv,rdma with -c (--csv)" 0 '' --plugin "$PLUGIN" --provider "$PROVIDER" \
    --protocol sendrecv,rdma -b 8 -e 64K -f 8 -n 20 -w 2 -r 1 -c -t lat,bw --csv --timeout 30; then
  cp "$TMP/out.txt" "$PCSV"
  modes=$(tail -n +2 "$PCSV" | cut -d, -f2 | sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ')
  [ "$modes" = "plugin:rdma=10 plugin:sendrecv=10 raw=10 " ] \
    && pass "--protocol: 10 rows each of plugin:rdma, plugin:sendrecv and raw" \
    || failed "--protocol: rows per mode are '$modes'"
  # Each protocol's rows with the raw rows, as a plain plugin-and-raw CSV, through the checker.
  for proto in sendrecv rdma; do
    awk -F, -v OFS=, -v m="plugin:$proto" \
        'NR == 1 || $2 == "raw" { print; next } $2 == m { $2 = "plugin"; print }' \
        "$PCSV" > "$TMP/proto-$proto.csv"
    bad=$(check_csv "$TMP/proto-$proto.csv" "lat bw" 20 12)
    if [ -z "$bad" ]; then pass "--protocol: plugin:$proto rows and raw: every test and size, ratios, sane"
    else failed "--protocol: plugin:$proto CSV content:"; echo "$bad" | head -n 10; fi
  done
fi
if run "--protocol rdma,sendrecv (table)" 0 '^# test .* rdma/raw +sendrecv/raw$' --plugin "$PLUGIN" \
    --provider "$PROVIDER" --protocol rdma,sendrecv -t bw -b 4K -n 10 -w 1 -r 1 --timeout 30; then
  grep -Eq -- '-+ plugin:rdma -+ +-+ plugin:sendrecv -+ +-+ raw -+$' "$TMP/out.txt" \
    && grep -q '^# protocols: rdma, sendrecv' "$TMP/out.txt" \
    && [ "$(grep -E '^  bw +4 KiB' "$TMP/out.txt" | wc -w)" -eq 18 ] \
    && pass "--protocol table: a block per protocol, raw, and a ratio column each" \
    || { failed "--protocol table layout"; show "$TMP/out.txt"; }
fi

# The table (the default output) with several comms and grouped receives, plus --json.
JSON="$TMP/groups.json"
if run "--comms 2 --group 2 with -c (table and --json=FILE)" 0 '^  bibw +4 KiB +20 ' \
    --plugin "$PLUGIN" --provider "$PROVIDER" --comms 2 --group 2 --window 4 -c -t bw,bibw \
    -b 4K -n 20 -w 2 -r 1 --json="$JSON" --timeout 30; then
  grep -q 'plugin/raw' "$TMP/out.txt" || failed "table has no plugin/raw column"
  if command -v python3 > /dev/null 2>&1; then
    python3 - "$JSON" <<'EOF' && pass "JSON parses, 4 rows with comms 2 and group 2" || failed "JSON content"
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["results"]
assert d["comms"] == 2 and d["group"] == 2 and d["plugin"]["abi"] == 12, d
assert len(rows) == 4, rows
assert {(r["test"], r["mode"]) for r in rows} == {("bw", "plugin"), ("bw", "raw"), ("bibw", "plugin"), ("bibw", "raw")}
for r in rows:
    assert r["size"] == 4096 and r["comms"] == 2 and r["group"] == 2 and r["gb_per_s"] > 0, r
EOF
  else
    [ "$(grep -c '"test":' "$JSON")" -eq 4 ] && pass "JSON has 4 rows (python3 absent: not parsed)" \
      || failed "JSON rows"
  fi
fi

run "an older ABI (--abi 7), plugin only" 0 '^  bw +64 KiB' --plugin "$PLUGIN" \
    --provider "$PROVIDER" --abi 7 --no-raw -t lat,bw -b 64K -n 10 -w 1 -r 1 -c --timeout 30
grep -q 'ncclNet v7' "$TMP/out.txt" || failed "--abi 7 header does not say ncclNet v7"
# Compact eager messages (docs/protocol.md): granted where the provider carries 8 bytes of CQ
# data (tcp;ofi_rxm), and not when NCCL_FABRIC_COMPACT_EAGER=0; both move checked data.
RUN_ENV=NCCL_DEBUG=INFO run "compact eager messages granted on tcp;ofi_rxm" 0 'eager up to 8192 B, compact' \
    --plugin "$PLUGIN" --provider "$PROVIDER" --protocol rdma --no-raw -c -t lat -b 4K -e 4K \
    -n 20 -w 1 -r 1 --timeout 30
RUN_ENV="NCCL_DEBUG=INFO NCCL_FABRIC_COMPACT_EAGER=0" run "compact eager messages refused with NCCL_FABRIC_COMPACT_EAGER=0" 0 \
    'eager up to 8192 B$' --plugin "$PLUGIN" --provider "$PROVIDER" --protocol rdma --no-raw -c \
    -t lat -b 4K -e 4K -n 20 -w 1 -r 1 --timeout 30
run "--raw-only needs no plugin" 0 '^  lat +1 KiB' --raw-only --plugin "$TMP/no-such-plugin.so" \
    --provider "$PROVIDER" -b 1K -n 10 -w 1 -r 1 --timeout 30

# Two "hosts" over loopback: --listen and --peer, the handles over a TCP socket.
# two_hosts NAME ROWS RANK0_ARGS...: rank 0 with those arguments writes ROWS CSV rows to two.csv;
# rank 1 gets only --plugin and --timeout and takes the rest from rank 0's plan.
two_hosts() {
  local name=$1 rows=$2 ok=0 port r0 rc0 rc1
  shift 2
  for attempt in 1 2 3; do
    # Below the kernel's ephemeral range (32768 up), where the providers' own listeners live.
    port=$(( 20000 + (RANDOM % 12000) ))
    "$TIMEOUT" 90 "$TOOL" --listen "$port" --plugin "$PLUGIN" --provider "$PROVIDER" "$@" \
        --csv="$TMP/two.csv" --timeout 20 > "$TMP/r0.txt" 2>&1 &
    r0=$!
    sleep 0.5
    if ! kill -0 "$r0" 2> /dev/null && grep -q 'cannot listen on port' "$TMP/r0.txt"; then
      wait "$r0"
      continue  # port taken: another one
    fi
    "$TIMEOUT" 90 "$TOOL" --peer "127.0.0.1:$port" --plugin "$PLUGIN" --timeout 20 > "$TMP/r1.txt" 2>&1
    rc1=$?
    wait "$r0"
    rc0=$?
    if [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] && [ "$(tail -n +2 "$TMP/two.csv" | wc -l)" -eq "$rows" ] &&
       grep -q '^# two hosts: rank 0 on' "$TMP/r0.txt"; then
      ok=1
    else
      echo "    rank 0 (exit $rc0):"; show "$TMP/r0.txt"; echo "    rank 1 (exit $rc1):"; show "$TMP/r1.txt"
    fi
    break
  done
  if [ "$ok" -eq 1 ]; then
    pass "$name, $rows CSV rows"
    return 0
  fi
  failed "$name"
  return 1
}
two_hosts "two hosts over loopback (--listen/--peer)" 8 -t lat,bw -b 1K -e 64K -f 64 -n 20 -w 2 \
    -r 1 -c
# Rank 1 learns the protocols from rank 0's plan and creates the same contexts in the same order.
if two_hosts "two hosts with rank 0's --protocol sendrecv,rdma" 6 --protocol sendrecv,rdma -t lat \
    -b 1K -e 64K -f 64 -n 20 -w 2 -r 1 -c; then
  [ "$(cut -d, -f2 "$TMP/two.csv" | grep -c '^plugin:')" -eq 4 ] \
    && pass "two hosts: plugin:sendrecv and plugin:rdma rows" || failed "two hosts: protocol rows"
fi

# ---------------------------------------------------------------------------------------------
# --plot
# ---------------------------------------------------------------------------------------------
EMPTY_PATH="$TMP/empty-path"
mkdir -p "$EMPTY_PATH"
if [ -s "$CSV" ]; then
  RUN_PATH="$EMPTY_PATH" run "--plot without gnuplot: clear error" 1 "needs gnuplot" \
      --plot "$TMP/x.png" "$CSV"
  run "--plot of a file that is no result" 1 "not a --csv file" --plot "$TMP/x.png" \
      "$TMP/not-a-plugin.so"
  if command -v gnuplot > /dev/null 2>&1; then
    awk -F, 'NR == 1 || $2 == "plugin"' "$CSV" > "$TMP/plugin.csv"
    awk -F, 'NR == 1 || $2 == "raw"' "$CSV" > "$TMP/raw.csv"
    if run "--plot of two result files" 0 "wrote .*cmp.png" --plot "$TMP/cmp.png" \
        "$TMP/plugin.csv" "$TMP/raw.csv" "$JSON"; then
      [ "$(head -c 4 "$TMP/cmp.png" | od -An -c | tr -d ' ')" = '211PNG' ] \
        && pass "--plot wrote a PNG" || failed "--plot output is not a PNG"
    fi
  else
    echo "SKIP: --plot drawing: gnuplot is not installed (apt-get install gnuplot-nox)"
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
exit 0
