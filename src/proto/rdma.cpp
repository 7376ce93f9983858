#include "proto/rdma.h"

#include <cstring>

#include <rdma/fi_errno.h>

#include "fabric/errors.h"
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

enum CtsFault { kFaultNone = 0, kFaultSize, kFaultCount, kFaultAddr, kFaultKey };

int parse_fault(const std::string& s) {
  if (s == "size") return kFaultSize;
  if (s == "count") return kFaultCount;
  if (s == "addr") return kFaultAddr;
  if (s == "key") return kFaultKey;
  return kFaultNone;
}

// The first protocol problem of a comm is a WARN, later ones INFO.
#define RDMA_LOG(c, ...)                                                                          \
  log_message(rdma_of(c).warned++ == 0 ? LogLevel::kWarn : LogLevel::kInfo, kSubsysNet, __FILE__, \
              __LINE__, __VA_ARGS__)

Status post_persistent(Comm& c, Request* r) {
  // Bounce buffers take any NCCL tag and notices; CTS buffers one tag.
  const uint64_t ignore = r->type == ReqType::kEagerRecv ? (kTagLowMask | kTagNoticeBit) : 0;
  ssize_t rc = fi_trecv(c.ep->ep(), r->bounce.buf, r->bounce.cap, r->bounce.desc, FI_ADDR_UNSPEC,
                        r->bounce.tag, ignore, &r->ops[0]);
  if (rc == -FI_EAGAIN) {
    RdmaState& rd = rdma_of(c);
    if (rd.n_repost < static_cast<int>(sizeof(rd.repost) / sizeof(rd.repost[0])))
      rd.repost[rd.n_repost++] = r;
    return Status::kOk;
  }
  if (rc != 0) return fi_fail("fi_trecv(rdma buffer)", static_cast<int>(rc), c.peer_name.c_str());
  r->posted = 1;
  r->in_flight = 1;
  r->state = ReqState::kPending;
  return Status::kOk;
}

void remove_active(RdmaState& rd, Request* r) {
  for (int i = 0; i < rd.n_active; ++i) {
    if (rd.active[i] == r) {
      rd.active[i] = rd.active[--rd.n_active];
      return;
    }
  }
}

void remove_cts_retry(RdmaState& rd, Request* r) {
  for (int i = 0; i < rd.n_cts_retry; ++i) {
    if (rd.cts_retry[i] == r) {
      rd.cts_retry[i] = rd.cts_retry[--rd.n_cts_retry];
      return;
    }
  }
}

// A receive stops taking writes: its slot is freed (a late write no longer matches) and its
// registrations are no longer in use by it.
void retire_recv(Request* r) {
  Comm& c = *r->comm;
  if (r->recv.slot != UINT32_MAX) {
    rdma_ep(*c.sep).free_slot(r);
    r->recv.slot = UINT32_MAX;
  }
  if (r->recv.holds_mrs) {
    r->recv.holds_mrs = false;
    for (int i = 0; i < r->n; ++i)
      if (r->recv.mhs[i] != nullptr) r->recv.mhs[i]->uses.fetch_sub(1, std::memory_order_release);
  }
  remove_active(rdma_of(c), r);
  remove_cts_retry(rdma_of(c), r);
}

// Done once every buffer is complete. Its CTS send may still be in flight (on some providers a
// send completes only when the peer acknowledged it): the request then goes back to the pool, and
// its CTS buffer with it, when that completes (request_release waits for in_flight == 0).
void maybe_finish_recv(Request* r) {
  if (r->recv.entries_left == 0 && r->state == ReqState::kPending) {
    retire_recv(r);
    r->state = ReqState::kDone;
  }
  if (r->in_flight == 0 && r->state == ReqState::kReleased) request_release(r);
}

void fail_recv(Request* r, Status s) {
  fail_request(r, s);
  retire_recv(r);
  if (r->in_flight == 0 && r->state == ReqState::kReleased) request_release(r);
}

// The posted receive and buffer that message `index` of `tag` goes to.
bool find_buffer(RdmaState& rd, int32_t tag, uint32_t index, Request** out, int* entry) {
  for (int a = 0; a < rd.n_active; ++a) {
    Request* r = rd.active[a];
    for (int i = 0; i < r->n; ++i) {
      if (static_cast<int32_t>(r->recv.tags[i]) == tag && r->recv.index[i] == index) {
        *out = r;
        *entry = i;
        return true;
      }
    }
  }
  return false;
}

// How far ahead of the receiver's posted buffers a sender may be (messages of one tag): an
// eager message further ahead is not held (it would keep a bounce buffer forever) but refused.
constexpr uint32_t kMaxAhead = 1u << 16;

// Whether the receiver has yet to post buffer `index` of `tag` (indices wrap).
bool not_posted_yet(RdmaState& rd, int32_t tag, uint32_t index) {
  return static_cast<int32_t>(index - rd.posted.count(tag)) >= 0;
}
bool too_far_ahead(RdmaState& rd, int32_t tag, uint32_t index) {
  return index - rd.posted.count(tag) >= kMaxAhead;
}

// Eager message in bounce buffer b for buffer i of receive r.
void deliver_eager(Request* r, int i, Request* b) {
  Comm& c = *r->comm;
  const size_t len = b->bounce.len;
  if (r->state != ReqState::kPending) return;  // failed already: nothing lands
  if (r->recv.entry_done[i] || r->recv.chunks_got[i] != 0) {
    RDMA_LOG(c,
             "eager message %u of tag %d from %s lands in a buffer already written: the "
             "receive fails",
             r->recv.index[i], static_cast<int32_t>(r->recv.tags[i]), c.peer_name.c_str());
    fail_recv(r, Status::kRemoteError);
    return;
  }
  if (len > r->recv.caps[i]) {
    RDMA_LOG(c, "message of %zu bytes from %s is larger than its receive buffer (%zu bytes)", len,
             c.peer_name.c_str(), r->recv.caps[i]);
    fail_recv(r, Status::kInvalidUsage);
    return;
  }
  if (len > 0) memcpy(r->recv.bufs[i], b->bounce.buf, len);
  r->recv.sizes[i] = len;
  r->recv.entry_done[i] = 1;
  --r->recv.entries_left;
  maybe_finish_recv(r);
}

// Sends receive r's clear-to-send: at irecv, or later when an RTS notice asks for it. Returns
// kOk with *sent false on -FI_EAGAIN.
Status send_cts(Comm& c, Request* r, bool* sent) {
  RdmaState& rd = rdma_of(c);
  *sent = false;
  const bool fresh_slot = r->recv.slot == UINT32_MAX;
  if (fresh_slot) NF_CHECK(rdma_ep(*c.sep).alloc_slot(r));
  CtsMsg m;  // only the header and the first n entries are filled and sent
  m.h.magic = kCtsMagic;
  m.h.version = kWireVersion;
  m.h.n = r->n;
  m.h.nrails = static_cast<uint8_t>(c.nrails);
  m.h.slot = static_cast<uint16_t>(r->recv.slot);
  m.h.gen = r->recv.gen;
  m.h.reserved = 0;
  for (int i = 0; i < r->n; ++i) {
    CtsEntry& e = m.e[i];
    MemHandle* mh = r->recv.mhs[i];
    e.tag = static_cast<int32_t>(r->recv.tags[i]);
    e.index = r->recv.index[i];
    e.size = r->recv.caps[i];
    const uintptr_t a = reinterpret_cast<uintptr_t>(r->recv.bufs[i]);
    e.addr = mh != nullptr ? a - mh->reg.remote_base : 0;
    for (int k = 0; k < kMaxRails; ++k)
      e.key[k] = mh != nullptr && k < c.nrails ? mh->rail_reg(k).key : 0;
  }
  switch (rd.cts_fault) {
    case kFaultAddr:
      for (int i = 0; i < r->n; ++i) m.e[i].addr += 1ull << 40;
      break;
    case kFaultKey:
      for (int i = 0; i < r->n; ++i)
        for (int k = 0; k < c.nrails; ++k) m.e[i].key[k] ^= 0x5a5a5a5a;
      break;
    default: break;
  }
  CtsWire& w = rd.cts_tx[c.pool->index_of(r)];
  size_t len = encode_cts(m, w.b);
  switch (rd.cts_fault) {
    case kFaultSize: len += 8; break;  // CtsWire has the room
    case kFaultCount: w.b[offsetof(CtsHeader, n)] = kMaxCtsEntries + 1; break;
    default: break;
  }
  const uint64_t t = ctrl_tag(c.peer_id, kCtrlCts);
  ssize_t rc;
  bool injected = false;
  if (c.use_inject && len <= c.inject_size) {
    rc = fi_tinject(c.ep->ep(), w.b, len, c.peer, t);
    injected = rc == 0;
  } else {
    rc = fi_tsend(c.ep->ep(), w.b, len, rd.cts_tx_reg.desc, c.peer, t, &r->ops[0]);
  }
  if (rc != 0) {
    if (fresh_slot) {
      rdma_ep(*c.sep).free_slot(r);
      r->recv.slot = UINT32_MAX;
    }
    if (rc == -FI_EAGAIN) return Status::kOk;
    return fi_fail("fi_tsend(clear-to-send)", static_cast<int>(rc), c.peer_name.c_str());
  }
  // posted/in_flight count the CTS send only: the request completes through rdma_on_cts_sent,
  // rdma_on_write and the eager path.
  r->posted = injected ? 0 : 1;
  r->in_flight = injected ? 0 : 1;
  *sent = true;
  return Status::kOk;
}

// A receive whose CTS was never sent (all its buffers small) is asked for one by an RTS notice.
void cts_on_request(Comm& c, Request* r) {
  if (r->recv.slot != UINT32_MAX || r->state != ReqState::kPending)
    return;  // sent already, or over
  bool sent = false;
  Status s = send_cts(c, r, &sent);
  if (!ok(s)) {
    fail_recv(r, s);
    return;
  }
  RdmaState& rd = rdma_of(c);
  if (!sent && rd.n_cts_retry < kActiveRecvs) rd.cts_retry[rd.n_cts_retry++] = r;
}

void on_notice(Comm& c, Request* b, const fi_cq_tagged_entry& e) {
  RdmaState& rd = rdma_of(c);
  const int32_t tag = static_cast<int32_t>(e.tag & kTagLowMask);
  const uint32_t index = static_cast<uint32_t>(e.data);
  NoticeMsg m;
  if (e.len != sizeof(m)) {
    RDMA_LOG(c, "a notice of %zu bytes from %s (expected %zu): ignored", static_cast<size_t>(e.len),
             c.peer_name.c_str(), sizeof(m));
    return;
  }
  memcpy(&m, b->bounce.buf, sizeof(m));
  if (m.magic != kNoticeMagic || (m.kind != kNoticeRts && m.kind != kNoticeTooLarge)) {
    RDMA_LOG(c, "a malformed notice from %s: ignored", c.peer_name.c_str());
    return;
  }
  Request* r = nullptr;
  int i = 0;
  const bool found = find_buffer(rd, tag, index, &r, &i);
  if (m.kind == kNoticeRts) {
    if (found) {
      cts_on_request(c, r);
    } else if (not_posted_yet(rd, tag, index) && !too_far_ahead(rd, tag, index) &&
               rd.n_rts < kPendingRts) {
      rd.rts[rd.n_rts++] = {tag, index};
    }
    return;
  }
  // kNoticeTooLarge: the sender failed its isend; the receive fails too, naming both sizes.
  if (!found || r->state != ReqState::kPending) return;
  RDMA_LOG(c, "message of %llu bytes from %s is larger than its receive buffer (%zu bytes)",
           static_cast<unsigned long long>(m.size), c.peer_name.c_str(), r->recv.caps[i]);
  fail_recv(r, Status::kInvalidUsage);
}

void on_eager(Request* b, const fi_cq_tagged_entry& e) {
  Comm& c = *b->comm;
  RdmaState& rd = rdma_of(c);
  if (e.tag & kTagNoticeBit) {
    on_notice(c, b, e);
  } else {
    const int32_t tag = static_cast<int32_t>(e.tag & kTagLowMask);
    const uint32_t index = static_cast<uint32_t>(e.data);
    b->bounce.index = index;
    b->bounce.len = e.len;
    b->bounce.msg_tag = tag;
    Request* r = nullptr;
    int i = 0;
    if (find_buffer(rd, tag, index, &r, &i)) {
      deliver_eager(r, i, b);
    } else if (not_posted_yet(rd, tag, index) && too_far_ahead(rd, tag, index)) {
      RDMA_LOG(c,
               "eager message %u of tag %d from %s is %u messages ahead of the receives "
               "posted (at most %u): the connection fails",
               index, tag, c.peer_name.c_str(), index - rd.posted.count(tag), kMaxAhead);
      comm_fail(c, Status::kRemoteError, "a peer's message far ahead of every receive");
    } else if (not_posted_yet(rd, tag, index)) {
      // Its receive is not posted yet: the message waits in this bounce buffer.
      rd.held[rd.n_held++] = b;
      return;
    } else {
      RDMA_LOG(c,
               "eager message %u of tag %d from %s belongs to no receive (already complete or "
               "failed): dropped",
               index, tag, c.peer_name.c_str());
    }
  }
  if (!ok(post_persistent(c, b))) b->state = ReqState::kError;
}

SendGroup* find_entry(RdmaState& rd, int32_t tag, uint32_t index, int* entry) {
  for (uint32_t k = 0; k < rd.g_count; ++k) {
    SendGroup& g = rd.groups[k];
    for (int i = 0; i < g.n; ++i) {
      if (g.e[i].tag == tag && g.e[i].index == index) {
        *entry = i;
        return &g;
      }
    }
  }
  return nullptr;
}

// Decodes the CTS in buf (decode_cts: what the bytes alone can be checked for), then checks it
// against this connection.
bool check_cts(Comm& c, const void* buf, size_t len, CtsMsg* out, std::string* why) {
  if (!decode_cts(buf, len, out, why)) return false;
  const CtsMsg& m = *out;
  char text[200];
  if (m.h.n > c.max_recvs) {
    snprintf(text, sizeof(text), "group of %u buffers (this connection allows 1..%d)", m.h.n,
             c.max_recvs);
    *why = text;
    return false;
  }
  if (m.h.nrails != c.nrails) {
    snprintf(text, sizeof(text), "keys for %u rails (the connection has %d)", m.h.nrails, c.nrails);
    *why = text;
    return false;
  }
  RdmaState& rd = rdma_of(c);
  for (int i = 0; i < m.h.n; ++i) {
    // A buffer larger than any message is fine (only the message's bytes are written).
    const CtsEntry& e = m.e[i];
    if (static_cast<int32_t>(e.index - rd.sent.count(e.tag)) > (1 << 24)) {
      snprintf(text, sizeof(text), "buffer %d: index %u of tag %d is far ahead of this side's %u",
               i, e.index, e.tag, rd.sent.count(e.tag));
      *why = text;
      return false;
    }
    int dup = 0;
    bool twice = find_entry(rd, e.tag, e.index, &dup) != nullptr;
    for (int j = 0; j < i; ++j) twice = twice || (m.e[j].tag == e.tag && m.e[j].index == e.index);
    if (twice) {
      snprintf(text, sizeof(text), "buffer %d: index %u of tag %d is announced twice", i, e.index,
               e.tag);
      *why = text;
      return false;
    }
  }
  return true;
}

void on_cts(Request* b, const fi_cq_tagged_entry& e) {
  Comm& c = *b->comm;
  RdmaState& rd = rdma_of(c);
  CtsMsg m;
  std::string why;
  if (!ok(rd.error)) {
    // Already broken: nothing more is used.
  } else if (!check_cts(c, b->bounce.buf, e.len, &m, &why)) {
    RDMA_LOG(c, "refused a clear-to-send from %s: %s; the connection fails", c.peer_name.c_str(),
             why.c_str());
    rd.error = Status::kRemoteError;
  } else if (rd.g_count == kGroupRing) {
    RDMA_LOG(c, "more than %d receive groups announced by %s at once; the connection fails",
             kGroupRing, c.peer_name.c_str());
    rd.error = Status::kRemoteError;
  } else {
    SendGroup& g = rd.groups[rd.g_count];
    g.n = m.h.n;
    g.gen = m.h.gen;
    g.slot = m.h.slot;
    g.used = 0;
    memcpy(g.e, m.e, sizeof(CtsEntry) * m.h.n);
    // Buffers the sender has already filled (eagerly, before this CTS came) need nothing more.
    for (int i = 0; i < g.n; ++i)
      if (static_cast<int32_t>(g.e[i].index - rd.sent.count(g.e[i].tag)) < 0)
        g.used = static_cast<uint8_t>(g.used | (1u << i));
    if (g.used != (1u << g.n) - 1) ++rd.g_count;
  }
  if (!ok(post_persistent(c, b))) b->state = ReqState::kError;
}

int least_loaded_rail(const SharedEp& sep, int nrails) {
  int best = 0;
  for (int r = 1; r < nrails; ++r)
    if (sep.rail_load[r] < sep.rail_load[best]) best = r;
  return best;
}

// Entry i of g has been sent: the group goes once all of its entries have.
void mark_sent(RdmaState& rd, SendGroup* g, int i) {
  g->used = static_cast<uint8_t>(g->used | (1u << i));
  if (g->used == (1u << g->n) - 1) *g = rd.groups[--rd.g_count];
}

// How long a large isend waits for its CTS before it asks for one with an RTS notice. Only a
// receive of small buffers sends none by itself, and that is an error case (the message cannot
// fit), so the question may wait: a sender streaming ahead of its receiver waits for CTSs all the
// time, and an RTS per message cost 5 % of bandwidth at 1 MiB on tcp;ofi_rxm (with 1 ms here; at
// once, 15-20 % at 2 MiB). At 100 ms it is at most ten small messages a second per connection.
constexpr uint64_t kRtsDelayNs = 100000000;

// Posts request r (taken by the caller): `size` bytes to the receiver's bounce buffers (an eager
// message or a notice), tag t, the message's per-tag index as CQ data; fi_tinjectdata when `inject`
// (done at once), else fi_tsenddata. On failure r goes back to the pool and *posted stays false
// (-FI_EAGAIN: not an error; NCCL calls again).
Status post_bounce(Comm& c, Request* r, const void* data, size_t size, void* desc, bool inject,
                   uint64_t t, uint32_t index, bool* posted) {
  *posted = false;
  r->send.size = size;
  ssize_t rc = inject ? fi_tinjectdata(c.ep->ep(), data, size, index, c.peer, t)
                      : fi_tsenddata(c.ep->ep(), data, size, desc, index, c.peer, t, &r->ops[0]);
  if (rc != 0) {
    request_release(r);
    if (rc == -FI_EAGAIN) return comm_progress(c);
    return fi_fail(inject ? "fi_tinjectdata(eager)" : "fi_tsenddata(eager)", static_cast<int>(rc),
                   c.peer_name.c_str());
  }
  if (inject) {
    r->state = ReqState::kDone;
  } else {
    r->posted = 1;
    r->in_flight = 1;
  }
  *posted = true;
  return Status::kOk;
}

// One eager message of NCCL's. *out stays NULL when the provider pushed back.
Status send_eager(Comm& c, void* data, size_t size, int tag, MemHandle* mh, uint32_t index,
                  Request** out) {
  *out = nullptr;
  Request* r = take_request(c, ReqType::kSend, 1);
  if (r == nullptr) return comm_progress(c);
  const bool inject = can_inject(c, size, mh);
  bool posted = false;
  NF_CHECK(post_bounce(c, r, data, size, mh != nullptr ? mh->reg.desc : nullptr, inject,
                       eager_tag(c.peer_id, tag), index + rdma_of(c).eager_skew, &posted));
  if (!posted) return Status::kOk;
  if (!inject && mh != nullptr) {
    r->send.mh = mh;  // released by complete_op
    mh->uses.fetch_add(1, std::memory_order_relaxed);
  }
  *out = r;
  return Status::kOk;
}

// A notice to the receiver about message `index` of `tag` (NoticeMsg), from the buffer that
// belongs to its request. *posted false on -FI_EAGAIN: the caller hands NCCL a NULL request and
// this is tried again on the retried call. Nobody tests a notice: its request goes back to the
// pool when it completes.
Status send_notice(Comm& c, int tag, uint32_t index, uint32_t kind, size_t size, bool* posted) {
  *posted = false;
  Request* r = take_request(c, ReqType::kSend, 1);
  if (r == nullptr) return comm_progress(c);
  NoticeMsg& m = rdma_of(c).notice_tx[c.pool->index_of(r)];
  m.magic = kNoticeMagic;
  m.kind = kind;
  m.size = size;
  NF_CHECK(post_bounce(c, r, &m, sizeof(m), rdma_of(c).notice_tx_reg.desc,
                       c.use_inject && sizeof(m) <= c.inject_size,
                       eager_tag(c.peer_id, tag) | kTagNoticeBit, index, posted));
  if (*posted) request_release(r);
  return Status::kOk;
}

Status alloc_registered(Comm& c, size_t bytes, MemReg* reg, bool remote, uint8_t** out) {
  std::unique_ptr<uint8_t[]> p(new uint8_t[bytes]());
  NF_CHECK(register_memory(c.ep->domain(), c.ep->ep(), p.get(), bytes, reg, remote));
  *out = p.release();
  return Status::kOk;
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
      NF_CHECK(post_persistent(c, r));
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
      NF_CHECK(post_persistent(c, r));
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
    if (!ok(post_persistent(c, todo[i]))) todo[i]->state = ReqState::kError;
  n = rd.n_cts_retry;
  rd.n_cts_retry = 0;
  Request* cts[kActiveRecvs];
  memcpy(cts, rd.cts_retry, sizeof(Request*) * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) cts_on_request(c, cts[i]);
}

void rdma_on_persistent(Request* r, const fi_cq_tagged_entry* e) {
  Comm& c = *r->comm;
  if (c.closing) return;  // cancelled by the close, or the last message: not reposted
  if (e == nullptr) {
    // Failed (logged by the caller): the buffer goes back to work.
    if (!ok(post_persistent(c, r))) r->state = ReqState::kError;
  } else if (r->type == ReqType::kEagerRecv) {
    on_eager(r, *e);
  } else {
    on_cts(r, *e);
  }
}

void rdma_on_cts_sent(Request* r) { maybe_finish_recv(r); }

void rdma_fail_recv(Request* r, Status s) { fail_recv(r, s); }

void rdma_on_cts_failed(Request* r, Status s) {
  if (r->state == ReqState::kPending)
    fail_recv(r, s);
  else
    maybe_finish_recv(r);  // complete already (eagerly): only the CTS's accounting is left
}

void rdma_on_write(SharedEp& sep, const fi_cq_tagged_entry& e) {
  const Imm i = imm_decode(e.data);
  if (i.slot >= rdma_ep(sep).slot_req.size() || rdma_ep(sep).slot_req[i.slot] == nullptr ||
      (rdma_ep(sep).slot_gen[i.slot] & kMaxGen) != i.gen) {
    NF_INFO(kSubsysNet,
            "a write with immediate data 0x%llx names no receive in progress "
            "(late, or not from this protocol): ignored",
            static_cast<unsigned long long>(e.data));
    return;
  }
  Request* r = rdma_ep(sep).slot_req[i.slot];
  Comm& c = *r->comm;
  ++c.events;
  const size_t len = sep.wide_imm ? static_cast<size_t>(e.data >> 32) : e.len;
  const char* bad = nullptr;
  if (i.entry >= r->n)
    bad = "names a buffer the receive does not have";
  else if (r->recv.entry_done[i.entry])
    bad = "lands in a buffer already complete";
  else if (r->recv.chunks_expected[i.entry] != 0 && r->recv.chunks_expected[i.entry] != i.nchunks)
    bad = "disagrees on the number of pieces";
  else if (r->recv.sizes[i.entry] + len > r->recv.caps[i.entry])
    bad = "overflows the buffer";
  if (bad != nullptr) {
    RDMA_LOG(c, "a write from %s %s (immediate 0x%llx): the receive fails", c.peer_name.c_str(),
             bad, static_cast<unsigned long long>(e.data));
    fail_recv(r, Status::kRemoteError);
    return;
  }
  r->recv.chunks_expected[i.entry] = static_cast<uint8_t>(i.nchunks);
  r->recv.sizes[i.entry] += len;
  if (++r->recv.chunks_got[i.entry] == i.nchunks) {
    r->recv.entry_done[i.entry] = 1;
    --r->recv.entries_left;
    maybe_finish_recv(r);
  }
}

bool rdma_on_write_error(SharedEp& sep, const CqError& err) {
  const Imm i = imm_decode(err.data);
  if (i.slot >= rdma_ep(sep).slot_req.size() || rdma_ep(sep).slot_req[i.slot] == nullptr ||
      (rdma_ep(sep).slot_gen[i.slot] & kMaxGen) != i.gen)
    return false;
  Request* r = rdma_ep(sep).slot_req[i.slot];
  Comm& c = *r->comm;
  RDMA_LOG(c, "a write from %s into a posted receive failed: %s; the receive fails",
           c.peer_name.c_str(), err.text.c_str());
  fail_recv(r, status_for_cq_error(err.err));
  return true;
}

Status rdma_post_writes(Comm& c, Request* r) {
  SharedEp& sep = *c.sep;
  const size_t total = r->send.size;
  while (r->posted < r->n) {
    const int k = r->posted;
    const size_t off = static_cast<size_t>(k) * r->send.chunk;
    const size_t len = total - off < r->send.chunk ? total - off : r->send.chunk;
    const int rail = least_loaded_rail(sep, c.nrails);
    MemHandle* mh = r->send.mh;
    void* desc = mh != nullptr ? mh->rail_reg(rail).desc : nullptr;
    const uint64_t data =
        sep.wide_imm ? (static_cast<uint64_t>(len) << 32) | r->send.imm : r->send.imm;
    ssize_t rc =
        fi_writedata(sep.rail(rail)->ep(), static_cast<uint8_t*>(r->send.buf) + off, len, desc,
                     data, c.peer_rail[rail], r->send.raddr + off, r->send.rkeys[rail], &r->ops[k]);
    if (rc == -FI_EAGAIN) return Status::kOk;
    if (rc != 0) {
      Status s = fi_fail("fi_writedata", static_cast<int>(rc), c.peer_name.c_str());
      fail_request(r, s);
      r->n = r->posted;
      return s;
    }
    r->send.op_rail[k] = static_cast<uint8_t>(rail);
    r->send.op_len[k] = len;
    sep.rail_load[rail] += len;
    if (mh != nullptr) mh->uses.fetch_add(1, std::memory_order_relaxed);
    ++r->posted;
    ++r->in_flight;
  }
  return Status::kOk;
}

Status rdma_isend(Comm& c, void* data, size_t size, int tag, MemHandle* mh, Request** out) {
  *out = nullptr;
  std::lock_guard<TicketLock> lock(c.sep->mu);
  if (!ok(c.sep->failed)) return c.sep->failed;
  if (!ok(c.failed)) return c.failed;
  RdmaState& rd = rdma_of(c);
  if (!ok(rd.error)) return rd.error;
  if (c.deferred_head != nullptr) {
    // A send is still being posted; later ones wait for it.
    NF_CHECK(comm_progress(c));
    if (c.deferred_head != nullptr) return Status::kOk;
  }
  uint32_t* count = rd.sent.get(tag);
  if (count == nullptr) {
    NF_WARN("isend to %s: more than %d distinct tags on one connection", c.peer_name.c_str(),
            kMaxTags);
    return Status::kInvalidUsage;
  }
  const uint32_t index = *count;  // this is message `index` of its tag
  int i = 0;
  SendGroup* g = find_entry(rd, tag, index, &i);
  const bool fits_eager = c.eager_max > 0 && size <= c.eager_max;  // 0: no eager messages
  if (g == nullptr && !fits_eager) {
    // Too large to send before the receiver's clear-to-send names the buffer. A receive of only
    // small buffers sends none by itself: ask for one (once per message), then wait for it.
    NF_CHECK(comm_progress(c));
    if (!ok(rd.error)) return rd.error;
    g = find_entry(rd, tag, index, &i);
    if (g == nullptr) {
      if (!rd.wait_valid || rd.wait_tag != tag || rd.wait_index != index) {
        rd.wait_valid = true;
        rd.wait_tag = tag;
        rd.wait_index = index;
        rd.wait_since = now_ns();
        rd.rts_sent = false;
      } else if (!rd.rts_sent && now_ns() - rd.wait_since > kRtsDelayNs) {
        bool posted = false;
        NF_CHECK(send_notice(c, tag, index, kNoticeRts, size, &posted));
        rd.rts_sent = posted;
      }
      return Status::kOk;
    }
  }
  if (g != nullptr && size > g->e[i].size) {
    // The receive cannot take it: tell the receiver (its receive fails too, not hangs), then fail.
    bool posted = false;
    NF_CHECK(send_notice(c, tag, index, kNoticeTooLarge, size, &posted));
    if (!posted) return Status::kOk;
    NF_WARN("isend of %zu bytes to %s is larger than the receive buffer (%llu bytes)", size,
            c.peer_name.c_str(), static_cast<unsigned long long>(g->e[i].size));
    ++*count;
    mark_sent(rd, g, i);
    return Status::kInvalidUsage;
  }
  if (fits_eager) {
    // Eager: no CTS yet, or a small message: a copy through the receiver's bounce buffers costs
    // less than a write.
    Status s = send_eager(c, data, size, tag, mh, index, out);
    if (*out == nullptr) return s;
    ++*count;
    if (g != nullptr) mark_sent(rd, g, i);
    return s;
  }

  // Rendezvous: write into the buffer the CTS named.
  const CtsEntry& e = g->e[i];
  if (size > 0 && mh == nullptr && (c.ep->domain().mr_mode() & FI_MR_LOCAL)) {
    NF_WARN("isend to %s: memory not registered (mhandle NULL)", c.peer_name.c_str());
    return Status::kInvalidUsage;
  }
  size_t nchunks = (size + rd.min_chunk - 1) / rd.min_chunk;
  if (nchunks < 1) nchunks = 1;
  if (nchunks > static_cast<size_t>(c.nrails)) nchunks = static_cast<size_t>(c.nrails);
  // A large message also goes as several writes in flight, on one rail too: the target lands
  // (and on tcp, receives) one while the next is on its way. Measured on tcp;ofi_rxm with 512 KiB
  // pieces: 1 MiB at about 1.25 of SENDRECV, 4 MiB 1.7, 16 MiB 1.4; smaller pieces lose at 1 MiB
  // (256 KiB: 0.9, 128 KiB: 0.6) (docs/performance.md).
  if (rd.write_chunk > 0 && size > rd.write_chunk) {
    size_t pieces = (size + rd.write_chunk - 1) / rd.write_chunk;
    if (pieces > static_cast<size_t>(kMaxGroup)) pieces = kMaxGroup;
    if (pieces > nchunks) nchunks = pieces;
  }
  size_t chunk = (size + nchunks - 1) / nchunks;
  chunk = (chunk + 127) & ~static_cast<size_t>(127);
  // No write larger than the provider takes in one (EFA: 1 GiB): more pieces where needed.
  const size_t max_write = c.max_write_size;
  if (chunk > max_write) chunk = max_write & ~static_cast<size_t>(127);
  if (chunk == 0) chunk = 128;
  nchunks = size == 0 ? 1 : (size + chunk - 1) / chunk;
  if (nchunks > static_cast<size_t>(kMaxGroup)) {
    NF_WARN("isend of %zu bytes to %s needs %zu writes of at most %zu bytes; the most is %d", size,
            c.peer_name.c_str(), nchunks, max_write, kMaxGroup);
    return Status::kInvalidUsage;
  }
  Request* r = take_request(c, ReqType::kSend, static_cast<int>(nchunks));
  if (r == nullptr) return comm_progress(c);
  r->send.size = size;
  r->send.buf = data;
  r->send.chunk = chunk;
  r->send.raddr = e.addr;
  for (int k = 0; k < kMaxRails; ++k) r->send.rkeys[k] = e.key[k];
  r->send.imm =
      imm_encode(g->slot, static_cast<uint32_t>(i), static_cast<uint32_t>(nchunks), g->gen);
  r->send.mh = mh;  // every write of the send counts a use of it (complete_op releases them)
  Status s = rdma_post_writes(c, r);
  if (r->posted == 0) {
    r->send.mh = nullptr;
    request_release(r);
    if (!ok(s)) return s;
    return comm_progress(c);
  }
  ++*count;
  mark_sent(rd, g, i);
  if (r->posted < r->n && ok(s)) defer(c, r);
  *out = r;
  return Status::kOk;
}

Status rdma_irecv(Comm& c, int n, void** data, const size_t* sizes, const int* tags,
                  MemHandle* const* mhs, Request** out) {
  *out = nullptr;
  std::lock_guard<TicketLock> lock(c.sep->mu);
  if (!ok(c.sep->failed)) return c.sep->failed;
  if (!ok(c.failed)) return c.failed;
  RdmaState& rd = rdma_of(c);
  if (rd.n_active >= kActiveRecvs) return comm_progress(c);
  // Each buffer's per-tag index; the counters move only once the receive is posted.
  uint32_t index[kMaxGroup];
  for (int i = 0; i < n; ++i) {
    uint32_t* cnt = rd.posted.get(tags[i]);
    if (cnt == nullptr) {
      NF_WARN("irecv from %s: more than %d distinct tags on one connection", c.peer_name.c_str(),
              kMaxTags);
      return Status::kInvalidUsage;
    }
    index[i] = *cnt;
    for (int j = 0; j < i; ++j) index[i] += tags[j] == tags[i];
  }
  // A group whose buffers all fit an eager message needs no CTS: whatever the sender sends into
  // it (no more than the buffer holds) goes eagerly. Ping-pongs of small messages then cost one
  // message per direction, as with SENDRECV. A sender with a larger message asks for a CTS with
  // an RTS notice (it may have come already).
  bool need_cts = false;
  for (int i = 0; i < n; ++i) need_cts = need_cts || c.eager_max == 0 || sizes[i] > c.eager_max;
  for (int i = 0; i < n && !need_cts; ++i)
    for (int k = 0; k < rd.n_rts && !need_cts; ++k)
      need_cts = rd.rts[k].tag == tags[i] && rd.rts[k].index == index[i];
  for (int i = 0; need_cts && i < n; ++i) {
    if (sizes[i] > 0 && mhs[i] == nullptr) {
      NF_WARN(
          "irecv from %s: buffer %d (%zu bytes) is not registered; the RDMA protocol needs "
          "an mhandle from regMr for buffers above NCCL_FABRIC_EAGER_MAX",
          c.peer_name.c_str(), i, sizes[i]);
      return Status::kInvalidUsage;
    }
  }
  Request* r = take_request(c, ReqType::kRecv, n);
  if (r == nullptr) return comm_progress(c);
  r->recv.slot = UINT32_MAX;
  r->recv.entries_left = static_cast<uint8_t>(n);
  for (int i = 0; i < n; ++i) {
    r->recv.bufs[i] = data[i];
    r->recv.caps[i] = sizes[i];
    r->recv.mhs[i] = mhs[i];
    r->recv.tags[i] = static_cast<uint32_t>(tags[i]);
    r->recv.index[i] = index[i];
    r->recv.chunks_expected[i] = 0;
    r->recv.chunks_got[i] = 0;
    r->recv.entry_done[i] = 0;
  }
  if (need_cts) {
    bool sent = false;
    Status s = send_cts(c, r, &sent);
    if (!ok(s) || !sent) {
      for (int i = 0; i < n; ++i) r->recv.mhs[i] = nullptr;
      request_release(r);
      if (!ok(s)) return s;
      return comm_progress(c);
    }
  }
  for (int i = 0; i < n; ++i) {
    ++*rd.posted.get(tags[i]);
    for (int k = 0; k < rd.n_rts; ++k) {
      if (rd.rts[k].tag == tags[i] && rd.rts[k].index == index[i]) {
        rd.rts[k] = rd.rts[--rd.n_rts];
        break;
      }
    }
  }
  for (int i = 0; i < n; ++i)
    if (mhs[i] != nullptr) mhs[i]->uses.fetch_add(1, std::memory_order_relaxed);
  r->recv.holds_mrs = true;
  rd.active[rd.n_active++] = r;
  // Eager messages that arrived before this receive was posted.
  for (int k = 0; k < rd.n_held;) {
    Request* b = rd.held[k];
    int i = 0;
    for (; i < n; ++i)
      if (static_cast<int32_t>(r->recv.tags[i]) == b->bounce.msg_tag &&
          r->recv.index[i] == b->bounce.index)
        break;
    if (i < n) {
      rd.held[k] = rd.held[--rd.n_held];
      deliver_eager(r, i, b);
      if (!ok(post_persistent(c, b))) b->state = ReqState::kError;
    } else {
      ++k;
    }
  }
  *out = r;
  return Status::kOk;
}

void rdma_close(Comm& c) {
  if (!c.pstate) return;
  RdmaState& rd = rdma_of(c);
  while (rd.n_active > 0) retire_recv(rd.active[0]);
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
                                rdma_on_write,
                                rdma_on_write_error,
                                rdma_tail,
                                rdma_close,
                                true,
                                false,
                                kCtsBufs,
                                kEagerBufs};

}  // namespace nf
