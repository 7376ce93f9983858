// RAII over libfabric objects and provider selection. Knows nothing of NCCL.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "util/mem_kind.h"
#include "util/status.h"

namespace nf {

struct MemReg;

// What a higher layer keeps per domain and must close before the domain closes (mem/'s
// registration cache: its idle registrations would keep the domain from closing). fabric/ only
// owns it; mem/ attaches it (mem/mr_cache.h), so fabric/ includes nothing of mem/.
class DomainAttachment {
 public:
  virtual ~DomainAttachment() = default;
};

// A registration held for a caller by a cache of a higher layer: deregister_memory() hands it
// back through release() instead of closing it.
class HeldReg {
 public:
  virtual void release() = 0;

 protected:
  ~HeldReg() = default;
};

// The newest libfabric API version both the headers we were built with and the library loaded
// know (1.17 refuses 1.18; a 2.1 library serves a 1.17 build at 1.17).
uint32_t fabric_api_version();
// The versions discover_nics asks for, newest first: fabric_api_version() (or `cap`, 0 = none, if
// lower), then each older one down to 1.17 (2.0 is followed by 1.22).
std::vector<uint32_t> api_version_ladder(uint32_t cap);
// "1.18".
std::string api_version_str(uint32_t v);
// NCCL_FABRIC_API_VERSION: "auto" or "" (0: no cap) or "MAJOR.MINOR" >= 1.17.
Status parse_api_version(const std::string& text, uint32_t* out, std::string* error);

struct InfoDeleter {
  void operator()(fi_info* i) const { fi_freeinfo(i); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// One NIC as libfabric presents it: a domain of one provider.
struct Nic {
  InfoPtr info;              // a private copy (fi_dupinfo) of the entry we chose for this domain
  std::string provider;      // e.g. "tcp;ofi_rxm"
  std::string domain;        // e.g. "rdmap16s27-rdm", "lo"
  std::string pci_path;      // canonical /sys/devices/... path, or "" when there is none
  int speed_mbps = 0;        // 0 when unknown, until settle_nic_speeds (core/) fills it
  std::string speed_source;  // where speed_mbps came from, for the log ("" while unknown)
  uint64_t guid = 0;
  bool loopback = false;
  bool rma = false;  // FI_RMA writes with remote CQ data of >= 4 bytes: the RDMA protocol works
  bool rma_read = false;     // FI_READ and FI_REMOTE_READ too: a GPUDirect flush is possible
  bool hmem = false;         // FI_HMEM granted (asked for only where a CUDA driver is present)
  uint32_t api_version = 0;  // the API version fi_getinfo answered at (fabric_attr->api_version)
  std::string api_refused;   // the newer versions the provider refused first ("" if none)
  std::string fabric;        // fabric_attr->name: "efa-direct", "efa", "TCP-IP", ...
  // Why this fabric, one clause for the log ("efa-direct: offered with device RMA writes
  // (auto)"); "" for a provider that lists no efa-direct fabric (its only fabric).
  std::string fabric_why;
  bool tagged = false;      // FI_TAGGED granted: the SENDRECV protocol works (efa-direct: never)
  bool rx_cq_data = false;  // mode FI_RX_CQ_DATA: each remote write with CQ data consumes a
                            // posted receive (efa-direct on NICs without unsolicited write recv)
};

// Link speeds above this (10 Tb/s per NIC) are a provider's or driver's mistake, not a figure to
// plan with; NCCL_FABRIC_SPEED has the same bound.
constexpr int kMaxSpeedMbps = 10000000;

// The speed assumed for a NIC of `provider` when neither the provider nor the OS reports its link
// speed, Mb/s (docs/configuration.md#speed): EFA 100000 (every EFA generation has 100 Gb/s links
// or more), verbs 100000 (RDMA NICs of today start there), shm 100000 (a memory copy, about
// 12.5 GB/s), anything else 10000 (tcp, sockets, udp: NCCL's own socket transport assumes this).
int default_speed_mbps(const std::string& provider);

// libfabric 2.1's thin EFA fabric: one device operation per call, no tagged messages, sends of
// one MTU, no ordering (efa-semantics §1.4). Selection keys on this fabric name, never on the
// provider's name.
constexpr const char* kEfaDirectFabric = "efa-direct";

// NCCL_FABRIC_EFA_FABRIC: which fabric of a provider that lists efa-direct beside its other one.
enum class EfaFabric {
  kAuto,    // efa-direct where it grants RMA writes and tagged messages are not needed, else efa
  kEfa,     // never efa-direct
  kDirect,  // only efa-direct: fail where it is not offered with RMA writes
};
// "auto", "efa", "efa-direct" (what params.cpp accepts); false with *error naming the parameter.
bool parse_efa_fabric(const std::string& text, EfaFabric* out, std::string* error);
const char* efa_fabric_str(EfaFabric f);

// The providers tried when NCCL_FABRIC_PROVIDER is empty, best first.
const std::vector<std::string>& default_provider_order();

// Finds the NICs of the first provider (from `wanted`, or the default order) that has any.
// `domain_filter` is a comma-separated list of domain names ("" = all). `want_hmem`: ask for
// FI_HMEM first (then without). On failure, *report says which providers were tried and what
// each answered.
// `api_cap`: the newest API version to ask for (0: the newest known, see api_version_ladder).
// `efa_fabric`: for a provider that lists an efa-direct fabric, which one to take (see EfaFabric);
// `need_tagged`: the caller can only use tagged messages (NCCL_FABRIC_PROTOCOL=sendrecv), which
// efa-direct lacks, so auto keeps to the other fabric. Each Nic says which fabric and why.
Status discover_nics(const std::string& wanted, const std::string& domain_filter, bool want_hmem,
                     std::vector<Nic>* out, std::string* report, uint32_t api_cap = 0,
                     EfaFabric efa_fabric = EfaFabric::kAuto, bool need_tagged = false);

// An open fabric + domain for one NIC. Shared by every comm on that NIC.
class Domain {
 public:
  static Status open(const Nic& nic, std::shared_ptr<Domain>* out);
  ~Domain();
  Domain(const Domain&) = delete;
  Domain& operator=(const Domain&) = delete;

  const fi_info* info() const { return info_.get(); }
  fid_fabric* fabric() const { return fabric_; }
  fid_domain* domain() const { return domain_; }
  uint64_t mr_mode() const { return static_cast<uint64_t>(info_->domain_attr->mr_mode); }
  size_t inject_size() const { return info_->tx_attr->inject_size; }
  uint64_t max_msg_size() const { return info_->ep_attr->max_msg_size; }
  size_t cq_data_size() const { return info_->domain_attr->cq_data_size; }
  bool rma() const { return (info_->caps & FI_RMA) != 0 && info_->domain_attr->cq_data_size >= 4; }
  bool hmem() const { return (info_->caps & FI_HMEM) != 0; }
  // FI_TAGGED granted (efa-direct: never).
  bool tagged() const { return (info_->caps & FI_TAGGED) != 0; }
  // mode FI_RX_CQ_DATA: a remote write with CQ data consumes one of our posted receives.
  bool rx_cq_data() const { return (info_->mode & FI_RX_CQ_DATA) != 0; }
  // fabric_attr->name ("efa-direct", "efa", ...; "" when the provider gives none).
  const std::string& fabric_name() const { return fabric_name_; }
  const std::string& name() const { return name_; }
  // GPUDirect is in use on this domain: every endpoint opened from now on forbids the provider
  // CUDA calls (FI_OPT_CUDA_API_PERMITTED=false), as NCCL requires.
  void set_forbid_cuda(bool v) { forbid_cuda_ = v; }
  bool forbid_cuda() const { return forbid_cuda_; }
  // GPU memory registers here (NCCL_PTR_CUDA), and through DMA-BUFs (NCCL_PTR_DMABUF).
  void set_gdr(bool cuda, bool dmabuf) {
    forbid_cuda_ = cuda;
    dmabuf_ = cuda && dmabuf;
  }
  bool gdr() const { return forbid_cuda_; }
  bool gdr_dmabuf() const { return dmabuf_; }
  // What a higher layer attached (mem/mr_cache.h: the registration cache of NCCL's buffers),
  // closed before the domain. Attached once, right after open, before the domain is shared.
  void attach(std::unique_ptr<DomainAttachment> a) { attachment_ = std::move(a); }
  DomainAttachment* attachment() const { return attachment_.get(); }
  // Keys for providers that do not choose them (no FI_MR_PROV_KEY): unique per domain.
  uint64_t next_requested_key() { return next_key_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Domain() = default;
  InfoPtr info_;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  std::string name_;
  std::string fabric_name_;
  std::atomic<uint64_t> next_key_{1};
  bool forbid_cuda_ = false;
  bool dmabuf_ = false;
  std::unique_ptr<DomainAttachment> attachment_;
};

// A memory registration, or the absence of one where the provider needs none.
struct MemReg {
  fid_mr* mr = nullptr;
  void* desc = nullptr;  // what fi_tsend/fi_trecv take; NULL where no registration is needed
  uint64_t key = 0;
  uintptr_t base = 0;
  size_t len = 0;
  // What a peer subtracts from a virtual address to get the address fi_write takes: 0 with
  // FI_MR_VIRT_ADDR, the registration's start otherwise (offset addressing).
  uintptr_t remote_base = 0;
  MemKind kind = MemKind::kHost;
  HeldReg* cached = nullptr;  // held from the domain's registration cache: released, not closed
};

// What memory a registration covers, beyond its address.
struct MemSpec {
  MemKind kind = MemKind::kHost;
  int device = 0;      // CUDA device ordinal
  int dmabuf_fd = -1;  // >= 0: register through this DMA-BUF (libfabric 1.20+)
  uint64_t dmabuf_offset = 0;
};

// Registers [buf, buf+len) for local send/recv as the provider's mr_mode demands
// (FI_MR_LOCAL: a descriptor; FI_MR_ENDPOINT: bound to `ep`; no FI_MR_PROV_KEY: our key).
// `remote`: also as the target of peers' RMA writes (always registered then, with a key).
Status register_memory(Domain& dom, fid_ep* ep, void* buf, size_t len, MemReg* out,
                       bool remote = false);
// The general form: `remote_access` is a mask of FI_REMOTE_WRITE / FI_REMOTE_READ; CUDA memory
// is always registered (FI_HMEM_CUDA), through its DMA-BUF when spec.dmabuf_fd >= 0.
// With `quiet`, a failure is described there instead of logged (probes).
Status register_memory_spec(Domain& dom, fid_ep* ep, void* buf, size_t len, uint64_t remote_access,
                            const MemSpec& spec, MemReg* out, std::string* quiet = nullptr);
// Closes a registration, or gives a cached one back to its cache.
void deregister_memory(MemReg* reg);

// What a poll of the completion queue found.
struct CqError {
  int err = 0;         // positive FI_E*
  int prov_errno = 0;  // the provider's own code (tcp and rxm: the socket's errno)
  void* op_context = nullptr;
  std::string text;
  bool entry = false;  // an error completion (fi_cq_readerr), not a failure of the queue itself
  uint64_t flags = 0;  // the error completion's flags, remote CQ data and tag
  uint64_t data = 0;
  uint64_t tag = 0;
};

// An error the provider reported on an endpoint's event queue: one that belongs to no operation
// (EFA: a failed handshake with a peer, an internal packet that could not be sent).
struct EqError {
  int err = 0;  // positive FI_E*
  int prov_errno = 0;
  std::string text;  // the provider's own description (err_data or fi_eq_strerror)
};

// What an endpoint of this provider offers beyond the basics, as its options answer
// (EFA's FI_OPT_EFA_*; other providers answer -FI_ENOPROTOOPT and are not EFA-like).
struct EpFeatures {
  bool efa_options = false;  // EFA-like: the provider knows EFA's endpoint options, or is named efa
  bool eq = false;           // an event queue is bound
  bool device_rdma_set = false;        // FI_OPT_EFA_USE_DEVICE_RDMA=true accepted
  std::string device_rdma_note;        // why it was not set ("" when it was)
  bool write_emulated = false;         // FI_OPT_EFA_EMULATED_WRITE (false where unknown)
  bool read_emulated = false;          // FI_OPT_EFA_EMULATED_READ
  bool write_in_order_128 = false;     // FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES granted
  bool sendrecv_in_order_128 = false;  // ..._SENDRECV_IN_ORDER_ALIGNED_128_BYTES granted
  std::string in_order_note;           // what the provider answered for each
  // FI_OPT_MAX_MSG_SIZE / FI_OPT_MAX_RMA_SIZE after fi_enable (API >= 1.20): the largest untagged
  // send and RMA transfer. 0: unknown (older API, or the provider does not answer).
  size_t max_msg = 0;
  size_t max_rma = 0;
};

// One RDM endpoint with its own completion queue, address vector and event queue.
class Endpoint {
 public:
  // With dom->forbid_cuda(), sets FI_OPT_CUDA_API_PERMITTED=false before enabling it. Binds an
  // event queue (EFA calls abort() when an operation-less error finds none; a provider that
  // refuses one, not being EFA-like, goes without). On EFA-like providers it asks for device RDMA
  // (unless FI_EFA_USE_DEVICE_RDMA is set) and the 128-byte in-order options. When fi_enable
  // answers -FI_EBUSY (shm: the endpoint's name is taken in /dev/shm) it WARNs and tries another
  // endpoint, which the provider names anew, a bounded number of times.
  static Status open(std::shared_ptr<Domain> dom, size_t cq_size, std::unique_ptr<Endpoint>* out);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  fid_ep* ep() const { return ep_; }
  fid_cq* cq() const { return cq_; }
  Domain& domain() const { return *dom_; }
  const std::shared_ptr<Domain>& domain_ptr() const { return dom_; }

  // Our address, as peers insert it.
  Status name(uint8_t* buf, size_t* len) const;
  Status insert_peer(const uint8_t* addr, size_t len, fi_addr_t* out);
  // The provider's printable form of an address (fi_av_straddr), for messages.
  std::string address_text(const uint8_t* addr, size_t len) const;

  // Reads up to `max` completions. Returns how many (0 = none), or -1 with *err filled when an
  // error completion was at the head of the queue.
  int read(fi_cq_tagged_entry* entries, int max, CqError* err);
  // Reads the event queue: 1 with *err filled for an error entry, 0 when there is nothing (other
  // events are consumed and ignored), -1 when the queue itself failed (*err says how).
  int read_eq(EqError* err);
  const EpFeatures& features() const { return features_; }
  // The largest untagged send (fi_send*): the provider's FI_OPT_MAX_MSG_SIZE where it answered,
  // else ep_attr->max_msg_size (on efa-direct with FI_RMA that is the RDMA limit, not the MTU).
  size_t msg_limit() const;
  // The largest RMA transfer: FI_OPT_MAX_RMA_SIZE where it answered, else ep_attr->max_msg_size.
  size_t rma_limit() const;

 private:
  Endpoint() = default;
  int enable(const char** call);
  void close_ep();
  std::shared_ptr<Domain> dom_;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_eq* eq_ = nullptr;
  fid_ep* ep_ = nullptr;
  EpFeatures features_;
};

}  // namespace nf
