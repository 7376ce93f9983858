// The RDMA protocol, the receiver's side: irecv and its clear-to-send, the peer's writes landing in
// the buffers it named, eager messages from the control pool, notices, and a receive's end.
#include <cstring>

#include <rdma/fi_errno.h>

#include "fabric/errors.h"
#include "proto/rdma.h"
#include "util/clock.h"
#include "util/log.h"

namespace nf {

namespace {

// The writes the buffers of receive r may take (at most kMaxGroup pieces each), each of which
// takes a posted receive under FI_RX_CQ_DATA.
int64_t write_budget(const Request* r) { return static_cast<int64_t>(r->recv.nbufs) * kMaxGroup; }

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
}  // namespace

void rdma_retire_recv(Request* r) {
  Comm& c = *r->comm;
  if (r->recv.slot != UINT32_MAX) {
    rdma_ep(*c.sep).free_slot(r);
    r->recv.slot = UINT32_MAX;
    ctrl_expect_writes(*c.sep, -write_budget(r));
  }
  if (r->recv.holds_mrs) {
    r->recv.holds_mrs = false;
    for (int i = 0; i < r->recv.nbufs; ++i)
      if (r->recv.mhs[i] != nullptr) r->recv.mhs[i]->uses.fetch_sub(1, std::memory_order_release);
  }
  remove_active(rdma_of(c), r);
  remove_cts_retry(rdma_of(c), r);
}

namespace {

// Done once every buffer is complete. Its CTS send may still be in flight (on some providers a
// send completes only when the peer acknowledged it): the request then goes back to the pool, and
// its CTS buffer with it, when that completes (request_held counts the CTS in the provider).
void maybe_finish_recv(Request* r) {
  if (r->recv.entries_left == 0 && r->state == ReqState::kPending) {
    rdma_retire_recv(r);
    r->state = ReqState::kDone;
  }
  if (r->recv.entries_left == 0 && r->recv.early_open) {
    // Reported early: every write has landed now.
    rdma_retire_recv(r);
    r->recv.early_open = false;
    r->comm->st.msgs.add();
    r->comm->st.bytes.add(r->recv.sizes[0]);
  }
  request_settle(r);  // a receive reported early: its writes let go
}

void fail_recv(Request* r, Status s) {
  fail_request(r, s);
  rdma_retire_recv(r);
  r->recv.early_open = false;
  request_settle(r);
}
// The posted receive and buffer that message `index` of `tag` goes to.
bool find_buffer(RdmaState& rd, int32_t tag, uint32_t index, Request** out, int* entry) {
  for (int a = 0; a < rd.n_active; ++a) {
    Request* r = rd.active[a];
    for (int i = 0; i < r->recv.nbufs; ++i) {
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
// eager message further ahead is not held (it would keep a control buffer forever) but refused.
constexpr uint32_t kMaxAhead = 1u << 16;
// Eager messages one connection may keep waiting in control buffers (the endpoint holds at most
// 4096 for all of its connections): NCCL's proxy is never more than a few steps ahead, so more is
// a broken or hostile peer, which would otherwise starve every other connection of buffers.
constexpr size_t kMaxHeld = 512;

// Whether the receiver has yet to post buffer `index` of `tag` (indices wrap).
bool not_posted_yet(RdmaState& rd, int32_t tag, uint32_t index) {
  return static_cast<int32_t>(index - rd.posted.count(tag)) >= 0;
}
bool too_far_ahead(RdmaState& rd, int32_t tag, uint32_t index) {
  return index - rd.posted.count(tag) >= kMaxAhead;
}

// Eager message in control buffer b for buffer i of receive r.
void deliver_eager(Request* r, int i, const CtrlRx* b) {
  Comm& c = *r->comm;
  const size_t len = b->plen();
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
  if (len > 0) memcpy(r->recv.bufs[i], b->payload(), len);
  r->recv.sizes[i] = len;
  c.st.eager.add();
  if (__builtin_expect(r->prof != nullptr, 0)) prof_mark(r, kProfEagerDelivered, i, len);
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
  if (fresh_slot) {
    NF_CHECK(rdma_ep(*c.sep).alloc_slot(r));
    ctrl_expect_writes(*c.sep, write_budget(r));
  }
  CtsMsg m;  // only the header and the first n entries are filled and sent
  m.h.magic = kCtsMagic;
  m.h.version = kWireVersion;
  m.h.n = r->recv.nbufs;
  m.h.nrails = static_cast<uint8_t>(c.nrails);
  m.h.slot = static_cast<uint16_t>(r->recv.slot);
  m.h.gen = r->recv.gen;
  m.h.reserved = 0;
  for (int i = 0; i < r->recv.nbufs; ++i) {
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
      for (int i = 0; i < r->recv.nbufs; ++i) m.e[i].addr += 1ull << 40;
      break;
    case kFaultKey:
      for (int i = 0; i < r->recv.nbufs; ++i)
        for (int k = 0; k < c.nrails; ++k) m.e[i].key[k] ^= 0x5a5a5a5a;
      break;
    default: break;
  }
  RdmaState::CtsTx& tx = rd.cts_tx[c.pool->index_of(r)];
  CtsWire& w = tx.w;
  size_t len = encode_cts(m, w.b);
  switch (rd.cts_fault) {
    case kFaultSize: len += 8; break;  // CtsWire has the room
    case kFaultCount: w.b[offsetof(CtsHeader, n)] = kMaxCtsEntries + 1; break;
    default: break;
  }
  bool posted = false, injected = false;
  tx.h = ctrl_hdr(kCtrlCts, c.peer_id, c.cookie_out);
  Status s = ctrl_send(c, &tx.h, len, rd.cts_tx_reg.desc, r, 0, true, &posted, &injected);
  if (!ok(s) || !posted) {
    if (fresh_slot) {
      rdma_ep(*c.sep).free_slot(r);
      r->recv.slot = UINT32_MAX;
      ctrl_expect_writes(*c.sep, -write_budget(r));
    }
    return s;  // kOk with nothing sent: -FI_EAGAIN
  }
  // posted/in_flight count the CTS send only: the request completes through rdma_on_cts_sent,
  // rdma_on_write and the eager path.
  if (!injected) {
    r->n = 1;  // its one operation (an injected CTS reports no completion: none)
    op_posted(r, nullptr);
  }
  *sent = true;
  return Status::kOk;
}

}  // namespace

// A receive whose CTS was never sent (all its buffers small) is asked for one by an RTS notice.
void rdma_cts_on_request(Comm& c, Request* r) {
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

namespace {

void on_notice(Comm& c, const CtrlHdr& h, const CtrlRx* b) {
  RdmaState& rd = rdma_of(c);
  const int32_t tag = h.tag;
  const uint32_t index = h.index;
  NoticeMsg m;
  std::string why;
  if (!decode_notice(b->payload(), b->plen(), &m, &why)) {
    RDMA_LOG(c, "a malformed notice from %s (%s): ignored", c.peer_name.c_str(), why.c_str());
    return;
  }
  Request* r = nullptr;
  int i = 0;
  const bool found = find_buffer(rd, tag, index, &r, &i);
  if (m.kind == kNoticeRts) {
    if (found) {
      rdma_cts_on_request(c, r);
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

}  // namespace

bool rdma_on_eager(Comm& c, const CtrlHdr& h, CtrlRx* b) {
  RdmaState& rd = rdma_of(c);
  if (ctrl_kind(h) == kCtrlNotice) {
    on_notice(c, h, b);
    return false;
  }
  const int32_t tag = h.tag;
  // A compact message carries the index's low 16 bits: completed from the buffers posted so far.
  const uint32_t index = b->compact ? compact_index(h.index, rd.posted.count(tag)) : h.index;
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
  } else if (not_posted_yet(rd, tag, index) && rd.held.size() >= kMaxHeld) {
    RDMA_LOG(c,
             "%s has %zu eager messages waiting for receives not posted yet (at most %zu per "
             "connection): the connection fails",
             c.peer_name.c_str(), rd.held.size(), kMaxHeld);
    comm_fail(c, Status::kRemoteError, "a peer's eager messages far ahead of the receives");
  } else if (not_posted_yet(rd, tag, index)) {
    // Its receive is not posted yet: the message waits in this control buffer (the endpoint
    // posts another in its place).
    b->msg_tag = tag;
    b->index = index;
    rd.held.push_back(b);
    return true;
  } else {
    RDMA_LOG(c,
             "eager message %u of tag %d from %s belongs to no receive (already complete or "
             "failed): dropped",
             index, tag, c.peer_name.c_str());
  }
  return false;
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
  if (i.entry >= r->recv.nbufs)
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
    if (__builtin_expect(r->prof != nullptr, 0))
      prof_mark(r, kProfDataLanded, static_cast<int>(i.entry), r->recv.sizes[i.entry]);
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

Status rdma_irecv(Comm& c, int n, void** data, const size_t* sizes, const int* tags,
                  MemHandle* const* mhs, Request** out) {
  *out = nullptr;
  std::lock_guard<TicketLock> lock(c.sep->mu);
  if (Status s = comm_usable(c); !ok(s)) return s;
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
  r->n = 0;  // its operations: the clear-to-send, once sent (send_cts); the buffers are nbufs
  // NCCL polls the data itself (NCCL_NET_OPTIONAL_RECV_COMPLETION): report it once its CTS has
  // left, where nothing but writes can fill it (no eager message on this connection) and the
  // writes land without our progress (Comm::early_ok).
  r->recv.early = c.cur_optional && c.early_ok && c.eager_max == 0 && need_cts;
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
  for (size_t k = 0; k < rd.held.size();) {
    CtrlRx* b = rd.held[k];
    int i = 0;
    for (; i < n; ++i)
      if (static_cast<int32_t>(r->recv.tags[i]) == b->msg_tag && r->recv.index[i] == b->index)
        break;
    if (i < n) {
      rd.held[k] = rd.held.back();
      rd.held.pop_back();
      deliver_eager(r, i, b);
      ctrl_release(*c.sep, b);
    } else {
      ++k;
    }
  }
  *out = r;
  return Status::kOk;
}

}  // namespace nf
