// Internal declarations shared by the mockefa provider's translation units.
//
// Concurrency: one process-wide recursive mutex (g().mu) guards every object below. Each
// libfabric entry point takes it for its whole duration and never calls application code while
// holding it, so the provider is FI_THREAD_SAFE without any finer reasoning.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "mock_dmabuf.h"
#include "mock_net.h"
#include "mock_opwire.h"
#include "mockefa.h"

#define MOCKEFA_EXPORT extern "C" __attribute__((visibility("default")))

namespace mockefa {

constexpr const char* kProvName = "mockefa";
constexpr const char* kFabricName = "efa";
// libfabric >= 2.1's thin RDM fabric (efa-semantics §1.4). Only built against 2.x headers: the
// mock must list exactly what it always did under Debian's 1.17.
#define MOCKEFA_HAVE_DIRECT (FI_MAJOR_VERSION >= 2)
constexpr const char* kDirectFabricName = "efa-direct";
constexpr uint32_t kProvVersion = FI_VERSION(1, 0);
constexpr size_t kAddrLen = 32;
constexpr size_t kIovLimit = 4;
constexpr size_t kRmaIovLimit = 1;
constexpr size_t kMrIovLimit = 1;
constexpr size_t kMrKeySize = 4;
constexpr size_t kCqDataSize = 4;
constexpr uint64_t kCqDataMax = 0xffffffffull;
constexpr uint64_t kTagFormat = 0xAAAAAAAAAAAAAAAAull;  // FI_TAG_GENERIC
constexpr int kMaxDomains = 32;
static_assert(sizeof(mockefa_counters::nic_tx_bytes) / sizeof(uint64_t) == kMaxDomains &&
                  sizeof(mockefa_counters::nic_tx_ops) / sizeof(uint64_t) == kMaxDomains,
              "one per-NIC counter per domain index");
constexpr size_t kMtu = 8928;
constexpr size_t kLinkMtu = 8760;
constexpr uint64_t kLinkSpeed = 100000000000ull;  // 100 Gb/s, what p4d/p5 NICs report
constexpr uint32_t kProtoVersion = 4;
constexpr size_t kErrDataMax = 1024;
// efa-direct limits: a send is one device packet (the mock NIC's link MTU), an RDMA is at most the
// device's max_rdma_size, inline data is 32 bytes, a WQE has 2 SGEs (RMA: one local IOV).
constexpr size_t kDirectMtu = kLinkMtu;
constexpr size_t kDirectMaxRdma = size_t{1} << 30;
constexpr size_t kDirectInjectSize = 32;
constexpr size_t kDirectIovLimit = 2;
constexpr size_t kDirectRmaLocalIovLimit = 1;
constexpr uint64_t kDirectBaseCaps =
    FI_MSG | FI_SEND | FI_RECV | FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;
constexpr uint64_t kDirectRmaCaps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// Caps of the `efa` RDM entry the mock offers (FI_HMEM is added only when asked for).
constexpr uint64_t kPrimaryCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_READ | FI_WRITE | FI_SEND |
                                  FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_DIRECTED_RECV;
constexpr uint64_t kSecondaryCaps = FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;
constexpr uint64_t kTxCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_READ | FI_WRITE | FI_SEND | FI_HMEM;
constexpr uint64_t kRxCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_RECV | FI_REMOTE_READ |
                             FI_REMOTE_WRITE | FI_SOURCE | FI_DIRECTED_RECV | FI_HMEM;
constexpr uint64_t kMsgOrder = FI_ORDER_SAS;
// Bits of mr_mode (spelled as numbers elsewhere would trip 2.x deprecation pragmas).
constexpr int kMrBasicLegacy = 1;                    // FI_MR_BASIC
constexpr int kMrScalableLegacy = 2;                 // FI_MR_SCALABLE
constexpr uint64_t kModeLocalMrLegacy = 1ULL << 55;  // FI_LOCAL_MR (mode bit, deprecated in 2.x)
constexpr int kMrRequired = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
constexpr int kMrRmaTarget = FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_RMA_EVENT;

// Endpoint option numbers added after libfabric 1.17 (values are ABI, efa-semantics §4).
constexpr int kOptCudaApiPermitted = 10;
constexpr int kOptSharedMemoryPermitted = 11;
constexpr int kOptMaxMsgSize = 12;
constexpr int kOptMaxTaggedSize = 13;
constexpr int kOptMaxRmaSize = 14;
constexpr int kOptMaxAtomicSize = 15;
constexpr int kOptInjectMsgSize = 16;
constexpr int kOptInjectTaggedSize = 17;
constexpr int kOptInjectRmaSize = 18;
constexpr int kOptInjectAtomicSize = 19;
constexpr int kOptEfaRnrRetry = -(0xefa << 16);
constexpr int kOptEfaEmulatedRead = kOptEfaRnrRetry + 1;
constexpr int kOptEfaEmulatedWrite = kOptEfaRnrRetry + 2;
constexpr int kOptEfaEmulatedAtomics = kOptEfaRnrRetry + 3;
constexpr int kOptEfaUseDeviceRdma = kOptEfaRnrRetry + 4;
constexpr int kOptEfaSendrecvInOrder128 = kOptEfaRnrRetry + 5;
constexpr int kOptEfaWriteInOrder128 = kOptEfaRnrRetry + 6;
constexpr int kOptEfaHomogeneousPeers = kOptEfaRnrRetry + 7;

// EFA provider error codes (prov_errno) the mock reports, efa-semantics §2.8.
enum ProvErrno : int {
  kEfaFlushed = 1,
  kEfaLocalQpError = 2,
  kEfaBadLkey = 5,
  kEfaRemoteBadAddress = 7,
  kEfaRemoteAbort = 8,
  kEfaBadDestQpn = 9,
  kEfaRnr = 10,
  kEfaBadStatus = 12,
  kEfaUnresp = 13,
  kEfaUnknownPeer = 14,
  kEfaUnreach = 15,
  kEfaErrPeerHandshake =
      4113,  // FI_EFA_ERR_PEER_HANDSHAKE: what EFA writes to the EQ for a handshake failure
};
int efa_errno_to_err(int prov_errno);      // the 2.1+ mapping to a positive FI_E* value
const char* efa_strerror(int prov_errno);  // static text, like EFA's table

enum class GdrMode { kP2p, kNoP2p, kNoCuda };
// MOCKEFA_DEVICE: kNew = the NIC's RDMA follows MOCKEFA_RMA (read and write alike); kOld = a
// first-generation device (vendor part id 0xefa0): RDMA read, no RDMA write, and at API < 1.18
// EFA leaves device RDMA off by default.
enum class DeviceGen { kNew, kOld };
// MOCKEFA_INORDER128: kAuto = WRITE_IN_ORDER_ALIGNED_128_BYTES granted exactly when the endpoint
// uses device RDMA write; kNo = a NIC that never reports the capability.
enum class InOrder128 { kAuto, kNo };
constexpr uint32_t kApi118 = FI_VERSION(1, 18);
constexpr uint32_t kApi120 = FI_VERSION(1, 20);
enum class HandshakeMode { kEagain, kQueue, kNone };

// What fi_getinfo reports and what endpoints enforce; read from the environment on each
// fi_getinfo / fi_domain / fi_endpoint so tests can change it between objects.
struct Profile {
  int ndomains = 1;
  GdrMode gdr = GdrMode::kP2p;
  DeviceGen device = DeviceGen::kNew;
  bool nic_rdma_read = false;  // the NIC can do RDMA read / write (device capability bits)
  bool nic_rdma_write = false;
  InOrder128 inorder128 = InOrder128::kAuto;
  // FI_EFA_USE_DEVICE_RDMA: -1 unset, 0/1, 2 = set but not a boolean (EFA aborts on it).
  int use_device_rdma_env = -1;
  std::string use_device_rdma_env_text;
  HandshakeMode handshake = HandshakeMode::kEagain;
  bool require_mr_local = false;
  bool legacy_opts = false;
  bool dmabuf = true;  // FI_MR_DMABUF registrations work (the kernel and rdma-core support them)
  size_t max_msg_size = SIZE_MAX;
  size_t inject_size = 4096;
  size_t eager_size = 8192;
  size_t tx_size = 4096;
  size_t rx_size = 8192;
  size_t max_writedata = size_t{1} << 30;
  uint64_t unreach_polls = 64;
  // MOCKEFA_NET=udp: every endpoint also has a UDP channel (mock_net.h) on MOCKEFA_NET_IP
  // (default 127.0.0.1), its address says where, and operations to such an address travel as
  // messages of the wire, also between endpoints of one process (README, "Across processes").
  bool net = false;
  uint32_t net_ip = 0x7f000001;     // host order
  uint64_t net_give_up_ms = 5000;   // MOCKEFA_NET_GIVE_UP_MS: an unanswered message fails its op
  uint64_t net_reasm_kib = 262144;  // MOCKEFA_NET_REASM_KIB: bytes held in unfinished operations
  double net_loss = 0,
         net_dup = 0;            // MOCKEFA_NET_LOSS / _DUP: per cent of datagrams dropped / doubled
  uint64_t rnr_delay_us = 1000;  // MOCKEFA_RNR_DELAY_US: the first back-off after an RNR
  size_t unexpected_limit = 8192;  // MOCKEFA_UNEXPECTED_LIMIT: efa's unexpected queue, messages
  bool write_event_context =
      false;  // fi_writedata target events carry a junk op_context (shm 1.17)
  // MOCKEFA_WRITE_LEN_BITS=16: the length of a write's target event keeps its low 16 bits only,
  // as rdma-core's efa provider without length_hi support reports an RDMA write with immediate
  // data (a 64 KiB write reads as 0). 0 (default): the whole length.
  unsigned write_len_bits = 0;
  bool verbose = false;
  bool abort_on_violation = false;
  // efa-direct: MOCKEFA_NO_UNSOLICITED_WRITE_RECV=1 (a NIC without unsolicited write recv), and
  // MOCKEFA_DIRECT_REORDER=0 (keep post order on efa-direct endpoints, for debugging).
  bool no_unsolicited_write_recv = false;
  bool direct_reorder = true;
  // MOCKEFA_CTX_REUSE=1: a context pointer may be reused while its op is in flight on the efa
  // fabric, as on EFA (mode 0 there; only efa-direct's FI_CONTEXT2 needs the memory). Off by
  // default: the plugin never reuses one, and a reuse there is a bug the mock should catch.
  bool ctx_reuse = false;
};
Profile read_profile();
mockefa_faults faults_from_env();
mockefa_faults faults_for_new_endpoint();
void nic_facts(int index, mockefa_nic_info* out);
std::string domain_name(int index);
int domain_index(const char* name, int ndomains);  // -1 if not one of ours

// 32-byte FI_ADDR_EFA address: GID(16) QPN(2) pad(2) QKEY(4) unused(8).
struct EfaAddr {
  uint8_t gid[16];
  uint16_t qpn;
  uint16_t pad;
  uint32_t qkey;
  uint8_t unused[8];
};
static_assert(sizeof(EfaAddr) == kAddrLen, "FI_ADDR_EFA is 32 bytes");
inline bool operator<(const EfaAddr& a, const EfaAddr& b) { return std::memcmp(&a, &b, 24) < 0; }
inline bool operator==(const EfaAddr& a, const EfaAddr& b) { return std::memcmp(&a, &b, 24) == 0; }
std::string addr_str(const EfaAddr& a);  // fi_addr_efa://[gid]:qpn:qkey
uint64_t steady_ns();                    // the clock of RNR back-offs
// MOCKEFA_NET: where an address's endpoint listens (false: not a net address).
bool net_peer_of(const EfaAddr& a, net::Peer* out);
struct Op;
// A proxy's completion, sent back to its initiator's endpoint (mock_progress.cpp).
void send_result(Op* op, int status);

struct Fabric;
struct Domain;
struct Av;
struct Cq;
struct Mr;
struct Ep;
struct Op;
// MOCKEFA_NET: a freshly posted op of ep to a net address goes on the wire at once.
void net_post(Ep* ep, Op* op);

// Each object that libfabric hands out is a small standard-layout handle whose first member is
// the libfabric fid struct, plus a pointer back to the C++ object (which is not standard-layout).
template <typename FidT, typename Obj>
struct Handle {
  FidT fid;
  Obj* self;
};
template <typename Obj, typename FidT>
Obj* self_of(FidT* f) {
  return reinterpret_cast<Handle<FidT, Obj>*>(f)->self;
}

struct Fabric {
  Handle<fid_fabric, Fabric> h;
  uint32_t api_version = 0;  // what fi_fabric's attr said (the version the app gave fi_getinfo)
  bool direct = false;       // opened as `efa-direct`
  int domains = 0;
  int eqs = 0;
};

// An event queue. The only events the provider writes are errors that belong to no operation
// (fi_eq_write adds user events); fi_eq_read does not drive progress, as on EFA.
struct EqEntry {
  uint32_t event = 0;
  bool is_error = false;
  std::vector<uint8_t> bytes;  // a user event's payload (fi_eq_write)
  fid_t fid = nullptr;         // error entries
  void* context = nullptr;
  uint64_t data = 0;
  int err = 0;
  int prov_errno = 0;
  std::string err_data;
};

struct Eq {
  Handle<fid_eq, Eq> h;
  Fabric* fabric = nullptr;
  uint64_t flags = 0;
  std::deque<EqEntry> entries;
  std::string err_buf;  // provider-owned err_data handed out by readerr
  int bound_eps = 0;
};

struct Domain {
  Handle<fid_domain, Domain> h;
  Fabric* fabric = nullptr;
  int index = 0;
  std::string name;
  int mr_mode = 0;
  uint64_t caps = 0;
  Profile profile;
  bool direct = false;  // of an `efa-direct` fabric
  int children = 0;     // open AVs, CQs, EPs, MRs
};

struct Av {
  Handle<fid_av, Av> h;
  Domain* domain = nullptr;
  std::vector<EfaAddr> table;
  std::vector<bool> valid;
  int bound_eps = 0;
  bool lookup(fi_addr_t a, EfaAddr* out) const;
  fi_addr_t reverse(const EfaAddr& a) const;
};

struct Mr {
  Handle<fid_mr, Mr> h;
  Domain* domain = nullptr;
  uintptr_t base = 0;
  size_t len = 0;
  uint64_t access = 0;
  int iface = FI_HMEM_SYSTEM;
  int device = 0;
  uint64_t key = 0;
  // FI_MR_DMABUF: the reference the kernel takes on the dma-buf while the MR lives (a dup of the
  // caller's fd, closed with the MR): the GPU memory stays pinned until fi_close, whatever the
  // caller does with its fd or its allocation. -1 otherwise.
  int dmabuf_ref = -1;
  // CUDA memory written by this MR's NIC with no read through it since (gpu_unflushed_mrs).
  bool unflushed = false;
  bool covers(uintptr_t addr, size_t n) const {
    return addr >= base && n <= len && addr - base <= len - n;
  }
};

struct CqEntry {
  void* op_context = nullptr;
  uint64_t flags = 0;
  size_t len = 0;
  void* buf = nullptr;
  uint64_t data = 0;
  uint64_t tag = 0;
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  bool is_error = false;
  int err = 0;
  int prov_errno = 0;
  size_t olen = 0;
  std::string err_data;
  uint64_t ep_serial = 0;  // endpoint whose context set this entry releases
  bool track_ctx = false;
  uint32_t hidden = 0;  // remaining CQ reads before it becomes visible
  bool held = false;    // a send's completion held back (hold_send_completions)
};

struct Cq {
  Handle<fid_cq, Cq> h;
  Domain* domain = nullptr;
  fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
  size_t entry_size = sizeof(fi_cq_entry);
  std::deque<CqEntry> entries;
  std::vector<Ep*> eps;  // endpoints bound (for progress)
  std::string err_buf;   // provider-owned err_data handed out by readerr
  std::mt19937_64 rng;
};

struct Seg {
  uint8_t* ptr = nullptr;
  size_t len = 0;
  Mr* mr = nullptr;  // the descriptor the app gave, if any (checked live before each copy)
};

struct RecvReq {
  void* context = nullptr;
  std::vector<Seg> segs;
  size_t cap = 0;
  bool tagged = false;
  uint64_t tag = 0, ignore = 0;
  bool any_src = true;
  EfaAddr src{};
  bool want_completion = true;
  bool track_ctx = false;
  bool mr_lost = false;
  int fail_prov = 0;  // injected failure
};

enum class OpKind { kMsg, kTagged, kWrite, kRead, kHandshake, kHandshakeReply };
enum class OpState { kWire, kWaitMatch, kLanding, kRetired };

struct Op {
  uint64_t id = 0;
  OpKind kind = OpKind::kMsg;
  OpState st = OpState::kWire;
  Ep* init = nullptr;  // null once the initiator has its completion (eager unexpected)
  uint64_t init_serial = 0;
  EfaAddr src_addr{}, dst_addr{};
  void* context = nullptr;
  uint64_t tx_flags = 0;  // completion flags at the initiator
  bool want_completion = true;
  bool track_ctx = false;
  bool is_inject = false;
  std::vector<Seg> segs;
  std::vector<uint8_t> own;  // injected or eagerly buffered payload (segs then point here)
  size_t len = 0;
  uint64_t tag = 0, data = 0;
  bool has_data = false;
  uint64_t rma_addr = 0, rma_key = 0;
  Mr* rma_mr = nullptr;  // the target registration, once rma_accept found it
  bool needs_handshake = false;
  bool ordered = true;  // FI_ORDER_SAS applies between this op and its pair's next message
  uint32_t wire_delay = 0;
  uint64_t undelivered_polls = 0;
  uint64_t rnr_until_ns = 0;  // receiver not ready: tried again from then (steady clock)
  uint32_t rnr_count = 0;     // RNRs so far: the back-off doubles with each
  // MOCKEFA_NET: sent to a remote endpoint (its result completes it), or a proxy of a remote
  // initiator's op (its completion becomes a result sent back through remote_via).
  bool remote_sent = false;
  uint64_t result_due_us = 0;  // sent: when to ask whether its target still lives (a probe)
  bool remote = false;
  struct Ep* remote_via = nullptr;
  net::Peer remote_peer;
  uint64_t remote_op_id = 0;
  int fail_err = 0, fail_prov = 0;  // injected failure, reported at the initiator's progress
  bool fail_unreachable = false;    // ... because of MOCKEFA_UNREACHABLE_AFTER
  bool fail_peer_lost =
      false;  // ... because of MOCKEFA_EQ_ERROR_AFTER (the peer's handshake failed)
  bool mr_lost = false;
  // landing state
  RecvReq recv;
  Ep* recv_ep = nullptr;
  size_t land_bytes = 0, chunk = 0;
  std::vector<size_t> chunks;  // remaining chunk indices, in landing order
  bool internal = false;       // handshake traffic: no completion, not counted as outstanding
  bool direct = false;         // posted by an efa-direct endpoint
  bool recv_consumed = false;  // efa-direct writedata that took a posted receive (recv holds it)
  bool on_wire = false;
  std::list<Op*>::iterator wire_it;
};

enum class HsState { kNone, kRequested, kDone, kFailed };

struct Ep {
  Handle<fid_ep, Ep> h;
  Domain* domain = nullptr;
  uint64_t serial = 0;
  EfaAddr addr{};
  Av* av = nullptr;
  Cq* tx_cq = nullptr;
  Cq* rx_cq = nullptr;
  bool tx_selective = false, rx_selective = false;
  bool enabled = false;
  uint64_t caps = 0;
  uint64_t tx_op_flags = 0, rx_op_flags = 0;
  uint64_t tx_msg_order = 0, rx_msg_order = 0;
  size_t inject_size = 0, max_msg = 0, max_tagged = 0, max_rma = 0;
  size_t inject_msg = 0, inject_tagged = 0, inject_rma = 0;
  size_t tx_size = 0, rx_size = 0;
  bool use_device_rdma =
      false;  // FI_OPT_EFA_USE_DEVICE_RDMA / FI_EFA_USE_DEVICE_RDMA / EFA's default
  bool read_emulated() const { return !(use_device_rdma && profile.nic_rdma_read); }
  bool write_emulated() const { return !(use_device_rdma && profile.nic_rdma_write); }
  bool homogeneous_peers = false;
  bool write_in_order_128 = false;
  bool sendrecv_in_order_128 = false;
  Eq* eq = nullptr;
  // MOCKEFA_EQ_ERROR_AFTER: peers whose (mock) handshake failed, and the events not yet raised.
  bool eq_error_fired = false;
  std::vector<EfaAddr> eq_error_pending;
  std::set<EfaAddr> lost_peers;
  std::map<EfaAddr, uint64_t> rnr_backoff;  // efa: peers in RNR back-off, until (steady clock)
  // MOCKEFA_NET: the channel, ops sent through it awaiting their results (by op id), which op each
  // wire message belongs to, pieces being put back together, and message order per peer (SAS).
  std::unique_ptr<net::Channel> chan;
  std::map<uint64_t, Op*> remote_out;
  std::map<uint64_t, uint64_t> msg_op;
  // Probes in flight (wire message id -> peer): a peer that owes results is asked whether it
  // still lives, since one that died after acknowledging an op's messages never sends its result.
  std::map<uint64_t, net::Peer> probe_msg;
  std::set<net::Peer> probing;
  std::unique_ptr<opwire::Reassembly> reasm;
  std::map<EfaAddr, uint64_t> sas_out;  // next message seq to each destination
  struct SasIn {
    uint64_t next = 1;
    std::map<uint64_t, Op*> held;  // arrived ahead of their turn
  };
  std::map<EfaAddr, SasIn> sas_in;
  size_t min_multi_recv = 0;
  size_t rnr_retry = 3;
  mockefa_faults faults{};
  std::mt19937_64 rng;
  uint64_t post_attempts = 0, accepted_ops = 0, tx_ops = 0;
  bool eagain_latched = false;
  bool unreachable = false;
  uint64_t tx_outstanding = 0;
  std::unordered_multiset<void*> inflight_ctx;
  std::list<RecvReq> posted_msg, posted_tagged, failing_recvs;
  std::list<Op*> unexpected_msg, unexpected_tagged;
  std::map<EfaAddr, HsState> peers;
  uint64_t progress_passes = 0;
  Profile profile;  // read when the endpoint was opened
  // efa-direct (an endpoint of an `efa-direct` domain): its own limits and rules.
  bool direct = false;
  bool rx_cq_data = false;  // FI_RX_CQ_DATA in its info's mode
  bool reorder = false;     // deliver and complete out of order (MOCKEFA_DIRECT_REORDER)
  size_t tx_iov_limit = kIovLimit, rx_iov_limit = kIovLimit, rma_iov_limit = kIovLimit;
  // The two pointer-sized words the provider wrote into each live fi_context2 (efa-direct).
  std::unordered_map<void*, std::pair<uintptr_t, uintptr_t>> ctx_marks;
};

struct Global {
  std::recursive_mutex mu;
  mockefa_counters counters{};
  std::string last_violation;
  std::unordered_set<const Mr*> live_mrs;
  std::unordered_map<uint64_t, Mr*> mr_by_key;
  uint32_t next_key = 0x1000;
  uint64_t next_cuda_key = uint64_t{1} << 32;
  std::map<EfaAddr, Ep*> eps_by_addr;  // enabled endpoints
  std::set<EfaAddr> closed_addrs;      // endpoints that were enabled and are gone
  std::unordered_map<uint64_t, Ep*> eps_by_serial;
  std::list<Op*> wire;         // ops in kWire or kLanding, in post order
  std::vector<Op*> graveyard;  // retired ops, freed when no pass iterates them
  int pass_depth = 0;
  uint64_t next_serial = 1, next_op_id = 1;
  uint16_t next_qpn[kMaxDomains] = {};
  uint32_t last_api_version = 0;  // of the most recently opened fabric
  bool faults_override = false;
  mockefa_faults faults_override_value{};
};
Global& g();
void destroy_global();
void domain_gid(int index, uint8_t gid[16]);
using Lock = std::lock_guard<std::recursive_mutex>;

// checker / counters
void violation(int kind, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void count_fault(int kind);
void apply_faults(Ep* ep, const mockefa_faults& f);  // also restarts its counters

// ops tables (set up once)
extern fi_ops g_fabric_fi_ops, g_domain_fi_ops, g_av_fi_ops, g_cq_fi_ops, g_mr_fi_ops, g_ep_fi_ops,
    g_eq_fi_ops;
extern fi_ops_eq g_eq_ops;
extern fi_ops_fabric g_fabric_ops;
extern fi_ops_domain g_domain_ops;
extern fi_ops_mr g_mr_ops;
extern fi_ops_av g_av_ops;
extern fi_ops_cq g_cq_ops;
extern fi_ops_ep g_ep_ops;
extern fi_ops_cm g_cm_ops;
extern fi_ops_msg g_msg_ops;
extern fi_ops_tagged g_tagged_ops;
extern fi_ops_rma g_rma_ops;
extern fi_ops_atomic g_atomic_ops;
extern fi_ops_collective g_collective_ops;
void fill_object_fi_ops(fi_ops* o, int (*close_fn)(fid*));  // close + -FI_ENOSYS rest
void init_fabric_ops();
void init_cq_ops();
void init_eq_ops();
void init_mr_ops();
void init_ep_ops();
void init_msg_ops();
void init_rma_ops();
void init_stub_ops();

// info
int mock_getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
                 const fi_info* hints, fi_info** info);
int mock_fabric_open(fi_fabric_attr* attr, fid_fabric** fabric, void* context);

// objects
int mock_cq_open(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq, void* context);
int mock_eq_open(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** eq, void* context);
void eq_write_error(Eq* eq, fid_t fid, void* context, int err, int prov_errno,
                    std::string err_data);
void eq_forget_fid(Eq* eq, fid_t fid);  // drops the entries about fid (its object is closing)
int mock_endpoint(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);
Mr* live_mr(const void* desc);  // the Mr behind desc if it is a live registration, else null
Mr* mr_for_key(uint64_t key);
void mr_closing(Mr* mr);  // flags ops that still use it

// posting (ep + msg + rma)
struct PostArgs {
  OpKind kind = OpKind::kMsg;
  bool is_recv = false;
  const iovec* iov = nullptr;
  void** desc = nullptr;
  size_t count = 0;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  void* context = nullptr;
  uint64_t flags = 0;  // FI_INJECT, FI_COMPLETION, FI_REMOTE_CQ_DATA, ...
  uint64_t data = 0;
  uint64_t tag = 0, ignore = 0;
  const fi_rma_iov* rma = nullptr;
  size_t rma_count = 0;
  bool inject_call = false;  // fi_inject*: no completion at all
};
ssize_t post(Ep* ep, const PostArgs& a);

// progress engine
void progress_ep(Ep* ep);
void retire(Op* op);
void wire_push(Op* op);
void flush_graveyard();
void complete_entry(Ep* ep, Cq* cq, CqEntry e, bool want_completion);
void fail_initiator(Op* op, int prov_errno, const char* why);
void match_new_recv(Ep* ep, RecvReq&& r);
void ep_teardown(Ep* ep);
void raise_eq_errors(Ep* ep);  // the endpoint's pending MOCKEFA_EQ_ERROR_AFTER events
Ep* ep_by_serial(uint64_t serial);
Ep* enabled_ep(const EfaAddr& a);
std::string err_text(const char* why, const EfaAddr& mine, const EfaAddr* peer);

// Pass guard: while a progress pass iterates, retired ops must stay allocated.
struct PassGuard {
  PassGuard() { ++g().pass_depth; }
  ~PassGuard() {
    if (--g().pass_depth == 0) flush_graveyard();
  }
  PassGuard(const PassGuard&) = delete;
  PassGuard& operator=(const PassGuard&) = delete;
};

}  // namespace mockefa
