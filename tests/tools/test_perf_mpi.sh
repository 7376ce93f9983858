#!/usr/bin/env bash
# nccl-fabric-perf under mpirun (built with configure --with-mpi): two ranks on this host, the
# handles over MPI, a short sweep over loopback with -c, its CSV checked; -np 3 refused. Exits 77
# (skipped) when the build has no MPI or mpirun is missing. Run by `make check`; by hand:
# NF_PERF_MPI=1 NF_PERF_TOOL=build/tools/nccl-fabric-perf
# NF_PLUGIN_LIB=build/.libs/libnccl-net-fabric.so FI_TCP_IFACE=lo tests/tools/test_perf_mpi.sh
set -u
. "$(dirname "$0")/csv_check.sh"

TOOL=${NF_PERF_TOOL:-$PWD/tools/nccl-fabric-perf}
PLUGIN=${NF_PLUGIN_LIB:-$PWD/.libs/libnccl-net-fabric.so}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
export NF_PLUGIN_LIB=$PLUGIN
PROVIDER='tcp;ofi_rxm'

if [ "${NF_PERF_MPI:-0}" != 1 ]; then
  echo "SKIP: built without MPI (configure --with-mpi; Debian: apt-get install libopenmpi-dev openmpi-bin)"
  exit 77
fi
MPIRUN=$(command -v mpirun)
if [ -z "$MPIRUN" ]; then
  echo "SKIP: mpirun not found (Debian: apt-get install openmpi-bin)"
  exit 77
fi
for f in "$TOOL" "$PLUGIN"; do
  [ -r "$f" ] || { echo "FAIL: $f not built"; exit 1; }
done
TIMEOUT=$(command -v timeout)
[ -n "$TIMEOUT" ] || { echo "FAIL: timeout(1) not found (coreutils)"; exit 1; }

# Open MPI as root needs --allow-run-as-root; in a container, vader's single-copy (CMA) is
# usually refused, and both ranks run on this host, so no ssh is needed.
MPI_ARGS=(--oversubscribe -x FI_TCP_IFACE -x NF_PLUGIN_LIB)
if "$MPIRUN" --version 2>&1 | grep -q 'Open MPI'; then
  [ "$(id -u)" -eq 0 ] && MPI_ARGS=(--allow-run-as-root "${MPI_ARGS[@]}")
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  # The ranks' own sanitizer runtimes (ASan builds) would report Open MPI's leaks as ours.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  MPI_ARGS+=(-x ASAN_OPTIONS -x OMPI_MCA_btl_vader_single_copy_mechanism)
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_perf_mpi.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0
pass() { echo "PASS: $*"; }
failed() { echo "FAIL: $*"; failures=$((failures + 1)); }
show() { sed 's/^/    | /' "$1" | head -n 40; }

# A sweep with the data checked: 2 tests x 5 sizes (8, 64, 512, 4K, 32K: -f 8 up to 64K) x 2 modes.
"$TIMEOUT" 180 "$MPIRUN" "${MPI_ARGS[@]}" -np 2 "$TOOL" --plugin "$PLUGIN" --provider "$PROVIDER" \
    -t lat,bw -b 8 -e 64K -f 8 -n 20 -w 2 -r 1 -c --csv --timeout 30 \
    > "$TMP/out.csv" 2> "$TMP/err.txt"
rc=$?
if [ "$rc" -ne 0 ]; then
  failed "mpirun -np 2: exit status $rc"
  show "$TMP/out.csv"; show "$TMP/err.txt"
else
  header='test,mode,size,iters,group,comms,window,time_us,gb_per_s,cpu_s_per_gb_rank0,cpu_s_per_gb_rank1,cpu_s_rank0,cpu_s_rank1,plugin_vs_raw,plugin,abi,provider,check'
  # Only rank 0 writes to stdout: the CSV is all there is.
  [ "$(head -n 1 "$TMP/out.csv")" = "$header" ] || failed "CSV header is '$(head -n 1 "$TMP/out.csv")'"
  bad=$(check_csv "$TMP/out.csv" "lat bw" 20)
  if [ -z "$bad" ]; then pass "mpirun -np 2: CSV of 20 rows, lat and bw, plugin and raw, checked"
  else failed "mpirun -np 2: CSV content:"; echo "$bad" | head -n 10; show "$TMP/out.csv"; fi
fi

# The table names the pair (one host here: two processes).
"$TIMEOUT" 120 "$MPIRUN" "${MPI_ARGS[@]}" -np 2 "$TOOL" --plugin "$PLUGIN" --provider "$PROVIDER" \
    -t bw -b 4K -n 10 -w 1 -r 1 --timeout 30 > "$TMP/table.txt" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^# two processes on ' "$TMP/table.txt" &&
   grep -Eq '^  bw +4 KiB' "$TMP/table.txt"; then
  pass "mpirun -np 2: the table"
else
  failed "mpirun -np 2: the table (exit status $rc)"; show "$TMP/table.txt"
fi

# Three ranks: a clear error and a non-zero exit, quickly.
start=$(date +%s)
"$TIMEOUT" 60 "$MPIRUN" "${MPI_ARGS[@]}" -np 3 "$TOOL" --plugin "$PLUGIN" --provider "$PROVIDER" \
    -t lat -b 8 -n 10 --timeout 10 > "$TMP/np3.txt" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q 'exactly 2 ranks.*this job has 3' "$TMP/np3.txt"; then
  pass "mpirun -np 3: refused (exit status $rc)"
else
  failed "mpirun -np 3: exit status $rc"; show "$TMP/np3.txt"
fi
[ $(( $(date +%s) - start )) -le 30 ] || failed "mpirun -np 3 took more than 30 s"

# --listen under MPI: bad usage on both ranks.
"$TIMEOUT" 60 "$MPIRUN" "${MPI_ARGS[@]}" -np 2 "$TOOL" --listen 5000 > "$TMP/listen.txt" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q 'exclude each other' "$TMP/listen.txt"; then
  pass "--listen under mpirun: refused"
else
  failed "--listen under mpirun: exit status $rc"; show "$TMP/listen.txt"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
exit 0
