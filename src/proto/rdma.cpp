// The RDMA protocol, the parts both sides share: completion slots of the endpoint, the comm's
// state, the control messages it takes (clear-to-send, eager messages, notices), close, and the
// table core calls. The receiver's side is rdma_recv.cpp, the sender's rdma_send.cpp.
#include <cstring>

#include <rdma/fi_errno.h>

#include "fabric/errors.h"
#include "proto/rdma.h"
#include "util/clock.h"
#include "util/log.h"

namespace nf {

// A write names its receive by slot and generation. So that a late or duplicate write (of a
// receive that failed or closed) can never be credited to another receive, a freed slot is reused
// only after kSlotQuarantine other slots were handed out, and its generation has 9 bits: the
// same (slot, generation) comes back only after 512 x 1024 receives on the endpoint.
constexpr size_t kSlotQuarantine = 1024;

Status RdmaEp::alloc_slot(Request* r) {
  uint32_t s;
  if (free_slots.size() > kSlotQuarantine ||
      (slot_req.size() >= kMaxSlots && !free_slots.empty())) {
    s = free_slots.front();
    free_slots.pop_front();
  } else if (slot_req.size() < kMaxSlots) {
    s = static_cast<uint32_t>(slot_req.size());
    slot_req.push_back(nullptr);
    slot_gen.push_back(0);
  } else {
    NF_WARN("more than %u RDMA receives in flight on one endpoint", kMaxSlots);
    return Status::kInternalError;
  }
  slot_req[s] = r;
  r->recv.slot = s;
  r->recv.gen = static_cast<uint16_t>(slot_gen[s] & kMaxGen);
  return Status::kOk;
}

void RdmaEp::free_slot(Request* r) {
  const uint32_t s = r->recv.slot;
  if (s >= slot_req.size() || slot_req[s] != r) return;
  slot_req[s] = nullptr;
  slot_gen[s] =
      static_cast<uint16_t>((slot_gen[s] + 1) & kMaxGen);  // a late write no longer matches
  free_slots.push_back(s);
}

RdmaState::~RdmaState() {
  deregister_memory(&cts_tx_reg);
  deregister_memory(&notice_tx_reg);
  deregister_memory(&eager_hdr_reg);
}

namespace {

int parse_fault(const std::string& s) {
  if (s == "size") return kFaultSize;
  if (s == "count") return kFaultCount;
  if (s == "addr") return kFaultAddr;
  if (s == "key") return kFaultKey;
  return kFaultNone;
}

}  // namespace

Status rdma_setup(Comm& c) {
  c.pstate.reset(new RdmaState());
  RdmaState& rd = rdma_of(c);
  SharedEp& sep = *c.sep;
  if (!sep.writer_state) {
    sep.writer_state.reset(new RdmaEp());
    sep.writer = &kRdmaProtocol;
  }
  rd.cts_fault = parse_fault(c.params.get_str(ParamId::kTestCtsFault));
  rd.eager_skew = c.params.get_str(ParamId::kTestEagerFault) == "ahead" ? 1u << 20 : 0;
  rd.min_chunk = static_cast<size_t>(c.params.get_int(ParamId::kMinChunk));
  rd.write_chunk = static_cast<size_t>(c.params.get_int(ParamId::kWriteChunk));
  // Clear-to-sends (to the sender) and eager messages and notices (to the receiver) arrive in the
  // endpoint's control pool (rdma_on_ctrl): the comm keeps no receive posted.
  const size_t n = c.pool->capacity();
  if (c.role == CommRole::kSend) {
    rd.notice_tx.reset(new RdmaState::NoticeTx[n]());
    NF_CHECK(register_memory(c.ep->domain(), c.ep->ep(), rd.notice_tx.get(),
                             sizeof(RdmaState::NoticeTx) * n, &rd.notice_tx_reg));
    rd.eager_hdr.reset(new CtrlHdr[n]());
    NF_CHECK(register_memory(c.ep->domain(), c.ep->ep(), rd.eager_hdr.get(), sizeof(CtrlHdr) * n,
                             &rd.eager_hdr_reg));
  } else {
    rd.cts_tx.reset(new RdmaState::CtsTx[n]());
    NF_CHECK(register_memory(c.ep->domain(), c.ep->ep(), rd.cts_tx.get(),
                             sizeof(RdmaState::CtsTx) * n, &rd.cts_tx_reg));
  }
  return Status::kOk;
}

void rdma_retry_reposts(Comm& c) {
  RdmaState& rd = rdma_of(c);
  const int n = rd.n_cts_retry;
  rd.n_cts_retry = 0;
  Request* cts[kActiveRecvs];
  memcpy(cts, rd.cts_retry, sizeof(Request*) * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) rdma_cts_on_request(c, cts[i]);
}

bool rdma_on_ctrl(Comm& c, const CtrlHdr& h, CtrlRx* rx) {
  const uint8_t kind = ctrl_kind(h);
  if (kind == kCtrlCts && c.role == CommRole::kSend) {
    rdma_on_cts(c, rx->payload(), rx->plen());
    return false;
  }
  if ((kind == kCtrlEager || kind == kCtrlNotice) && c.role == CommRole::kRecv)
    return rdma_on_eager(c, h, rx);
  RDMA_LOG(c,
           "a control message of kind %u from %s that this side of the connection never takes: "
           "ignored",
           kind, c.peer_name.c_str());
  return false;
}

void rdma_close(Comm& c) {
  if (!c.pstate) return;
  RdmaState& rd = rdma_of(c);
  while (rd.n_active > 0) rdma_retire_recv(rd.active[0]);
  for (CtrlRx* rx : rd.held) ctrl_release(*c.sep, rx);
  rd.held.clear();
  rd.n_cts_retry = 0;
  rd.n_rts = 0;
}

namespace {

// A receive's own operation is its clear-to-send; its data comes by the peer's writes.
bool rdma_recv_op_done(Request* r) {
  --r->in_flight;
  rdma_on_cts_sent(r);
  return true;
}
// Its clear-to-send could not be delivered: the sender will never write. The receive stops taking
// writes (its slot and its place among the active receives go) and fails.
bool rdma_recv_op_failed(Request* r, Status s) {
  --r->in_flight;
  rdma_on_cts_failed(r, s);
  return true;
}
void rdma_tail(Comm& c) {
  if (!c.pstate) return;
  RdmaState& rd = rdma_of(c);
  if (c.closing) {
    // A closing comm sends no late clear-to-send.
    rd.n_cts_retry = 0;
    return;
  }
  if (rd.n_cts_retry > 0) rdma_retry_reposts(c);
}
// An RDMA receive is never deferred: irecv sends its clear-to-send at once or hands NCCL a NULL
// request.
Status rdma_post_recv(Comm& c, Request*) {
  NF_WARN(
      "an RDMA receive from %s was deferred, which never happens: a plugin bug, please report it",
      c.peer_name.c_str());
  return Status::kInternalError;
}
// An isend NCCL retries because no clear-to-send has come for its message yet.
bool rdma_send_waiting(const Comm& c) {
  if (!c.pstate) return false;
  RdmaState& rd = rdma_of(c);
  return rd.wait_valid && rd.sent.count(rd.wait_tag) == rd.wait_index;
}

const char* rdma_waiting_for(const Request& r) {
  if (r.type == ReqType::kFlush) return "waiting for the flush read";
  if (r.type == ReqType::kSend)
    return r.posted < r.n ? "waiting to post its writes (the provider pushed back)"
                          : "waiting for write completions";
  if (r.posted < r.n) return "waiting to send its clear-to-send (the provider pushed back)";
  if (r.in_flight > 0) return "waiting for its clear-to-send to leave";
  return r.recv.slot != UINT32_MAX ? "waiting for the data (clear-to-send sent)"
                                   : "waiting for the data (an eager message)";
}

}  // namespace

const Protocol kRdmaProtocol = {"RDMA",
                                rdma_setup,
                                rdma_isend,
                                rdma_irecv,
                                rdma_recv_op_done,
                                rdma_recv_op_failed,
                                rdma_fail_recv,
                                rdma_post_writes,
                                rdma_post_recv,
                                rdma_on_ctrl,
                                rdma_send_waiting,
                                rdma_waiting_for,
                                rdma_on_write,
                                rdma_on_write_error,
                                rdma_tail,
                                rdma_close,
                                true,
                                false};

}  // namespace nf
