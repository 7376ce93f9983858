// libfabric ABI newer than the headers we build against (Debian 12 ships 1.17): what the plugin
// needs from 1.18-1.20, declared with the layout those versions define, and used only when the
// library loaded at run time is at least that version (or a provider answers for itself).
#pragma once
#include <cstddef>
#include <cstdint>
#include <sys/uio.h>

#include <rdma/fi_domain.h>

namespace nf {

// fi_setopt(FI_OPT_ENDPOINT, ...), libfabric 1.18+: bool. false forbids the provider CUDA calls
// (NCCL owns the CUDA stream ordering); a provider that cannot honour it answers -FI_EOPNOTSUPP.
constexpr int kFiOptCudaApiPermitted = 10;

// fi_mr_regattr flag, libfabric 1.20+: attr->dmabuf describes the memory.
constexpr uint64_t kFiMrDmabuf = 1ull << 40;
constexpr uint32_t kFiDmabufVersion = FI_VERSION(1, 20);

struct FiMrDmabuf {
  int fd;
  uint64_t offset;   // where the registration starts inside the DMA-BUF
  size_t len;
  void* base_addr;   // the virtual address of the DMA-BUF's first byte
};

// struct fi_mr_attr as libfabric 1.20 lays it out: the 1.17 fields, with the first one a union,
// and four more at the end (zero here).
struct FiMrAttr120 {
  union {
    const struct iovec* mr_iov;
    const FiMrDmabuf* dmabuf;
  };
  size_t iov_count;
  uint64_t access;
  uint64_t offset;
  uint64_t requested_key;
  void* context;
  size_t auth_key_size;
  uint8_t* auth_key;
  enum fi_hmem_iface iface;
  union {
    uint64_t reserved;
    int cuda;
  } device;
  void* hmem_data;
  size_t page_size;
  const struct fid_mr* base_mr;
  size_t sub_mr_cnt;
};
static_assert(offsetof(FiMrAttr120, iface) == offsetof(fi_mr_attr, iface), "1.17 prefix");
static_assert(offsetof(FiMrAttr120, device) == offsetof(fi_mr_attr, device), "1.17 prefix");
static_assert(offsetof(FiMrAttr120, hmem_data) == sizeof(fi_mr_attr), "1.20 tail");

}  // namespace nf
