#!/usr/bin/env bash
# Assembles what a machine without libfabric needs to run the plugin (e.g. a GPU host that has
# CUDA, NCCL and PyTorch but no libfabric): the plugin, nccl-fabric-perf, the mock provider,
# libfabric.so.1 and every library those load that is not the C/C++ runtime, into one folder,
# plus the GPU tests (gpu/: run.sh, torch_check.py, nccl-fabric-gpucheck; docs/gpu-testing.md).
#   tools/make-bundle.sh BUILD_DIR DEST
# Then on the other machine: source DEST/env.sh  (and DEST/gpu/run.sh for the GPU tests)
set -euo pipefail
build=${1:?usage: make-bundle.sh BUILD_DIR DEST}
dest=${2:?usage: make-bundle.sh BUILD_DIR DEST}
limit=$((64 * 1024 * 1024))  # what the project's device tool carries

plugin="$build/.libs/libnccl-net-fabric.so"
tool="$build/tools/nccl-fabric-perf"
mock="$build/tests/mockprov/.libs/libmockefa-fi.so"
gpucheck="$build/tests/gpu/nccl-fabric-gpucheck"
cudacheck="$build/tests/gpu/nccl-fabric-cudacheck"
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for f in "$plugin" "$tool" "$gpucheck" "$cudacheck" "$src/tests/gpu/run.sh" "$src/tests/gpu/torch_check.py"; do
  [ -f "$f" ] || { echo "make-bundle: $f is missing: run make first" >&2; exit 1; }
done

rm -rf "$dest"
mkdir -p "$dest/lib" "$dest/bin" "$dest/prov" "$dest/gpu"
cp "$plugin" "$dest/lib/"
[ -f "$build/.libs/libnccl-tuner-fabric.so" ] && cp "$build/.libs/libnccl-tuner-fabric.so" "$dest/lib/"
cp "$tool" "$dest/bin/"
[ -f "$build/tools/nccl-fabric-tune" ] && cp "$build/tools/nccl-fabric-tune" "$dest/bin/"
cp "$gpucheck" "$cudacheck" "$src/tests/gpu/run.sh" "$src/tests/gpu/torch_check.py" "$dest/gpu/"
# A rank stopped mid-job must become an error on the other within NCCL_FABRIC_PEER_TIMEOUT.
cp "$src/tests/gpu/peer_stop.py" "$dest/gpu/"
[ -f "$mock" ] && cp "$mock" "$dest/prov/"

# The C/C++ runtime stays the host's: a libstdc++ on LD_LIBRARY_PATH would shadow the newer one
# a PyTorch process needs.
is_runtime() {
  case "$1" in
    linux-vdso.so.*|ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*| \
    libstdc++.so.*|libgcc_s.so.*|libresolv.so.*) return 0 ;;
  esac
  return 1
}

copy_deps() {
  ldd "$1" | while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    is_runtime "$name" && continue
    [ -f "$dest/lib/$name" ] && continue
    [ -f "$path" ] || { echo "make-bundle: $1 needs $name, which is not found" >&2; exit 1; }
    cp -L "$path" "$dest/lib/$name"
    copy_deps "$path"
  done
}
copy_deps "$plugin"
copy_deps "$tool"
copy_deps "$gpucheck"
copy_deps "$cudacheck"

cat > "$dest/env.sh" <<'ENV'
# Source this file: the plugin and its libfabric come from this folder.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NET_PLUGIN="$here/lib/libnccl-net-fabric.so"
export NCCL_NET=fabric
export PATH="$here/bin:$PATH"
# The mock EFA provider, for tests: add FI_PROVIDER=mockefa NCCL_FABRIC_PROVIDER=mockefa to use it.
export FI_PROVIDER_PATH="$here/prov"
# The GPU tests: $here/gpu/run.sh (docs/gpu-testing.md).
ENV

size=$(du -sb "$dest" | cut -f1)
if [ "$size" -gt "$limit" ]; then
  echo "make-bundle: $dest is $size bytes, over the 64 MiB a device run can carry" >&2
  exit 1
fi
echo "make-bundle: $dest: $(ls "$dest/lib" | wc -l) libraries, $((size / 1024)) KiB; source $dest/env.sh"
