#!/bin/bash
# The mock-provider cases again on a p5-like NIC. The mock's default NIC emulates RMA writes (as a
# p4d's EFA does), where NCCL_FABRIC_PROTOCOL=auto picks SENDRECV; with MOCKEFA_RMA=device writes
# go through the device, auto picks RDMA, and the 128-byte in-order option is granted.
#
# The GPU-memory cases run in a process of their own: under ASan+UBSan, after the other mock cases
# in the same test process, LeakSanitizer's own exit-time scan crashed in their children ("Tracer
# caught signal 11", a bogus dynamic-TLS range in its thread registry) with the plugin of dcfb41b
# as well as this one; each half alone passes, leak checks included.
set -euo pipefail
: "${NF_BUILD_DIR:?run from make check}"
export MOCKEFA_RMA=device NCCL_FABRIC_PROTOCOL=auto
"$NF_BUILD_DIR/tests/plugin/test_plugin" "[mock]~[gpu]" "$@"
exec "$NF_BUILD_DIR/tests/plugin/test_plugin" "[mock][gpu]" "$@"
