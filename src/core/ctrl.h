// The control path (wire version 5, docs/protocol.md "Control messages"): every message of the
// plugin's own (handshake, clear-to-send, eager message, notice, liveness probe) is an untagged
// message that starts with a CtrlHdr naming the receiving comm and the kind. Each shared endpoint
// keeps a pool of receive buffers posted on rail 0; a message that lands in one is routed to its
// comm by id through SharedEp::by_id (O(1)), and the buffer goes back to work at once, or stays
// with the comm while the message waits (an eager message whose receive is not posted yet, a
// message that arrived before its comm was ready for it). Nothing relies on tag matching or on
// the order in which messages arrive. Everything here runs under SharedEp::mu.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/comm.h"

namespace nf {

constexpr uint32_t kCtrlRxBit = 0x40000000u;  // OpCtx::index of a pool receive (req nullptr)

// One receive buffer of the pool.
struct CtrlRx {
  OpCtx op;  // op.req nullptr, op.index kCtrlRxBit | its number
  uint8_t* buf = nullptr;
  size_t cap = 0;
  void* desc = nullptr;
  int rail = 0;
  size_t len = 0;  // bytes received, header included
  bool posted = false;
  bool held = false;  // kept by a comm (stash, or an eager message waiting for its receive)
  // A compact eager message: no header in buf (hdr was made from the CQ data; its index holds
  // only the low 16 bits, completed by the protocol) and the payload at buf.
  bool compact = false;
  CtrlHdr hdr{};  // the message's header, as decoded (or made)
  // An eager message waiting for its receive (RDMA): NCCL's tag and the per-tag index.
  int32_t msg_tag = 0;
  uint32_t index = 0;
  const uint8_t* payload() const { return compact ? buf : buf + kCtrlHdrSize; }
  size_t plen() const { return compact ? len : len - kCtrlHdrSize; }
};

// Compact eager messages (wire/wire.h): a message with FI_REMOTE_CQ_DATA and the mark.
inline bool is_compact_eager(uint64_t flags, uint64_t data) {
  return (flags & FI_REMOTE_CQ_DATA) != 0 && (data >> 60) == (kCompactMark >> 60);
}
// The receive buffers of one rail of a shared endpoint. Rail 0 takes every control message;
// the other rails have receives only where the provider needs one per write with immediate data
// (FI_RX_CQ_DATA: efa-direct on a NIC without unsolicited write receive).
struct CtrlPool {
  struct Chunk {
    std::unique_ptr<uint8_t[]> mem;
    MemReg reg;
  };
  std::vector<std::unique_ptr<Chunk>> chunks;
  std::vector<std::unique_ptr<CtrlRx>> all;
  std::vector<CtrlRx*> idle;  // neither posted nor held
  size_t buf_size = 0;        // of each buffer, header included
  size_t target = 0;          // buffers kept posted (more with more comms, up to target_max)
  size_t target_max = 0;
  size_t max_total = 0;  // buffers at most (posted, idle and held)
  size_t posted = 0;
  uint64_t dropped = 0;  // messages refused or lost, receives not posted (their log lines)
  bool full_said = false;
};

// Opens the pool of every rail (shared_ep_open): rail 0's buffers take `max_payload` bytes after
// the header (clamped to the provider's largest message), rails 1.. only with FI_RX_CQ_DATA.
Status ctrl_open(SharedEp& sep, size_t max_payload);
// Posts idle buffers (allocating more, up to the bound) until each rail has its target posted.
void ctrl_fill(SharedEp& sep);
// FI_RX_CQ_DATA: `n` more (or, negative, fewer) writes with immediate data may arrive, each
// taking a posted receive on its rail: receives are posted for them now. Nothing elsewhere.
void ctrl_expect_writes(SharedEp& sep, int64_t n);
// Closes the pools' registrations (after the endpoints closed).
void ctrl_teardown(SharedEp& sep);
// The largest payload a control message to this endpoint may have (rail 0's buffers).
size_t ctrl_max_payload(const SharedEp& sep);

// A pool receive completed (e) or failed (err). Under sep.mu.
void ctrl_rx_done(SharedEp& sep, OpCtx* op, const fi_cq_tagged_entry* e, const CqError* err);
// A comm is done with a buffer it held: it goes back to work.
void ctrl_release(SharedEp& sep, CtrlRx* rx);
// Whether op is a pool receive.
inline bool is_ctrl_rx(const OpCtx* op) {
  return op->req == nullptr && (op->index & kCtrlRxBit) != 0;
}

// The comm's messages that arrived before it could take them: routed again (after its handshake
// receive is posted, or after its protocol is set up).
void ctrl_replay(Comm& c);
// Gives back everything the comm holds (close). Under sep.mu.
void ctrl_drop_comm(Comm& c);

// Sends a control message to c's peer: the CtrlHdr at `hdr` (filled by the caller, ctrl_hdr), the
// message right after it (len bytes; the whole registered with `desc`). Injected (no completion)
// when it fits the provider's inject size and `may_inject`; otherwise as r's operation `op`.
// -FI_EAGAIN: kOk with *posted false and nothing sent.
Status ctrl_send(Comm& c, CtrlHdr* hdr, size_t len, void* desc, Request* r, int op, bool may_inject,
                 bool* posted, bool* injected);

}  // namespace nf
