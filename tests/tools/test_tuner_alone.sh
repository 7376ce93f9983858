#!/bin/bash
# libnccl-tuner-fabric.so stands alone: neither it nor anything it loads needs libfabric or hwloc
# (a job on another network, or a host without them, can still use the tuner). Checked on every
# library ldd resolves for it, then the library is loaded (dlopen, RTLD_NOW) and its v5 entry
# point looked up. The tuner's behaviour is tests/tuner's.
set -euo pipefail
: "${NF_BUILD_DIR:?run from make check}"
lib="$NF_BUILD_DIR/.libs/libnccl-tuner-fabric.so"
[ -f "$lib" ] || { echo "no $lib"; exit 1; }
deps=$(ldd "$lib")
echo "$deps"
# Here-strings, not pipes into grep -q: with pipefail, a writer killed by SIGPIPE when grep -q
# stops reading early would fail the pipeline (and turn a check around).
if grep -Eq 'libfabric|libhwloc' <<< "$deps"; then
  echo "FAIL: libnccl-tuner-fabric.so depends on libfabric or hwloc"
  exit 1
fi
needed=$(readelf -d "$lib" | grep NEEDED || true)
if grep -Eq 'libfabric|libhwloc' <<< "$needed"; then
  echo "FAIL: a NEEDED entry names libfabric or hwloc"
  exit 1
fi
# The net library, by contrast, does need libfabric: the check above can see a dependency.
net_deps=$(ldd "$NF_BUILD_DIR/.libs/libnccl-net-fabric.so")
grep -q libfabric <<< "$net_deps" \
  || { echo "FAIL: the check cannot see libfabric in the net library either"; exit 1; }
command -v python3 > /dev/null || { echo "no python3: the load itself is not tried"; exit 0; }
# A sanitizer build needs its runtime loaded first (the test programs bring it; python does not).
undefined=$(nm -D --undefined-only "$lib")  # not piped into grep -q: pipefail would see SIGPIPE
if grep -Eq ' __(asan|ubsan|tsan)_' <<< "$undefined"; then
  echo "sanitizer build: the dependency checks above hold; the load is tried in the plain build"
  exit 0
fi
python3 - "$lib" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL | 2)  # RTLD_NOW
sym = ctypes.c_void_p.in_dll(lib, "ncclTunerPlugin_v5")
print("loaded; ncclTunerPlugin_v5 at", hex(ctypes.addressof(sym)))
PY
