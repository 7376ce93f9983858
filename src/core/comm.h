// The SENDRECV protocol: one NCCL message = one tagged message (fi_tsend / fi_trecv).
// Every comm of a plugin context on one device shares one RDM endpoint (SharedEp), multiplexed by
// tag: the receiver's comm id sits in tag bits 32..59. One endpoint per process pair means one
// provider connection carrying both directions (docs/architecture.md). NCCL's service and
// progress threads both reach the shared completion queue, so everything that posts to it, reads
// it or touches a request pool holds SharedEp::mu.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/profile.h"
#include "core/protocol.h"
#include "core/stats.h"
#include "fabric/fabric.h"
#include "mem/cuda.h"
#include "util/params.h"
#include "util/pool.h"
#include "util/status.h"
#include "util/ticket_lock.h"
#include "wire/wire.h"

namespace nf {

constexpr int kMaxGroup = 8;      // largest grouped receive
constexpr int kMaxRequests = 32;  // NCCL_NET_MAX_REQUESTS
constexpr uint32_t kReqMagic = 0x52514e46u;
constexpr uint32_t kCommMagic = 0x434d4e46u;
constexpr uint32_t kMrMagic = 0x524d4e46u;

struct Request;
struct Comm;
struct CtrlPool;
struct CtrlRx;
struct MemHandle;
struct Zombie;
struct Liveness;

// What the provider gets as the context of each operation: the fi_context2 it may use comes first,
// then where the completion belongs.
struct OpCtx {
  fi_context2 fi;
  Request* req;
  uint32_t index;
};

// A request is one job, with the fields of that job (docs/architecture.md, "Requests", draws
// the lifecycle):
//   kSend      one NCCL message: a tagged send (SENDRECV), an eager message or notice into the
//              receiver's control pool, or up to kMaxGroup writes into its buffer (RDMA);
//   kRecv      one NCCL receive of up to kMaxGroup buffers;
//   kCtrlSend, kCtrlRecv  one handshake message;
//   kFlush     the GPUDirect flush's read;
// (The RDMA protocol's clear-to-send and eager messages arrive in the endpoint's pool of control
// receives, core/ctrl.h, which belongs to no request.)
enum class ReqType : uint8_t { kSend, kRecv, kCtrlSend, kCtrlRecv, kFlush };

// One lifecycle for every type. kPending ends in kDone or kError (each type's own rule, below);
// reporting it to NCCL (test) frees it, or, while the provider still holds one of its operations
// or it waits on the comm's deferred list, leaves it kReleased until the last one comes back.
// A comm that closes with operations in the provider turns their requests kZombie: completions
// then only count down what the zombie keeps alive.
enum class ReqState : uint8_t { kFree, kPending, kDone, kError, kReleased, kZombie };

// kSend. Every operation of a send uses its one buffer (and registration).
struct SendJob {
  void* buf;
  size_t size;
  MemHandle* mh;  // a use counted per operation in flight
  // RDMA writes: the receiver's buffer, the immediate data naming its receive, the piece size,
  // and per write posted its rail and length (the rail's load).
  uint64_t raddr;
  uint64_t rkeys[kMaxRails];
  uint32_t imm;
  size_t chunk;
  uint8_t op_rail[kMaxGroup];
  size_t op_len[kMaxGroup];
  // Every write on one rail (NCCL's hints: as many flows as rails, hints_one_rail): kNoPin, or
  // kPinLater until the first write picks the least-loaded rail, then that rail.
  uint8_t pin;
};
constexpr uint8_t kNoPin = 0xff;
constexpr uint8_t kPinLater = 0xfe;

// kRecv: n buffers. SENDRECV: one tagged receive per buffer. RDMA: one clear-to-send naming them
// all (the request's only operation); each buffer is filled by the sender's writes or by an eager
// message copied from a control buffer.
struct RecvJob {
  uint8_t nbufs;  // buffers (SENDRECV: also its operations; RDMA: its one operation is the CTS)
  void* bufs[kMaxGroup];
  size_t caps[kMaxGroup];
  void* descs[kMaxGroup];
  MemHandle* mhs[kMaxGroup];
  uint64_t tags[kMaxGroup];  // SENDRECV: the wire tag; RDMA: NCCL's tag
  size_t sizes[kMaxGroup];   // bytes received
  // RDMA.
  uint32_t slot;  // completion slot its CTS announced (UINT32_MAX: none)
  uint16_t gen;
  uint8_t entries_left;  // buffers not complete yet
  bool holds_mrs;        // holds a use of each buffer's registration until it stops taking writes
  // NCCL does not need its completion (NCCL_NET_OPTIONAL_RECV_COMPLETION): test() may report it
  // once its clear-to-send has left (early); early_open: reported so, its data not all landed.
  bool early;
  bool early_open;
  uint32_t index[kMaxGroup];  // per buffer: its per-tag index
  uint8_t chunks_expected[kMaxGroup];
  uint8_t chunks_got[kMaxGroup];
  uint8_t entry_done[kMaxGroup];
};

// kCtrlSend, kCtrlRecv: the message lives in the comm's CtrlBuf.
struct CtrlJob {
  size_t size;  // bytes received
};

// kFlush: a read of `len` bytes of `buf` (GPU memory registered in mh) into the comm's CtrlBuf.
struct FlushJob {
  void* buf;
  size_t len;
  MemHandle* mh;
};

struct Request {
  uint32_t magic;  // kReqMagic while it belongs to the caller
  ReqType type;
  ReqState state;
  uint8_t n;          // operations it has (SENDRECV receive: one per buffer; RDMA send: its
                      // writes; RDMA receive: its clear-to-send, 0 or 1)
  uint8_t posted;     // ... handed to the provider so far (fewer: waiting on the deferred list)
  uint8_t in_flight;  // ... posted and not completed
  Status error;       // kError: why
  Comm* comm;
  Request* next_deferred;  // deferred list: operations not all posted yet
  Zombie* zowner;          // kZombie: what its comm left behind (counted down to free it)
  uint32_t seq;            // the comm's count of requests when it was taken (oldest: smallest)
  ProfReq* prof;           // its profiler events (profile.h); nullptr when nobody profiles
  OpCtx ops[kMaxGroup];    // the provider's context of each operation
  union {
    SendJob send;
    RecvJob recv;
    CtrlJob ctrl;
    FlushJob flush;
  };
};

enum class CommRole : uint8_t { kListen, kSend, kRecv };

// A registration handed to NCCL as mhandle.
struct MemHandle {
  uint32_t magic;
  Comm* comm;
  MemReg reg;                  // rail 0
  MemReg more[kMaxRails - 1];  // rails 1.. (RDMA protocol)
  MemReg& rail_reg(int r) { return r == 0 ? reg : more[r - 1]; }
  // Closes (or gives back to the cache) its registration on every rail.
  void deregister() {
    deregister_memory(&reg);
    for (MemReg& m : more) deregister_memory(&m);
  }
  // Operations posted on it and not completed. deregMr runs on NCCL's service thread while the
  // progress thread posts and completes, so this is the one thing they share.
  std::atomic<int> uses{0};
};

// The handshake messages of a comm, each right after the control header it is sent with.
struct CtrlBuf {
  CtrlHdr connect_hdr;
  ConnectMsg connect;
  uint8_t connect_slack[64];  // a longer message is copied this far and refused for its length
  CtrlHdr ack_hdr;
  AckMsg ack;
  uint8_t ack_slack[64];
  uint8_t flush[64];  // where GPUDirect flush reads land (content unused)
};

// A protocol's own state of a comm (RdmaState, proto/rdma.h) or of an endpoint: core owns it,
// keeps it alive in a zombie while the provider holds the comm's operations, and destroys it
// (its destructor closes its registrations) when nothing can touch it any more.
struct ProtoState {
  virtual ~ProtoState() = default;
};

// What a closed comm leaves behind while the provider may still hold its operations: freed by the
// first progress pass after the provider gave back the last of them, or with the shared endpoint.
struct Zombie {
  int in_flight = 0;  // operations the provider still holds
  std::unique_ptr<Pool<Request>> pool;
  std::unique_ptr<CtrlBuf> ctrl;
  std::unique_ptr<ProtoState> pstate;
  std::vector<MemReg> mrs;
  std::vector<std::unique_ptr<MemHandle>> handles;
};

// The RDM endpoint all comms of one (plugin context, device) share.
struct SharedEp {
  TicketLock mu;                 // fair, cheap when free (util/ticket_lock.h)
  std::unique_ptr<Endpoint> ep;  // rail 0: every tagged message
  // Rails 1.. (RDMA writes only). nrails counts rail 0.
  std::vector<std::unique_ptr<Endpoint>> more;
  int nrails = 1;
  bool wide_imm = false;  // 8 bytes of remote CQ data: a write's length travels in the upper 4
  uint64_t rail_load[kMaxRails] = {};  // bytes of writes in flight per rail
  std::unordered_map<std::string, fi_addr_t> rail_peers[kMaxRails - 1];
  // The protocol that takes peers' writes on this endpoint (set by its setup) and its state of
  // the endpoint (RDMA: the completion slots a write's immediate data names).
  const Protocol* writer = nullptr;
  std::unique_ptr<ProtoState> writer_state;
  uint32_t next_id = 1;  // comm ids: 1 .. kMaxCommId
  // The comm of each id (control messages are routed by it); nullptr once it closed.
  std::vector<Comm*> by_id;
  // The listed comms by the low 28 bits of their cookie (compact eager messages are routed by it):
  // open addressing, linear probing, a power of two at least twice the comms; route_find.
  std::vector<Comm*> by_route;
  // The cookie keys (low 28 bits) of the last kClosedKeys comms that closed, a ring: a compact
  // message for one of them is a late message of a closed connection (dropped quietly), and a new
  // comm never draws one of them (a late message never reaches another connection).
  std::vector<uint32_t> closed_keys;
  size_t closed_next = 0;
  // The control path's receive buffers per rail (core/ctrl.h): rail 0 always, the others only
  // where writes with immediate data consume receives (rx_cq_data).
  std::unique_ptr<CtrlPool> pools[kMaxRails];
  bool rx_cq_data = false;  // FI_RX_CQ_DATA: each write with immediate data takes a posted receive
  size_t msg_limit = 0;     // largest untagged message rail 0 takes (0: no limit known)
  size_t writes_expected = 0;   // rx_cq_data: writes announced receives may still bring
  uint64_t ctrl_bad = 0;        // control messages ignored as breaking the protocol
  uint64_t forged = 0;          // ... of which named a comm but lacked its cookie
  size_t refused_peers = 0;     // AV entries made to answer refused connects (kMaxRefusedPeers)
  Status failed = Status::kOk;  // sticky: the completion queue itself failed
  uint64_t stray_errors = 0;    // error completions that belonged to no operation
  uint64_t eq_errors = 0;       // errors the provider reported on an event queue
  uint64_t eq_unnamed = 0;      // ... of which named no peer of ours (EFA names none)
  std::unordered_map<std::string, fi_addr_t> peers;  // address bytes -> AV entry: one per peer
  fi_addr_t self = FI_ADDR_UNSPEC;  // our own address in the AV (GPUDirect flush reads)
  fi_addr_t self_rail[kMaxRails] = {FI_ADDR_UNSPEC, FI_ADDR_UNSPEC, FI_ADDR_UNSPEC,
                                    FI_ADDR_UNSPEC};  // ... in rail r's AV (r >= 1)
  std::vector<std::unique_ptr<Zombie>> zombies;
  std::vector<Comm*> comms;  // every open comm on it (a failure without an operation finds its own)
  bool zombie_done = false;  // a zombie's last operation came back: sweep after the CQ pass
  void sweep_zombies();
  std::unique_ptr<Liveness> live;  // peer probes (liveness.h)
  uint64_t polls = 0;              // CQ passes by NCCL's calls (the keeper skips busy endpoints)
  uint64_t keeper_polls = 0;       // ... as the keeper saw it at its last pass
  uint64_t events = 0;             // completions dispatched (the keeper's pass found work?)
  bool keeper_busy = false;        // the keeper's last pass found work: it comes back sooner
  bool kept_warned = false;        // said once that a closed comm left operations in the provider
  // Closes share one bound for waiting on the provider (Comm::close_wait): the time they spent
  // waiting, and when the last one ended (a pause of one bound gives the whole bound back).
  uint64_t close_spent_ns = 0;
  uint64_t close_last_ns = 0;
  int peer_failures = 0;  // peers declared failed (the endpoint is not closed at the end)
  int cq_batch = 16;      // NCCL_FABRIC_CQ_BATCH
  // NCCL's device it serves, for statistics (set when the plugin opens it).
  int dev = -1;
  std::string dev_name;
  std::string provider;
  uint64_t watch_last_ns = 0;  // the keeper's last stall check (stats.cpp)

  SharedEp() = default;
  ~SharedEp();
  SharedEp(const SharedEp&) = delete;
  SharedEp& operator=(const SharedEp&) = delete;

  Endpoint* rail(int r) const { return r == 0 ? ep.get() : more[static_cast<size_t>(r - 1)].get(); }

  // Under mu.
  Status insert_peer(const uint8_t* addr, size_t len, fi_addr_t* out);
  // The AV entry of a peer already inserted (a connection's, or a refused connect's); false for an
  // address this endpoint never met. Nothing is inserted.
  bool known_peer(const uint8_t* addr, size_t len, fi_addr_t* out) const;
  Status insert_rail_peer(int rail, const uint8_t* addr, size_t len, fi_addr_t* out);
  Status alloc_id(uint32_t* out);
};

// Opens the shared endpoint: rail r on doms[r] (several rails may share a domain), posts its
// probe receives and hands it to the keeper thread (liveness.h).
Status shared_ep_open(const std::vector<std::shared_ptr<Domain>>& doms, const Params& params,
                      std::shared_ptr<SharedEp>* out);

// One pass over the shared endpoint's completion queues, dispatching every completion. Under mu.
Status sep_progress(SharedEp& sep);
// The keeper's pass over an idle endpoint: sep_progress, then what each comm still has to post.
void sep_progress_all(SharedEp& sep);

// NCCL's traffic hints for a plugin context (setNetAttr, v11+): the last values it gave, -1 when
// unset. Written by NCCL's service or progress thread, read by the data path (relaxed).
struct NetHints {
  std::atomic<int> send_peers{-1};  // maxConcurrentPeers of the send side
  std::atomic<int> send_flows{-1};  // maxFlowsPerPeer of the send side
  std::atomic<int> recv_peers{-1};
  std::atomic<int> recv_flows{-1};
  std::atomic<uint32_t> op{UINT32_MAX};  // bit mask of ncclFunc_t
  std::atomic<uint32_t> algo{UINT32_MAX};
  std::atomic<uint32_t> proto{UINT32_MAX};
  bool enabled = true;  // NCCL_FABRIC_NET_ATTR
};

// Whether a large RDMA message of c should stay on one rail: NCCL said as many flows run
// concurrently as c has rails (peers x flows per peer), so every rail is busy without cutting.
inline bool hints_one_rail(const Comm& c);

struct Comm {
  uint32_t magic = kCommMagic;
  CommRole role;
  std::shared_ptr<SharedEp> sep;
  Endpoint* ep;          // sep->ep
  uint32_t id = 0;       // ours: control messages to us name it (CtrlHdr::dst)
  uint32_t peer_id = 0;  // the peer comm's: what our sends carry
  // Wire version 7: the connection's messages to us carry cookie_in (random, not 0, unique among
  // the endpoint's comms: comm_register), ours to the peer cookie_out (its ProtoInfo::cookie).
  uint32_t cookie_in = 0;
  uint32_t cookie_out = 0;
  bool forged_said = false;  // a message without cookie_in was WARNed about (once per comm)
  std::unique_ptr<Pool<Request>> pool;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  std::string peer_name;  // printable peer address, for messages
  Params params;          // the creating context's snapshot: accept has no context
  const Protocol* protocol = &kSendRecvProtocol;  // negotiated in the handshake (protocol_for)
  uint8_t offered = kProtoSendRecv;  // what this side accepts (connect's offer, listener's choice)
  int nrails = 1;                    // rails of this connection (RDMA), <= sep->nrails
  fi_addr_t peer_rail[kMaxRails] = {FI_ADDR_UNSPEC, FI_ADDR_UNSPEC, FI_ADDR_UNSPEC, FI_ADDR_UNSPEC};
  uint32_t eager_max = 0;      // send: the receiver's eager limit; recv: ours
  bool compact_eager = false;  // compact eager messages: recv: granted; send: the peer takes them
  std::unique_ptr<ProtoState> pstate;  // the protocol's own state (RDMA: RdmaState)
  int max_recvs;
  int cq_batch;
  bool use_inject;
  size_t inject_size;
  uint64_t max_msg_size;
  size_t max_write_size;  // largest single RMA write (EFA: 1 GiB, one device write)
  Request* deferred_head = nullptr;
  Request* deferred_tail = nullptr;
  int errors_logged = 0;        // the first failure of a comm is a WARN, later ones INFO
  Status failed = Status::kOk;  // the connection failed: every pending and later request fails
  bool closing = false;         // its receives are being cancelled: their errors are expected
  bool close_waiting = false;   // close waits for the provider: the peer is still probed
  uint64_t events = 0;          // completions and landed writes of its requests (close: quiet?)
  CommStats st;                 // counters (stats.h)
  // Profiler (profile.h): NCCL's callback, the handle of the isend/irecv being served, the gate
  // counted down per request, each request slot's events, and a send's wait for a CTS.
  ProfHook prof;
  // isend answered NULL (nothing posted): what it asked, so that a next isend of the same tag on
  // the comm that is another message is reported once (NCCL retries the same call;
  // docs/troubleshooting.md).
  const void* null_data = nullptr;
  size_t null_size = 0;
  int null_tag = 0;
  bool null_open = false;    // the last isend answered NULL has not been retried yet
  bool null_warned = false;  // the comm said so once
  void* cur_phandle = nullptr;
  uint64_t cur_bytes = 0;     // ... its size (irecv: the buffers' capacities added up)
  bool cur_optional = false;  // irecv: NCCL preset the optional-completion hint, one buffer
  bool early_ok = false;      // recv: receives may complete early (NCCL_FABRIC_EARLY_COMPLETION)
  int cur_tag = -1;           // ... its tag (irecv: the first buffer's)
  uint32_t prof_gate = UINT32_MAX;
  std::unique_ptr<ProfReq[]> prof_slots;
  void* prof_wait_eh = nullptr;
  ProfDescr prof_wait{};
  // NCCL's hints for the context (setNetAttr), shared with it; nullptr: none.
  std::shared_ptr<NetHints> hints;
  uint32_t issued = 0;  // requests taken (Request::seq)
  // The keeper's stall watch (stats.cpp): since when it has had requests pending and `events`
  // unchanged, whether it said so, and the oldest pending request it saw and since when.
  uint64_t stall_since_ns = 0;
  uint64_t stall_events = 0;
  bool stall_warned = false;
  bool stats_folded = false;  // its counters joined its device's totals (close)
  // The handshake is done (set under sep->mu): the statistics may read its names and protocol,
  // which a connect writes without the lock while the comm is already on the endpoint's list.
  bool established = false;
  uint32_t watch_seq = UINT32_MAX;
  uint64_t watch_seen_ns = 0;
  // Registrations NCCL released while operations still used them (teardown after an abort): kept,
  // handle and all, until nothing of this comm is in flight. Service thread only.
  std::vector<std::unique_ptr<MemHandle>> retired;

  // Handshake state (connect and accept), and the registered buffer its messages live in.
  using Ctrl = CtrlBuf;
  std::unique_ptr<Ctrl> ctrl;
  MemReg ctrl_reg;
  // The flush's landing bytes (ctrl->flush) on rails 1.. (rail 0: ctrl_reg), made at the first
  // iflush of a multi-rail connection.
  MemReg flush_reg[kMaxRails - 1];
  WireHandle handle{};  // connect: the decoded handle; listen: what we published
  uint64_t nonce = 0;
  uint64_t started_ns = 0;
  int stage = 0;
  Request* ctrl_send = nullptr;
  Request* ctrl_recv = nullptr;
  uint8_t ctrl_expect = 0;  // the handshake message ctrl_recv waits for (kCtrlConnect, kCtrlAck)
  // Control messages that came before the comm could take them (core/ctrl.h), oldest first.
  std::vector<CtrlRx*> stash;
  // listen: the recv comm of the connection being accepted, listed and named in the reply, until
  // the reply has left (then accept hands it to NCCL, and the listen comm listens again).
  std::unique_ptr<Comm> accepting;

  Comm(CommRole r, std::shared_ptr<SharedEp> s, size_t pool_size, const Params& p);
  // Cancels what it still has posted, reaps it, and leaves to the shared endpoint what the
  // provider keeps. Takes sep->mu.
  ~Comm();

 private:
  // Cancels what can be cancelled and waits, bounded, for the provider to give back the rest.
  // Returns whether operations are still in the provider. Takes and drops sep->mu per pass.
  bool close_wait();
};

inline bool hints_one_rail(const Comm& c) {
  const NetHints* h = c.hints.get();
  if (h == nullptr || !h->enabled || c.nrails < 2) return false;
  const int peers = h->send_peers.load(std::memory_order_relaxed);
  const int flows = h->send_flows.load(std::memory_order_relaxed);
  return peers > 0 && flows > 0 && static_cast<int64_t>(peers) * flows >= c.nrails;
}

// Gives a comm its context's profiler callback and hints.
inline void comm_observe(Comm& c, const ProfHook& prof, const std::shared_ptr<NetHints>& hints) {
  c.prof = prof;
  c.prof_gate = prof.fn != nullptr ? 1 : UINT32_MAX;
  c.hints = hints;
}

// Requests NCCL is waiting on (sends, receives, flushes not complete), and for RDMA an isend that
// waits for a clear-to-send; while closing, operations still in flight. Under sep->mu.
bool comm_pending(const Comm& c, int* sends, int* recvs);

// Makes a comm for `role` on the shared endpoint, with a fresh id and its handshake buffer
// registered. The endpoint does not list it yet: the caller fills it in, then lists it with
// comm_register under sep->mu (the keeper and the control path read a listed comm's fields under
// that lock only; issue 34).
// `locked`: the caller holds sep->mu already. On a failure *out may still hold the half-made comm:
// the caller drops it without sep->mu held (closing a comm takes the lock).
Status comm_create(CommRole role, std::shared_ptr<SharedEp> sep, const Params& params,
                   std::unique_ptr<Comm>* out, bool locked = false);

// Reads the shared completion queue and dispatches every completion (whichever comm it belongs
// to); posts what c's grouped receives still owe. The caller holds c.sep->mu.
Status comm_progress(Comm& c);

// For the protocols (proto/).
// Whether a send of `size` bytes from `mh` may go with fi_tinject: small enough, allowed, and host
// memory (the provider copies the payload with the CPU before returning).
inline bool can_inject(const Comm& c, size_t size, const MemHandle* mh) {
  return c.use_inject && size <= c.inject_size && (mh == nullptr || mh->reg.kind == MemKind::kHost);
}
Request* take_request(Comm& c, ReqType type, int n);
// One of r's operations was handed to the provider: it is in flight, and so is its use of the
// registration mh (nullptr: none), which complete_op gives back. Its twin for the end of an
// operation is op_over (endpoint.cpp).
inline void op_posted(Request* r, MemHandle* mh) {
  if (mh != nullptr) mh->uses.fetch_add(1, std::memory_order_relaxed);
  if (__builtin_expect(r->prof != nullptr, 0)) prof_op_start(r, r->posted);
  ++r->posted;
  ++r->in_flight;
}
// Whether c may still take requests: the endpoint's failure first, then the connection's.
inline Status comm_usable(const Comm& c) { return !ok(c.sep->failed) ? c.sep->failed : c.failed; }
void fail_request(Request* r, Status s);
// The whole connection fails (a provider error no single request owns): one WARN, then every
// pending and later request of c reports s. Under sep->mu.
void comm_fail(Comm& c, Status s, const char* why);
// With 4 bytes of CQ data the RDMA protocol's receiver takes a write's length from the
// completion; some rdma-core builds (efa without length_hi) keep only its low 16 bits. One 64 KiB
// write to e's own address, on an endpoint nothing else uses yet: "" when the length came back
// whole (or the check could not be made), else why the lengths cannot be used (endpoint.cpp).
std::string write_len_probe(Endpoint& e, bool rx_cq_data);
// Adds c to its endpoint's list of comms. Under sep->mu. The keeper and route() read listed comms
// under that lock: every field they read is set before c is listed (issue 34).
void comm_register(Comm& c);
// The comm whose cookie's low 28 bits are `key` (compact eager messages), or nullptr. Under sep.mu.
inline Comm* route_find(const SharedEp& s, uint32_t key) {
  const size_t n = s.by_route.size();
  if (n == 0) return nullptr;
  for (size_t i = key & (n - 1);; i = (i + 1) & (n - 1)) {
    Comm* c = s.by_route[i];
    if (c == nullptr || (c->cookie_in & kMaxCommId) == key) return c;
  }
}
// Takes c out of the table (its close) and remembers its key among the closed ones. Under sep.mu.
void route_remove(SharedEp& s, const Comm* c);
// Whether `key` is the cookie key of a comm of s that closed recently. Under sep.mu.
bool route_closed(const SharedEp& s, uint32_t key);
// Tests only (tests/unit/test_listing.cpp): when set, comm_register calls it under sep->mu with the
// comm it lists, to check that comm is complete by then. NULL in the plugin.
extern void (*comm_listed_hook)(const Comm& c);
// Posts a flush's read (reg.cpp); -FI_EAGAIN leaves it for a later test().
Status post_flush(Comm& c, Request* r);
// What a comm's progress does after the CQ is read: RDMA reposts and retries, deferred posts.
Status comm_tail(Comm& c);
// Puts r on c's deferred list: its operations not posted yet are posted by later progress. While
// there, r holds a use of each registration it names, given back when it
// leaves the list (posted, failed, or its comm closes).
void defer(Comm& c, Request* r);

// NCCL's test: progresses r's comm, then reports r (and frees it) once done or failed.
Status request_test(Request* r, int* done, int* sizes);

// Registers NCCL's buffer on every rail of the comm, through each domain's registration cache.
Status comm_reg_mr(Comm& c, void* data, size_t size, const PtrInfo& info, const MemSpec& spec,
                   MemHandle** out);
// GPUDirect flush: an RDMA read of a few bytes of `data` (CUDA memory in `mh`) into host memory,
// through the comm's own endpoint.
Status comm_iflush(Comm& c, void* data, MemHandle* mh, Request** out);
Status comm_dereg_mr(Comm& c, MemHandle* mh);

// Sends one handshake message (kCtrlConnect: ctrl->connect, kCtrlAck: ctrl->ack, `len` bytes) to
// comm `dst` of c.peer, or waits for one (ctrl_expect): the request to poll (*out NULL when the
// provider pushed back: call again). Under sep->mu.
Status ctrl_post_send(Comm& c, uint8_t kind, uint32_t dst, size_t len, Request** out);
Status ctrl_expect(Comm& c, uint8_t kind, Request** out);
// A request's lifetime, one rule (docs/architecture.md, "Requests"). Its holders: its caller
// until test() reports it or the protocol gives it up (NCCL, or the handshake that took it: the
// state is not kReleased), each of its operations in the provider (in_flight), the comm's deferred
// list (operations not posted yet), and the writes still to land in a receive reported early
// (early_open). A registration it names is held the same way: a use per operation in the provider
// and one while it waits on the deferred list (defer). Under sep->mu.
bool request_held(const Request* r);
// Called wherever a holder lets go: the one place a request goes back to its pool (when no holder
// is left). A kZombie request belongs to its closed comm's remains and is never settled here.
void request_settle(Request* r);
// Its caller lets go (test() reported it, or the protocol gave it up before handing it out).
void request_release(Request* r);

}  // namespace nf
