#!/usr/bin/env bash
# libfabric's own unit tests (fabtests) on the mock EFA provider: the fabtests of the libfabric
# 2.1.0 source tarball that .ci/libfabric2.sh downloaded and checked, built against that libfabric
# (PREFIX), run with -p mockefa on the mock built against it (MOCK_DIR, holding libmockefa-fi.so).
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
rm -rf "$FT"
mkdir -p "$FT"
tar -C "$FT" -xf "$TARBALL" "libfabric-$VERSION/fabtests"
cd "$FT/libfabric-$VERSION/fabtests"
./autogen.sh > ../autogen.log 2>&1 || { tail -n 30 ../autogen.log; exit 1; }
./configure --with-libfabric="$PREFIX" > ../configure.log 2>&1 || { tail -n 30 ../configure.log; exit 1; }
make -j2 "${UNITS[@]/#/unit/}" > ../make.log 2>&1 || { tail -n 30 ../make.log; exit 1; }

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
[ "$fails" -eq 0 ] || { echo "fabtests: $fails unit test program(s) failed on the mock"; exit 1; }
echo "fabtests: ${#UNITS[@]} unit test programs on the mock, none failed"
