#!/bin/bash
# The whole plugin suite again on the SENDRECV protocol: `make check` runs test_plugin with the
# default (auto: RDMA on tcp;ofi_rxm and shm; SENDRECV on the mock, whose default NIC emulates
# writes: test_plugin_mock_device.sh covers RDMA there), this runs it with SENDRECV forced. The
# [rdma] cases are the RDMA protocol's own and are left out here.
set -euo pipefail
: "${NF_BUILD_DIR:?run from make check}"
export NCCL_FABRIC_PROTOCOL=sendrecv
# The [gpu] cases are left out too: each sets its protocol itself (the RDMA protocol by default),
# so here they only repeated test_plugin's run. (Repeated in this order under ASan they also made
# LeakSanitizer's own tracer crash at a child's exit, "Tracer caught signal 11", not a leak or a
# memory error; alone, or in test_plugin's order, they pass under ASan.)
exec "$NF_BUILD_DIR/tests/plugin/test_plugin" "~[rdma]~[gpu]" "$@"
