#!/usr/bin/env bash
# Builds nccl-fabric from a source tree and installs it under one prefix, then checks what it
# installed: the plugin and the tuner export NCCL's symbols, every library they need resolves, and
# libfabric resolves to the one it was built against. The container image (docs/deploy/Dockerfile),
# the HyperPod lifecycle script and CI (.ci/run) all install through this script.
#
# usage: install-plugin.sh [--src DIR] [--libfabric DIR] [--prefix DIR] [--build-dir DIR]
#                          [--jobs N] [--with-tests] [--dry-run] [-- CONFIGURE_ARGS...]
#   --src DIR        the source tree (default: the tree this script is in)
#   --libfabric DIR  libfabric's install prefix (default: /opt/amazon/efa when the EFA installer
#                    put it there, else the system's, found by pkg-config)
#   --prefix DIR     where to install (default: /opt/nccl-fabric)
#   --build-dir DIR  build there and keep it (default: a temporary folder, removed at the end)
#   --jobs N         parallel compile jobs (default: the number of CPUs)
#   --with-tests     configure the tests too (needs Catch2 v2), so that `make check` can run in
#                    the build folder afterwards; the default is --disable-tests
#   --dry-run        check the arguments and the source tree, print the steps, build nothing
#                    (--libfabric need not exist yet: the Dockerfile's checks use this)
# Exit status: 0 installed and checked, 1 a step failed, 2 bad arguments.
set -euo pipefail

die() { echo "install-plugin.sh: $*" >&2; exit 1; }
usage() { sed -n '/^# usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

SRC=$(cd "$(dirname "$0")/../.." && pwd)
LIBFABRIC=""
PREFIX=/opt/nccl-fabric
BUILD=""
JOBS=$(nproc 2>/dev/null || echo 2)
TESTS=no
DRY=no
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --src) [ $# -ge 2 ] || usage; SRC=$2; shift 2 ;;
    --libfabric) [ $# -ge 2 ] || usage; LIBFABRIC=$2; shift 2 ;;
    --prefix) [ $# -ge 2 ] || usage; PREFIX=$2; shift 2 ;;
    --build-dir) [ $# -ge 2 ] || usage; BUILD=$2; shift 2 ;;
    --jobs) [ $# -ge 2 ] || usage; JOBS=$2; shift 2 ;;
    --with-tests) TESTS=yes; shift ;;
    --dry-run) DRY=yes; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h | --help) usage ;;
    *) echo "install-plugin.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "install-plugin.sh: --jobs '$JOBS' is not a positive number" >&2; exit 2; }
case "$PREFIX" in /*) ;; *) echo "install-plugin.sh: --prefix must be an absolute path" >&2; exit 2 ;; esac
if [ ! -f "$SRC/configure.ac" ] || [ ! -f "$SRC/src/api/net_v12.cpp" ]; then
  die "--src $SRC is not an nccl-fabric source tree"
fi
SRC=$(cd "$SRC" && pwd)
if [ -z "$LIBFABRIC" ] && [ -f /opt/amazon/efa/include/rdma/fabric.h ]; then
  LIBFABRIC=/opt/amazon/efa
fi
if [ -n "$LIBFABRIC" ] && [ -f "$LIBFABRIC/include/rdma/fabric.h" ]; then
  LIBFABRIC=$(cd "$LIBFABRIC" && pwd)
elif [ -n "$LIBFABRIC" ] && [ "$DRY" = no ]; then
  die "--libfabric $LIBFABRIC: no include/rdma/fabric.h there"
fi

conf=(--prefix="$PREFIX")
[ -n "$LIBFABRIC" ] && conf+=(--with-libfabric="$LIBFABRIC")
[ "$TESTS" = no ] && conf+=(--disable-tests)
conf+=("${EXTRA[@]}")

echo "== nccl-fabric: $SRC -> $PREFIX"
echo "  libfabric: ${LIBFABRIC:-the system one, found by pkg-config}"
echo "  configure ${conf[*]}"
if [ "$DRY" = yes ]; then
  echo "  (dry run: nothing built)"
  exit 0
fi

if [ -z "$BUILD" ]; then
  BUILD=$(mktemp -d "${TMPDIR:-/tmp}/nccl-fabric-build.XXXXXX")
  trap 'rm -rf "$BUILD"' EXIT
fi
mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)

if [ ! -x "$SRC/configure" ]; then
  echo "== autogen (a git checkout: needs autoconf, automake, libtool, pkg-config)"
  (cd "$SRC" && ./autogen.sh) > "$BUILD/autogen.out" 2>&1 || { cat "$BUILD/autogen.out"; die "autogen.sh failed"; }
fi
echo "== configure (in $BUILD)"
(cd "$BUILD" && "$SRC/configure" "${conf[@]}") > "$BUILD/configure.out" 2>&1 \
  || { tail -n 40 "$BUILD/configure.out"; die "configure failed (all of it: $BUILD/configure.out)"; }
sed -n '/^nccl-fabric /,$p' "$BUILD/configure.out"
echo "== make -j$JOBS"
make -C "$BUILD" -j"$JOBS" > "$BUILD/make.out" 2>&1 || { tail -n 60 "$BUILD/make.out"; die "make failed"; }
echo "== make install"
make -C "$BUILD" install > "$BUILD/install.out" 2>&1 || { tail -n 40 "$BUILD/install.out"; die "make install failed"; }

echo "== checks of what was installed"
LIBDIR=$PREFIX/lib
for f in "$LIBDIR/libnccl-net-fabric.so" "$LIBDIR/libnccl-tuner-fabric.so" \
  "$PREFIX/bin/nccl-fabric-info" "$PREFIX/bin/nccl-fabric-perf" "$PREFIX/bin/nccl-fabric-tune"; do
  [ -e "$f" ] || die "$f was not installed"
done
syms=$(nm -D --defined-only "$LIBDIR/libnccl-net-fabric.so" | awk '{print $3}')
for s in ncclNetPlugin_v6 ncclNetPlugin_v12 ncclTunerPlugin_v2; do
  grep -qx "$s" <<<"$syms" || die "libnccl-net-fabric.so does not export $s"
done
nm -D --defined-only "$LIBDIR/libnccl-tuner-fabric.so" | grep -q ' ncclTunerPlugin_v' \
  || die "libnccl-tuner-fabric.so exports no ncclTunerPlugin_v*"
for f in "$LIBDIR/libnccl-net-fabric.so" "$LIBDIR/libnccl-tuner-fabric.so" "$PREFIX/bin/nccl-fabric-perf"; do
  missing=$(ldd "$f" | grep 'not found' || true)
  [ -z "$missing" ] || die "$f: libraries not found: $missing"
done
lf=$(ldd "$LIBDIR/libnccl-net-fabric.so" | awk '$1 == "libfabric.so.1" {print $3}')
echo "  libfabric.so.1 -> $lf"
if [ -n "$LIBFABRIC" ]; then
  case "$(readlink -f "$lf")" in
    "$LIBFABRIC"/*) ;;
    *) die "the plugin resolves libfabric.so.1 to $lf, not to the one under $LIBFABRIC it was built against" ;;
  esac
fi
echo "  exports: $(grep -c '^ncclNetPlugin_v' <<<"$syms") net ABIs, $(grep -c '^ncclTunerPlugin_v' <<<"$syms") tuner ABIs"
echo "== installed. To use it (NCCL keeps its default plugin until you ask):"
echo "  export LD_LIBRARY_PATH=$LIBDIR:\$LD_LIBRARY_PATH NCCL_NET_PLUGIN=fabric NCCL_NET=fabric"
echo "  $PREFIX/bin/nccl-fabric-info   # what the plugin sees on this node, and the traps it finds"
