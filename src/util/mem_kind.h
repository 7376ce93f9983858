// What kind of memory a buffer is. Here, below both fabric/ (which registers it) and mem/ (which
// classifies pointers), so that neither has to include the other for it.
#pragma once
#include <cstdint>

namespace nf {

enum class MemKind : uint8_t {
  kHost,         // not CUDA memory (plain or pinned host memory)
  kCudaDevice,   // cuMemAlloc & co.: the NIC reaches it only through GPUDirect RDMA
  kCudaManaged,  // cuMemAllocManaged: pages migrate, not registrable for GPUDirect
};

inline const char* mem_kind_name(MemKind k) {
  switch (k) {
    case MemKind::kHost: return "host";
    case MemKind::kCudaDevice: return "CUDA device";
    case MemKind::kCudaManaged: return "CUDA managed";
  }
  return "?";
}

}  // namespace nf
