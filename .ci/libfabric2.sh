#!/usr/bin/env bash
# Builds libfabric 2.1.0 from Debian 13's (trixie) source package into PREFIX (default
# /opt/nf-libfabric-2.1.0), with the providers the tests use: tcp, rxm, shm. CI then builds the
# plugin against it (--with-libfabric=PREFIX) and runs the whole suite a second time.
#
# The source comes through apt with a private sources list and private state directories: the
# system's apt configuration is neither read for sources nor changed. Only the upstream tarball is
# used (the .dsc and the Debian patches are not needed), and its SHA-256 must match both the value
# pinned here and the one apt's source index gives.
set -euo pipefail
PREFIX=${1:-/opt/nf-libfabric-2.1.0}
VERSION=2.1.0
TARBALL=libfabric_$VERSION.orig.tar.xz
SHA256=1a66369772d5bb151737214af1c478993e969cf298e8f9ed369e7a2ab8d8c6df
WORK=${NF_LF2_WORK:-/tmp/nf-libfabric2}

if [ -x "$PREFIX/bin/fi_info" ] && "$PREFIX/bin/fi_info" --version 2>/dev/null | grep -q "libfabric: $VERSION"; then
  echo "libfabric $VERSION already in $PREFIX"
  exit 0
fi
rm -rf "$WORK"
mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial"
cd "$WORK"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
if [ -f "$KEYRING" ]; then
  echo "deb-src [signed-by=$KEYRING] http://deb.debian.org/debian trixie main" > apt/sources.list
else
  # No Debian keyring (e.g. Ubuntu without debian-archive-keyring): the index is not verified;
  # the tarball still has to match the pinned checksum below.
  echo "deb-src [trusted=yes] http://deb.debian.org/debian trixie main" > apt/sources.list
fi
APT_OPTS=(-o "Dir::Etc::sourcelist=$WORK/apt/sources.list" -o Dir::Etc::sourceparts=/dev/null
  -o "Dir::State::lists=$WORK/apt/lists" -o "Dir::Cache=$WORK/apt/cache"
  -o APT::Sandbox::User=root)
apt-get "${APT_OPTS[@]}" update -qq
# The .dsc and the Debian tarball may be missing from the mirror: apt then fails, but the upstream
# tarball, which is all we need, has arrived (checked below).
apt-get "${APT_OPTS[@]}" source --download-only "libfabric=$VERSION-1.1" > apt-source.log 2>&1 \
  || echo "(apt-get source: $(grep -c '^E:' apt-source.log) error(s), checked below)"
[ -f "$TARBALL" ] || { cat apt-source.log; echo "$TARBALL did not download"; exit 1; }
INDEX_SHA=$(apt-cache "${APT_OPTS[@]}" showsrc libfabric \
  | awk -v f="$TARBALL" '/^Checksums-Sha256:/ { s = 1; next } /^[^ ]/ { s = 0 } s && $3 == f { print $1; exit }')
GOT_SHA=$(sha256sum "$TARBALL" | cut -d' ' -f1)
echo "libfabric $VERSION: sha256 $GOT_SHA (pinned $SHA256, apt index ${INDEX_SHA:-none})"
if [ "$GOT_SHA" != "$SHA256" ] || [ "$INDEX_SHA" != "$SHA256" ]; then
  echo "checksum mismatch"
  exit 1
fi
tar xf "$TARBALL"
cd "libfabric-$VERSION"
./autogen.sh > ../autogen.log 2>&1 || { tail -n 50 ../autogen.log; exit 1; }
./configure --prefix="$PREFIX" --enable-only --enable-tcp --enable-rxm --enable-shm \
  --disable-static > ../configure.log 2>&1 || { tail -n 50 ../configure.log; exit 1; }
make -j2 > ../make.log 2>&1 || { tail -n 50 ../make.log; exit 1; }
make install > ../install.log 2>&1 || { tail -n 50 ../install.log; exit 1; }
echo "libfabric $VERSION in $PREFIX: providers $("$PREFIX/bin/fi_info" -l | grep -v version | tr -d ':' | tr '\n' ' ')"
