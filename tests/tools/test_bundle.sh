#!/usr/bin/env bash
# make-bundle.sh: the bundle is complete (every non-runtime library resolves inside it), small
# enough to carry, and the tool runs from it alone.
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
build=${NF_BUILD_DIR:?}
src=${NF_SRC_DIR:?}
dest=$(mktemp -d)/bundle
trap 'rm -rf "$(dirname "$dest")"' EXIT

"$src/tools/make-bundle.sh" "$build" "$dest" || fail "make-bundle.sh failed"
for f in lib/libnccl-net-fabric.so lib/libfabric.so.1 bin/nccl-fabric-perf env.sh \
         gpu/run.sh gpu/torch_check.py gpu/nccl-fabric-gpucheck; do
  [ -f "$dest/$f" ] || fail "$f missing from the bundle"
done
for f in gpu/run.sh gpu/torch_check.py gpu/nccl-fabric-gpucheck; do
  [ -x "$dest/$f" ] || fail "$f in the bundle is not executable"
done
size=$(du -sb "$dest" | cut -f1)
[ "$size" -lt $((64 * 1024 * 1024)) ] || fail "bundle is $size bytes"

# Every library the plugin needs, other than the C/C++ runtime, must come from the bundle.
while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue
  case "$name" in linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++*|libgcc_s*|libresolv*) continue ;; esac
  case "$path" in "$dest"/lib/*) ;; *) fail "$name resolves to $path, not into the bundle" ;; esac
done < <(LD_LIBRARY_PATH="$dest/lib" ldd "$dest/lib/libnccl-net-fabric.so")

# The tool runs from the bundle with nothing of the build tree.
out=$(env -i PATH=/usr/bin:/bin HOME="${HOME:-/tmp}" bash -c "source '$dest/env.sh' && FI_TCP_IFACE=lo nccl-fabric-perf --plugin \"\$NCCL_NET_PLUGIN\" --provider 'tcp;ofi_rxm' -t lat -b 8 -e 8 -n 50 -w 5 -r 1 -c" 2>&1) \
  || fail "the tool did not run from the bundle: $out"
grep -q '^ *lat' <<< "$out" || fail "no latency row in: $out"
# The GPU tests run from the bundle: here, with no GPU, they say they skip (77).
out=$(env -i PATH=/usr/bin:/bin HOME="${HOME:-/tmp}" bash -c "source '$dest/env.sh' && '$dest/gpu/nccl-fabric-gpucheck' --help" 2>&1) \
  || fail "nccl-fabric-gpucheck --help did not run from the bundle: $out"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  out=$(env -i PATH=/usr/bin:/bin HOME="${HOME:-/tmp}" bash -c "source '$dest/env.sh' && '$dest/gpu/run.sh'" 2>&1)
  rc=$?
  [ $rc -eq 77 ] || fail "gpu/run.sh from the bundle, no GPU: exit $rc, not 77: $out"
  grep -q '^SKIP: ' <<< "$out" || fail "gpu/run.sh said no SKIP line: $out"
fi
echo "PASS: bundle of $((size / 1024)) KiB runs on its own"
