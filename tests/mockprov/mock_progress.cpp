// The wire and the progress engine.
//
// A posted transmit op goes onto the process-wide wire (g().wire) and nothing else happens.
// Ops move only inside progress_ep(X), which a read of a CQ bound to X runs:
//  * as target, X takes messages addressed to it off the wire (matching a posted receive or
//    queueing as unexpected), serves RMA aimed at its memory, and answers handshakes;
//  * as initiator, X reports its injected failures and unreachable peers, and (with
//    MOCKEFA_RMA=device only) carries its own RMA to the peer's memory;
//  * payload lands in pieces (MOCKEFA_LAND_CHUNK) over successive passes of the landing side.
// Completions go to the CQ of the endpoint they belong to the moment the work is done, so a
// sender whose receiver polls finds its completion at its own next read.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "mock_internal.h"

namespace mockefa {

namespace {

// Copies bytes [off, off+n) of the logical concatenation of src into the same range of dst.
void copy_range(const std::vector<Seg>& dst, const std::vector<Seg>& src, size_t off, size_t n) {
  size_t di = 0, doff = off, si = 0, soff = off;
  while (di < dst.size() && doff >= dst[di].len) doff -= dst[di++].len;
  while (si < src.size() && soff >= src[si].len) soff -= src[si++].len;
  while (n) {
    if (di >= dst.size() || si >= src.size()) return;  // callers bound n by both totals
    size_t k = std::min({n, dst[di].len - doff, src[si].len - soff});
    std::memmove(dst[di].ptr + doff, src[si].ptr + soff, k);
    n -= k;
    doff += k;
    soff += k;
    if (doff == dst[di].len) {
      ++di;
      doff = 0;
    }
    if (soff == src[si].len) {
      ++si;
      soff = 0;
    }
  }
}

bool segs_live(const std::vector<Seg>& segs) {
  for (const Seg& s : segs)
    if (s.mr && !live_mr(s.mr)) return false;
  return true;
}

bool matches(const RecvReq& r, const Op* op) {
  if (r.tagged && ((op->tag & ~r.ignore) != (r.tag & ~r.ignore))) return false;
  return r.any_src || r.src == op->src_addr;
}

// SAS bookkeeping for one progress pass: messages between an ordered (sender, receiver) pair
// arrive in post order. In post order passes a pair is blocked once one of its messages stays
// on the wire; in shuffled passes only the pair's oldest message may arrive.
struct Sas {
  bool shuffled = false;
  std::map<std::pair<uint64_t, EfaAddr>, uint64_t> oldest;
  std::set<std::pair<uint64_t, EfaAddr>> blocked;
  bool allowed(const Op* op) const {
    auto key = std::make_pair(op->init_serial, op->dst_addr);
    if (shuffled) {
      auto it = oldest.find(key);
      return it == oldest.end() || it->second == op->id;
    }
    return !blocked.count(key);
  }
  void block(const Op* op) {
    if (!shuffled) blocked.insert(std::make_pair(op->init_serial, op->dst_addr));
  }
};

bool is_msg(const Op* op) { return op->kind == OpKind::kMsg || op->kind == OpKind::kTagged; }
bool is_rma(const Op* op) { return op->kind == OpKind::kWrite || op->kind == OpKind::kRead; }

// The initiator of op, taken once: NULL when it was already reported, or the op is internal.
Ep* claim_initiator(Op* op) {
  Ep* ep = op->init;
  if (!ep) return nullptr;
  op->init = nullptr;
  return op->internal ? nullptr : ep;
}

// What the initiator's completion says, whether it succeeded or failed.
CqEntry initiator_entry(const Op& op, const Ep& ep) {
  CqEntry e;
  e.op_context = op.context;
  e.flags = op.tx_flags;
  e.len = op.len;
  e.ep_serial = ep.serial;
  e.track_ctx = op.track_ctx;
  return e;
}

void finish_initiator(Op* op) {
  if (op->remote) {
    send_result(op, 0);
    return;
  }
  Ep* ep = claim_initiator(op);
  if (!ep) return;
  complete_entry(ep, ep->tx_cq, initiator_entry(*op, *ep), op->want_completion);
  ep->tx_outstanding--;
}

void fail_recv(Ep* ep, const RecvReq& r, int prov_errno, const char* why, const EfaAddr* peer) {
  CqEntry e;
  e.op_context = r.context;
  e.flags = FI_RECV | (r.tagged ? FI_TAGGED : FI_MSG);
  e.buf = r.segs.empty() ? nullptr : r.segs[0].ptr;
  e.tag = r.tag;
  e.is_error = true;
  e.err = efa_errno_to_err(prov_errno);
  e.prov_errno = prov_errno;
  e.err_data = err_text(why, ep->addr, peer);
  e.ep_serial = ep->serial;
  e.track_ctx = r.track_ctx;
  complete_entry(ep, ep->rx_cq, std::move(e), true);
}

void complete_recv(Ep* ep, const RecvReq& r, const Op* op) {
  CqEntry e;
  e.op_context = r.context;
  e.flags = FI_RECV | (r.tagged ? FI_TAGGED : FI_MSG) | (op->has_data ? FI_REMOTE_CQ_DATA : 0);
  e.len = std::min(op->len, r.cap);
  e.buf = r.segs.empty() ? nullptr : r.segs[0].ptr;
  e.data = op->data;
  e.tag = r.tagged ? op->tag : 0;
  e.src = ep->av ? ep->av->reverse(op->src_addr) : FI_ADDR_NOTAVAIL;
  e.ep_serial = ep->serial;
  e.track_ctx = r.track_ctx;
  if (op->len > r.cap) {
    e.is_error = true;
    e.err = FI_ETRUNC;
    e.prov_errno = -FI_ETRUNC;
    e.olen = op->len - r.cap;
    e.err_data = err_text("Message truncated: receive buffer too small", ep->addr, &op->src_addr);
    g().counters.truncations++;
  }
  complete_entry(ep, ep->rx_cq, std::move(e), r.want_completion);
}

// Sets up landing of op->land_bytes; `cfg` is the endpoint that owns the destination memory,
// whose knobs decide the chunking and chunk order.
void setup_landing(Op* op, Ep* cfg) {
  op->st = OpState::kLanding;
  size_t chunk = cfg ? cfg->faults.land_chunk : 0;
  if (chunk && cfg->write_in_order_128) chunk = (chunk + 127) / 128 * 128;
  size_t n = 0;
  if (!chunk || chunk >= op->land_bytes) {
    op->chunk = op->land_bytes;
    n = op->land_bytes ? 1 : 0;
  } else {
    op->chunk = chunk;
    n = (op->land_bytes + chunk - 1) / chunk;
    count_fault(MOCKEFA_F_CHUNKED);
  }
  op->chunks.clear();
  for (size_t i = n; i-- > 0;) op->chunks.push_back(i);  // popped from the back: index 0 first
  if (cfg && cfg->faults.wire_reorder && n > 1) {
    std::shuffle(op->chunks.begin(), op->chunks.end(), cfg->rng);
    count_fault(MOCKEFA_F_WIRE_REORDER);
  }
}

// The NIC of mr's domain wrote into it: CUDA memory then waits for a read through that NIC.
void mark_gpu_write(Mr* mr) {
  if (!mr || mr->iface != FI_HMEM_CUDA || mr->unflushed) return;
  mr->unflushed = true;
  g().counters.gpu_unflushed_mrs++;
}

void start_msg_landing(Ep* x, Op* op) {
  op->recv_ep = x;
  op->land_bytes = std::min(op->len, op->recv.cap);
  setup_landing(op, x);
}

// Lands one chunk; true when the whole transfer has landed.
bool land_chunk(Op* op, const std::vector<Seg>& dst, const std::vector<Seg>& src) {
  if (op->chunks.empty()) return true;
  size_t idx = op->chunks.back();
  op->chunks.pop_back();
  size_t off = idx * op->chunk;
  size_t n = std::min(op->chunk, op->land_bytes - off);
  copy_range(dst, src, off, n);
  g().counters.bytes_landed += n;
  return op->chunks.empty();
}

void land_msg(Ep* x, Op* op) {
  if (op->recv.mr_lost || !segs_live(op->recv.segs)) {
    fail_recv(x, op->recv, kEfaBadLkey, "Receive buffer's memory registration was closed",
              &op->src_addr);
    fail_initiator(op, kEfaRemoteAbort, "Receiver's memory registration was closed");
    retire(op);
    return;
  }
  if (op->mr_lost || !segs_live(op->segs)) {
    fail_recv(x, op->recv, kEfaRemoteAbort, "Sender's memory registration was closed",
              &op->src_addr);
    fail_initiator(op, kEfaBadLkey, "Send buffer's memory registration was closed");
    retire(op);
    return;
  }
  if (!land_chunk(op, op->recv.segs, op->segs)) return;
  for (const Seg& s : op->recv.segs) mark_gpu_write(s.mr);
  complete_recv(x, op->recv, op);
  finish_initiator(op);
  retire(op);
}

void land_rma(Op* op, Ep* tgt) {
  if (op->mr_lost || !segs_live(op->segs)) {
    const bool local = !segs_live(op->segs);  // else it was the target's registration
    fail_initiator(op, local ? kEfaBadLkey : kEfaRemoteBadAddress,
                   local ? "Local memory registration was closed during the transfer"
                         : "Remote memory registration was closed during the transfer");
    retire(op);
    return;
  }
  std::vector<Seg> remote{Seg{reinterpret_cast<uint8_t*>(op->rma_addr), op->len, nullptr}};
  bool done = op->kind == OpKind::kWrite ? land_chunk(op, remote, op->segs)
                                         : land_chunk(op, op->segs, remote);
  if (!done) return;
  // live: the registration may have closed since rma_accept (mr_lost then failed the op above).
  if (op->rma_mr && g().live_mrs.count(op->rma_mr)) {
    if (op->kind == OpKind::kWrite)
      mark_gpu_write(op->rma_mr);
    else if (op->rma_mr->unflushed) {
      op->rma_mr->unflushed = false;  // a read through the NIC that wrote it: the flush
      g().counters.gpu_unflushed_mrs--;
    }
  }
  if (op->kind == OpKind::kWrite && op->has_data) {
    // fi_writedata's target event: one per write, covering only that write's bytes.
    CqEntry e;
    e.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
    // fi_cq(3) says NULL; shm 1.17 puts the sender's message id there on some paths.
    if (tgt->profile.write_event_context) e.op_context = reinterpret_cast<void*>(uintptr_t{0x10});
    e.len = op->len;
    if (tgt->profile.write_len_bits != 0) e.len &= (uint64_t{1} << tgt->profile.write_len_bits) - 1;
    e.data = op->data;
    e.src = tgt->av ? tgt->av->reverse(op->src_addr) : FI_ADDR_NOTAVAIL;
    e.ep_serial = tgt->serial;
    bool want = true;
    if (op->recv_consumed) {
      // efa-direct without unsolicited write recv: the event is the consumed receive's
      // completion (its context, no buffer), as EFA reports IBV_WC_RECV_RDMA_WITH_IMM.
      e.op_context = op->recv.context;
      e.track_ctx = op->recv.track_ctx;
      want = op->recv.want_completion;
    }
    complete_entry(tgt, tgt->rx_cq, std::move(e), want);
  }
  finish_initiator(op);
  retire(op);
}

// Target-side checks of an RMA op; false (and the op failed) if the target refuses it.
bool rma_accept(Op* op, Ep* tgt) {
  if (tgt->direct && tgt->av->reverse(op->src_addr) == FI_ADDR_NOTAVAIL) {
    // RDMA over SRD needs an address handle at the responder: the target must have the
    // initiator in its AV (efa-semantics §1.4, REMOTE_ERROR_UNKNOWN_PEER).
    violation(MOCKEFA_V_UNKNOWN_PEER, "efa-direct RMA from %s to %s, which lacks it in its AV",
              addr_str(op->src_addr).c_str(), addr_str(op->dst_addr).c_str());
    fail_initiator(op, kEfaUnknownPeer,
                   "REMOTE_ERROR_UNKNOWN_PEER: no valid address handle at remote side (the target "
                   "has not inserted the initiator into its AV)");
    retire(op);
    return false;
  }
  if (op->len) {
    Mr* mr = mr_for_key(op->rma_key);
    const char* what = nullptr;
    if (!mr || mr->domain != tgt->domain) {
      violation(MOCKEFA_V_RMA_KEY, "RMA with key 0x%llx unknown at target %s",
                static_cast<unsigned long long>(op->rma_key), addr_str(op->dst_addr).c_str());
      what = "Remote key is not a registration of the target's domain";
    } else if (!mr->covers(op->rma_addr, op->len)) {
      violation(MOCKEFA_V_RMA_BOUNDS, "RMA [0x%llx, +%zu) outside MR [0x%llx, +%zu) key 0x%llx",
                static_cast<unsigned long long>(op->rma_addr), op->len,
                static_cast<unsigned long long>(mr->base), mr->len,
                static_cast<unsigned long long>(mr->key));
      what = "Remote address range is outside the registration";
    } else if (!(mr->access & (op->kind == OpKind::kWrite ? FI_REMOTE_WRITE : FI_REMOTE_READ))) {
      violation(MOCKEFA_V_RMA_ACCESS, "%s to MR key 0x%llx registered without %s",
                op->kind == OpKind::kWrite ? "RMA write" : "RMA read",
                static_cast<unsigned long long>(mr->key),
                op->kind == OpKind::kWrite ? "FI_REMOTE_WRITE" : "FI_REMOTE_READ");
      what = "Registration lacks the remote access rights";
    }
    if (what) {
      fail_initiator(op, kEfaRemoteBadAddress, what);
      retire(op);
      return false;
    }
    op->rma_mr = mr;
  }
  if (op->kind == OpKind::kWrite && op->has_data && tgt->direct &&
      tgt->profile.no_unsolicited_write_recv) {
    // No unsolicited write recv: the write-with-immediate consumes a posted receive, and without
    // one the device answers RNR (the mock fails it at once, where EFA would retry first).
    if (tgt->posted_msg.empty()) {
      violation(MOCKEFA_V_WRITE_RECV,
                "efa-direct fi_writedata to %s, which has no posted receive (NIC without "
                "unsolicited write recv: FI_RX_CQ_DATA)",
                addr_str(op->dst_addr).c_str());
      fail_initiator(op, kEfaRnr,
                     "REMOTE_ERROR_RNR: write with immediate data and no receive posted at the "
                     "target (no unsolicited write recv)");
      retire(op);
      return false;
    }
    op->recv = std::move(tgt->posted_msg.front());
    tgt->posted_msg.pop_front();
    op->recv_consumed = true;
  }
  op->land_bytes = op->len;
  setup_landing(op, op->kind == OpKind::kWrite ? tgt : op->init);
  return true;
}

// Receiver not ready: op stays on the wire for a back-off that doubles with each RNR it meets (at
// most 1 s); on efa its sender's posts to that peer return -FI_EAGAIN meanwhile (mock_msg.cpp).
void rnr(Ep* x, Op* op) {
  const uint64_t cap = 1000000;  // FI_EFA_MAX_TIMEOUT: 1 s
  const uint64_t base = std::max<uint64_t>(1, x->profile.rnr_delay_us);
  uint64_t us = op->rnr_count >= 20 ? cap : std::min(cap, base << op->rnr_count);
  ++op->rnr_count;
  op->rnr_until_ns = steady_ns() + us * 1000;
  g().counters.rnr_events++;
  g().counters.rnr_backoff_us += us;
  if (!x->direct && op->init) op->init->rnr_backoff[op->dst_addr] = op->rnr_until_ns;
}

void arrive(Ep* x, Op* op) {
  auto& posted = op->kind == OpKind::kTagged ? x->posted_tagged : x->posted_msg;
  for (auto it = posted.begin(); it != posted.end(); ++it) {
    if (!matches(*it, op)) continue;
    op->recv = std::move(*it);
    posted.erase(it);
    start_msg_landing(x, op);
    return;
  }
  // efa-direct has no unexpected queue: the device answers RNR and retries until a receive is
  // posted, so the message stays on the wire and its sender waits, a back-off each time. On efa
  // the message waits in the unexpected queue, unless that is full.
  if (x->direct ||
      x->unexpected_msg.size() + x->unexpected_tagged.size() >= x->profile.unexpected_limit) {
    rnr(x, op);
    return;
  }
  g().counters.unexpected_msgs++;
  if (op->len <= x->profile.eager_size) {
    // Eager: the payload sits in the receiver's bounce buffer and the sender is done.
    if (op->mr_lost || !segs_live(op->segs)) {
      fail_initiator(op, kEfaBadLkey, "Send buffer's memory registration was closed");
      retire(op);
      return;
    }
    std::vector<uint8_t> copy(op->len);
    std::vector<Seg> bounce{Seg{copy.data(), op->len, nullptr}};
    copy_range(bounce, op->segs, 0, op->len);
    op->own = std::move(copy);
    op->segs = {Seg{op->own.data(), op->len, nullptr}};
    finish_initiator(op);
  }
  // Rendezvous otherwise: the sender's op stays in flight until a receive matches.
  if (op->on_wire) {
    g().wire.erase(op->wire_it);
    op->on_wire = false;
  }
  op->st = OpState::kWaitMatch;
  (op->kind == OpKind::kTagged ? x->unexpected_tagged : x->unexpected_msg).push_back(op);
}

// An op doomed at post time (fail_err) fails at its initiator's pass, and is retired.
void fail_injected(Op* op) {
  if (op->fail_unreachable) count_fault(MOCKEFA_F_UNREACHABLE);
  fail_initiator(op, op->fail_prov,
                 op->fail_unreachable ? "Peer unreachable (MOCKEFA_UNREACHABLE_AFTER)"
                 : op->fail_peer_lost
                     ? "Peer unreachable: its handshake failed (MOCKEFA_EQ_ERROR_AFTER)"
                     : "Injected error (MOCKEFA_ERROR_EVERY)");
  retire(op);
}

// ---- MOCKEFA_NET: operations between endpoints over the wire (mock_net.h, mock_opwire.h) ----

opwire::Kind wire_kind(OpKind k) {
  switch (k) {
    case OpKind::kMsg: return opwire::Kind::kSend;
    case OpKind::kTagged: return opwire::Kind::kTagged;
    case OpKind::kWrite: return opwire::Kind::kWrite;
    default: return opwire::Kind::kRead;
  }
}

// Sends frame f with `bytes` in pieces of at most one wire message; their ids to *ids.
void send_pieces(Ep* x, const net::Peer& to, opwire::OpFrame f, const std::vector<uint8_t>& bytes,
                 std::vector<uint64_t>* ids) {
  const size_t piece_max = net::kMaxPayload - sizeof(opwire::OpFrame);
  const uint64_t total = bytes.size();
  f.total = total;
  uint64_t off = 0;
  std::vector<uint8_t> frame;
  do {
    f.offset = off;
    f.piece = static_cast<uint32_t>(std::min<uint64_t>(piece_max, total - off));
    if (!opwire::encode(f, bytes.data() + off, &frame)) return;
    const uint64_t id = x->chan->send(to, frame.data(), frame.size());
    if (ids && id) ids->push_back(id);
    off += f.piece;
  } while (off < total);
}

// A result for the initiator's op op_id, sent through via to `to`: the status, a read's data.
void send_result_to(Ep* via, const net::Peer& to, uint64_t op_id, int status,
                    const std::vector<uint8_t>& data) {
  opwire::OpFrame f;
  f.kind = opwire::Kind::kResult;
  f.op_id = op_id;
  f.status = status;
  std::memcpy(f.src, &via->addr, sizeof(f.src));
  send_pieces(via, to, f, data, nullptr);
}

// The initiator x hands op to the wire; its result (net_arrival) completes it.
void remote_send(Ep* x, Op* op, const net::Peer& to) {
  if (x->lost_peers.count(op->dst_addr)) {
    // The wire gave up on this peer before: it is gone, as EFA reports a peer it cannot reach.
    fail_initiator(op, kEfaUnreach, "Peer unreachable: no answer on the mock's wire");
    retire(op);
    return;
  }
  if (op->kind != OpKind::kRead && (op->mr_lost || !segs_live(op->segs))) {
    fail_initiator(op, kEfaBadLkey, "Send buffer's memory registration was closed");
    retire(op);
    return;
  }
  opwire::OpFrame f;
  f.kind = wire_kind(op->kind);
  f.flags = op->has_data ? opwire::kHasData : 0;
  f.op_id = op->id;
  f.tag = op->tag;
  f.data = op->data;
  f.rma_addr = op->rma_addr;
  f.rma_key = op->rma_key;
  if (is_msg(op)) f.seq = ++x->sas_out[op->dst_addr];
  std::memcpy(f.src, &op->src_addr, sizeof(f.src));
  std::memcpy(f.dst, &op->dst_addr, sizeof(f.dst));
  std::vector<uint64_t> ids;
  if (op->kind == OpKind::kRead) {
    // A request: the bytes asked for, no payload.
    f.total = op->len;
    f.piece = 0;
    std::vector<uint8_t> frame;
    if (opwire::encode(f, nullptr, &frame)) {
      const uint64_t id = x->chan->send(to, frame.data(), frame.size());
      if (id) ids.push_back(id);
    }
  } else {
    std::vector<uint8_t> bytes(op->len);
    copy_range({Seg{bytes.data(), op->len, nullptr}}, op->segs, 0, op->len);
    send_pieces(x, to, f, bytes, &ids);
  }
  for (uint64_t id : ids) x->msg_op[id] = op->id;
  x->remote_out[op->id] = op;
  op->remote_sent = true;
  op->result_due_us = net::now_us() + x->profile.net_give_up_ms * 1000;
}

void release_sas(Ep::SasIn& s) {
  for (auto it = s.held.find(s.next); it != s.held.end(); it = s.held.find(s.next)) {
    // Its id now, in its sender's order: shuffled passes let a pair's lowest id arrive first, and
    // an id taken when its last piece came would put a big message behind a later small one.
    it->second->id = g().next_op_id++;
    wire_push(it->second);
    s.held.erase(it);
    ++s.next;
  }
}

// A whole operation arrived at x: a result for one of x's ops, or an op for x (a proxy).
void net_arrival(Ep* x, const net::Peer& from, const uint8_t* buf, size_t len) {
  opwire::OpFrame f;
  const uint8_t* payload = nullptr;
  std::string why;
  if (!opwire::decode(buf, len, &f, &payload, &why)) {
    std::fprintf(stderr, "mockefa: a malformed frame from the wire at %s: %s\n",
                 addr_str(x->addr).c_str(), why.c_str());
    return;
  }
  // Results and operations of one sender are put back together apart: a result carries the id of
  // an operation of ours, an operation the sender's own id, and the two may be equal.
  const uint64_t sender = ((static_cast<uint64_t>(from.ip) << 16) | from.port) |
                          (f.kind == opwire::Kind::kResult ? uint64_t{1} << 63 : 0);
  std::vector<uint8_t> whole;
  // A read request is one frame without payload (its total is the bytes asked for).
  const opwire::Reassembly::Add added = f.kind == opwire::Kind::kRead
                                            ? opwire::Reassembly::Add::kDone
                                            : x->reasm->add(sender, f, payload, &whole);
  if (added == opwire::Reassembly::Add::kRefused && f.kind != opwire::Kind::kResult) {
    // No room to put it together (or pieces that disagree): the initiator must hear of it, or
    // it would wait for a result forever. Receiver not ready, as EFA says of a full receiver.
    send_result_to(x, from, f.op_id, kEfaRnr, {});
    return;
  }
  if (added != opwire::Reassembly::Add::kDone) return;
  if (f.kind == opwire::Kind::kResult) {
    auto it = x->remote_out.find(f.op_id);
    if (it == x->remote_out.end()) return;
    Op* op = it->second;
    x->remote_out.erase(it);
    if (f.status == 0) {
      if (op->kind == OpKind::kRead) {
        const size_t n = std::min<size_t>(whole.size(), op->len);
        copy_range(op->segs, {Seg{whole.data(), n, nullptr}}, 0, n);
        g().counters.bytes_landed += n;
      }
      finish_initiator(op);
    } else {
      fail_initiator(op, f.status, "The remote endpoint failed the operation");
    }
    retire(op);
    return;
  }
  auto* p = new Op();
  p->id = g().next_op_id++;
  switch (f.kind) {
    case opwire::Kind::kSend: p->kind = OpKind::kMsg; break;
    case opwire::Kind::kTagged: p->kind = OpKind::kTagged; break;
    case opwire::Kind::kWrite: p->kind = OpKind::kWrite; break;
    default: p->kind = OpKind::kRead; break;
  }
  p->remote = true;
  p->remote_via = x;
  p->remote_peer = from;
  p->remote_op_id = f.op_id;
  std::memcpy(&p->src_addr, f.src, sizeof(p->src_addr));
  p->dst_addr = x->addr;
  p->tag = f.tag;
  p->data = f.data;
  p->has_data = (f.flags & opwire::kHasData) != 0;
  p->rma_addr = f.rma_addr;
  p->rma_key = f.rma_key;
  p->len = f.total;
  p->direct = x->direct;
  if (p->kind == OpKind::kRead)
    p->own.assign(f.total, 0);
  else
    p->own = std::move(whole);
  p->segs = {Seg{p->own.data(), p->own.size(), nullptr}};
  if (!is_msg(p)) {
    wire_push(p);
    return;
  }
  // Messages from one sender are taken in its order (FI_ORDER_SAS), whatever order the wire kept.
  Ep::SasIn& s = x->sas_in[p->src_addr];
  s.held[f.seq] = p;
  release_sas(s);
}

// A probe to `to` came back (alive) or was given up: the ops that wait for results from it wait
// another give-up time, or fail as EFA fails an op to a peer its device can no longer reach.
void probe_done(Ep* x, const net::Peer& to, bool alive) {
  x->probing.erase(to);
  const uint64_t due = net::now_us() + x->profile.net_give_up_ms * 1000;
  for (auto it = x->remote_out.begin(); it != x->remote_out.end();) {
    Op* op = it->second;
    net::Peer at;
    if (!net_peer_of(op->dst_addr, &at) || !(at == to)) {
      ++it;
      continue;
    }
    if (alive) {
      op->result_due_us = due;
      ++it;
      continue;
    }
    it = x->remote_out.erase(it);
    x->lost_peers.insert(op->dst_addr);
    fail_initiator(op, kEfaUnreach,
                   "Peer unreachable: it stopped answering while it owed this operation's result "
                   "(MOCKEFA_NET_GIVE_UP_MS)");
    retire(op);
  }
}

void progress_net(Ep* x) {
  if (!x->chan) return;
  // Results overdue: ask each peer that owes one whether it still lives (one probe at a time).
  const uint64_t now = net::now_us();
  for (const auto& [id, op] : x->remote_out) {
    net::Peer to;
    if (now < op->result_due_us || !net_peer_of(op->dst_addr, &to) || x->probing.count(to))
      continue;
    const uint64_t pid = x->chan->send(to, nullptr, 0);
    if (!pid) continue;
    x->probe_msg[pid] = to;
    x->probing.insert(to);
  }
  x->chan->progress(
      [x](const net::Peer& from, const uint8_t* buf, size_t len) {
        net_arrival(x, from, buf, len);
      },
      [x](uint64_t id, bool delivered) {
        auto pr = x->probe_msg.find(id);
        if (pr != x->probe_msg.end()) {
          const net::Peer to = pr->second;
          x->probe_msg.erase(pr);
          probe_done(x, to, delivered);
          return;
        }
        auto it = x->msg_op.find(id);
        if (it == x->msg_op.end()) return;
        const uint64_t op_id = it->second;
        x->msg_op.erase(it);
        if (delivered) return;
        auto o = x->remote_out.find(op_id);
        if (o == x->remote_out.end()) return;
        Op* op = o->second;
        x->remote_out.erase(o);
        // Its later messages could never be taken in order (SAS): the peer is lost for good.
        x->lost_peers.insert(op->dst_addr);
        fail_initiator(op, kEfaUnreach,
                       "Peer unreachable: no answer on the mock's wire (MOCKEFA_NET_GIVE_UP_MS)");
        retire(op);
      });
}

void step(Ep* x, Op* op, Sas& sas) {
  if (op->remote_sent) return;  // its result completes it (net_arrival)
  net::Peer to;
  if (!op->remote && !op->internal && op->init && op->init->chan &&
      net_peer_of(op->dst_addr, &to)) {
    // MOCKEFA_NET: the initiator hands it to the wire; nobody else touches it.
    if (op->init != x || op->st != OpState::kWire) return;
    if (op->fail_err) {
      fail_injected(op);
      return;
    }
    remote_send(x, op, to);
    return;
  }
  Ep* tgt = enabled_ep(op->dst_addr);
  if (op->init == x && op->st == OpState::kWire) {
    if (op->fail_err) {
      fail_injected(op);
      return;
    }
    if (x->lost_peers.count(op->dst_addr)) {
      // Posted before the handshake with that peer failed, and still on the wire: lost too.
      if (op->kind == OpKind::kHandshake) x->peers[op->dst_addr] = HsState::kFailed;
      fail_initiator(op, kEfaUnreach,
                     "Peer unreachable: its handshake failed (MOCKEFA_EQ_ERROR_AFTER)");
      retire(op);
      return;
    }
    const bool closed = !tgt && g().closed_addrs.count(op->dst_addr);
    const bool unreachable =
        x->unreachable || (!tgt && (closed || ++op->undelivered_polls >= x->profile.unreach_polls));
    if (unreachable) {
      if (op->kind == OpKind::kHandshake) x->peers[op->dst_addr] = HsState::kFailed;
      if (!op->internal) {
        if (x->unreachable) count_fault(MOCKEFA_F_UNREACHABLE);
        if (closed && !x->unreachable)
          fail_initiator(op, kEfaBadDestQpn, "Destination endpoint was closed");
        else
          fail_initiator(op, kEfaUnreach,
                         x->unreachable ? "Peer unreachable (MOCKEFA_UNREACHABLE_AFTER)"
                                        : "Destination unreachable: no endpoint at that address");
      }
      retire(op);
      return;
    }
  }
  if (!tgt || op->fail_err) return;  // an op doomed at post time never reaches the target
  if (op->st == OpState::kWire && tgt->direct != op->direct && (op->init == x || tgt == x)) {
    // `efa` and `efa-direct` endpoints speak different protocols over the same device.
    if (op->internal) {
      if (op->kind == OpKind::kHandshake && op->init)
        op->init->peers[op->dst_addr] = HsState::kDone;  // let the real ops fail below
      op->init = nullptr;
      retire(op);
      return;
    }
    violation(MOCKEFA_V_FABRIC_MISMATCH, "op from %s endpoint %s to %s endpoint %s",
              op->direct ? "efa-direct" : "efa", addr_str(op->src_addr).c_str(),
              tgt->direct ? "efa-direct" : "efa", addr_str(op->dst_addr).c_str());
    fail_initiator(op, kEfaBadStatus, "The peer endpoint belongs to the other EFA fabric");
    retire(op);
    return;
  }
  // Device RDMA needs both sides to use it for that direction (EFA also needs the peer's
  // handshake to say so); otherwise the target's progress serves the op (emulated RMA).
  const bool device_rma =
      is_rma(op) && op->init == x &&
      (op->kind == OpKind::kWrite ? !x->write_emulated() && !tgt->write_emulated()
                                  : !x->read_emulated() && !tgt->read_emulated());
  // efa-direct messages are device sends too: the initiator's pass delivers them as well.
  const bool device_msg = op->direct && is_msg(op) && op->init == x;
  if (tgt != x && !device_rma && !device_msg) return;
  if (op->st == OpState::kWire) {
    // A message the receiver was not ready for waits for its back-off.
    if (op->rnr_until_ns != 0 && steady_ns() < op->rnr_until_ns) {
      if (is_msg(op)) sas.block(op);
      return;
    }
    // Time on the wire passes for every op; SAS then decides which message may arrive.
    if (op->wire_delay) {
      op->wire_delay--;
      if (is_msg(op)) sas.block(op);
      return;
    }
    if (is_msg(op) && op->ordered && (tgt->rx_msg_order & FI_ORDER_SAS) && !sas.allowed(op)) return;
    if (op->needs_handshake) {
      if (op->init && op->init->peers[op->dst_addr] == HsState::kRequested) return;
      op->needs_handshake = false;
    }
    switch (op->kind) {
      case OpKind::kHandshake: {
        auto* reply = new Op();
        reply->id = g().next_op_id++;
        reply->kind = OpKind::kHandshakeReply;
        reply->internal = true;
        reply->want_completion = false;
        reply->init = x;
        reply->init_serial = x->serial;
        reply->src_addr = x->addr;
        reply->dst_addr = op->src_addr;
        wire_push(reply);
        op->init = nullptr;
        retire(op);
        return;
      }
      case OpKind::kHandshakeReply:
        x->peers[op->src_addr] = HsState::kDone;
        op->init = nullptr;
        retire(op);
        return;
      case OpKind::kMsg:
      case OpKind::kTagged: arrive(tgt, op); break;
      case OpKind::kWrite:
      case OpKind::kRead:
        if (!rma_accept(op, tgt)) return;
        break;
    }
  }
  if (op->st != OpState::kLanding || !op->on_wire) return;
  if (is_msg(op)) {
    if (op->recv_ep && (op->recv_ep == x || device_msg)) land_msg(op->recv_ep, op);
  } else {
    land_rma(op, tgt);
  }
}

}  // namespace

void wire_push(Op* op) {
  g().wire.push_back(op);
  op->wire_it = std::prev(g().wire.end());
  op->on_wire = true;
  if (op->st != OpState::kLanding) op->st = OpState::kWire;
}

void retire(Op* op) {
  if (op->st == OpState::kRetired) return;
  if (op->on_wire) {
    g().wire.erase(op->wire_it);
    op->on_wire = false;
  }
  op->st = OpState::kRetired;
  g().graveyard.push_back(op);
}

void net_post(Ep* ep, Op* op) {
  net::Peer to;
  if (op->remote || op->internal || op->init != ep || !net_peer_of(op->dst_addr, &to)) return;
  remote_send(ep, op, to);
}

// A proxy's completion goes back to its initiator as a result: the status, and a read's data.
void send_result(Op* op, int status) {
  op->remote = false;
  Ep* via = op->remote_via;
  if (!via || !via->chan) return;
  static const std::vector<uint8_t> kNone;
  const bool data = status == 0 && op->kind == OpKind::kRead;
  send_result_to(via, op->remote_peer, op->remote_op_id, status, data ? op->own : kNone);
}

void flush_graveyard() {
  for (Op* op : g().graveyard) delete op;
  g().graveyard.clear();
}

void fail_initiator(Op* op, int prov_errno, const char* why) {
  if (op->remote) {
    send_result(op, prov_errno);
    return;
  }
  Ep* ep = claim_initiator(op);
  if (!ep) return;
  CqEntry e = initiator_entry(*op, *ep);
  e.data = op->data;
  e.tag = op->tag;
  e.is_error = true;
  e.err = efa_errno_to_err(prov_errno);
  e.prov_errno = prov_errno;
  e.err_data = err_text(why, ep->addr, &op->dst_addr);
  complete_entry(ep, ep->tx_cq, std::move(e), true);
  ep->tx_outstanding--;
}

void match_new_recv(Ep* ep, RecvReq&& r) {
  auto& unexpected = r.tagged ? ep->unexpected_tagged : ep->unexpected_msg;
  for (auto it = unexpected.begin(); it != unexpected.end(); ++it) {
    Op* op = *it;
    if (!matches(r, op)) continue;
    unexpected.erase(it);
    op->recv = std::move(r);
    start_msg_landing(ep, op);
    wire_push(op);  // lands during the receiver's next progress pass
    return;
  }
  (r.tagged ? ep->posted_tagged : ep->posted_msg).push_back(std::move(r));
}

void raise_eq_errors(Ep* ep) {
  if (ep->eq_error_pending.empty()) return;
  std::vector<EfaAddr> pending;
  pending.swap(ep->eq_error_pending);
  for (const EfaAddr& peer : pending) {
    count_fault(MOCKEFA_F_EQ_ERROR);
    const std::string why =
        "mockefa: handshake with peer " + addr_str(peer) + " failed (MOCKEFA_EQ_ERROR_AFTER)";
    if (ep->eq) {
      // As EFA's efa_base_ep_write_eq_error: an entry zeroed but for err (the failed call's
      // errno) and prov_errno (FI_EFA_ERR_PEER_HANDSHAKE): no fid, no context, no err_data.
      // Nothing in it names the peer or the endpoint (issue 35: a plugin that looks for the peer
      // in the error's text finds none on EFA).
      eq_write_error(ep->eq, nullptr, nullptr, FI_EIO, kEfaErrPeerHandshake, std::string());
      continue;
    }
    // EFA prints the error and calls abort(); the mock prints, counts and goes on (it aborts only
    // with MOCKEFA_ABORT_ON_VIOLATION).
    std::fprintf(
        stderr,
        "mockefa: endpoint %s has no EQ bound for an error that belongs to no operation: %s; "
        "EFA would abort() here\n",
        addr_str(ep->addr).c_str(), why.c_str());
    violation(MOCKEFA_V_NO_EQ,
              "endpoint %s has no EQ bound for an error without an operation (EFA aborts): %s",
              addr_str(ep->addr).c_str(), why.c_str());
  }
}

void progress_ep(Ep* x) {
  PassGuard pass;
  x->eagain_latched = false;
  x->progress_passes++;
  progress_net(x);
  raise_eq_errors(x);
  while (!x->failing_recvs.empty()) {
    fail_recv(x, x->failing_recvs.front(), x->failing_recvs.front().fail_prov,
              "Injected error (MOCKEFA_ERROR_EVERY)", nullptr);
    x->failing_recvs.pop_front();
  }
  std::vector<Op*> snap(g().wire.begin(), g().wire.end());
  Sas sas;
  if ((x->faults.wire_reorder || x->reorder) && snap.size() > 1) {
    sas.shuffled = true;
    for (const Op* op : snap) {
      if (!is_msg(op) || op->st != OpState::kWire) continue;
      auto key = std::make_pair(op->init_serial, op->dst_addr);
      auto it = sas.oldest.find(key);
      if (it == sas.oldest.end() || op->id < it->second) sas.oldest[key] = op->id;
    }
    std::shuffle(snap.begin(), snap.end(), x->rng);
    count_fault(MOCKEFA_F_WIRE_REORDER);
  }
  for (Op* op : snap) {
    if (op->st == OpState::kRetired || !op->on_wire) continue;
    step(x, op, sas);
  }
}

void ep_teardown(Ep* ep) {
  // MOCKEFA_NET: its proxies of remote operations fail back to their initiators; messages held
  // for their turn go; the channel closes with the endpoint.
  for (Op* op : std::vector<Op*>(g().wire.begin(), g().wire.end())) {
    if (op->st == OpState::kRetired || !op->remote || op->remote_via != ep) continue;
    send_result(op, kEfaBadDestQpn);
    retire(op);
  }
  for (auto& kv : ep->sas_in)
    for (auto& h : kv.second.held) delete h.second;
  ep->sas_in.clear();
  ep->remote_out.clear();
  ep->msg_op.clear();
  // Ops this endpoint started vanish without completions (its CQs may be closed next).
  // Peers lose what was in flight to or from it, the way a destroyed QP looks to them.
  for (Op* op : std::vector<Op*>(g().wire.begin(), g().wire.end())) {
    if (op->st == OpState::kRetired) continue;
    if (op->init == ep) {
      if (op->st == OpState::kLanding && is_msg(op) && op->recv_ep && op->recv_ep != ep)
        fail_recv(op->recv_ep, op->recv, kEfaRemoteAbort, "Sender endpoint closed mid-transfer",
                  &op->src_addr);
      if (!op->internal) ep->tx_outstanding--;
      op->init = nullptr;
      retire(op);
      continue;
    }
    if (op->st != OpState::kLanding) continue;  // still on the wire: fails at its initiator
    const bool into_ep = is_msg(op) ? op->recv_ep == ep : op->dst_addr == ep->addr;
    if (!into_ep) continue;
    fail_initiator(op, kEfaBadDestQpn, "Destination endpoint closed mid-transfer");
    retire(op);
  }
  // Its rendezvous messages still waiting in other endpoints' unexpected queues go too.
  for (auto& kv : g().eps_by_serial) {
    if (kv.second == ep) continue;
    for (auto* lst : {&kv.second->unexpected_msg, &kv.second->unexpected_tagged}) {
      for (auto it = lst->begin(); it != lst->end();) {
        Op* op = *it;
        if (op->init != ep) {
          ++it;
          continue;
        }
        op->init = nullptr;
        retire(op);
        it = lst->erase(it);
      }
    }
  }
  for (auto* lst : {&ep->unexpected_msg, &ep->unexpected_tagged}) {
    for (Op* op : *lst) {
      if (op->init == ep) {
        ep->tx_outstanding--;
        op->init = nullptr;
      }
      fail_initiator(op, kEfaBadDestQpn,
                     "Destination endpoint closed before the message was received");
      retire(op);
    }
    lst->clear();
  }
  ep->posted_msg.clear();
  ep->posted_tagged.clear();
  ep->failing_recvs.clear();
  if (ep->chan) {
    // As a device acknowledges what it took before its queue pair goes, the results and messages
    // this endpoint still owes reach their peers before the channel closes (for at most a second,
    // or MOCKEFA_NET_GIVE_UP_MS if shorter): a process that closes its endpoint right after its
    // last completion, as fabtests' finalize does, must not leave its peer's last send waiting
    // for a result. Other endpoints of this process pass meanwhile: the peer may be one of them.
    const uint64_t until =
        net::now_us() + std::min<uint64_t>(ep->profile.net_give_up_ms, 1000) * 1000;
    while (ep->chan->in_flight() && net::now_us() < until) {
      ep->chan->progress([](const net::Peer&, const uint8_t*, size_t) {}, [](uint64_t, bool) {});
      for (auto& kv : g().eps_by_serial)
        if (kv.second != ep && kv.second->chan) progress_net(kv.second);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace mockefa
