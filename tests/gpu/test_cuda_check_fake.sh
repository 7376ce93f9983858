#!/usr/bin/env bash
# nccl-fabric-cudacheck against the fake CUDA driver (tests/fakecuda) and the mock EFA provider:
# the same program runs against the real driver from the bundle on a GPU machine.
set -u
build=${NF_BUILD_DIR:-.}
fake=${NF_FAKECUDA_LIB:?NF_FAKECUDA_LIB is not set (make check sets it)}
exec "$build/tests/gpu/nccl-fabric-cudacheck" --cuda-lib "$fake"
