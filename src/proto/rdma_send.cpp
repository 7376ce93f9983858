// The RDMA protocol, the sender's side: isend, clear-to-send messages from the receiver, writes
// striped over the rails, eager messages and notices as control messages into the receiver's
// control pool.
#include <cstring>

#include <rdma/fi_errno.h>

#include "fabric/errors.h"
#include "proto/rdma.h"
#include "util/clock.h"
#include "util/log.h"

namespace nf {

namespace {

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

}  // namespace

void rdma_on_cts(Comm& c, const void* buf, size_t len) {
  RdmaState& rd = rdma_of(c);
  CtsMsg m;
  std::string why;
  if (!ok(rd.error)) {
    // Already broken: nothing more is used.
  } else if (!check_cts(c, buf, len, &m, &why)) {
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
}

namespace {

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

// Messages up to this size (and the provider's inject size) go with fi_inject, copied behind their
// header on the stack (the provider copies them anyway); larger ones as two pieces (header,
// NCCL's buffer) with fi_sendv.
constexpr size_t kInjectCopyMax = 4096;

// Copies n bytes behind a header, without a library call for up to 16 (the small messages whose
// instructions count, docs/performance.md): two overlapping loads and stores.
inline void copy_small(uint8_t* dst, const void* src, size_t n) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  if (n >= 8 && n <= 16) {
    uint64_t a, b;
    memcpy(&a, s, 8);
    memcpy(&b, s + n - 8, 8);
    memcpy(dst, &a, 8);
    memcpy(dst + n - 8, &b, 8);
  } else if (n >= 4 && n < 8) {
    uint32_t a, b;
    memcpy(&a, s, 4);
    memcpy(&b, s + n - 4, 4);
    memcpy(dst, &a, 4);
    memcpy(dst + n - 4, &b, 4);
  } else if (n > 0) {
    memcpy(dst, s, n);
  }
}

// One eager message of NCCL's: the control header (in the request's slot) and NCCL's buffer, as
// one untagged message into the receiver's control pool. *out stays NULL when the provider pushed
// back.
Status send_eager(Comm& c, void* data, size_t size, int tag, MemHandle* mh, uint32_t index,
                  Request** out) {
  *out = nullptr;
  Request* r = take_request(c, ReqType::kSend, 1);
  if (r == nullptr) return comm_progress(c);
  RdmaState& rd = rdma_of(c);
  r->send.size = size;
  const CtrlHdr h = ctrl_hdr(kCtrlEager, c.peer_id, c.cookie_out, tag, index + rd.eager_skew);
  const size_t total = kCtrlHdrSize + size;
  ssize_t rc;
  const bool compact = c.compact_eager && tag >= 0 && tag <= kCompactTagMax && rd.eager_skew == 0;
  bool inject;
  if (compact) {
    // NCCL's buffer alone, in one piece; the header in the CQ data, which names the receiving comm
    // by its cookie.
    const uint64_t cqd = compact_eager_data(c.cookie_out, tag, index);
    inject = can_inject(c, size, mh);
    static uint8_t empty;
    void* buf = size > 0 ? data : &empty;
    if (inject)
      rc = fi_injectdata(c.ep->ep(), buf, size, cqd, c.peer);
    else
      rc = fi_senddata(c.ep->ep(), buf, size, mh != nullptr ? mh->reg.desc : nullptr, cqd, c.peer,
                       &r->ops[0]);
  } else if ((inject = total <= kInjectCopyMax && can_inject(c, total, mh))) {
    alignas(8) uint8_t tmp[kInjectCopyMax];
    memcpy(tmp, &h, kCtrlHdrSize);
    copy_small(tmp + kCtrlHdrSize, data, size);
    rc = fi_inject(c.ep->ep(), tmp, total, c.peer);
  } else {
    CtrlHdr& slot = rd.eager_hdr[c.pool->index_of(r)];
    slot = h;
    struct iovec iov[2] = {{&slot, kCtrlHdrSize}, {data, size}};
    void* desc[2] = {rd.eager_hdr_reg.desc, mh != nullptr ? mh->reg.desc : nullptr};
    rc = fi_sendv(c.ep->ep(), iov, desc, size > 0 ? 2 : 1, c.peer, &r->ops[0]);
  }
  if (rc != 0) {
    request_release(r);
    if (rc == -FI_EAGAIN) {
      c.st.eagain.add();
      return comm_progress(c);
    }
    return fi_fail(compact  ? (inject ? "fi_injectdata(eager)" : "fi_senddata(eager)")
                   : inject ? "fi_inject(eager)"
                            : "fi_sendv(eager)",
                   static_cast<int>(rc), c.peer_name.c_str());
  }
  if (inject) {
    r->state = ReqState::kDone;
  } else {
    r->send.mh = mh;  // its use is given back by complete_op
    op_posted(r, mh);
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
  RdmaState& rd = rdma_of(c);
  RdmaState::NoticeTx& tx = rd.notice_tx[c.pool->index_of(r)];
  tx.m.magic = kNoticeMagic;
  tx.m.kind = kind;
  tx.m.size = size;
  r->send.size = sizeof(tx.m);
  bool injected = false;
  tx.h = ctrl_hdr(kCtrlNotice, c.peer_id, c.cookie_out, tag, index);
  Status s =
      ctrl_send(c, &tx.h, sizeof(tx.m), rd.notice_tx_reg.desc, r, 0, true, posted, &injected);
  if (!ok(s) || !*posted) {
    request_release(r);
    if (!ok(s)) return s;
    return comm_progress(c);
  }
  if (injected) {
    r->state = ReqState::kDone;
  } else {
    op_posted(r, nullptr);
  }
  request_release(r);
  return Status::kOk;
}

}  // namespace

Status rdma_post_writes(Comm& c, Request* r) {
  SharedEp& sep = *c.sep;
  const size_t total = r->send.size;
  while (r->posted < r->n) {
    const int k = r->posted;
    const size_t off = static_cast<size_t>(k) * r->send.chunk;
    const size_t len = total - off < r->send.chunk ? total - off : r->send.chunk;
    int rail;
    if (r->send.pin == kNoPin) {
      rail = least_loaded_rail(sep, c.nrails);
    } else {
      if (r->send.pin == kPinLater)
        r->send.pin = static_cast<uint8_t>(least_loaded_rail(sep, c.nrails));
      rail = r->send.pin;
    }
    MemHandle* mh = r->send.mh;
    void* desc = mh != nullptr ? mh->rail_reg(rail).desc : nullptr;
    uint8_t* buf = static_cast<uint8_t*>(r->send.buf) + off;
    if (len == 0) {
      // A 0-byte message (a GPUDirect receiver takes no eager ones): efa-direct before libfabric
      // 2.6 needs a descriptor for a 0-byte write too (2.6 brought a bounce buffer), and NCCL's
      // buffer may come without one: the write goes from the comm's own registered bytes, on
      // rail 0 (issue 35).
      rail = 0;
      buf = c.ctrl->flush;
      desc = c.ctrl_reg.desc;
    }
    const uint64_t data =
        sep.wide_imm ? (static_cast<uint64_t>(len) << 32) | r->send.imm : r->send.imm;
    ssize_t rc = fi_writedata(sep.rail(rail)->ep(), buf, len, desc, data, c.peer_rail[rail],
                              r->send.raddr + off, r->send.rkeys[rail], &r->ops[k]);
    if (rc == -FI_EAGAIN) {
      c.st.eagain.add();
      return Status::kOk;
    }
    if (rc != 0) {
      Status s = fi_fail("fi_writedata", static_cast<int>(rc), c.peer_name.c_str());
      fail_request(r, s);
      r->n = r->posted;
      return s;
    }
    r->send.op_rail[k] = static_cast<uint8_t>(rail);
    r->send.op_len[k] = len;
    sep.rail_load[rail] += len;
    c.st.writes[rail].add();
    op_posted(r, mh);
  }
  return Status::kOk;
}

Status rdma_isend(Comm& c, void* data, size_t size, int tag, MemHandle* mh, Request** out) {
  *out = nullptr;
  std::lock_guard<TicketLock> lock(c.sep->mu);
  if (Status s = comm_usable(c); !ok(s)) return s;
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
        c.st.cts_waits.add();
        prof_wait_start(c, size, tag);
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
    // Eager: no CTS yet, or a small message: a copy through the receiver's control buffers costs
    // less than a write.
    Status s = send_eager(c, data, size, tag, mh, index, out);
    if (*out == nullptr) return s;
    c.st.eager.add();
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
  // NCCL said enough flows run at once to keep every rail busy (setNetAttr): cutting the message
  // over rails adds writes and completions and buys no bandwidth; it goes on the least-loaded rail,
  // every piece of it (pin, below).
  const bool one_rail = hints_one_rail(c);
  if (nchunks > 1 && one_rail) nchunks = 1;
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
  r->send.pin = one_rail ? kPinLater : kNoPin;
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

}  // namespace nf
