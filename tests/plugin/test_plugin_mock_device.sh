#!/bin/bash
# The mock-provider cases again on a p5-like NIC. The mock's default NIC emulates RMA writes (as a
# p4d's EFA does), where NCCL_FABRIC_PROTOCOL=auto picks SENDRECV; with MOCKEFA_RMA=device writes
# go through the device, auto picks RDMA, and the 128-byte in-order option is granted.
set -euo pipefail
: "${NF_BUILD_DIR:?run from make check}"
export MOCKEFA_RMA=device NCCL_FABRIC_PROTOCOL=auto
exec "$NF_BUILD_DIR/tests/plugin/test_plugin" "[mock]" "$@"
