// The RDMA protocol, the parts both sides share: completion slots of the endpoint, the comm's
// state, its persistent receives (set-up, repost, dispatch of their messages), close, and the
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
  deregister_memory(&cts_rx_reg);
  deregister_memory(&cts_tx_reg);
  deregister_memory(&bounce_reg);
  deregister_memory(&notice_tx_reg);
}

namespace {

int parse_fault(const std::string& s) {
  if (s == "size") return kFaultSize;
  if (s == "count") return kFaultCount;
  if (s == "addr") return kFaultAddr;
  if (s == "key") return kFaultKey;
  return kFaultNone;
}

Status alloc_registered(Comm& c, size_t bytes, MemReg* reg, bool remote, uint8_t** out) {
  std::unique_ptr<uint8_t[]> p(new uint8_t[bytes]());
  NF_CHECK(register_memory(c.ep->domain(), c.ep->ep(), p.get(), bytes, reg, remote));
  *out = p.release();
  return Status::kOk;
}

}  // namespace

Status rdma_post_persistent(Comm& c, Request* r) {
  // Bounce buffers take any NCCL tag and notices; CTS buffers one tag.
  const uint64_t ignore = r->type == ReqType::kEagerRecv ? (kTagLowMask | kTagNoticeBit) : 0;
  ssize_t rc = fi_trecv(c.ep->ep(), r->bounce.buf, r->bounce.cap, r->bounce.desc, FI_ADDR_UNSPEC,
                        r->bounce.tag, ignore, &r->ops[0]);
  if (rc == -FI_EAGAIN) {
    c.st.eagain.add();
    RdmaState& rd = rdma_of(c);
    if (rd.n_repost < static_cast<int>(sizeof(rd.repost) / sizeof(rd.repost[0])))
      rd.repost[rd.n_repost++] = r;
    return Status::kOk;
  }
  if (rc != 0) return fi_fail("fi_trecv(rdma buffer)", static_cast<int>(rc), c.peer_name.c_str());
  op_posted(r, nullptr);
  r->state = ReqState::kPending;
  return Status::kOk;
}

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
  if (c.role == CommRole::kSend) {
    rd.cts_rx.reset(new CtsWire[kCtsBufs]());
    NF_CHECK(register_memory(c.ep->domain(), c.ep->ep(), rd.cts_rx.get(),
                             sizeof(CtsWire) * kCtsBufs, &rd.cts_rx_reg));
    rd.notice_tx.reset(new NoticeMsg[c.pool->capacity()]());
    NF_CHECK(register_memory(c.ep->domain(), c.ep->ep(), rd.notice_tx.get(),
                             sizeof(NoticeMsg) * c.pool->capacity(), &rd.notice_tx_reg));
    for (int i = 0; i < kCtsBufs; ++i) {
      Request* r = take_request(c, ReqType::kCtsRecv, 1);
      if (r == nullptr) return Status::kInternalError;
      r->bounce.buf = &rd.cts_rx[i];
      r->bounce.cap = sizeof(CtsWire);
      r->bounce.desc = rd.cts_rx_reg.desc;
      r->bounce.tag = ctrl_tag(c.id, kCtrlCts);
      NF_CHECK(rdma_post_persistent(c, r));
    }
  } else {
    rd.cts_tx.reset(new CtsWire[c.pool->capacity()]());
    NF_CHECK(register_memory(c.ep->domain(), c.ep->ep(), rd.cts_tx.get(),
                             sizeof(CtsWire) * c.pool->capacity(), &rd.cts_tx_reg));
    // Bounce buffers also take the sender's notices, so they exist with eager messages off too.
    rd.bounce_size = c.eager_max > kMinBounce ? c.eager_max : kMinBounce;
    uint8_t* p = nullptr;
    NF_CHECK(alloc_registered(c, rd.bounce_size * kEagerBufs, &rd.bounce_reg, false, &p));
    rd.bounce.reset(p);
    for (int i = 0; i < kEagerBufs; ++i) {
      Request* r = take_request(c, ReqType::kEagerRecv, 1);
      if (r == nullptr) return Status::kInternalError;
      r->bounce.buf = p + static_cast<size_t>(i) * rd.bounce_size;
      r->bounce.cap = rd.bounce_size;
      r->bounce.desc = rd.bounce_reg.desc;
      r->bounce.tag = eager_tag(c.id, 0);
      NF_CHECK(rdma_post_persistent(c, r));
    }
  }
  return Status::kOk;
}

void rdma_retry_reposts(Comm& c) {
  RdmaState& rd = rdma_of(c);
  int n = rd.n_repost;
  rd.n_repost = 0;
  Request* todo[kEagerBufs + kCtsBufs];
  memcpy(todo, rd.repost, sizeof(Request*) * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    if (!ok(rdma_post_persistent(c, todo[i]))) todo[i]->state = ReqState::kError;
  n = rd.n_cts_retry;
  rd.n_cts_retry = 0;
  Request* cts[kActiveRecvs];
  memcpy(cts, rd.cts_retry, sizeof(Request*) * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) rdma_cts_on_request(c, cts[i]);
}

void rdma_on_persistent(Request* r, const fi_cq_tagged_entry* e) {
  Comm& c = *r->comm;
  if (c.closing) return;  // cancelled by the close, or the last message: not reposted
  if (e == nullptr) {
    // Failed (logged by the caller): the buffer goes back to work.
    if (!ok(rdma_post_persistent(c, r))) r->state = ReqState::kError;
  } else if (r->type == ReqType::kEagerRecv) {
    rdma_on_eager(r, *e);
  } else {
    rdma_on_cts(r, *e);
  }
}

void rdma_close(Comm& c) {
  if (!c.pstate) return;
  RdmaState& rd = rdma_of(c);
  while (rd.n_active > 0) rdma_retire_recv(rd.active[0]);
  rd.n_held = 0;
  rd.n_repost = 0;
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
    // A closing comm reposts nothing and sends no late clear-to-send.
    rd.n_repost = 0;
    rd.n_cts_retry = 0;
    return;
  }
  if (rd.n_repost > 0 || rd.n_cts_retry > 0) rdma_retry_reposts(c);
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
                                rdma_on_persistent,
                                rdma_send_waiting,
                                rdma_waiting_for,
                                rdma_on_write,
                                rdma_on_write_error,
                                rdma_tail,
                                rdma_close,
                                true,
                                false,
                                kCtsBufs,
                                kEagerBufs};

}  // namespace nf
