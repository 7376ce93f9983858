// A comm's life: its requests (taken from and given back to its pool), failure, deferred posts,
// the control messages of the handshake, and close: waiting for the provider to give back what
// the comm still has in flight, or leaving it to the endpoint as a zombie.
#include "core/comm.h"

#include <climits>
#include <cstring>
#include <thread>

#include <rdma/fi_errno.h>

#include "core/ctrl.h"
#include "core/liveness.h"
#include "fabric/errors.h"
#include "mem/mr_cache.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/random.h"

namespace nf {
namespace {

// Two control requests (connect + ack) come on top of what NCCL may have in flight.
constexpr size_t kCtrlRequests = 2;
// Requests of a recv comm that only flushes may take: as many as NCCL may have in flight.
constexpr size_t kFlushReserve = kMaxRequests;
// A closing comm waits for the provider to give back its operations for at most half of
// NCCL_FABRIC_PEER_TIMEOUT (this when probing is off): a live peer completes them in
// milliseconds, and a dead one is found by the probes in that time or soon after. When its
// connection had failed already (nothing more will arrive), it waits for this long.
constexpr uint64_t kCloseWaitNoProbeNs = 5000000000ull;
constexpr uint64_t kCloseWaitFailedNs = 100000000ull;
// A closing comm takes what its peer still sends into its posted receives until nothing arrived
// for this long (a peer that closed, or never sends, leaves them empty).
constexpr uint64_t kCloseQuietNs = 200000000ull;
// Once the endpoint's bound is spent, a close leaves what the provider still holds after this
// long without a completion (a live peer's transfers complete far more often).
constexpr uint64_t kCloseQuietSpentNs = 20000000ull;

// Whether the provider still holds an operation of a request of this pool.
bool in_provider(Pool<Request>& pool) {
  bool any = false;
  pool.for_each(
      [&](Request* r) { any = any || (r->state != ReqState::kFree && r->in_flight != 0); });
  return any;
}

}  // namespace

Request* take_request(Comm& c, ReqType type, int n) {
  // A receive reported to NCCL may keep its request while its clear-to-send's completion is out
  // (EFA reports a send once the peer acknowledged it): receives could then hold every request,
  // and iflush, which cannot answer "later", failed the communicator (issue 34). Receives leave
  // kFlushReserve requests to flushes; past that, irecv answers NULL until completions come.
  if (type == ReqType::kRecv && c.pool->capacity() - c.pool->in_use() <= kFlushReserve)
    return nullptr;
  Request* r = c.pool->get();
  if (r == nullptr) return nullptr;
  r->magic = kReqMagic;
  r->type = type;
  r->state = ReqState::kPending;
  r->n = static_cast<uint8_t>(n);
  r->posted = 0;
  r->in_flight = 0;
  r->error = Status::kOk;
  r->comm = &c;
  r->next_deferred = nullptr;
  r->zowner = nullptr;
  r->seq = c.issued++;
  r->prof = nullptr;
  // One operation is the common case (every SENDRECV send, most receives): plain stores. A loop
  // becomes memset calls (gcc), about 36 instructions for one entry (callgrind).
  r->ops[0].req = r;
  r->ops[0].index = 0;
  for (int i = 1; i < n; ++i) {
    r->ops[i].req = r;
    r->ops[i].index = static_cast<uint32_t>(i);
  }
  // What the completion of an operation reads; the rest the poster fills in.
  switch (type) {
    case ReqType::kSend:
      if (__builtin_expect(--c.prof_gate == 0, 0)) prof_take(c, r);
      r->send.size = 0;
      r->send.mh = nullptr;
      r->send.op_len[0] = 0;
      for (int i = 1; i < n; ++i) r->send.op_len[i] = 0;
      break;
    case ReqType::kRecv:
      if (__builtin_expect(--c.prof_gate == 0, 0)) prof_take(c, r);
      r->recv.sizes[0] = 0;
      r->recv.mhs[0] = nullptr;
      for (int i = 1; i < n; ++i) {
        r->recv.sizes[i] = 0;
        r->recv.mhs[i] = nullptr;
      }
      r->recv.nbufs = static_cast<uint8_t>(n);
      r->recv.slot = UINT32_MAX;
      r->recv.holds_mrs = false;
      r->recv.early = false;
      r->recv.early_open = false;
      break;
    case ReqType::kCtrlSend:
    case ReqType::kCtrlRecv: r->ctrl.size = 0; break;
    case ReqType::kFlush: r->flush.mh = nullptr; break;
  }
  return r;
}

void (*comm_listed_hook)(const Comm& c) = nullptr;

namespace {

// Closed comms whose cookie keys an endpoint remembers (SharedEp::closed_keys): 16 KiB.
constexpr size_t kClosedKeys = 4096;

// Lists every comm of s.comms but `skip` in s.by_route (comms come and go rarely: connect, accept,
// close).
void route_rebuild(SharedEp& s, const Comm* skip) {
  size_t n = 16;
  while (n < 2 * (s.comms.size() + 1)) n *= 2;
  s.by_route.assign(n, nullptr);
  for (Comm* c : s.comms) {
    if (c == skip || c->cookie_in == 0) continue;
    size_t i = (c->cookie_in & kMaxCommId) & (n - 1);
    while (s.by_route[i] != nullptr) i = (i + 1) & (n - 1);
    s.by_route[i] = c;
  }
}

}  // namespace

void comm_register(Comm& c) {
  if (comm_listed_hook != nullptr) comm_listed_hook(c);
  SharedEp& s = *c.sep;
  // A cookie whose low 28 bits no other comm of the endpoint has (SENDRECV receives match on the
  // cookie, compact eager messages are routed by those bits) and are not 0.
  for (bool taken = true; taken;) {
    c.cookie_in = static_cast<uint32_t>(random_u64());
    const uint32_t key = c.cookie_in & kMaxCommId;
    taken = key == 0 || route_closed(s, key);
    for (const Comm* o : s.comms) taken = taken || (o->cookie_in & kMaxCommId) == key;
  }
  s.comms.push_back(&c);
  if (s.by_id.size() <= c.id) s.by_id.resize(static_cast<size_t>(c.id) + 1, nullptr);
  s.by_id[c.id] = &c;
  route_rebuild(s, nullptr);
}

void route_remove(SharedEp& s, const Comm* c) {
  route_rebuild(s, c);
  if (c->cookie_in == 0) return;
  if (s.closed_keys.size() < kClosedKeys) {
    s.closed_keys.push_back(c->cookie_in & kMaxCommId);
  } else {
    s.closed_keys[s.closed_next] = c->cookie_in & kMaxCommId;
    s.closed_next = (s.closed_next + 1) % kClosedKeys;
  }
}

bool route_closed(const SharedEp& s, uint32_t key) {
  for (uint32_t k : s.closed_keys)
    if (k == key) return true;
  return false;
}

void comm_fail(Comm& c, Status s, const char* why) {
  if (!ok(c.failed)) return;
  c.failed = s;
  NF_WARN("connection with %s failed: %s; every request on it fails", c.peer_name.c_str(), why);
}

void fail_request(Request* r, Status s) {
  // Only a pending request fails: one complete, reported or orphaned keeps its state.
  if (r->state == ReqState::kPending) {
    r->state = ReqState::kError;
    r->error = s;
  }
}

namespace {

// While r waits on the deferred list (defer), it holds a use of each registration it names.
void hold_registrations(Request* r, int delta) {
  if (r->type == ReqType::kSend) {
    if (r->send.mh != nullptr) r->send.mh->uses.fetch_add(delta, std::memory_order_acq_rel);
  } else if (r->type == ReqType::kRecv) {
    for (int i = 0; i < r->recv.nbufs; ++i)
      if (r->recv.mhs[i] != nullptr)
        r->recv.mhs[i]->uses.fetch_add(delta, std::memory_order_acq_rel);
  }
}

}  // namespace

void defer(Comm& c, Request* r) {
  // Its operations not posted yet will use its registrations: deregMr must not free them while
  // it waits, even when every operation posted so far has completed (issue 34).
  hold_registrations(r, 1);
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
    Status s =
        r->type == ReqType::kSend ? c.protocol->post_send(c, r) : c.protocol->post_recv(c, r);
    if (r->posted < r->n && ok(s)) return Status::kOk;  // still blocked
    c.deferred_head = r->next_deferred;
    if (c.deferred_head == nullptr) c.deferred_tail = nullptr;
    r->next_deferred = nullptr;
    hold_registrations(r, -1);  // posted (each operation counts its own use) or given up
    request_settle(r);          // the deferred list let go
  }
  return Status::kOk;
}

}  // namespace

bool Comm::close_wait() {
  const uint64_t start = now_ns();
  const int64_t t = params.get_int(ParamId::kPeerTimeout);
  uint64_t limit = t > 0 ? static_cast<uint64_t>(t) * 500000000ull : kCloseWaitNoProbeNs;
  bool failed_before = false;
  uint64_t spent_before = 0;
  {
    std::lock_guard<TicketLock> lock(sep->mu);
    // The bound is the endpoint's, not each comm's: NCCL closes every comm of a communicator one
    // after the other, and N comms whose peer takes nothing would wait N bounds (issue 34). The
    // closes that ended with operations still in the provider spent it; once it is spent, a close
    // waits only while its operations make progress. A pause of one bound gives it back.
    if (start - sep->close_last_ns > limit) sep->close_spent_ns = 0;
    spent_before = sep->close_spent_ns;
    closing = true;
    close_waiting = true;
    failed_before = !ok(failed) || !ok(sep->failed);
    // Grouped receives not fully posted: what was never posted never will be.
    Request* r = deferred_head;
    deferred_head = deferred_tail = nullptr;
    while (r != nullptr) {
      Request* next = r->next_deferred;
      r->next_deferred = nullptr;
      r->n = r->posted;
      hold_registrations(r, -1);
      request_settle(r);  // the deferred list let go
      r = next;
    }
  }
  if (failed_before) limit = kCloseWaitFailedNs;
  const bool spent = spent_before >= limit;
  if (!spent) limit -= spent_before;
  // Cancels our posted receives (sends cannot be cancelled and finish or fail on their own; an
  // RDMA receive has only its CTS send out) and stops RDMA receives taking writes. Under sep->mu.
  auto cancel_posted = [this] {
    pool->for_each([&](Request* r) {
      if (r->state == ReqState::kFree || r->in_flight == 0) return;
      if (r->type == ReqType::kSend || r->type == ReqType::kCtrlSend || r->type == ReqType::kFlush)
        return;
      if (r->type == ReqType::kRecv && !protocol->cancel_recvs) return;
      for (int i = 0; i < r->posted; ++i) fi_cancel(&ep->ep()->fid, &r->ops[i]);
    });
    protocol->close(
        *this);  // RDMA: slots freed, registrations no longer used by announced receives
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
      std::lock_guard<TicketLock> lock(sep->mu);
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
            (r->in_flight != 0 || r->recv.slot != UINT32_MAX))
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
    if (spent && now - quiet_since > kCloseQuietSpentNs) break;
    if (pass >= 64) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::lock_guard<TicketLock> lock(sep->mu);
  close_waiting = false;
  if (!cancelled) {
    cancel_posted();
    for (int pass = 0; pass < 64; ++pass)
      if (!ok(comm_progress(*this))) break;
  }
  busy = in_provider(*pool);
  const uint64_t end = now_ns();
  if (busy) sep->close_spent_ns += end - start;
  sep->close_last_ns = end;
  if (busy) {
    const double waited = static_cast<double>(end - start) / 1e9;
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
  if (role != CommRole::kListen) stats_fold(*this);
  const bool busy = pool && role != CommRole::kListen ? close_wait() : false;
  std::lock_guard<TicketLock> lock(sep->mu);
  ctrl_drop_comm(*this);
  if (prof_slots && pool) {
    // Their events end here: the slots go with the comm, a zombie keeps no profiler state.
    pool->for_each([](Request* r) {
      if (r->state != ReqState::kFree && r->prof != nullptr) prof_finish(r);
    });
    prof_wait_stop(*this);
  }
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
    for (int pass = 0; pass < 64; ++pass)
      if (!ok(comm_progress(*this)) || !in_provider(*pool)) break;
  }
  const bool zombie = busy || (pool && role == CommRole::kListen && in_provider(*pool));
  if (pool && zombie) {
    // The provider still holds some of our operations: their memory lives on until it gives
    // them back (SharedEp::sweep_zombies).
    std::unique_ptr<Zombie> zp(new Zombie());
    Zombie& z = *zp;
    pool->for_each([&z](Request* r) {
      if (r->state == ReqState::kFree || r->in_flight == 0) return;
      r->state = ReqState::kZombie;
      r->zowner = &z;
      z.in_flight += r->in_flight;
    });
    z.pool = std::move(pool);
    z.ctrl = std::move(ctrl);
    z.mrs.push_back(ctrl_reg);
    ctrl_reg = MemReg();
    for (MemReg& m : flush_reg) {
      z.mrs.push_back(m);
      m = MemReg();
    }
    z.pstate = std::move(pstate);  // its registrations close with it
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
  for (MemReg& m : flush_reg) deregister_memory(&m);
  pstate.reset();  // the protocol's buffers and registrations
  pool.reset();
}

Status comm_create(CommRole role, std::shared_ptr<SharedEp> sep, const Params& params,
                   std::unique_ptr<Comm>* out, bool locked) {
  const size_t per_recv = static_cast<size_t>(params.get_int(ParamId::kMaxRecvs));
  // NCCL may have 32 requests in flight per comm; a send comm shared by grouped receivers
  // sees 32 x maxRecvs sends.
  size_t requests = kMaxRequests;
  if (role == CommRole::kSend) requests *= per_recv;
  // A listen comm's requests become its recv comm's: flushes get their own (take_request).
  if (role != CommRole::kSend) requests += kFlushReserve;
  requests += kCtrlRequests;
  // The id first: a comm made and then dropped here would close under the caller's lock.
  uint32_t id = 0;
  if (locked) {
    NF_CHECK(sep->alloc_id(&id));
  } else {
    std::lock_guard<TicketLock> lock(sep->mu);
    NF_CHECK(sep->alloc_id(&id));
  }
  out->reset(new Comm(role, std::move(sep), requests, params));
  Comm& c = **out;
  c.id = id;
  c.ctrl.reset(new Comm::Ctrl());
  memset(c.ctrl.get(), 0, sizeof(Comm::Ctrl));
  return register_memory(c.ep->domain(), c.ep->ep(), c.ctrl.get(), sizeof(Comm::Ctrl), &c.ctrl_reg);
}

bool request_held(const Request* r) {
  return r->state != ReqState::kReleased || r->in_flight != 0 || r->next_deferred != nullptr ||
         r->comm->deferred_tail == r || (r->type == ReqType::kRecv && r->recv.early_open);
}

void request_settle(Request* r) {
  if (r->state == ReqState::kFree || r->state == ReqState::kZombie || request_held(r)) return;
  r->state = ReqState::kFree;
  r->comm->pool->put(r);
}

void request_release(Request* r) {
  if (__builtin_expect(r->prof != nullptr, 0)) prof_finish(r);
  r->magic = 0;
  r->state = ReqState::kReleased;
  request_settle(r);
}

Status request_test(Request* r, int* done, int* sizes) {
  Comm& c = *r->comm;
  std::lock_guard<TicketLock> lock(c.sep->mu);
  if (r->type == ReqType::kFlush && r->state == ReqState::kPending && r->posted < r->n) {
    Status s = post_flush(c, r);
    if (!ok(s)) fail_request(r, s);
  }
  if (r->state == ReqState::kPending) {
    Status s = comm_progress(c);
    if (ok(s)) s = c.failed;
    if (!ok(s) && r->state == ReqState::kPending) {
      if (r->type == ReqType::kRecv)
        c.protocol->fail_recv(r, s);
      else
        fail_request(r, s);
    }
  }
  // NCCL passes one int for a send or a flush, one per buffer for a receive.
  auto clamp = [](size_t v) {
    return v > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(v);
  };
  switch (r->state) {
    case ReqState::kPending:
      if (__builtin_expect(r->type == ReqType::kRecv && r->recv.early, 0) && r->posted == r->n &&
          r->in_flight == 0 && r->recv.slot != UINT32_MAX) {
        // NCCL reads the data's own flags (LL, LL128): its clear-to-send has left, so the
        // writes land without us; the request lives on until they have (counted then).
        *done = 1;
        if (sizes != nullptr) sizes[0] = 0;
        r->recv.early_open = true;
        request_release(r);
        return Status::kOk;
      }
      *done = 0;
      return Status::kOk;
    case ReqState::kDone:
      *done = 1;
      if (r->type == ReqType::kRecv) {
        size_t got = 0;
        for (int i = 0; i < r->recv.nbufs; ++i) {
          got += r->recv.sizes[i];
          if (sizes != nullptr) sizes[i] = clamp(r->recv.sizes[i]);
        }
        c.st.msgs.add();
        c.st.bytes.add(got);
      } else {
        const size_t sent = r->type == ReqType::kSend ? r->send.size : 0;
        if (sizes != nullptr) sizes[0] = clamp(sent);
        if (r->type == ReqType::kSend) {
          c.st.msgs.add();
          c.st.bytes.add(sent);
        }
      }
      request_release(r);
      return Status::kOk;
    default: {
      Status s = r->error;
      c.st.errors.add();
      *done = 0;
      request_release(r);
      return s;
    }
  }
}

Status comm_tail(Comm& c) {
  c.protocol->tail(c);
  if (c.deferred_head != nullptr) return post_deferred(c);
  return Status::kOk;
}

Status comm_progress(Comm& c) {
  SharedEp& sep = *c.sep;
  NF_CHECK(sep_progress(sep));
  ++sep.polls;
  return comm_tail(c);
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
        closing ? r->in_flight > 0 || (r->type == ReqType::kRecv && r->recv.slot != UINT32_MAX &&
                                       (r->state == ReqState::kPending || r->recv.early_open))
                : r->state == ReqState::kPending && r->magic == kReqMagic;
    if (!waiting) return;
    if (r->type == ReqType::kSend)
      ++ps;
    else
      ++pr;
  });
  // An isend NCCL keeps retrying because the peer has not let it go yet (RDMA: no clear-to-send
  // for its message).
  if (!closing && c.protocol->send_waiting(c)) ++ps;
  *sends = ps;
  *recvs = pr;
  return ps + pr > 0;
}

Status ctrl_post_send(Comm& c, uint8_t kind, uint32_t dst, size_t len, Request** out) {
  *out = nullptr;
  Request* r = take_request(c, ReqType::kCtrlSend, 1);
  if (r == nullptr) return Status::kInternalError;
  CtrlHdr* hdr = kind == kCtrlConnect ? &c.ctrl->connect_hdr : &c.ctrl->ack_hdr;
  bool posted = false, injected = false;
  *hdr = ctrl_hdr(kind, dst, c.id);
  Status s = ctrl_send(c, hdr, len, c.ctrl_reg.desc, r, 0, false, &posted, &injected);
  if (!ok(s) || !posted) {
    request_release(r);
    if (!ok(s)) return s;
    return comm_progress(c);  // *out stays NULL: try again on the next call
  }
  op_posted(r, nullptr);
  *out = r;
  return Status::kOk;
}

Status ctrl_expect(Comm& c, uint8_t kind, Request** out) {
  *out = nullptr;
  Request* r = take_request(c, ReqType::kCtrlRecv, 0);
  if (r == nullptr) return Status::kInternalError;
  // Nothing is posted for it: the message lands in the endpoint's pool and is copied into the
  // handshake buffer (core/ctrl.cpp), now if it came already.
  c.ctrl_recv = r;
  c.ctrl_expect = kind;
  ctrl_replay(c);
  *out = r;
  return Status::kOk;
}

}  // namespace nf
