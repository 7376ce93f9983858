#include "proto/sendrecv.h"

#include <climits>
#include <cstring>
#include <thread>

#include <rdma/fi_errno.h>

#include "fabric/errors.h"
#include "mem/mr_cache.h"
#include "proto/liveness.h"
#include "proto/rdma.h"
#include "util/clock.h"
#include "util/log.h"

namespace nf {
namespace {

// Extra requests of a comm for the RDMA protocol's persistent receives.
constexpr size_t kPersistentRequests = kEagerBufs > kCtsBufs ? kEagerBufs : kCtsBufs;
// Two control requests (connect + ack) come on top of what NCCL may have in flight.
constexpr size_t kCtrlRequests = 2;
// Completion queue entries of a shared endpoint (rxm and shm queue what does not fit).
constexpr size_t kSharedCqSize = 16384;
// A closing comm waits for the provider to give back its operations for at most half of
// NCCL_FABRIC_PEER_TIMEOUT (this when probing is off): a live peer completes them in
// milliseconds, and a dead one is found by the probes in that time or soon after. When its
// connection had failed already (nothing more will arrive), it waits for this long.
constexpr uint64_t kCloseWaitNoProbeNs = 5000000000ull;
constexpr uint64_t kCloseWaitFailedNs = 100000000ull;
// A closing comm takes what its peer still sends into its posted receives until nothing arrived
// for this long (a peer that closed, or never sends, leaves them empty).
constexpr uint64_t kCloseQuietNs = 200000000ull;

}  // namespace

Request* take_request(Comm& c, ReqType type, int n) {
  Request* r = c.pool->get();
  if (r == nullptr) return nullptr;
  r->magic = kReqMagic;
  r->type = type;
  r->state = ReqState::kPending;
  r->abandoned = false;
  r->zombie = false;
  r->zowner = nullptr;
  r->n = static_cast<uint8_t>(n);
  r->posted = 0;
  r->in_flight = 0;
  r->error = Status::kOk;
  r->comm = &c;
  r->next_deferred = nullptr;
  for (int i = 0; i < n; ++i) {
    r->sizes[i] = 0;
    r->mhs[i] = nullptr;
    r->ops[i].req = r;
    r->ops[i].index = static_cast<uint32_t>(i);
    r->op_len[i] = 0;
  }
  r->mrs_counted = false;
  return r;
}

void comm_register(Comm& c) { c.sep->comms.push_back(&c); }

void comm_fail(Comm& c, Status s, const char* why) {
  if (!ok(c.failed)) return;
  c.failed = s;
  NF_WARN("connection with %s failed: %s; every request on it fails", c.peer_name.c_str(), why);
}

void fail_request(Request* r, Status s) {
  if (r->state != ReqState::kError) {
    r->state = ReqState::kError;
    r->error = s;
  }
}

namespace {

// Posts the receive operations a request still owes. Stops at -FI_EAGAIN (the rest is posted by a
// later progress call, before any later receive: FIFO is kept).
Status post_recvs(Comm& c, Request* r) {
  while (r->posted < r->n) {
    const int i = r->posted;
    ssize_t rc = fi_trecv(c.ep->ep(), r->bufs[i], r->caps[i], r->descs[i], FI_ADDR_UNSPEC,
                          r->tags[i], 0, &r->ops[i]);
    if (rc == -FI_EAGAIN) return Status::kOk;
    if (rc != 0) {
      Status s = fi_fail("fi_trecv", static_cast<int>(rc), c.peer_name.c_str());
      fail_request(r, s);
      r->n = r->posted;  // what was never posted will never complete
      return s;
    }
    if (r->mhs[i] != nullptr) r->mhs[i]->uses.fetch_add(1, std::memory_order_relaxed);
    ++r->posted;
    ++r->in_flight;
  }
  return Status::kOk;
}

}  // namespace

void defer(Comm& c, Request* r) {
  r->next_deferred = nullptr;
  if (c.deferred_tail)
    c.deferred_tail->next_deferred = r;
  else
    c.deferred_head = r;
  c.deferred_tail = r;
}

namespace {

Status post_deferred(Comm& c) {
  while (c.deferred_head != nullptr) {
    Request* r = c.deferred_head;
    Status s = r->type == ReqType::kSend ? rdma_post_writes(c, r) : post_recvs(c, r);
    if (r->posted < r->n && ok(s)) return Status::kOk;  // still blocked
    c.deferred_head = r->next_deferred;
    if (c.deferred_head == nullptr) c.deferred_tail = nullptr;
    r->next_deferred = nullptr;
    if (r->abandoned && r->in_flight == 0) request_release(r);
  }
  return Status::kOk;
}

void complete_op(SharedEp& sep, OpCtx* op, const fi_cq_tagged_entry* e) {
  if (is_probe_op(op)) {
    live_on_completion(sep, op, e, nullptr);
    return;
  }
  Request* r = op->req;
  const uint32_t idx = op->index;
  if (r->type == ReqType::kSend && r->op_len[idx] != 0) {
    sep.rail_load[r->op_rail[idx]] -= r->op_len[idx];
    r->op_len[idx] = 0;
  }
  if (r->zombie) {
    // Its comm has closed: its memory stays until the provider has given back every operation.
    --r->in_flight;
    if (--r->zowner->in_flight == 0) sep.zombie_done = true;
    return;
  }
  const size_t len = e != nullptr ? e->len : 0;
  ++r->comm->events;
  if (r->type == ReqType::kEagerRecv || r->type == ReqType::kCtsRecv) {
    --r->in_flight;
    r->posted = 0;
    if (e != nullptr) rdma_on_persistent(r, *e);
    return;
  }
  if (r->type == ReqType::kRecv && r->comm->proto == kProtoRdma) {
    // The receive's clear-to-send went out.
    --r->in_flight;
    rdma_on_cts_sent(r);
    return;
  }
  if (r->type == ReqType::kRecv || r->type == ReqType::kCtrlRecv) r->sizes[idx] = len;
  // A send's operations (an RDMA send's several writes) all use its one buffer, mhs[0].
  MemHandle* mh = r->type == ReqType::kSend ? r->mhs[0] : r->mhs[idx];
  if (mh != nullptr) mh->uses.fetch_sub(1, std::memory_order_release);
  --r->in_flight;
  if (r->in_flight == 0 && r->posted == r->n) {
    if (r->state == ReqState::kPending) r->state = ReqState::kDone;
    if (r->abandoned) request_release(r);
  }
}

void fail_op(SharedEp& sep, OpCtx* op, const CqError& err) {
  if (is_probe_op(op)) {
    live_on_completion(sep, op, nullptr, &err);
    return;
  }
  Request* r = op->req;
  if (r->zombie) {
    complete_op(sep, op, nullptr);
    return;
  }
  Comm& c = *r->comm;
  if (c.closing) {
    // A receive cancelled by the close: expected.
    if (r->type != ReqType::kEagerRecv && r->type != ReqType::kCtsRecv)
      fail_request(r, Status::kInternalError);
    complete_op(sep, op, nullptr);
    return;
  }
  const bool conn = is_connection_error(err.err, err.prov_errno);
  const Status s = conn ? Status::kRemoteError : status_for_cq_error(err.err);
  const char* hint = fi_error_hint(err.err);
  const char* what =
      r->type == ReqType::kSend || r->type == ReqType::kCtrlSend ? "send" : "receive";
  // One WARN per comm says what happened, the rest is INFO.
  const LogLevel level = c.errors_logged++ == 0 && !conn ? LogLevel::kWarn : LogLevel::kInfo;
  log_message(level, kSubsysNet, __FILE__, __LINE__, "%s to/from %s failed: %s%s%s", what,
              c.peer_name.empty() ? "peer" : c.peer_name.c_str(), err.text.c_str(),
              hint[0] ? "; " : "", hint);
  if (conn && c.peer != FI_ADDR_UNSPEC) {
    // The provider may have said why on the event queue (EFA: a failed handshake, written before
    // the operations it fails): its account names the peer better than this error does.
    eq_check(sep);
    // The path to the peer is gone: every connection with it fails, not only this request.
    peer_failed(sep, c.peer, Status::kRemoteError,
                std::string("a ") + what + " failed with " + err.text);
  } else if (err.err != FI_ETRUNC && err.err != FI_EMSGSIZE) {
    // Any other provider error breaks this connection (a message may be lost): every pending and
    // later request of it fails. A message larger than its receive fails that receive only.
    comm_fail(c, s, err.text.c_str());
  }
  if (r->type == ReqType::kEagerRecv || r->type == ReqType::kCtsRecv) {
    --r->in_flight;
    r->posted = 0;
    rdma_on_persistent_error(r);
    return;
  }
  if (r->type == ReqType::kRecv && c.proto == kProtoRdma) {
    // Its clear-to-send could not be delivered: the sender will never write. The receive stops
    // taking writes (its slot and its place among the active receives go) and fails.
    --r->in_flight;
    rdma_on_cts_failed(r, s);
    return;
  }
  fail_request(r, s);
  complete_op(sep, op, nullptr);
}

}  // namespace

Status SharedEp::insert_peer(const uint8_t* addr, size_t len, fi_addr_t* out) {
  std::string key(reinterpret_cast<const char*>(addr), len);
  auto it = peers.find(key);
  if (it != peers.end()) {
    *out = it->second;
    return Status::kOk;
  }
  NF_CHECK(ep->insert_peer(addr, len, out));
  peers.emplace(std::move(key), *out);
  return Status::kOk;
}

Status SharedEp::insert_rail_peer(int rail, const uint8_t* addr, size_t len, fi_addr_t* out) {
  if (rail == 0) return insert_peer(addr, len, out);
  auto& map = rail_peers[rail - 1];
  std::string key(reinterpret_cast<const char*>(addr), len);
  auto it = map.find(key);
  if (it != map.end()) {
    *out = it->second;
    return Status::kOk;
  }
  NF_CHECK(this->rail(rail)->insert_peer(addr, len, out));
  map.emplace(std::move(key), *out);
  return Status::kOk;
}

// A write names its receive by slot and generation. So that a late or duplicate write (of a
// receive that failed or closed) can never be credited to another receive, a freed slot is reused
// only after kSlotQuarantine other slots were handed out, and its generation has 9 bits: the
// same (slot, generation) comes back only after 512 x 1024 receives on the endpoint.
constexpr size_t kSlotQuarantine = 1024;

Status SharedEp::alloc_slot(Request* r) {
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
  r->slot = s;
  r->gen = static_cast<uint16_t>(slot_gen[s] & kMaxGen);
  return Status::kOk;
}

void SharedEp::free_slot(Request* r) {
  const uint32_t s = r->slot;
  if (s >= slot_req.size() || slot_req[s] != r) return;
  slot_req[s] = nullptr;
  slot_gen[s] =
      static_cast<uint16_t>((slot_gen[s] + 1) & kMaxGen);  // a late write no longer matches
  free_slots.push_back(s);
}

Status SharedEp::alloc_id(uint32_t* out) {
  if (next_id > kMaxCommId) {
    NF_WARN("more than %u comms on one endpoint: out of comm ids", kMaxCommId);
    return Status::kInternalError;
  }
  *out = next_id++;
  return Status::kOk;
}

namespace {

void free_zombie(Zombie& z) {
  for (MemReg& r : z.mrs) deregister_memory(&r);
  for (auto& h : z.handles) {
    h->deregister();
  }
}

}  // namespace

void SharedEp::sweep_zombies() {
  zombie_done = false;
  for (size_t i = 0; i < zombies.size();) {
    if (zombies[i]->in_flight > 0) {
      ++i;
      continue;
    }
    free_zombie(*zombies[i]);
    zombies[i] = std::move(zombies.back());
    zombies.pop_back();
  }
}

namespace {

// Endpoints that still held operations of closed comms when their context went: never closed.
struct KeptEndpoints {
  std::mutex mu;
  std::vector<std::unique_ptr<Endpoint>> eps;
  std::vector<std::unique_ptr<Zombie>> zombies;
  std::vector<std::unique_ptr<Liveness>> live;
};
KeptEndpoints& kept_endpoints() {
  static KeptEndpoints* k = new KeptEndpoints();  // never destroyed: lives until the process ends
  return *k;
}

}  // namespace

SharedEp::~SharedEp() {
  keeper_remove(this);
  sweep_zombies();
  if (!zombies.empty() || peer_failures > 0) {
    // Closing an endpoint under operations a failed connection left in it, or with a connection
    // to a peer that died or vanished, is where libfabric 1.x's rxm crashes (fi_close, seen in
    // the two-host fault tests); and a provider that still holds an operation may still write
    // into its buffer. So the endpoint, and every buffer those operations may touch, stays as it
    // is until the process ends (which, after a peer failure, is usually soon: NCCL aborts).
    int ops = 0;
    for (auto& z : zombies) ops += z->in_flight;
    if (ops > 0)
      NF_WARN(
          "finalize: %d operation(s) of closed comms are still in the provider; their endpoint "
          "and buffers are left open until the process exits rather than closed under them",
          ops);
    else
      NF_WARN(
          "finalize: a peer of this endpoint failed; the endpoint is left open until the "
          "process exits rather than closed under a broken connection");
    KeptEndpoints& k = kept_endpoints();
    std::lock_guard<std::mutex> lock(k.mu);
    for (auto& e : more) k.eps.push_back(std::move(e));
    k.eps.push_back(std::move(ep));
    for (auto& z : zombies) k.zombies.push_back(std::move(z));
    if (live) k.live.push_back(std::move(live));
    more.clear();
    zombies.clear();
    return;
  }
  // The endpoints first: closing them drops every operation still in flight; only then may the
  // memory the zombies kept go. Their domains (and registration caches) stay until then.
  std::vector<std::shared_ptr<Domain>> doms;
  if (ep) doms.push_back(ep->domain_ptr());
  for (auto& e : more) doms.push_back(e->domain_ptr());
  more.clear();
  ep.reset();
  live_teardown(*this);
}

Status shared_ep_open(const std::vector<std::shared_ptr<Domain>>& doms, const Params& params,
                      std::shared_ptr<SharedEp>* out) {
  std::shared_ptr<SharedEp> s(new SharedEp());
  s->cq_batch = static_cast<int>(params.get_int(ParamId::kCqBatch));
  NF_CHECK(Endpoint::open(doms[0], kSharedCqSize, &s->ep));
  for (size_t r = 1; r < doms.size() && r < static_cast<size_t>(kMaxRails); ++r) {
    std::unique_ptr<Endpoint> e;
    NF_CHECK(Endpoint::open(doms[r], kSharedCqSize, &e));
    s->more.push_back(std::move(e));
  }
  s->nrails = 1 + static_cast<int>(s->more.size());
  s->wide_imm = s->ep->domain().cq_data_size() >= 8;
  NF_CHECK(live_setup(*s, params.get_int(ParamId::kPeerTimeout)));
  keeper_add(s.get());
  *out = std::move(s);
  return Status::kOk;
}

Comm::Comm(CommRole r, std::shared_ptr<SharedEp> s, size_t pool_size, const Params& p)
    : role(r), sep(std::move(s)), ep(sep->ep.get()), pool(new Pool<Request>(pool_size)), params(p) {
  max_recvs = static_cast<int>(p.get_int(ParamId::kMaxRecvs));
  cq_batch = static_cast<int>(p.get_int(ParamId::kCqBatch));
  use_inject = p.get_bool(ParamId::kInject);
  inject_size = ep->domain().inject_size();
  max_msg_size = message_limit(ep->domain().max_msg_size());  // what getProperties promised
  max_write_size = static_cast<size_t>(max_msg_size < kMaxWriteSize ? max_msg_size : kMaxWriteSize);
}

bool Comm::close_wait() {
  const uint64_t start = now_ns();
  const int64_t t = params.get_int(ParamId::kPeerTimeout);
  uint64_t limit = t > 0 ? static_cast<uint64_t>(t) * 500000000ull : kCloseWaitNoProbeNs;
  bool failed_before = false;
  {
    std::lock_guard<std::mutex> lock(sep->mu);
    closing = true;
    close_waiting = true;
    failed_before = !ok(failed) || !ok(sep->failed);
    // Grouped receives not fully posted: what was never posted never will be.
    for (Request* r = deferred_head; r != nullptr;) {
      Request* next = r->next_deferred;
      r->next_deferred = nullptr;
      r->n = r->posted;
      r = next;
    }
    deferred_head = deferred_tail = nullptr;
    if (rdma) {
      rdma->n_repost = 0;
      rdma->n_cts_retry = 0;
    }
  }
  if (failed_before) limit = kCloseWaitFailedNs;
  // Cancels our posted receives (sends cannot be cancelled and finish or fail on their own; an
  // RDMA receive has only its CTS send out) and stops RDMA receives taking writes. Under sep->mu.
  auto cancel_posted = [this] {
    pool->for_each([&](Request* r) {
      if (r->state == ReqState::kFree || r->in_flight == 0) return;
      if (r->type == ReqType::kSend || r->type == ReqType::kCtrlSend || r->type == ReqType::kFlush)
        return;
      if (r->type == ReqType::kRecv && proto == kProtoRdma) return;
      for (int i = 0; i < r->posted; ++i) fi_cancel(&ep->ep()->fid, &r->ops[i]);
    });
    rdma_close(*this);  // slots freed, registrations no longer in use by announced receives
  };
  // 1. Drain: messages the peer already sent into our posted receives (also a closed peer's, which
  //    its provider still delivers) are taken, not cancelled: cancelled, they would stay in our
  //    provider as unexpected messages, and rxm stalls a connection behind those. Until every
  //    receive is complete, or nothing arrived for kCloseQuietNs (a peer that never sends).
  // 2. Cancel what is still posted. 3. Wait for the provider to give back the rest (sends,
  //    cancellations), within the bound.
  uint64_t seen = events;
  uint64_t quiet_since = start;
  bool cancelled = false;
  bool busy = true;
  for (int pass = 0;; ++pass) {
    uint64_t now;
    {
      std::lock_guard<std::mutex> lock(sep->mu);
      if (!ok(comm_progress(*this))) break;
      now = now_ns();
      if (events != seen) {
        seen = events;
        quiet_since = now;
      }
      busy = false;
      bool receiving = false;
      pool->for_each([&](Request* r) {
        if (r->state == ReqState::kFree) return;
        if (r->in_flight != 0) busy = true;
        if (r->type == ReqType::kRecv && r->state == ReqState::kPending &&
            (r->in_flight != 0 || (proto == kProtoRdma && r->slot != UINT32_MAX)))
          receiving = true;
      });
      if (!cancelled && (!receiving || now - quiet_since >= kCloseQuietNs || !ok(failed))) {
        cancel_posted();
        cancelled = true;
        continue;
      }
      if (cancelled && !busy) break;
      // The peer was found dead meanwhile (probes keep running for a closing comm): nothing more
      // will come from it.
      if (!ok(failed) && !failed_before) {
        failed_before = true;
        limit = now - start + kCloseWaitFailedNs;
      }
      live_check(*sep);
    }
    if (now - start > limit) break;
    if (pass >= 64) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::lock_guard<std::mutex> lock(sep->mu);
  close_waiting = false;
  if (!cancelled) {
    cancel_posted();
    for (int pass = 0; pass < 64; ++pass)
      if (!ok(comm_progress(*this))) break;
  }
  busy = false;
  pool->for_each([&](Request* r) {
    if (r->state != ReqState::kFree && r->in_flight != 0) busy = true;
  });
  if (busy) {
    const double waited = static_cast<double>(now_ns() - start) / 1e9;
    if (ok(failed) && !sep->kept_warned) {
      sep->kept_warned = true;
      NF_WARN(
          "comm with %s closed with operations the provider did not give back within %.1f s "
          "(NCCL_FABRIC_PEER_TIMEOUT): the peer is alive but did not complete them; their "
          "registrations and the endpoint are kept until it does, but the provider may still "
          "write into buffers NCCL frees",
          peer_name.c_str(), waited);
    } else {
      NF_INFO(kSubsysNet,
              "comm with %s closed after %.1f s with operations still in the provider; "
              "its registrations are kept until they come back",
              peer_name.c_str(), waited);
    }
  }
  return busy;
}

Comm::~Comm() {
  magic = 0;
  const bool busy = pool && role != CommRole::kListen ? close_wait() : false;
  std::lock_guard<std::mutex> lock(sep->mu);
  for (size_t i = 0; i < sep->comms.size(); ++i) {
    if (sep->comms[i] == this) {
      sep->comms[i] = sep->comms.back();
      sep->comms.pop_back();
      break;
    }
  }
  if (pool && role == CommRole::kListen) {
    // A listen comm has only its handshake receives: cancel and reap them.
    closing = true;
    pool->for_each([&](Request* r) {
      if (r->state != ReqState::kFree && r->in_flight != 0)
        for (int i = 0; i < r->posted; ++i) fi_cancel(&ep->ep()->fid, &r->ops[i]);
    });
    for (int pass = 0; pass < 64; ++pass) {
      bool left = false;
      if (!ok(comm_progress(*this))) break;
      pool->for_each([&](Request* r) {
        if (r->state != ReqState::kFree && r->in_flight != 0) left = true;
      });
      if (!left) break;
    }
  }
  bool zombie = busy;
  if (pool && role == CommRole::kListen) {
    pool->for_each([&](Request* r) {
      if (r->state != ReqState::kFree && r->in_flight != 0) zombie = true;
    });
  }
  if (pool && zombie) {
    // The provider still holds some of our operations: their memory lives on until it gives
    // them back (SharedEp::sweep_zombies).
    std::unique_ptr<Zombie> zp(new Zombie());
    Zombie& z = *zp;
    pool->for_each([&z](Request* r) {
      if (r->state == ReqState::kFree || r->in_flight == 0) return;
      r->zombie = true;
      r->zowner = &z;
      z.in_flight += r->in_flight;
    });
    z.pool = std::move(pool);
    z.ctrl = std::move(ctrl);
    z.mrs.push_back(ctrl_reg);
    ctrl_reg = MemReg();
    if (rdma) {
      z.mrs.push_back(rdma->cts_rx_reg);
      z.mrs.push_back(rdma->cts_tx_reg);
      z.mrs.push_back(rdma->bounce_reg);
      z.mrs.push_back(rdma->notice_tx_reg);
      rdma->cts_rx_reg = rdma->cts_tx_reg = rdma->bounce_reg = rdma->notice_tx_reg = MemReg();
      z.rdma = std::move(rdma);
    }
    // NCCL's registrations stay only where an operation of ours still uses them; the others
    // close now, so that a peer's late RDMA write into memory NCCL frees is refused by the NIC.
    for (auto& h : retired) {
      if (h->uses.load(std::memory_order_acquire) > 0) {
        z.handles.push_back(std::move(h));
      } else {
        h->deregister();
      }
    }
    retired.clear();
    sep->zombies.push_back(std::move(zp));
  }
  for (auto& h : retired) {
    h->deregister();
  }
  retired.clear();
  deregister_memory(&ctrl_reg);
  if (rdma) {
    deregister_memory(&rdma->cts_rx_reg);
    deregister_memory(&rdma->cts_tx_reg);
    deregister_memory(&rdma->bounce_reg);
    deregister_memory(&rdma->notice_tx_reg);
  }
  pool.reset();
}

Status comm_create(CommRole role, std::shared_ptr<SharedEp> sep, const Params& params,
                   std::unique_ptr<Comm>* out) {
  const size_t per_recv = static_cast<size_t>(params.get_int(ParamId::kMaxRecvs));
  // NCCL may have 32 requests in flight per comm; a send comm shared by grouped receivers
  // sees 32 x maxRecvs sends.
  size_t requests = kMaxRequests;
  if (role == CommRole::kSend) requests *= per_recv;
  requests += kCtrlRequests + kPersistentRequests;
  std::unique_ptr<Comm> c(new Comm(role, std::move(sep), requests, params));
  {
    std::lock_guard<std::mutex> lock(c->sep->mu);
    NF_CHECK(c->sep->alloc_id(&c->id));
    comm_register(*c);
  }
  c->ctrl.reset(new Comm::Ctrl());
  memset(c->ctrl.get(), 0, sizeof(Comm::Ctrl));
  NF_CHECK(register_memory(c->ep->domain(), c->ep->ep(), c->ctrl.get(), sizeof(Comm::Ctrl),
                           &c->ctrl_reg));
  *out = std::move(c);
  return Status::kOk;
}

void request_release(Request* r) {
  Comm* c = r->comm;
  if (r->in_flight != 0 || r->next_deferred != nullptr || c->deferred_tail == r) {
    // Still referenced by the provider or by the deferred list: return it when that ends.
    r->abandoned = true;
    r->magic = 0;
    return;
  }
  r->magic = 0;
  r->state = ReqState::kFree;
  c->pool->put(r);
}

namespace {

// An error completion that belongs to no operation of ours fails what it names, and only that:
// - a peer's write that failed to land (remote CQ data): the receive its immediate names;
// - one of our sends that reports no completion (an injected one): its tag names the peer comm it
//   went to, and the path to that peer process failed, so every connection with it fails;
// - anything else: reported once per endpoint; no comm is failed.
void route_stray_error(SharedEp& sep, const CqError& err) {
  if ((err.flags & FI_REMOTE_CQ_DATA) && rdma_on_write_error(sep, err)) return;
  if ((err.flags & FI_SEND) && (err.flags & FI_TAGGED)) {
    eq_check(sep);  // the provider's own account first, where it gave one (see fail_op)
    const uint32_t to = static_cast<uint32_t>(err.tag >> 32) & kMaxCommId;
    bool any = false;
    for (Comm* named : sep.comms) {
      if (named->role == CommRole::kListen || named->peer_id != to) continue;
      any = true;
      peer_failed(sep, named->peer, status_for_cq_error(err.err),
                  "a send to it failed with " + err.text);
      break;
    }
    if (any) return;
  }
  if (sep.stray_errors++ == 0)
    NF_WARN(
        "an error completion that belongs to no operation of this process (flags 0x%llx): %s; "
        "no comm is failed for it",
        static_cast<unsigned long long>(err.flags), err.text.c_str());
}

}  // namespace

Status sep_progress(SharedEp& sep) {
  if (!ok(sep.failed)) return sep.failed;
  fi_cq_tagged_entry entries[128];
  CqError err;
  const int max = sep.cq_batch;
  for (int rail = 0; rail < sep.nrails; ++rail) {
    Endpoint* ep = sep.rail(rail);
    for (;;) {
      int n = ep->read(entries, max, &err);
      if (n < 0) {
        if (err.op_context != nullptr) {
          fail_op(sep, static_cast<OpCtx*>(err.op_context), err);
          continue;
        }
        if (err.entry) {
          route_stray_error(sep, err);
          continue;
        }
        // The queue itself failed: every comm of the endpoint is affected, whoever polled it.
        NF_WARN(
            "the completion queue of a shared endpoint (%s) failed: %s; every connection on it "
            "fails",
            ep->domain().name().c_str(), err.text.c_str());
        sep.failed = Status::kSystemError;
        return sep.failed;
      }
      sep.events += static_cast<uint64_t>(n);
      for (int i = 0; i < n; ++i) {
        // A peer's RDMA write landed. Decided by the flags, not by op_context: fi_cq(3) makes it
        // NULL for such events, but shm (1.17) hands out the sender's message id there when a
        // write goes through its segmentation (SAR) path.
        const uint64_t f = entries[i].flags;
        if ((f & FI_REMOTE_CQ_DATA) &&
            (entries[i].op_context == nullptr || (f & FI_REMOTE_WRITE))) {
          rdma_on_write(sep, entries[i]);
        } else if (entries[i].op_context != nullptr) {
          complete_op(sep, static_cast<OpCtx*>(entries[i].op_context), &entries[i]);
        }
      }
      if (n < max) break;
    }
  }
  if (sep.zombie_done) sep.sweep_zombies();
  return Status::kOk;
}

namespace {

Status comm_tail(Comm& c) {
  if (c.rdma && (c.rdma->n_repost > 0 || c.rdma->n_cts_retry > 0)) rdma_retry_reposts(c);
  if (c.deferred_head != nullptr) return post_deferred(c);
  return Status::kOk;
}

}  // namespace

Status comm_progress(Comm& c) {
  SharedEp& sep = *c.sep;
  NF_CHECK(sep_progress(sep));
  ++sep.polls;
  return comm_tail(c);
}

void sep_progress_all(SharedEp& sep) {
  if (!ok(sep_progress(sep))) return;
  for (Comm* c : sep.comms)
    if (!c->closing && c->role != CommRole::kListen) (void)comm_tail(*c);
}

bool comm_pending(const Comm& c, int* sends, int* recvs) {
  if (!c.pool) return false;
  int ps = 0, pr = 0;
  const bool closing = c.close_waiting;
  c.pool->for_each([&](Request* r) {
    if (r->state == ReqState::kFree) return;
    if (r->type != ReqType::kSend && r->type != ReqType::kRecv && r->type != ReqType::kFlush)
      return;
    const bool waiting =
        closing ? r->in_flight > 0 || (r->type == ReqType::kRecv && r->slot != UINT32_MAX &&
                                       c.proto == kProtoRdma && r->state == ReqState::kPending)
                : r->state == ReqState::kPending && r->magic == kReqMagic;
    if (!waiting) return;
    if (r->type == ReqType::kSend)
      ++ps;
    else
      ++pr;
  });
  // An isend NCCL keeps retrying because no clear-to-send has come for its message yet.
  if (c.rdma && c.rdma->wait_valid && !closing &&
      c.rdma->sent.count(c.rdma->wait_tag) == c.rdma->wait_index)
    ++ps;
  *sends = ps;
  *recvs = pr;
  return ps + pr > 0;
}

Status ctrl_post(Comm& c, bool send, void* buf, size_t len, uint64_t tag, Request** out) {
  *out = nullptr;
  Request* r = take_request(c, send ? ReqType::kCtrlSend : ReqType::kCtrlRecv, 1);
  if (r == nullptr) return Status::kInternalError;
  ssize_t rc =
      send ? fi_tsend(c.ep->ep(), buf, len, c.ctrl_reg.desc, c.peer, tag, &r->ops[0])
           : fi_trecv(c.ep->ep(), buf, len, c.ctrl_reg.desc, FI_ADDR_UNSPEC, tag, 0, &r->ops[0]);
  if (rc == -FI_EAGAIN) {
    request_release(r);
    return comm_progress(c);  // *out stays NULL: try again on the next call
  }
  if (rc != 0) {
    request_release(r);
    return fi_fail(send ? "fi_tsend(handshake)" : "fi_trecv(handshake)", static_cast<int>(rc),
                   c.peer_name.c_str());
  }
  r->posted = 1;
  r->in_flight = 1;
  *out = r;
  return Status::kOk;
}

Status sr_isend(Comm& c, void* data, size_t size, int tag, MemHandle* mh, Request** out) {
  *out = nullptr;
  std::lock_guard<std::mutex> lock(c.sep->mu);
  if (!ok(c.sep->failed)) return c.sep->failed;
  if (!ok(c.failed)) return c.failed;
  Request* r = take_request(c, ReqType::kSend, 1);
  if (r == nullptr) {
    // Every request is out: reap completions; NCCL asks again.
    return comm_progress(c);
  }
  r->sizes[0] = size;
  const uint64_t t = data_tag(c.peer_id, tag);
  ssize_t rc;
  const bool inject = can_inject(c, size, mh);
  if (inject) {
    // The provider copies the data before returning and reports no completion.
    rc = fi_tinject(c.ep->ep(), data, size, c.peer, t);
    if (rc == 0) {
      r->state = ReqState::kDone;
      *out = r;
      return Status::kOk;
    }
  } else {
    void* desc = mh != nullptr ? mh->reg.desc : nullptr;
    rc = fi_tsend(c.ep->ep(), data, size, desc, c.peer, t, &r->ops[0]);
    if (rc == 0 && mh != nullptr) {
      r->mhs[0] = mh;
      mh->uses.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (rc == 0) {
    r->posted = 1;
    r->in_flight = 1;
    *out = r;
    return Status::kOk;
  }
  request_release(r);
  if (rc == -FI_EAGAIN) return comm_progress(c);
  return fi_fail(inject ? "fi_tinject" : "fi_tsend", static_cast<int>(rc), c.peer_name.c_str());
}

Status sr_irecv(Comm& c, int n, void** data, const size_t* sizes, const int* tags,
                MemHandle* const* mhs, Request** out) {
  *out = nullptr;
  std::lock_guard<std::mutex> lock(c.sep->mu);
  if (!ok(c.sep->failed)) return c.sep->failed;
  if (!ok(c.failed)) return c.failed;
  if (c.deferred_head != nullptr) {
    // An earlier grouped receive is still being posted; this one must come after it.
    NF_CHECK(comm_progress(c));
    if (c.deferred_head != nullptr) return Status::kOk;
  }
  Request* r = take_request(c, ReqType::kRecv, n);
  if (r == nullptr) return comm_progress(c);
  for (int i = 0; i < n; ++i) {
    r->bufs[i] = data[i];
    // No message is larger than max_msg_size: a larger buffer is posted as that much (EFA refuses
    // a receive above its limit).
    r->caps[i] = sizes[i] < c.max_msg_size ? sizes[i] : static_cast<size_t>(c.max_msg_size);
    r->descs[i] = mhs[i] != nullptr ? mhs[i]->reg.desc : nullptr;
    r->mhs[i] = mhs[i];
    r->tags[i] = data_tag(c.id, tags[i]);
  }
  Status s = post_recvs(c, r);
  if (!ok(s)) {
    if (r->posted == 0) {
      request_release(r);
      return s;
    }
    *out = r;  // test() reports the failure once the posted part is accounted for
    return Status::kOk;
  }
  if (r->posted == 0) {
    request_release(r);
    return comm_progress(c);
  }
  if (r->posted < r->n) defer(c, r);
  *out = r;
  return Status::kOk;
}

namespace {

Status post_flush(Comm& c, Request* r) {
  MemHandle* mh = r->mhs[0];
  const uintptr_t a = reinterpret_cast<uintptr_t>(r->bufs[0]);
  ssize_t rc = fi_read(c.ep->ep(), c.ctrl->flush, r->caps[0], c.ctrl_reg.desc, c.sep->self,
                       a - mh->reg.remote_base, mh->reg.key, &r->ops[0]);
  if (rc == -FI_EAGAIN) return Status::kOk;  // posted later, from test()
  if (rc != 0) {
    r->n = 0;  // nothing will complete
    Status s = fi_fail("fi_read(GPUDirect flush)", static_cast<int>(rc), "our own endpoint");
    fail_request(r, s);
    return s;
  }
  mh->uses.fetch_add(1, std::memory_order_relaxed);
  r->posted = 1;
  r->in_flight = 1;
  return Status::kOk;
}

}  // namespace

Status sr_test(Request* r, int* done, int* sizes) {
  Comm& c = *r->comm;
  std::lock_guard<std::mutex> lock(c.sep->mu);
  if (r->type == ReqType::kFlush && r->state == ReqState::kPending && r->posted == 0) {
    Status s = post_flush(c, r);
    if (!ok(s)) fail_request(r, s);
  }
  if (r->state == ReqState::kPending) {
    Status s = comm_progress(c);
    if (ok(s)) s = c.failed;
    if (!ok(s) && r->state == ReqState::kPending) {
      if (r->type == ReqType::kRecv && c.proto == kProtoRdma)
        rdma_fail_recv(r, s);
      else
        fail_request(r, s);
    }
  }
  switch (r->state) {
    case ReqState::kPending: *done = 0; return Status::kOk;
    case ReqState::kDone:
      *done = 1;
      if (sizes != nullptr) {
        // NCCL passes one int for a send: an RDMA send's n counts its writes, not buffers.
        const int nsizes = r->type == ReqType::kSend ? 1 : r->n;
        for (int i = 0; i < nsizes; ++i)
          sizes[i] =
              r->sizes[i] > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(r->sizes[i]);
      }
      request_release(r);
      return Status::kOk;
    default: {
      Status s = r->error;
      *done = 0;
      request_release(r);
      return s;
    }
  }
}

Status sr_reg_mr(Comm& c, void* data, size_t size, const PtrInfo& info, const MemSpec& spec,
                 MemHandle** out) {
  std::unique_ptr<MemHandle> mh(new MemHandle());
  mh->magic = kMrMagic;
  mh->comm = &c;
  const bool rdma = c.proto == kProtoRdma;
  uint64_t remote = 0;
  if (rdma && c.role == CommRole::kRecv) remote |= FI_REMOTE_WRITE;  // the peer writes into it
  // The GPUDirect flush reads received GPU memory back through our own endpoint.
  if (info.kind != MemKind::kHost && c.role == CommRole::kRecv &&
      c.params.get_bool(ParamId::kFlush))
    remote |= FI_REMOTE_READ;
  for (int r = 0; r < (rdma ? c.nrails : 1); ++r) {
    Endpoint* ep = c.sep->rail(r);
    Status s =
        mr_cache(ep->domain()).acquire(ep->ep(), data, size, remote, info, spec, &mh->rail_reg(r));
    if (!ok(s)) {
      mh->deregister();  // the rails before this one (the others hold nothing)
      return s;
    }
    if (c.params.get_bool(ParamId::kTestDropDesc)) mh->rail_reg(r).desc = nullptr;  // see its doc
  }
  *out = mh.release();
  return Status::kOk;
}

Status sr_iflush(Comm& c, void* data, MemHandle* mh, Request** out) {
  *out = nullptr;
  std::lock_guard<std::mutex> lock(c.sep->mu);
  if (!ok(c.sep->failed)) return c.sep->failed;
  if (c.sep->self == FI_ADDR_UNSPEC) {
    uint8_t name[kMaxAddrLen];
    size_t len = sizeof(name);
    NF_CHECK(c.ep->name(name, &len));
    NF_CHECK(c.sep->insert_peer(name, len, &c.sep->self));
  }
  Request* r = take_request(c, ReqType::kFlush, 1);
  if (r == nullptr) {
    // A NULL flush request means "flushed" to NCCL: running out must be an error.
    NF_WARN("iflush with %s: every request of the comm is in use", c.peer_name.c_str());
    return Status::kInternalError;
  }
  r->bufs[0] = data;
  r->caps[0] = 4;  // a few bytes are enough to order the earlier PCIe writes
  r->mhs[0] = mh;
  Status s = post_flush(c, r);
  if (!ok(s)) {
    request_release(r);
    return s;
  }
  *out = r;
  return Status::kOk;
}

Status sr_dereg_mr(Comm& c, MemHandle* mh) {
  if (mh->uses.load(std::memory_order_acquire) > 0) {
    // NCCL deregisters before it closes, also after an abort with receives still posted into this
    // memory. Closing the registration under them would let the NIC write into memory that is
    // about to be freed: it goes when the comm closes, after its operations are reaped.
    NF_INFO(kSubsysNet,
            "deregMr of memory still used by %d operation(s) with %s: released when "
            "the comm closes",
            mh->uses.load(std::memory_order_relaxed), c.peer_name.c_str());
    // The handle stays too: a completion dispatched by another comm's progress still counts on it.
    // Its registrations are never shared again: NCCL frees the memory next.
    mr_cache_retire(mh->reg.cached);
    for (MemReg& m : mh->more) mr_cache_retire(m.cached);
    mh->magic = 0;
    c.retired.emplace_back(mh);
    return Status::kOk;
  }
  mh->deregister();
  mh->magic = 0;
  delete mh;
  return Status::kOk;
}

}  // namespace nf
