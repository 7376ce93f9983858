// GPUDirect RDMA detection: can this NIC read and write GPU memory for NCCL, and how.
#pragma once
#include <memory>
#include <string>

#include "fabric/fabric.h"
#include "mem/cuda.h"
#include "util/params.h"

namespace nf {

struct GdrReport {
  bool cuda = false;        // NCCL_PTR_CUDA: GPU buffers registered with FI_HMEM_CUDA
  bool dmabuf = false;      // NCCL_PTR_DMABUF: ... also through a DMA-BUF fd
  std::string cuda_reason;  // why (not), for the log
  std::string dmabuf_reason;
};

// Probes NIC `nic` through its open domain: CUDA present (NCCL_FABRIC_CUDA_LIBRARY), the provider
// grants FI_HMEM, an endpoint accepts FI_OPT_CUDA_API_PERMITTED=false, reads for the flush exist
// (unless NCCL_FABRIC_FLUSH=0), and a real device allocation registers with FI_HMEM_CUDA; then
// DMA-BUF: libfabric >= 1.20, the device exports DMA-BUFs, and such a registration works.
// Needs a current CUDA context (NCCL's init thread has one). On success the domain forbids
// providers CUDA calls on every endpoint it opens from then on.
GdrReport probe_gdr(const Nic& nic, Domain& dom, const Params& params);

// The policy for a GPU buffer NCCL registers (NCCL_PTR_CUDA) on `dom`: GPUDirect must be on, the
// pointer must be CUDA device memory (host memory is NCCL's mistake; managed memory migrates and
// cannot be registered) and [data, data+size) must lie inside its allocation; `fd` >= 0 asks for
// a DMA-BUF registration, which the domain must offer. Fills *info (the classification) and the
// DMA-BUF part of *spec. Each refusal is WARNed, prefixed with `who` (regMr, regMrDmaBuf).
Status check_gpu_buffer(const Domain& dom, void* data, size_t size, int fd, uint64_t offset,
                        const char* who, PtrInfo* info, MemSpec* spec);

}  // namespace nf
