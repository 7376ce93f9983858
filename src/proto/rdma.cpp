#include "proto/rdma.h"

#include <cstring>

#include <rdma/fi_errno.h>

#include "fabric/errors.h"
#include "util/log.h"

namespace nf {
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
#define RDMA_LOG(c, ...)                                                                      \
  log_message((c).rdma->warned++ == 0 ? LogLevel::kWarn : LogLevel::kInfo, kSubsysNet, __FILE__, \
              __LINE__, __VA_ARGS__)

Status post_persistent(Comm& c, Request* r) {
  const uint64_t ignore = r->type == ReqType::kEagerRecv ? kTagLowMask : 0;
  ssize_t rc = fi_trecv(c.ep->ep(), r->bufs[0], r->caps[0], r->descs[0], FI_ADDR_UNSPEC, r->tags[0],
                        ignore, &r->ops[0]);
  if (rc == -FI_EAGAIN) {
    RdmaState& rd = *c.rdma;
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

// A receive stops taking writes: its slot is freed (a late write no longer matches) and its
// registrations are no longer in use by it.
void retire_recv(Request* r) {
  Comm& c = *r->comm;
  if (r->slot != UINT32_MAX) {
    c.sep->free_slot(r);
    r->slot = UINT32_MAX;
  }
  if (r->mrs_counted) {
    r->mrs_counted = false;
    for (int i = 0; i < r->n; ++i)
      if (r->mhs[i] != nullptr) r->mhs[i]->uses.fetch_sub(1, std::memory_order_release);
  }
  remove_active(*c.rdma, r);
}

// Done once every buffer is complete. Its CTS send may still be in flight (on some providers a
// send completes only when the peer acknowledged it): the request then goes back to the pool, and
// its CTS buffer with it, when that completes (request_release waits for in_flight == 0).
void maybe_finish_recv(Request* r) {
  if (r->entries_left == 0 && r->state == ReqState::kPending) {
    retire_recv(r);
    r->state = ReqState::kDone;
  }
  if (r->in_flight == 0 && r->state != ReqState::kPending && r->abandoned) request_release(r);
}

void fail_recv(Request* r, Status s) {
  fail_request(r, s);
  retire_recv(r);
  if (r->in_flight == 0 && r->abandoned) request_release(r);
}

// Eager message in bounce buffer b for receive r: copy it into the first free buffer of its tag.
void deliver_eager(Request* r, Request* b) {
  Comm& c = *r->comm;
  const int32_t tag = static_cast<int32_t>(b->imm);
  const size_t len = b->sizes[0];
  int i = 0;
  for (; i < r->n; ++i) {
    if (static_cast<int32_t>(r->tags[i]) == tag && !r->entry_done[i] && r->chunks_got[i] == 0)
      break;
  }
  if (i == r->n) {
    RDMA_LOG(c, "eager message with tag %d from %s matches no free buffer of its receive group",
             tag, c.peer_name.c_str());
    fail_recv(r, Status::kInvalidUsage);
    return;
  }
  if (len > r->caps[i]) {
    RDMA_LOG(c, "message of %zu bytes from %s is larger than its receive buffer (%zu bytes)", len,
             c.peer_name.c_str(), r->caps[i]);
    fail_recv(r, Status::kInvalidUsage);
    return;
  }
  if (len > 0) memcpy(r->bufs[i], b->bufs[0], len);
  r->sizes[i] = len;
  r->entry_done[i] = 1;
  --r->entries_left;
  maybe_finish_recv(r);
}

Request* group_of(RdmaState& rd, uint32_t m) {
  for (int i = 0; i < rd.n_active; ++i) {
    Request* r = rd.active[i];
    if (m - r->base < r->n) return r;
  }
  return nullptr;
}

void on_eager(Request* b, const fi_cq_tagged_entry& e) {
  Comm& c = *b->comm;
  RdmaState& rd = *c.rdma;
  const uint32_t m = static_cast<uint32_t>(e.data);
  b->base = m;
  b->sizes[0] = e.len;
  b->imm = static_cast<uint32_t>(e.tag & kTagLowMask);
  if (Request* r = group_of(rd, m)) {
    if (r->state == ReqState::kPending) deliver_eager(r, b);
  } else if (static_cast<int32_t>(m - rd.next_base) >= 0) {
    // Its receive is not posted yet: the message waits in this bounce buffer.
    rd.held[rd.n_held++] = b;
    return;
  } else {
    RDMA_LOG(c, "eager message %u from %s belongs to no receive (already complete or never "
             "posted): dropped", m, c.peer_name.c_str());
  }
  if (!ok(post_persistent(c, b))) b->state = ReqState::kError;
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
    snprintf(text, sizeof(text), "keys for %u rails (the connection has %d)", m.h.nrails,
             c.nrails);
    *why = text;
    return false;
  }
  // CTSs are processed in whatever order their completions come (groups with only small buffers
  // get none), so a group is checked against the others, not against a running count.
  const RdmaState& rd = *c.rdma;
  if (static_cast<int32_t>(m.h.base - rd.next_msg) > (1 << 24)) {
    snprintf(text, sizeof(text), "sequence %u is far ahead of this side's %u", m.h.base,
             rd.next_msg);
    *why = text;
    return false;
  }
  for (uint32_t k = 0; k < rd.g_count; ++k) {
    const SendGroup& g = rd.groups[k];
    if (m.h.base - g.base < g.n || g.base - m.h.base < m.h.n) {
      snprintf(text, sizeof(text), "group %u+%u overlaps the announced group %u+%u", m.h.base,
               m.h.n, g.base, g.n);
      *why = text;
      return false;
    }
  }
  for (int i = 0; i < m.h.n; ++i) {
    const CtsEntry& e = m.e[i];
    if (e.size > c.max_msg_size) {
      snprintf(text, sizeof(text), "buffer %d: %llu bytes, more than the largest message (%llu)",
               i, static_cast<unsigned long long>(e.size),
               static_cast<unsigned long long>(c.max_msg_size));
      *why = text;
      return false;
    }
  }
  return true;
}

void on_cts(Request* b, const fi_cq_tagged_entry& e) {
  Comm& c = *b->comm;
  RdmaState& rd = *c.rdma;
  CtsMsg m;
  std::string why;
  if (!ok(rd.error)) {
    // Already broken: nothing more is used.
  } else if (!check_cts(c, b->bufs[0], e.len, &m, &why)) {
    RDMA_LOG(c, "refused a clear-to-send from %s: %s; the connection fails", c.peer_name.c_str(),
             why.c_str());
    rd.error = Status::kRemoteError;
  } else if (rd.g_count == kGroupRing) {
    RDMA_LOG(c, "more than %d receive groups announced by %s at once; the connection fails",
             kGroupRing, c.peer_name.c_str());
    rd.error = Status::kRemoteError;
  } else {
    SendGroup& g = rd.groups[rd.g_count];
    g.base = m.h.base;
    g.n = m.h.n;
    g.gen = m.h.gen;
    g.slot = m.h.slot;
    memcpy(g.e, m.e, sizeof(CtsEntry) * m.h.n);
    // A group the sender has already filled (eagerly, before this CTS came) needs nothing more.
    if (static_cast<int32_t>(rd.next_msg - (g.base + g.n)) < 0) ++rd.g_count;
  }
  if (!ok(post_persistent(c, b))) b->state = ReqState::kError;
}

SendGroup* find_group(RdmaState& rd, uint32_t m) {
  for (uint32_t k = 0; k < rd.g_count; ++k) {
    SendGroup& g = rd.groups[k];
    if (m - g.base < g.n) return &g;
  }
  return nullptr;
}

int least_loaded_rail(const SharedEp& sep, int nrails) {
  int best = 0;
  for (int r = 1; r < nrails; ++r)
    if (sep.rail_load[r] < sep.rail_load[best]) best = r;
  return best;
}

// Forgets the groups every message of which has been sent.
void pop_done_groups(RdmaState& rd) {
  for (uint32_t k = 0; k < rd.g_count;) {
    const SendGroup& g = rd.groups[k];
    if (static_cast<int32_t>(rd.next_msg - (g.base + g.n)) >= 0) rd.groups[k] = rd.groups[--rd.g_count];
    else ++k;
  }
}

// One eager message: fi_tinjectdata / fi_tsenddata to the receiver's bounce buffers, the sequence
// number as CQ data. *out stays NULL when the provider pushed back.
Status send_eager(Comm& c, void* data, size_t size, int tag, MemHandle* mh, uint32_t m,
                  Request** out) {
  *out = nullptr;
  Request* r = take_request(c, ReqType::kSend, 1);
  if (r == nullptr) return comm_progress(c);
  r->sizes[0] = size;
  const uint64_t t = eager_tag(c.peer_id, tag);
  ssize_t rc;
  bool injected = false;
  if (can_inject(c, size, mh)) {
    rc = fi_tinjectdata(c.ep->ep(), data, size, m, c.peer, t);
    injected = rc == 0;
  } else {
    void* desc = mh != nullptr ? mh->reg.desc : nullptr;
    rc = fi_tsenddata(c.ep->ep(), data, size, desc, m, c.peer, t, &r->ops[0]);
  }
  if (rc != 0) {
    request_release(r);
    if (rc == -FI_EAGAIN) return comm_progress(c);
    return fi_fail("fi_tsenddata(eager)", static_cast<int>(rc), c.peer_name.c_str());
  }
  if (injected) {
    r->state = ReqState::kDone;
  } else {
    r->posted = 1;
    r->in_flight = 1;
    if (mh != nullptr) {
      r->mhs[0] = mh;
      mh->uses.fetch_add(1, std::memory_order_relaxed);
    }
  }
  *out = r;
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
  c.rdma.reset(new RdmaState());
  RdmaState& rd = *c.rdma;
  rd.cts_fault = parse_fault(c.params.get_str(ParamId::kTestCtsFault));
  rd.min_chunk = static_cast<size_t>(c.params.get_int(ParamId::kMinChunk));
  rd.write_chunk = static_cast<size_t>(c.params.get_int(ParamId::kWriteChunk));
  if (c.role == CommRole::kSend) {
    rd.cts_rx.reset(new CtsWire[kCtsBufs]());
    NF_CHECK(register_memory(c.ep->domain(), c.ep->ep(), rd.cts_rx.get(),
                             sizeof(CtsWire) * kCtsBufs, &rd.cts_rx_reg));
    for (int i = 0; i < kCtsBufs; ++i) {
      Request* r = take_request(c, ReqType::kCtsRecv, 1);
      if (r == nullptr) return Status::kInternalError;
      r->bufs[0] = &rd.cts_rx[i];
      r->caps[0] = sizeof(CtsWire);
      r->descs[0] = rd.cts_rx_reg.desc;
      r->tags[0] = ctrl_tag(c.id, kCtrlCts);
      NF_CHECK(post_persistent(c, r));
    }
  } else {
    rd.cts_tx.reset(new CtsWire[c.pool->capacity()]());
    NF_CHECK(register_memory(c.ep->domain(), c.ep->ep(), rd.cts_tx.get(),
                             sizeof(CtsWire) * c.pool->capacity(), &rd.cts_tx_reg));
    if (c.eager_max > 0) {
      uint8_t* p = nullptr;
      NF_CHECK(alloc_registered(c, static_cast<size_t>(c.eager_max) * kEagerBufs, &rd.bounce_reg,
                                false, &p));
      rd.bounce.reset(p);
      for (int i = 0; i < kEagerBufs; ++i) {
        Request* r = take_request(c, ReqType::kEagerRecv, 1);
        if (r == nullptr) return Status::kInternalError;
        r->bufs[0] = p + static_cast<size_t>(i) * c.eager_max;
        r->caps[0] = c.eager_max;
        r->descs[0] = rd.bounce_reg.desc;
        r->tags[0] = eager_tag(c.id, 0);
        NF_CHECK(post_persistent(c, r));
      }
    }
  }
  return Status::kOk;
}

void rdma_retry_reposts(Comm& c) {
  RdmaState& rd = *c.rdma;
  int n = rd.n_repost;
  rd.n_repost = 0;
  Request* todo[kEagerBufs + kCtsBufs];
  memcpy(todo, rd.repost, sizeof(Request*) * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    if (!ok(post_persistent(c, todo[i]))) todo[i]->state = ReqState::kError;
}

void rdma_on_persistent(Request* r, const fi_cq_tagged_entry& e) {
  if (r->comm->closing) return;
  if (r->type == ReqType::kEagerRecv) on_eager(r, e);
  else on_cts(r, e);
}

void rdma_on_persistent_error(Request* r) {
  Comm& c = *r->comm;
  if (c.closing) return;
  // Logged by the caller; the buffer goes back to work.
  if (!ok(post_persistent(c, r))) r->state = ReqState::kError;
}

void rdma_on_cts_sent(Request* r) { maybe_finish_recv(r); }

void rdma_on_write(SharedEp& sep, const fi_cq_tagged_entry& e) {
  const Imm i = imm_decode(e.data);
  if (i.reserved_set || i.slot >= sep.slot_req.size() || sep.slot_req[i.slot] == nullptr ||
      (sep.slot_gen[i.slot] & 63u) != i.gen) {
    NF_INFO(kSubsysNet, "a write with immediate data 0x%llx names no receive in progress "
            "(late, or not from this protocol): ignored",
            static_cast<unsigned long long>(e.data));
    return;
  }
  Request* r = sep.slot_req[i.slot];
  Comm& c = *r->comm;
  const size_t len = sep.wide_imm ? static_cast<size_t>(e.data >> 32) : e.len;
  const char* bad = nullptr;
  if (i.entry >= r->n) bad = "names a buffer the receive does not have";
  else if (r->entry_done[i.entry]) bad = "lands in a buffer already complete";
  else if (r->chunks_expected[i.entry] != 0 && r->chunks_expected[i.entry] != i.nchunks)
    bad = "disagrees on the number of pieces";
  else if (r->sizes[i.entry] + len > r->caps[i.entry]) bad = "overflows the buffer";
  if (bad != nullptr) {
    RDMA_LOG(c, "a write from %s %s (immediate 0x%llx): the receive fails", c.peer_name.c_str(),
             bad, static_cast<unsigned long long>(e.data));
    fail_recv(r, Status::kRemoteError);
    return;
  }
  r->chunks_expected[i.entry] = static_cast<uint8_t>(i.nchunks);
  r->sizes[i.entry] += len;
  if (++r->chunks_got[i.entry] == i.nchunks) {
    r->entry_done[i.entry] = 1;
    --r->entries_left;
    maybe_finish_recv(r);
  }
}

Status rdma_post_writes(Comm& c, Request* r) {
  SharedEp& sep = *c.sep;
  const size_t total = r->sizes[0];
  while (r->posted < r->n) {
    const int k = r->posted;
    const size_t off = static_cast<size_t>(k) * r->chunk;
    const size_t len = total - off < r->chunk ? total - off : r->chunk;
    const int rail = least_loaded_rail(sep, c.nrails);
    MemHandle* mh = r->mhs[0];
    void* desc = mh != nullptr ? mh->rail_reg(rail).desc : nullptr;
    const uint64_t data = sep.wide_imm ? (static_cast<uint64_t>(len) << 32) | r->imm : r->imm;
    ssize_t rc = fi_writedata(sep.rail(rail)->ep(), static_cast<uint8_t*>(r->bufs[0]) + off, len,
                              desc, data, c.peer_rail[rail], r->raddr + off, r->rkeys[rail],
                              &r->ops[k]);
    if (rc == -FI_EAGAIN) return Status::kOk;
    if (rc != 0) {
      Status s = fi_fail("fi_writedata", static_cast<int>(rc), c.peer_name.c_str());
      fail_request(r, s);
      r->n = r->posted;
      return s;
    }
    r->op_rail[k] = static_cast<uint8_t>(rail);
    r->op_len[k] = len;
    sep.rail_load[rail] += len;
    if (mh != nullptr) mh->uses.fetch_add(1, std::memory_order_relaxed);
    ++r->posted;
    ++r->in_flight;
  }
  return Status::kOk;
}

Status rdma_isend(Comm& c, void* data, size_t size, int tag, MemHandle* mh, Request** out) {
  *out = nullptr;
  std::lock_guard<std::mutex> lock(c.sep->mu);
  if (!ok(c.sep->failed)) return c.sep->failed;
  RdmaState& rd = *c.rdma;
  if (!ok(rd.error)) return rd.error;
  if (c.deferred_head != nullptr) {
    // A send is still being posted; later ones wait for it.
    NF_CHECK(comm_progress(c));
    if (c.deferred_head != nullptr) return Status::kOk;
  }
  const uint32_t m = rd.next_msg;
  SendGroup* g = find_group(rd, m);
  const bool fits_eager = c.eager_max > 0 && size <= c.eager_max;  // 0: no bounce buffers
  if (g == nullptr && !fits_eager) {
    // Too large to send before the receiver's clear-to-send names the buffer: wait for it.
    NF_CHECK(comm_progress(c));
    if (!ok(rd.error)) return rd.error;
    g = find_group(rd, m);
    if (g == nullptr) return Status::kOk;
  }
  // Within a group a message takes the first buffer of its tag that earlier messages of the group
  // did not take: the k-th message of tag t goes to the k-th buffer of tag t (the receiver's rule).
  int i = -1;
  bool unique = true;
  if (g != nullptr) {
    int k = 0;
    for (uint32_t p = g->base; p != m; ++p) k += rd.recent_tags[p % kRecentTags] == tag;
    int seen = 0;
    for (int j = 0; j < g->n; ++j) {
      if (g->e[j].tag != tag) continue;
      if (seen++ == k) i = j;
    }
    unique = seen == 1;
    if (i < 0) {
      NF_WARN("isend with tag %d to %s matches no remaining buffer of the receiver's group (sends "
              "and receives must match in order, by tag within a group)", tag, c.peer_name.c_str());
      return Status::kInvalidUsage;
    }
  }
  if (g == nullptr || (fits_eager && unique)) {
    // Eager: no CTS yet, or a small message whose buffer is unambiguous: a copy through the
    // receiver's bounce buffers costs less than a write.
    Status s = send_eager(c, data, size, tag, mh, m, out);
    if (*out == nullptr) return s;
    rd.recent_tags[m % kRecentTags] = tag;
    ++rd.next_msg;
    pop_done_groups(rd);
    return s;
  }

  // Rendezvous: write into the buffer the CTS named.
  const CtsEntry& e = g->e[i];
  if (size > e.size) {
    NF_WARN("isend of %zu bytes to %s is larger than the receive buffer (%llu bytes)", size,
            c.peer_name.c_str(), static_cast<unsigned long long>(e.size));
    return Status::kInvalidUsage;
  }
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
  if (chunk == 0) chunk = 128;
  nchunks = size == 0 ? 1 : (size + chunk - 1) / chunk;
  Request* r = take_request(c, ReqType::kSend, static_cast<int>(nchunks));
  if (r == nullptr) return comm_progress(c);
  r->sizes[0] = size;
  r->bufs[0] = data;
  r->mhs[0] = mh;
  r->chunk = chunk;
  r->raddr = e.addr;
  for (int k = 0; k < kMaxRails; ++k) r->rkeys[k] = e.key[k];
  r->imm = imm_encode(g->slot, static_cast<uint32_t>(i), static_cast<uint32_t>(nchunks), g->gen);
  Status s = rdma_post_writes(c, r);
  if (r->posted == 0) {
    r->mhs[0] = nullptr;
    request_release(r);
    if (!ok(s)) return s;
    return comm_progress(c);
  }
  rd.recent_tags[m % kRecentTags] = tag;
  ++rd.next_msg;
  pop_done_groups(rd);
  if (r->posted < r->n && ok(s)) defer(c, r);
  *out = r;
  return Status::kOk;
}

Status rdma_irecv(Comm& c, int n, void** data, const size_t* sizes, const int* tags,
                  MemHandle* const* mhs, Request** out) {
  *out = nullptr;
  std::lock_guard<std::mutex> lock(c.sep->mu);
  if (!ok(c.sep->failed)) return c.sep->failed;
  RdmaState& rd = *c.rdma;
  if (rd.n_active >= kActiveRecvs) return comm_progress(c);
  // A group whose buffers all fit an eager message needs no CTS: whatever the sender sends into
  // it (no more than the buffer holds) goes eagerly. Ping-pongs of small messages then cost one
  // message per direction, as with SENDRECV.
  bool need_cts = false;
  for (int i = 0; i < n; ++i) need_cts = need_cts || c.eager_max == 0 || sizes[i] > c.eager_max;
  for (int i = 0; need_cts && i < n; ++i) {
    if (sizes[i] > 0 && mhs[i] == nullptr) {
      NF_WARN("irecv from %s: buffer %d (%zu bytes) is not registered; the RDMA protocol needs "
              "an mhandle from regMr for buffers above NCCL_FABRIC_EAGER_MAX",
              c.peer_name.c_str(), i, sizes[i]);
      return Status::kInvalidUsage;
    }
  }
  Request* r = take_request(c, ReqType::kRecv, n);
  if (r == nullptr) return comm_progress(c);
  r->slot = UINT32_MAX;
  if (need_cts) {
    Status s = c.sep->alloc_slot(r);
    if (!ok(s)) {
      request_release(r);
      return s;
    }
  }
  r->base = rd.next_base;
  r->entries_left = static_cast<uint8_t>(n);
  CtsMsg m;  // only the header and the first n entries are filled and sent
  m.h.magic = kCtsMagic;
  m.h.version = kWireVersion;
  m.h.n = static_cast<uint8_t>(n);
  m.h.nrails = static_cast<uint8_t>(c.nrails);
  m.h.base = r->base;
  m.h.slot = static_cast<uint16_t>(r->slot);
  m.h.gen = r->gen;
  m.h.reserved = 0;
  for (int i = 0; i < n; ++i) {
    r->bufs[i] = data[i];
    r->caps[i] = sizes[i];
    r->mhs[i] = mhs[i];
    r->tags[i] = static_cast<uint32_t>(tags[i]);
    r->chunks_expected[i] = 0;
    r->chunks_got[i] = 0;
    r->entry_done[i] = 0;
    CtsEntry& e = m.e[i];
    e.tag = tags[i];
    e.reserved = 0;
    e.size = sizes[i];
    const uintptr_t a = reinterpret_cast<uintptr_t>(data[i]);
    e.addr = mhs[i] != nullptr ? a - mhs[i]->reg.remote_base : 0;
    for (int k = 0; k < c.nrails; ++k) e.key[k] = mhs[i] != nullptr ? mhs[i]->rail_reg(k).key : 0;
  }
  switch (rd.cts_fault) {
    case kFaultAddr: for (int i = 0; i < n; ++i) m.e[i].addr += 1ull << 40; break;
    case kFaultKey: for (int i = 0; i < n; ++i) for (int k = 0; k < c.nrails; ++k) m.e[i].key[k] ^= 0x5a5a5a5a; break;
    default: break;
  }
  CtsWire& w = rd.cts_tx[c.pool->index_of(r)];
  size_t len = need_cts ? encode_cts(m, w.b) : 0;
  switch (rd.cts_fault) {
    case kFaultSize: len += 8; break;  // CtsWire has the room
    case kFaultCount: w.b[offsetof(CtsHeader, n)] = kMaxCtsEntries + 1; break;
    default: break;
  }
  const uint64_t t = ctrl_tag(c.peer_id, kCtrlCts);
  ssize_t rc = 0;
  bool injected = false;
  if (!need_cts) {
    injected = true;  // nothing to send, nothing to wait for
  } else if (c.use_inject && len <= c.inject_size) {
    rc = fi_tinject(c.ep->ep(), w.b, len, c.peer, t);
    injected = rc == 0;
  } else {
    rc = fi_tsend(c.ep->ep(), w.b, len, rd.cts_tx_reg.desc, c.peer, t, &r->ops[0]);
  }
  if (rc != 0) {
    if (r->slot != UINT32_MAX) c.sep->free_slot(r);
    r->slot = UINT32_MAX;
    for (int i = 0; i < n; ++i) r->mhs[i] = nullptr;
    request_release(r);
    if (rc == -FI_EAGAIN) return comm_progress(c);
    return fi_fail("fi_tsend(clear-to-send)", static_cast<int>(rc), c.peer_name.c_str());
  }
  for (int i = 0; i < n; ++i)
    if (mhs[i] != nullptr) mhs[i]->uses.fetch_add(1, std::memory_order_relaxed);
  r->mrs_counted = true;
  r->posted = injected ? 0 : 1;
  r->in_flight = injected ? 0 : 1;
  // posted/n keep the generic completion logic out: this request completes through
  // rdma_on_cts_sent / rdma_on_write / the eager path.
  rd.next_base += static_cast<uint32_t>(n);
  rd.active[rd.n_active++] = r;
  // Eager messages that arrived before this receive was posted.
  for (int k = 0; k < rd.n_held;) {
    Request* b = rd.held[k];
    if (b->base - r->base < static_cast<uint32_t>(n)) {
      rd.held[k] = rd.held[--rd.n_held];
      if (r->state == ReqState::kPending)
        deliver_eager(r, b);
      if (!ok(post_persistent(c, b))) b->state = ReqState::kError;
    } else {
      ++k;
    }
  }
  *out = r;
  return Status::kOk;
}

void rdma_close(Comm& c) {
  if (!c.rdma) return;
  RdmaState& rd = *c.rdma;
  while (rd.n_active > 0) retire_recv(rd.active[0]);
  rd.n_held = 0;
  rd.n_repost = 0;
}

}  // namespace nf
