#!/usr/bin/env bash
# libfabric's own unit tests (fabtests) on the mock EFA provider: the fabtests of the libfabric
# 2.1.0 source tarball that .ci/libfabric2.sh downloaded and checked, built against that libfabric
# (PREFIX), run with -p mockefa on the mock built against it (MOCK_DIR, holding libmockefa-fi.so).
# Then the two-process functional tests and benchmarks that fit EFA's shape, a server and a client
# process over the mock's UDP wire (MOCKEFA_NET=udp), addresses exchanged out of band (-E), data
# checked where the test can (-v); two of them again with datagrams lost and doubled.
# Which tests run, which do not apply and why: tests/mockprov/README.md ("libfabric's fabtests on
# the mock"). A failure here is a mock bug to fix or an EFA difference to document.
set -euo pipefail
PREFIX=${1:?usage: .ci/fabtests.sh LIBFABRIC_PREFIX MOCK_DIR}
MOCK_DIR=${2:?usage: .ci/fabtests.sh LIBFABRIC_PREFIX MOCK_DIR}
VERSION=2.1.0
WORK=${NF_LF2_WORK:-/tmp/nf-libfabric2}
TARBALL=$WORK/libfabric_$VERSION.orig.tar.xz
FT=${NF_FABTESTS_DIR:-/tmp/nf-fabtests}
# NIC 0 of the mock (tests/mockprov/mock_info.cpp, domain_gid): EFA reads fi_getinfo's node as a GID.
GID=fe80::4a1:b5ff:fe7e:1000

[ -f "$TARBALL" ] || { echo "$TARBALL missing: run .ci/libfabric2.sh first"; exit 1; }
[ -f "$MOCK_DIR/libmockefa-fi.so" ] || { echo "no libmockefa-fi.so in $MOCK_DIR"; exit 1; }
UNITS=(fi_getinfo_test fi_eq_test fi_cq_test fi_mr_test fi_setopt_test fi_dom_test fi_cntr_test)
# Two-process tests: "program|its arguments|environment". MOCKEFA_CTX_REUSE=1 where fabtests posts
# a context again while its first op is in flight (its bandwidth loops, unexpected_msg): EFA's efa
# fabric allows it (mode 0), the mock refuses it by default to catch plugin bugs. -f efa where the
# test would otherwise take efa-direct, which has FI_CONTEXT2 and forbids it.
PAIRS=(
  "benchmarks/fi_rdm_pingpong|-v -f efa-direct|"
  "benchmarks/fi_rdm_tagged_pingpong|-v|"
  "benchmarks/fi_rdm_tagged_bw|-v|MOCKEFA_CTX_REUSE=1"
  "benchmarks/fi_rdm_bw|-v -f efa|MOCKEFA_CTX_REUSE=1"
  "benchmarks/fi_rma_bw|-e rdm -o write -v -f efa|"
  "benchmarks/fi_rma_bw|-e rdm -o read -v -f efa|"
  "benchmarks/fi_rma_bw|-e rdm -o writedata -v -f efa|"
  "benchmarks/fi_rma_bw|-e rdm -o writedata -v -f efa-direct -S 4096|MOCKEFA_RMA=device"
  "benchmarks/fi_rma_pingpong|-e rdm -o writedata -v|"
  "functional/fi_rdm||"
  "functional/fi_cq_data||"
  "functional/fi_unexpected_msg|-v|MOCKEFA_CTX_REUSE=1"
  "functional/fi_rdm_multi_client||"
  "functional/fi_av_xfer||"
  "functional/fi_inject_test||"
  "functional/fi_resmgmt_test||"
  "functional/fi_flood||"
  "benchmarks/fi_rdm_tagged_bw|-v|MOCKEFA_CTX_REUSE=1 MOCKEFA_NET_LOSS=10 MOCKEFA_NET_DUP=5"
  "benchmarks/fi_rma_bw|-e rdm -o writedata -v -f efa -S 65536|MOCKEFA_NET_LOSS=10 MOCKEFA_NET_DUP=5"
)
OOB_PORT=9228  # the out-of-band port (-E=PORT; fabtests' default, 3000, is a common one)
rm -rf "$FT"
mkdir -p "$FT"
tar -C "$FT" -xf "$TARBALL" "libfabric-$VERSION/fabtests"
cd "$FT/libfabric-$VERSION/fabtests"
./autogen.sh > ../autogen.log 2>&1 || { tail -n 30 ../autogen.log; exit 1; }
./configure --with-libfabric="$PREFIX" > ../configure.log 2>&1 || { tail -n 30 ../configure.log; exit 1; }
progs=()
for pr in "${PAIRS[@]}"; do progs+=("${pr%%|*}"); done
read -r -a progs <<< "$(printf '%s\n' "${progs[@]}" | sort -u | tr '\n' ' ')"
make -j2 "${UNITS[@]/#/unit/}" "${progs[@]}" > ../make.log 2>&1 || { tail -n 30 ../make.log; exit 1; }

export LD_LIBRARY_PATH=$PREFIX/lib FI_PROVIDER_PATH=$MOCK_DIR
fails=0
for t in "${UNITS[@]}"; do
  args=(-p mockefa)
  [ "$t" = fi_getinfo_test ] && args+=(-s "$GID" "$GID")
  rc=0
  timeout 120 "unit/$t" "${args[@]}" > "../$t.out" 2>&1 || rc=$?
  pass=$(grep -c 'PASS' "../$t.out" || true)
  skip=$(grep -c 'skipped' "../$t.out" || true)
  if [ "$rc" -ne 0 ] || grep -q 'tests failed' "../$t.out"; then
    echo "FAIL: $t (exit $rc)"
    tail -n 20 "../$t.out"
    fails=$((fails + 1))
  else
    echo "PASS: $t ${args[*]}: $pass passed, $skip skipped$(grep -q 'Summary' "../$t.out" || echo ' (exit 0; it prints no summary)')"
  fi
done

# A server, then a client once the server listens on the out-of-band port; both must exit 0
# within 120 s.
pair_fails=0
n=0
for pr in "${PAIRS[@]}"; do
  IFS='|' read -r prog args envs <<< "$pr"
  read -r -a argv <<< "$args"
  read -r -a envv <<< "$envs"
  n=$((n + 1))
  log=../pair$n-$(basename "$prog")
  t0=$(date +%s)
  env MOCKEFA_NET=udp "${envv[@]}" timeout 120 "$prog" -p mockefa -E="$OOB_PORT" "${argv[@]}" > "$log.server" 2>&1 &
  spid=$!
  for _ in $(seq 1 100); do
    ss -ltn 2>/dev/null | grep -q ":$OOB_PORT " && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  crc=0
  env MOCKEFA_NET=udp "${envv[@]}" timeout 120 "$prog" -p mockefa -E="$OOB_PORT" "${argv[@]}" 127.0.0.1 \
    > "$log.client" 2>&1 || crc=$?
  src=0
  wait "$spid" || src=$?
  what="$(basename "$prog") ${args}${envs:+ ($envs)}"
  if [ "$src" -ne 0 ] || [ "$crc" -ne 0 ]; then
    echo "FAIL: $what: server exit $src, client exit $crc"
    tail -n 12 "$log.server" "$log.client"
    pair_fails=$((pair_fails + 1))
  else
    echo "PASS: $what ($(( $(date +%s) - t0 )) s)"
  fi
done
[ "$fails" -eq 0 ] || echo "fabtests: $fails unit test program(s) failed on the mock"
[ "$pair_fails" -eq 0 ] || echo "fabtests: $pair_fails two-process test(s) failed on the mock"
[ "$fails" -eq 0 ] && [ "$pair_fails" -eq 0 ] || exit 1
echo "fabtests: ${#UNITS[@]} unit test programs and ${#PAIRS[@]} two-process runs on the mock, none failed"
