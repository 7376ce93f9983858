// The RDMA protocol (docs/protocol.md, "RDMA protocol"): every irecv sends the sender a
// clear-to-send (CTS) naming its buffers, keys and a completion slot; the sender writes the payload
// straight into them with fi_writedata, striped over the rails, and the 4-byte immediate data of
// each write tells the receiver which buffer and how many pieces to count. Small messages the
// sender has no CTS for yet go at once, as control messages, into the receiver's pool (eager).
// Core calls it through kRdmaProtocol (core/protocol.h) only; this header is the protocol's own.
// Everything here runs under SharedEp::mu, like the rest of the data path.
#pragma once
#include <deque>
#include <memory>
#include <vector>

#include "core/comm.h"
#include "core/ctrl.h"

namespace nf {

constexpr int kGroupRing = 64;  // sender: groups announced and not fully sent
constexpr int kActiveRecvs = kMaxRequests + 2;
constexpr int kMaxTags = 128;    // distinct NCCL tags on one connection
constexpr int kPendingRts = 64;  // receiver: notices for buffers not posted yet

// Per NCCL tag, how many messages were sent (sender) or buffers posted (receiver) with it: the
// k-th message of tag t goes to the k-th buffer of tag t (docs/protocol.md, "Matching").
struct TagCounts {
  struct Entry {
    int32_t tag;
    uint32_t count;
  };
  Entry e[kMaxTags];
  int n = 0;
  // The counter of `tag`; nullptr when the tag is new (find) or the table is full (get).
  uint32_t* find(int32_t tag) {
    for (int i = 0; i < n; ++i)
      if (e[i].tag == tag) return &e[i].count;
    return nullptr;
  }
  uint32_t* get(int32_t tag) {
    if (uint32_t* c = find(tag)) return c;
    if (n == kMaxTags) return nullptr;
    e[n] = {tag, 0};
    return &e[n++].count;
  }
  uint32_t count(int32_t tag) {
    uint32_t* c = find(tag);
    return c != nullptr ? *c : 0;
  }
};

// A group of receive buffers as a CTS announced it to the sender.
struct SendGroup {
  uint8_t n;
  uint16_t gen;
  uint8_t used;  // bit i: entry i has been sent (written, or eagerly before the CTS came)
  uint16_t slot;
  CtsEntry e[kMaxCtsEntries];
};

// The protocol's state of one comm (Comm::pstate). Its registrations close with it.
struct RdmaState final : ProtoState {
  ~RdmaState() override;
  // Sender.
  TagCounts sent;                // messages sent per tag
  SendGroup groups[kGroupRing];  // announced, not fully sent; unordered
  uint32_t g_count = 0;
  // The message an isend is waiting to see a CTS for (NCCL retries the same call), since when,
  // and whether its RTS notice went (once, and only after kRtsDelayNs: a CTS usually comes first).
  bool wait_valid = false;
  int32_t wait_tag = 0;
  uint32_t wait_index = 0;
  uint64_t wait_since = 0;
  bool rts_sent = false;
  // What a request sends besides NCCL's data, each after its control header: a notice, or the
  // header of an eager message (whose payload is NCCL's buffer). One per request of the pool.
  struct NoticeTx {
    CtrlHdr h;
    NoticeMsg m;
  };
  std::unique_ptr<NoticeTx[]> notice_tx;
  MemReg notice_tx_reg;
  std::unique_ptr<CtrlHdr[]> eager_hdr;
  MemReg eager_hdr_reg;
  // Receiver.
  TagCounts posted;  // buffers posted per tag
  struct CtsTx {
    CtrlHdr h;
    CtsWire w;
  };
  std::unique_ptr<CtsTx[]> cts_tx;  // one per request of the pool
  MemReg cts_tx_reg;
  Request* active[kActiveRecvs];  // posted receives, to find the buffer of an eager message
  int n_active = 0;
  // Eager messages whose buffer is not posted yet, in the control buffers they arrived in.
  std::vector<CtrlRx*> held;
  struct Rts {
    int32_t tag;
    uint32_t index;
  };
  Rts rts[kPendingRts];  // RTS notices for buffers not posted yet
  int n_rts = 0;
  Request* cts_retry[kActiveRecvs];  // receives whose late CTS met -FI_EAGAIN
  int n_cts_retry = 0;
  Status error = Status::kOk;  // a CTS broke the protocol: every later isend fails
  int warned = 0;
  int cts_fault = 0;        // NCCL_FABRIC_TEST_CTS_FAULT
  uint32_t eager_skew = 0;  // NCCL_FABRIC_TEST_EAGER_FAULT=ahead: added to eager indices
  size_t min_chunk = 65536;
  size_t write_chunk = 512 << 10;  // NCCL_FABRIC_WRITE_CHUNK (0: one write per rail)
};

inline RdmaState& rdma_of(const Comm& c) { return *static_cast<RdmaState*>(c.pstate.get()); }

// The protocol's state of a shared endpoint (SharedEp::writer_state): the completion slots of
// posted receives, which the immediate data of a write names.
struct RdmaEp final : ProtoState {
  std::vector<Request*> slot_req;
  std::vector<uint16_t> slot_gen;
  std::deque<uint32_t> free_slots;  // FIFO: a freed slot waits behind kSlotQuarantine others
  Status alloc_slot(Request* r);
  void free_slot(Request* r);
};

inline RdmaEp& rdma_ep(const SharedEp& sep) {
  return *static_cast<RdmaEp*>(sep.writer_state.get());
}

// NCCL_FABRIC_TEST_CTS_FAULT: what a receiver breaks in its clear-to-send (testing only).
enum CtsFault { kFaultNone = 0, kFaultSize, kFaultCount, kFaultAddr, kFaultKey };

// The first protocol problem of a comm is a WARN, later ones INFO.
#define RDMA_LOG(c, ...)                                                                          \
  log_message(rdma_of(c).warned++ == 0 ? LogLevel::kWarn : LogLevel::kInfo, kSubsysNet, __FILE__, \
              __LINE__, __VA_ARGS__)

// Between the protocol's files (rdma.cpp: both sides; rdma_recv.cpp; rdma_send.cpp).
// A control message for the comm: an eager message or notice (receiver; true: the buffer is
// kept until its receive is posted), a clear-to-send (sender).
bool rdma_on_eager(Comm& c, const CtrlHdr& h, CtrlRx* rx);
void rdma_on_cts(Comm& c, const void* buf, size_t len);
// Sends a receive's clear-to-send when it has none yet (an RTS asked, or a retry after
// -FI_EAGAIN).
void rdma_cts_on_request(Comm& c, Request* r);
// A receive stops taking writes: its slot is freed, its registrations no longer held.
void rdma_retire_recv(Request* r);

// The entry points core reaches through kRdmaProtocol (their meaning: core/protocol.h).
Status rdma_setup(Comm& c);
Status rdma_isend(Comm& c, void* data, size_t size, int tag, MemHandle* mh, Request** out);
Status rdma_irecv(Comm& c, int n, void** data, const size_t* sizes, const int* tags,
                  MemHandle* const* mhs, Request** out);
bool rdma_on_ctrl(Comm& c, const CtrlHdr& h, CtrlRx* rx);  // a control message (core/ctrl.h)
void rdma_on_cts_sent(Request* r);                         // a receive's CTS send
void rdma_on_cts_failed(Request* r, Status s);             // ... failed
void rdma_fail_recv(Request* r, Status s);  // a pending receive fails: it stops taking writes
void rdma_on_write(SharedEp& sep, const fi_cq_tagged_entry& e);  // a peer's write landed
bool rdma_on_write_error(SharedEp& sep, const CqError& err);
Status rdma_post_writes(Comm& c, Request* r);
void rdma_retry_reposts(Comm& c);
void rdma_close(Comm& c);

}  // namespace nf
