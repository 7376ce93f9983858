// What libfabric after 1.17 adds that the plugin uses, whichever headers it is built against.
//
// configure checks each symbol (m4/nf_deps.m4: AC_CHECK_DECLS / AC_CHECK_TYPES / AC_CHECK_MEMBERS).
// Where the headers declare it, the header's own definition is used; where they do not (Debian
// 12's 1.17), it is declared here with the value or layout the newer ABI fixes. Nothing here is
// used unless the library loaded at run time, and the API version obtained from fi_getinfo, are at
// least the version that introduced it (or the provider answers for itself: an option it does not
// know gives -FI_ENOPROTOOPT). docs/compatibility.md lists what each version brings.
#pragma once
#include <sys/uio.h>
#include <cstddef>
#include <cstdint>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_ext.h>

namespace nf {

// The API versions whose changes matter to us.
constexpr uint32_t kFiApi117 = FI_VERSION(1, 17);  // the oldest we build against
constexpr uint32_t kFiApi118 =
    FI_VERSION(1, 18);  // CUDA_API_PERMITTED, FI_OPT_EFA_*, EFA RDMA write
constexpr uint32_t kFiApi120 = FI_VERSION(1, 20);  // FI_MR_DMABUF
constexpr uint32_t kFiApi122 = FI_VERSION(1, 22);  // EFA queues RMA before the handshake
constexpr uint32_t kFiApi21 = FI_VERSION(2, 1);    // EFA lists the efa-direct fabric
constexpr uint32_t kFiDmabufVersion = kFiApi120;
// The API version of the headers we were built against.
constexpr uint32_t kFiBuiltVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

// fi_setopt(FI_OPT_ENDPOINT, ...), libfabric 1.18+: bool. false forbids the provider CUDA calls
// (NCCL owns the CUDA stream ordering); a provider that cannot honour it answers -FI_EOPNOTSUPP.
#if HAVE_DECL_FI_OPT_CUDA_API_PERMITTED
constexpr int kFiOptCudaApiPermitted = FI_OPT_CUDA_API_PERMITTED;
// The values below are ABI: where the headers have a symbol, they must agree with the value this
// file uses for headers that lack it (so a 2.x build checks what a 1.17 build hard-codes).
static_assert(FI_OPT_CUDA_API_PERMITTED == 10, "FI_OPT_CUDA_API_PERMITTED");
#else
constexpr int kFiOptCudaApiPermitted = 10;
#endif

// EFA's endpoint options (rdma/fi_ext.h, 1.18+; the 1.17 header has only FI_OPT_EFA_RNR_RETRY).
// All bool. EMULATED_*: getopt only, whether RMA goes through the device or is emulated with
// messages. USE_DEVICE_RDMA: setopt before fi_enable. *_IN_ORDER_ALIGNED_128_BYTES: setopt before
// fi_enable; true asks that each 128-byte aligned block of a write (or a received message) land
// in order and once, which NCCL's LL128 protocol relies on; -FI_EOPNOTSUPP where the NIC cannot.
constexpr int kFiOptEfaBase = -(0xefa << 16);  // FI_PROV_SPECIFIC_EFA, negated
#if HAVE_DECL_FI_OPT_EFA_EMULATED_WRITE
constexpr int kFiOptEfaEmulatedRead = FI_OPT_EFA_EMULATED_READ;
constexpr int kFiOptEfaEmulatedWrite = FI_OPT_EFA_EMULATED_WRITE;
static_assert(FI_OPT_EFA_EMULATED_READ == kFiOptEfaBase + 1, "FI_OPT_EFA_EMULATED_READ");
static_assert(FI_OPT_EFA_EMULATED_WRITE == kFiOptEfaBase + 2, "FI_OPT_EFA_EMULATED_WRITE");
#else
constexpr int kFiOptEfaEmulatedRead = kFiOptEfaBase + 1;
constexpr int kFiOptEfaEmulatedWrite = kFiOptEfaBase + 2;
#endif
#if HAVE_DECL_FI_OPT_EFA_USE_DEVICE_RDMA
constexpr int kFiOptEfaUseDeviceRdma = FI_OPT_EFA_USE_DEVICE_RDMA;
static_assert(FI_OPT_EFA_USE_DEVICE_RDMA == kFiOptEfaBase + 4, "FI_OPT_EFA_USE_DEVICE_RDMA");
#else
constexpr int kFiOptEfaUseDeviceRdma = kFiOptEfaBase + 4;
#endif
#if HAVE_DECL_FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES
constexpr int kFiOptEfaSendrecvInOrder128 = FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES;
static_assert(kFiOptEfaSendrecvInOrder128 == kFiOptEfaBase + 5, "SENDRECV_IN_ORDER_128");
#else
constexpr int kFiOptEfaSendrecvInOrder128 = kFiOptEfaBase + 5;
#endif
#if HAVE_DECL_FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES
constexpr int kFiOptEfaWriteInOrder128 = FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES;
static_assert(kFiOptEfaWriteInOrder128 == kFiOptEfaBase + 6, "WRITE_IN_ORDER_128");
#else
constexpr int kFiOptEfaWriteInOrder128 = kFiOptEfaBase + 6;
#endif

// fi_getopt(FI_OPT_ENDPOINT, ...), libfabric 1.20+: size_t, the largest untagged message and the
// largest RMA transfer the endpoint takes (efa-direct: one MTU for messages). Asked only of a
// fabric opened at API >= 1.20; other answers (-FI_ENOPROTOOPT) mean unknown.
#if HAVE_DECL_FI_OPT_MAX_MSG_SIZE
constexpr int kFiOptMaxMsgSize = FI_OPT_MAX_MSG_SIZE;
static_assert(FI_OPT_MAX_MSG_SIZE == 12, "FI_OPT_MAX_MSG_SIZE");
#else
constexpr int kFiOptMaxMsgSize = 12;
#endif
#if HAVE_DECL_FI_OPT_MAX_RMA_SIZE
constexpr int kFiOptMaxRmaSize = FI_OPT_MAX_RMA_SIZE;
static_assert(FI_OPT_MAX_RMA_SIZE == 14, "FI_OPT_MAX_RMA_SIZE");
#else
constexpr int kFiOptMaxRmaSize = 14;
#endif
constexpr uint32_t kFiOptMaxSizeVersion = kFiApi120;

// fi_mr_regattr flag, libfabric 1.20+: attr->dmabuf describes the memory.
#if HAVE_DECL_FI_MR_DMABUF
constexpr uint64_t kFiMrDmabuf = FI_MR_DMABUF;
static_assert(FI_MR_DMABUF == 1ull << 40, "FI_MR_DMABUF");
#else
constexpr uint64_t kFiMrDmabuf = 1ull << 40;
#endif

#if HAVE_STRUCT_FI_MR_DMABUF && HAVE_STRUCT_FI_MR_ATTR_DMABUF
// The headers have it all (1.20+): their layout is the one the library reads.
using FiMrDmabuf = struct fi_mr_dmabuf;
using FiMrAttrDmabuf = struct fi_mr_attr;
#else
struct FiMrDmabuf {
  int fd;
  uint64_t offset;  // where the registration starts inside the DMA-BUF
  size_t len;
  void* base_addr;  // the virtual address of the DMA-BUF's first byte
};

// struct fi_mr_attr as libfabric 1.20 lays it out: the 1.17 fields, with the first one a union,
// and four more at the end (zero here). Headers of 1.18/1.19 already have some of the tail; only
// the 1.17 prefix is checked against them.
struct FiMrAttrDmabuf {
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
static_assert(offsetof(FiMrAttrDmabuf, iface) == offsetof(fi_mr_attr, iface), "1.17 prefix");
static_assert(offsetof(FiMrAttrDmabuf, device) == offsetof(fi_mr_attr, device), "1.17 prefix");
static_assert(sizeof(FiMrAttrDmabuf) >= sizeof(fi_mr_attr), "never shorter than the headers'");
#endif

}  // namespace nf
