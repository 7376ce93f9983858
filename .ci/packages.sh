#!/usr/bin/env bash
# The Debian packages, as a user gets them (issue 20): built from the committed tree with
# dpkg-buildpackage, checked by lintian, installed, exercised with nothing of the build tree in the
# environment (the installed nccl-fabric-info, and nccl-fabric-perf finding the plugin as NCCL
# does, by NCCL_NET_PLUGIN=fabric), purged, and nothing left behind. Needs root (apt-get).
#
# usage: .ci/packages.sh [SOURCE_DIR]   (default: the tree this script is in)
set -euo pipefail
SRC=$(cd "${1:-$(dirname "$0")/..}" && pwd)
WORK=$(mktemp -d /tmp/nf-deb.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SUDO=$(command -v sudo || true)
[ "$(id -u)" = 0 ] && SUDO=""

echo "== build: dpkg-buildpackage -us -uc -b (from git archive HEAD of $SRC)"
git -C "$SRC" archive --format=tar --prefix=nccl-fabric/ HEAD | tar -x -C "$WORK"
(cd "$WORK/nccl-fabric" && dpkg-buildpackage -us -uc -b -j2) > "$WORK/build.log" 2>&1 \
  || { tail -n 60 "$WORK/build.log"; echo "packages.sh: dpkg-buildpackage failed"; exit 1; }
mapfile -t debs < <(ls "$WORK"/*.deb)
for d in "${debs[@]}"; do
  echo "  $(basename "$d"): $(dpkg-deb -f "$d" Depends)"
  dpkg-deb -c "$d" | awk '{print "    " $6}'
done

echo "== lintian (every tag it may still print is explained in debian/*.lintian-overrides)"
lintian --fail-on error,warning --tag-display-limit 0 "${debs[@]}" "$WORK"/*.changes \
  || { echo "packages.sh: lintian found errors or warnings"; exit 1; }

echo "== install"
$SUDO apt-get install -y -qq "${debs[@]}" > "$WORK/install.log" 2>&1 \
  || { cat "$WORK/install.log"; exit 1; }
dpkg -L libnccl-net-fabric nccl-fabric-tools | sort -u > "$WORK/files"
clean_env=(env -i "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  "HOME=${HOME:-/root}" FI_TCP_IFACE=lo NCCL_FABRIC_TEST_DMI_FILE=/dev/null)

echo "== the installed nccl-fabric-info (its default plugin: the installed library)"
out=$("${clean_env[@]}" nccl-fabric-info --no-cuda 2>&1) && rc=0 || rc=$?
echo "$out" | sed -n '/== NCCL devices/,/^$/p'
if [ "$rc" -gt 1 ] || ! grep -q "== NCCL devices (plugin /usr/lib/.*/libnccl-net-fabric.so" <<<"$out"; then
  echo "$out"; echo "packages.sh: nccl-fabric-info exit $rc, or it did not use the installed plugin"
  exit 1
fi

echo "== the installed nccl-fabric-perf with NCCL_NET_PLUGIN=fabric"
out=$("${clean_env[@]}" NCCL_NET_PLUGIN=fabric nccl-fabric-perf -t lat,bw -b 8 -e 1M -f 1024 \
  -n 200 -r 1 2>&1) || { echo "$out"; echo "packages.sh: nccl-fabric-perf failed"; exit 1; }
grep "plugin /usr/lib/.*libnccl-net-fabric.so\|^  lat\|^  bw" <<<"$out"
grep -q "plugin /usr/lib/.*/libnccl-net-fabric.so" <<<"$out" \
  || { echo "$out"; echo "packages.sh: NCCL_NET_PLUGIN=fabric did not resolve to the installed plugin"; exit 1; }

echo "== man pages"
for t in nccl-fabric-info nccl-fabric-perf nccl-fabric-tune; do
  man -w "$t" >/dev/null || { echo "packages.sh: man $t: no page"; exit 1; }
  echo "  man $t: $(man -w "$t")"
done

echo "== purge, and nothing left"
$SUDO apt-get purge -y -qq libnccl-net-fabric nccl-fabric-tools > "$WORK/purge.log" 2>&1 \
  || { cat "$WORK/purge.log"; exit 1; }
left=0
while read -r f; do
  [ -d "$f" ] && continue  # shared directories (/usr/bin) stay
  if [ -e "$f" ]; then echo "  left behind: $f"; left=1; fi
done < "$WORK/files"
for p in libnccl-net-fabric nccl-fabric-tools; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$st" in
    "" | *not-installed) ;;
    *) echo "  $p: $st"; left=1 ;;
  esac
done
[ "$left" = 0 ] || { echo "packages.sh: the purge left files or package state behind"; exit 1; }
echo "packages.sh: built, lintian clean, installed, exercised, purged"
