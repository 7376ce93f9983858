// The control path: the endpoint's pool of untagged receives, routing each control message to its
// comm by id, and sending one (see core/ctrl.h).
#include "core/ctrl.h"

#include <cstring>

#include <rdma/fi_errno.h>

#include "core/liveness.h"
#include "core/stats.h"
#include "fabric/errors.h"
#include "util/log.h"

namespace nf {
namespace {

// Rail 0: buffers kept posted, and at most in all (kRxMax). A comm may keep buffers (eager
// messages that wait for their receive); each one kept is replaced from the idle ones or a new
// chunk, so the other comms always find posted buffers, until the bound. The count kept posted:
// kRxTarget, plus kRxPerComm for every comm on the endpoint, up to kRxTargetMax. Few buffers keep
// those a connection cycles through in the CPU's caches: with 64 or 128 posted (8 KiB each), shm's
// stream of 256-byte eager messages was 15 % slower than with 16 (nccl-fabric-perf,
// docs/performance.md); each comm adds room for its bursts.
constexpr size_t kRxTarget = 16;
constexpr size_t kRxPerComm = 2;
constexpr size_t kRxTargetMax = 512;
constexpr size_t kRxMax = 4096;
constexpr size_t kRxChunk = 32;
// Rails 1.. under FI_RX_CQ_DATA: receives that writes with immediate data consume.
constexpr size_t kWriteRxTarget = 64;
constexpr size_t kWriteRxSize = 64;
// Messages a comm keeps before it is ready for them (handshake not done): a peer that sends more
// is not following the protocol.
constexpr size_t kMaxStash = 256;
// Connects a listen comm keeps waiting for accept (docs/protocol.md, "What a peer cannot do"):
// NCCL's one peer sends one; more come only from a stale or foreign sender, refused one by one.
constexpr size_t kMaxPendingConnects = 16;

Status grow(SharedEp& sep, int rail) {
  CtrlPool& p = *sep.pools[rail];
  // The first chunk holds what is kept posted (one registration); later ones kRxChunk each.
  size_t n = p.chunks.empty() ? p.target : kRxChunk;
  if (n < kRxChunk) n = kRxChunk;
  if (p.all.size() + n > p.max_total) n = p.max_total - p.all.size();
  if (n == 0) return Status::kInternalError;
  std::unique_ptr<CtrlPool::Chunk> ch(new CtrlPool::Chunk());
  const size_t bytes = n * p.buf_size;
  ch->mem.reset(new uint8_t[bytes]());
  Endpoint* ep = sep.rail(rail);
  NF_CHECK(register_memory(ep->domain(), ep->ep(), ch->mem.get(), bytes, &ch->reg));
  for (size_t i = 0; i < n; ++i) {
    std::unique_ptr<CtrlRx> rx(new CtrlRx());
    rx->op.req = nullptr;
    rx->op.index =
        kCtrlRxBit | static_cast<uint32_t>(rail << 24) | static_cast<uint32_t>(p.all.size());
    rx->buf = ch->mem.get() + i * p.buf_size;
    rx->cap = p.buf_size;
    rx->desc = ch->reg.desc;
    rx->rail = rail;
    p.idle.push_back(rx.get());
    p.all.push_back(std::move(rx));
  }
  p.chunks.push_back(std::move(ch));
  return Status::kOk;
}

// Posts rx; false when the provider refused (it stays idle, tried again later).
bool post(SharedEp& sep, CtrlRx* rx) {
  // A receive that fails leaves its header readable only if the failed message wrote it.
  memset(rx->buf, 0, kCtrlHdrSize);
  ssize_t rc =
      fi_recv(sep.rail(rx->rail)->ep(), rx->buf, rx->cap, rx->desc, FI_ADDR_UNSPEC, &rx->op);
  if (rc != 0) {
    if (rc != -FI_EAGAIN && sep.pools[rx->rail]->dropped++ == 0)
      NF_WARN("posting a control receive on %s failed: %s",
              sep.rail(rx->rail)->domain().name().c_str(), fi_strerror(static_cast<int>(-rc)));
    return false;
  }
  rx->posted = true;
  ++sep.pools[rx->rail]->posted;
  return true;
}

// A message is dropped. What a working peer may cause (a message for a comm that closed or is
// closing) is an INFO line; what breaks the protocol (a peer that is broken, stale or hostile) is a
// WARN: the first 16 of an endpoint, then one at each power of two, with the count.
void drop(SharedEp& sep, const char* why, uint32_t id, uint8_t kind, bool violation = true) {
  CtrlPool& p = *sep.pools[0];
  const uint64_t n = ++p.dropped;
  if (!violation) {
    if (n <= 8)
      NF_INFO(kSubsysNet, "a control message (kind %u) for comm %u dropped: %s", kind, id, why);
    return;
  }
  const uint64_t w = ++sep.ctrl_bad;
  if (w <= 16 || (w & (w - 1)) == 0)
    NF_WARN("ignored a control message (kind %u) for comm %u: %s (%llu ignored on %s so far)", kind,
            id, why, static_cast<unsigned long long>(w), sep.ep->domain().name().c_str());
}

// A connection's message for comm c without c's cookie: from a stale process, a broken client or
// a hostile one (docs/security.md), never from c's peer. Dropped, counted (the statistics file's
// "unsolicited" object), and WARNed about once per comm, then at each power of two per endpoint.
// Without FI_SOURCE the sender's address is unknown: the WARN names the comm and its peer.
void forged(SharedEp& sep, Comm* c, uint8_t kind) {
  ++sep.pools[0]->dropped;
  ++sep.ctrl_bad;
  const uint64_t n = ++sep.forged;
  stats_unsolicited(Unsolicited::kWrongCookie);
  const bool first = c != nullptr && !c->forged_said;
  if (!first && (n & (n - 1)) != 0) return;
  if (c != nullptr) c->forged_said = true;
  const std::string whom = c != nullptr ? "comm " + std::to_string(c->id) + " (connected to " +
                                              c->peer_name + ") that does not carry its cookie"
                                        : "a cookie that belongs to no comm here";
  NF_WARN(
      "ignored %s for %s: it is not from that comm's peer but from a stale, broken or hostile "
      "process that can reach this endpoint (%llu such messages on %s so far; "
      "docs/troubleshooting.md#wrong-cookie)",
      kind == kCtrlCts     ? "a clear-to-send"
      : kind == kCtrlEager ? "an eager message"
                           : "a notice",
      whom.c_str(), static_cast<unsigned long long>(n), sep.ep->domain().name().c_str());
}

// Copies a handshake message into the comm's handshake buffer and completes its receive.
void fill_handshake(Comm& c, const CtrlRx* rx) {
  Request* r = c.ctrl_recv;
  uint8_t* dst = c.ctrl_expect == kCtrlConnect ? reinterpret_cast<uint8_t*>(&c.ctrl->connect)
                                               : reinterpret_cast<uint8_t*>(&c.ctrl->ack);
  const size_t cap = c.ctrl_expect == kCtrlConnect
                         ? sizeof(ConnectMsg) + sizeof(c.ctrl->connect_slack)
                         : sizeof(AckMsg) + sizeof(c.ctrl->ack_slack);
  const size_t n = rx->plen() < cap ? rx->plen() : cap;
  memcpy(dst, rx->payload(), n);
  r->ctrl.size = rx->plen();  // a longer message is refused for its length
  r->state = ReqState::kDone;
  c.ctrl_expect = 0;
}

// Routes one message to comm c. Returns whether c keeps the buffer.
bool route(Comm& c, const CtrlHdr& h, CtrlRx* rx) {
  const uint8_t kind = ctrl_kind(h);
  SharedEp& sep = *c.sep;
  if (c.closing) {
    drop(sep, "its comm is closing", c.id, kind, false);
    return false;
  }
  // A connection's messages (clear-to-sends, eager messages, notices) carry the cookie this comm
  // gave its peer in the handshake (wire version 7), which nobody else learned: one without it is
  // not the peer's. Clear-to-sends may overtake the reply that completes a send comm's handshake:
  // its cookie is its own from the start. The handshake's messages come from the peer comm this
  // one knows (an ack from the listen comm that was connected to).
  if (ctrl_conn_kind(kind)) {
    if (ctrl_cookie(h) != c.cookie_in) {
      forged(sep, &c, kind);
      return false;
    }
  } else if (kind != kCtrlConnect && c.peer_id != 0 && ctrl_src(h) != c.peer_id) {
    drop(sep, "it comes from another comm than this one's peer", c.id, kind);
    return false;
  }
  if (rx->compact && !c.compact_eager) {
    drop(sep, "a compact eager message on a connection that did not grant them", c.id, kind);
    return false;
  }
  ++c.events;
  if (kind == kCtrlConnect || kind == kCtrlAck) {
    const bool right_role = (kind == kCtrlConnect) == (c.role == CommRole::kListen);
    if (!right_role) {
      drop(sep, "a handshake message for a comm of the other side", c.id, kind);
      return false;
    }
    if (c.ctrl_expect == kind && c.ctrl_recv != nullptr && c.ctrl) {
      fill_handshake(c, rx);
      return false;
    }
    if (c.established) {
      drop(sep, "a handshake message after the handshake", c.id, kind);
      return false;
    }
  } else if (c.established && c.protocol->on_ctrl != nullptr) {
    return c.protocol->on_ctrl(c, h, rx);
  } else if (c.established) {
    drop(sep, "a message its protocol does not take", c.id, kind);
    return false;
  }
  // Not ready for it yet: the handshake's receive is not posted, or the protocol not set up (a
  // clear-to-send or eager message may overtake the handshake's reply).
  if (c.role == CommRole::kListen) {
    // A listen comm takes connects only (an accepted peer sends to the recv comm its reply
    // names); connects wait, a few of them, to be refused or accepted one at a time.
    if (kind != kCtrlConnect) {
      drop(sep, "a message for a listen comm that is not a connect", c.id, kind);
      return false;
    }
    size_t pending = 0;
    for (const CtrlRx* s : c.stash) pending += ctrl_kind(s->hdr) == kCtrlConnect;
    if (pending >= kMaxPendingConnects) {
      drop(sep, "16 connects already wait for this listen comm", c.id, kind);
      return false;
    }
  }
  if (c.stash.size() >= kMaxStash) {
    // Dropping it would leave the transfer it belongs to waiting forever: the connection fails.
    comm_fail(c, Status::kRemoteError,
              "the peer sent more than 256 control messages before the handshake finished");
    return false;
  }
  rx->held = true;
  c.stash.push_back(rx);
  return true;
}

// A control message was lost: its receive failed. The comm it was for fails (a clear-to-send or
// eager message that never comes leaves its transfer waiting forever); when the header did not
// arrive, every connection on the endpoint that takes control messages fails, as one whose
// message may be lost. A handshake in progress ends at its timeout.
void lost(SharedEp& sep, CtrlRx* rx, const CqError& err) {
  const std::string why = "a control message was lost (its receive failed: " + err.text + ")";
  CtrlHdr h;
  std::string bad;
  if (rx->rail == 0 && decode_ctrl_hdr(rx->buf, kCtrlHdrSize, &h, &bad) &&
      ctrl_kind(h) != kCtrlProbe) {
    const uint32_t id = ctrl_dst(h);
    Comm* c = id < sep.by_id.size() ? sep.by_id[id] : nullptr;
    // Only from the comm's own peer: another sender cannot fail it with an oversized message.
    if (c != nullptr && c->established &&
        (ctrl_conn_kind(ctrl_kind(h)) ? ctrl_cookie(h) == c->cookie_in : ctrl_src(h) == c->peer_id))
      comm_fail(*c, Status::kRemoteError, why.c_str());
    else
      drop(sep, ("a message that failed to land (" + err.text + ")").c_str(), id, ctrl_kind(h));
    return;
  }
  if (rx->rail != 0) {
    // A write's receive (FI_RX_CQ_DATA): the write's own error names its receive.
    if (sep.pools[rx->rail]->dropped++ == 0)
      NF_WARN("a receive for writes failed on %s: %s", sep.rail(rx->rail)->domain().name().c_str(),
              err.text.c_str());
    return;
  }
  if (err.err == FI_ETRUNC) {
    // Longer than a control buffer: no message of this protocol is (every kind has a fixed bound,
    // eager messages the receiver's own), so it came from a broken or hostile sender, and
    // libfabric 2.1's tcp;ofi_rxm leaves none of it in the buffer to say which: ignored. Failing
    // every connection here would let any sender end them all with one long message.
    drop(sep, ("a message longer than any control message (" + err.text + ")").c_str(), 0, 0);
    return;
  }
  NF_WARN(
      "%s on %s, for a comm it does not name: every connection on the endpoint that takes "
      "control messages fails",
      why.c_str(), sep.ep->domain().name().c_str());
  for (Comm* c : sep.comms)
    if (c->established && c->protocol->on_ctrl != nullptr)
      comm_fail(*c, Status::kRemoteError, why.c_str());
}

}  // namespace

Status ctrl_open(SharedEp& sep, size_t max_payload) {
  Endpoint* ep0 = sep.ep.get();
  const size_t limit = sep.msg_limit;
  size_t size = kCtrlHdrSize + max_payload;
  if (limit != 0 && size > limit) size = limit;
  size = (size + 63) & ~static_cast<size_t>(63);
  if (limit != 0 && size > limit) size = limit;
  for (int rail = 0; rail < sep.nrails; ++rail) {
    if (rail > 0 && !sep.rx_cq_data) break;
    sep.pools[rail].reset(new CtrlPool());
    CtrlPool& p = *sep.pools[rail];
    p.buf_size = rail == 0 ? size : kWriteRxSize;
    p.target = rail == 0 ? kRxTarget : kWriteRxTarget;
    const size_t rx = sep.rail(rail)->domain().info()->rx_attr->size;
    if (rx > 0 && p.target > rx / 2) p.target = rx / 2 > 8 ? rx / 2 : 8;
    p.target_max = rail == 0 && !sep.rx_cq_data ? kRxTargetMax : kRxMax;
    if (rx > 0 && p.target_max > rx / 2) p.target_max = rx / 2 > p.target ? rx / 2 : p.target;
    p.max_total = rail == 0 ? kRxMax : p.target_max;
    if (p.max_total < p.target) p.max_total = p.target;
  }
  ctrl_fill(sep);
  if (sep.pools[0]->posted == 0) {
    NF_WARN("no control receive could be posted on %s", ep0->domain().name().c_str());
    return Status::kSystemError;
  }
  return Status::kOk;
}

size_t ctrl_max_payload(const SharedEp& sep) {
  return sep.pools[0] ? sep.pools[0]->buf_size - kCtrlHdrSize : 0;
}

void ctrl_fill(SharedEp& sep) {
  for (int rail = 0; rail < kMaxRails; ++rail) {
    if (!sep.pools[rail]) continue;
    CtrlPool& p = *sep.pools[rail];
    // FI_RX_CQ_DATA: every write a clear-to-send may bring takes a posted receive, on whichever
    // rail it lands.
    size_t want = (rail == 0 ? kRxTarget + kRxPerComm * sep.comms.size() : kWriteRxTarget) +
                  (sep.rx_cq_data ? sep.writes_expected : 0);
    if (want > p.target_max) want = p.target_max;
    p.target = want;  // a smaller target lets surplus buffers go idle as they come back
    while (p.posted < p.target) {
      if (p.idle.empty()) {
        if (p.all.size() >= p.max_total) {
          if (!p.full_said) {
            p.full_said = true;
            NF_WARN(
                "%zu control buffers on %s are held by messages waiting for their receives; "
                "no more are added (senders wait until receives are posted)",
                p.all.size(), sep.rail(rail)->domain().name().c_str());
          }
          break;
        }
        if (!ok(grow(sep, rail))) break;
      }
      CtrlRx* rx = p.idle.back();
      if (!post(sep, rx)) break;
      p.idle.pop_back();
    }
  }
}

void ctrl_expect_writes(SharedEp& sep, int64_t n) {
  if (!sep.rx_cq_data) return;
  sep.writes_expected = static_cast<size_t>(static_cast<int64_t>(sep.writes_expected) + n);
  if (n > 0) ctrl_fill(sep);  // before the clear-to-send goes: its writes may follow at once
}

void ctrl_teardown(SharedEp& sep) {
  for (auto& p : sep.pools) {
    if (!p) continue;
    for (auto& ch : p->chunks) deregister_memory(&ch->reg);
    p.reset();
  }
}

void ctrl_release(SharedEp& sep, CtrlRx* rx) {
  rx->held = false;
  CtrlPool& p = *sep.pools[rx->rail];
  if (p.posted < p.target && post(sep, rx)) return;
  p.idle.push_back(rx);
}

void ctrl_rx_done(SharedEp& sep, OpCtx* op, const fi_cq_tagged_entry* e, const CqError* err) {
  const int rail = static_cast<int>((op->index >> 24) & 0x3f);
  CtrlPool& p = *sep.pools[rail];
  CtrlRx* rx = p.all[op->index & 0xffffffu].get();
  rx->posted = false;
  --p.posted;
  if (err != nullptr) {
    if (err->err != FI_ECANCELED) lost(sep, rx, *err);
    ctrl_release(sep, rx);
    return;
  }
  if (e->flags & FI_REMOTE_WRITE) {
    // A write with immediate data consumed it (FI_RX_CQ_DATA): the caller credited the write.
    ctrl_release(sep, rx);
    return;
  }
  rx->len = e->len;
  CtrlHdr h;
  std::string why;
  rx->compact = rx->rail == 0 && is_compact_eager(e->flags, e->data);
  if (rx->compact) {
    // Its header is the CQ data, which names the receiving comm by its cookie's low 28 bits: a
    // message that names none came from someone who does not know the cookie.
    const uint32_t key = static_cast<uint32_t>(e->data >> 32) & kMaxCommId;
    Comm* c = route_find(sep, key);
    if (c == nullptr) {
      // A late message of a connection that closed here (its peer may not know yet), or one
      // that never had a cookie of ours.
      if (route_closed(sep, key))
        drop(sep, "its comm closed", 0, kCtrlEager, false);
      else
        forged(sep, nullptr, kCtrlEager);
      ctrl_release(sep, rx);
      return;
    }
    h = compact_hdr(e->data, c->id, c->cookie_in);  // routed below by its id, as every message
  } else if (!decode_ctrl_hdr(rx->buf, rx->len, &h, &why)) {
    drop(sep, why.c_str(), ctrl_dst(*reinterpret_cast<const CtrlHdr*>(rx->buf)),
         ctrl_kind(*reinterpret_cast<const CtrlHdr*>(rx->buf)));
    ctrl_release(sep, rx);
    return;
  }
  rx->hdr = h;
  if (ctrl_kind(h) == kCtrlProbe) {
    live_on_probe(sep, rx->payload(), rx->plen());
    ctrl_release(sep, rx);
    return;
  }
  const uint32_t id = ctrl_dst(h);
  Comm* c = id < sep.by_id.size() ? sep.by_id[id] : nullptr;
  if (c == nullptr) {
    // An id this endpoint gave out belongs to a comm that closed (its peer may not know yet).
    drop(
        sep,
        id != 0 && id < sep.next_id ? "its comm closed" : "no comm of that id was ever opened here",
        id, ctrl_kind(h), id == 0 || id >= sep.next_id);
    ctrl_release(sep, rx);
    return;
  }
  if (!route(*c, h, rx)) ctrl_release(sep, rx);
}

void ctrl_replay(Comm& c) {
  if (c.stash.empty()) return;
  std::vector<CtrlRx*> todo;
  todo.swap(c.stash);
  SharedEp& sep = *c.sep;
  for (size_t i = 0; i < todo.size(); ++i) {
    CtrlRx* rx = todo[i];
    rx->held = false;
    if (!route(c, rx->hdr, rx)) ctrl_release(sep, rx);
  }
}

void ctrl_drop_comm(Comm& c) {
  SharedEp& sep = *c.sep;
  for (CtrlRx* rx : c.stash) ctrl_release(sep, rx);
  c.stash.clear();
  if (c.id < sep.by_id.size() && sep.by_id[c.id] == &c) sep.by_id[c.id] = nullptr;
  route_remove(sep, &c);
}

Status ctrl_send(Comm& c, CtrlHdr* hdr, size_t len, void* desc, Request* r, int op, bool may_inject,
                 bool* posted, bool* injected) {
  *posted = false;
  *injected = false;
  const size_t total = kCtrlHdrSize + len;
  ssize_t rc;
  if (may_inject && c.use_inject && total <= c.inject_size) {
    rc = fi_inject(c.ep->ep(), hdr, total, c.peer);
    if (rc == 0) *injected = true;
  } else {
    rc = fi_send(c.ep->ep(), hdr, total, desc, c.peer, &r->ops[op]);
  }
  if (rc == -FI_EAGAIN) {
    c.st.eagain.add();
    return Status::kOk;
  }
  if (rc != 0)
    return fi_fail(may_inject ? "fi_send/fi_inject(control)" : "fi_send(control)",
                   static_cast<int>(rc), c.peer_name.c_str());
  *posted = true;
  return Status::kOk;
}

}  // namespace nf
