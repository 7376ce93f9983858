// The shared endpoint (one per plugin context and device, every comm of it on one CQ): its peers,
// RDMA completion slots and ids, closed comms whose operations are still in the provider
// (zombies), and progress: reading the CQ and dispatching each completion, or error, to what it
// belongs to.
#include "core/comm.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "core/ctrl.h"
#include "core/liveness.h"
#include "fabric/errors.h"
#include "mem/mr_cache.h"
#include "util/clock.h"
#include "util/log.h"

namespace nf {
namespace {

// Completion queue entries of a shared endpoint (rxm and shm queue what does not fit).
constexpr size_t kSharedCqSize = 16384;

// One of r's operations is over (completed, failed or cancelled; a failure was recorded first):
// the request is done when the last one is; the provider let go of it (request_settle).
void op_over(Request* r) {
  --r->in_flight;
  if (r->in_flight == 0 && r->posted == r->n && r->state == ReqState::kPending)
    r->state = ReqState::kDone;
  request_settle(r);
}

void complete_op(SharedEp& sep, OpCtx* op, const fi_cq_tagged_entry* e) {
  if (op->req == nullptr) {
    if (is_ctrl_rx(op))
      ctrl_rx_done(sep, op, e, nullptr);
    else
      live_on_completion(sep, op, e, nullptr);
    return;
  }
  Request* r = op->req;
  const uint32_t idx = op->index;
  if (r->type == ReqType::kSend && r->send.op_len[idx] != 0) {
    sep.rail_load[r->send.op_rail[idx]] -= r->send.op_len[idx];
    r->send.op_len[idx] = 0;
  }
  if (r->state == ReqState::kZombie) {
    // Its comm has closed: its memory stays until the provider has given back every operation.
    --r->in_flight;
    if (--r->zowner->in_flight == 0) sep.zombie_done = true;
    return;
  }
  ++r->comm->events;
  if (__builtin_expect(r->prof != nullptr, 0)) prof_op_stop(r, static_cast<int>(idx));
  const size_t len = e != nullptr ? e->len : 0;
  switch (r->type) {
    case ReqType::kSend:
      if (r->send.mh != nullptr) r->send.mh->uses.fetch_sub(1, std::memory_order_release);
      break;
    case ReqType::kRecv:
      // RDMA: the operation is the receive's clear-to-send; its data comes by writes.
      if (r->comm->protocol->recv_op_done(r)) return;
      r->recv.sizes[idx] = len;
      if (r->recv.mhs[idx] != nullptr)
        r->recv.mhs[idx]->uses.fetch_sub(1, std::memory_order_release);
      break;
    case ReqType::kCtrlSend:
    case ReqType::kCtrlRecv: r->ctrl.size = len; break;
    case ReqType::kFlush:
      if (r->flush.mh != nullptr) r->flush.mh->uses.fetch_sub(1, std::memory_order_release);
      break;
  }
  op_over(r);
}

void fail_op(SharedEp& sep, OpCtx* op, const CqError& err) {
  if (op->req == nullptr) {
    if (is_ctrl_rx(op))
      ctrl_rx_done(sep, op, nullptr, &err);
    else
      live_on_completion(sep, op, nullptr, &err);
    return;
  }
  Request* r = op->req;
  if (r->state == ReqState::kZombie) {
    complete_op(sep, op, nullptr);
    return;
  }
  Comm& c = *r->comm;
  if (c.closing) {
    // A receive cancelled by the close: expected.
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
  if (r->type == ReqType::kRecv && c.protocol->recv_op_failed(r, s)) return;
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

bool SharedEp::known_peer(const uint8_t* addr, size_t len, fi_addr_t* out) const {
  auto it = peers.find(std::string(reinterpret_cast<const char*>(addr), len));
  if (it == peers.end()) return false;
  *out = it->second;
  return true;
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
  std::vector<std::unique_ptr<CtrlPool>> pools;
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
    for (auto& p : pools)
      if (p) k.pools.push_back(std::move(p));
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
  ctrl_teardown(*this);
  live_teardown(*this);
}

// Where the receiver of the RDMA protocol takes a write's length from the completion (4 bytes of
// CQ data: no room for it in the immediate), that length must be whole. rdma-core's efa provider
// without length_hi support reports only its low 16 bits: a write of 64 KiB reads as 0 bytes, and
// NCCL would get a wrong size with no error (issue 35). One write of 64 KiB + 128 bytes to our own
// address, before anything else uses the endpoint, says which kind this is. Returns "" when the
// length came back whole, or when the probe could not run (its own failure is logged at INFO:
// nothing is concluded from it); else the reason the lengths cannot be used.
std::string write_len_probe(Endpoint& e, bool rx_cq_data) {
  const size_t kLen = 65536 + 128;
  const fi_info* info = e.domain().info();
  if ((info->caps & FI_RMA) == 0 || (info->caps & FI_REMOTE_WRITE) == 0) return "";
  // The buffers and the operations' contexts in one block: where an operation may still be in
  // the provider when the probe gives up, the block is left allocated rather than freed under it.
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, 2 * kLen + 4096 + 2 * sizeof(OpCtx)) != 0) return "";
  std::unique_ptr<void, void (*)(void*)> hold(mem, free);
  uint8_t* src = static_cast<uint8_t*>(mem);
  uint8_t* dst = src + kLen;
  uint8_t* rx = dst + kLen;
  OpCtx* ctxs = reinterpret_cast<OpCtx*>(rx + 4096);
  memset(src, 0x5a, kLen);
  memset(ctxs, 0, 2 * sizeof(OpCtx));
  fi_context2* wctx = &ctxs[0].fi;
  fi_context2* rctx = &ctxs[1].fi;
  bool in_provider = false;  // an operation posted and not seen complete
  MemReg sreg, dreg, rreg;
  auto inconclusive = [&](const std::string& why) {
    NF_INFO(kSubsysInit | kSubsysNet, "write-length check on %s not made: %s",
            e.domain().name().c_str(), why.c_str());
    if (in_provider) {
      (void)hold.release();
      return std::string();  // the registrations stay too
    }
    deregister_memory(&sreg);
    deregister_memory(&dreg);
    deregister_memory(&rreg);
    return std::string();
  };
  if (!ok(register_memory(e.domain(), e.ep(), src, kLen, &sreg)) ||
      !ok(register_memory(e.domain(), e.ep(), dst, kLen, &dreg, true)) ||
      !ok(register_memory(e.domain(), e.ep(), rx, 4096, &rreg)))
    return inconclusive("registration failed");
  uint8_t name[kMaxAddrLen];
  size_t nlen = sizeof(name);
  fi_addr_t self = FI_ADDR_UNSPEC;
  if (!ok(e.name(name, &nlen)) || !ok(e.insert_peer(name, nlen, &self)))
    return inconclusive("our own address could not be inserted");
  // Without unsolicited write receive, the write's immediate data consumes a posted receive.
  if (rx_cq_data) {
    if (fi_recv(e.ep(), rx, 4096, rreg.desc, FI_ADDR_UNSPEC, rctx) != 0)
      return inconclusive("fi_recv failed");
    in_provider = true;
  }
  const uint64_t deadline = now_ns() + 2000000000ull;
  ssize_t rc;
  while ((rc = fi_writedata(e.ep(), src, kLen, sreg.desc, 0, self,
                            reinterpret_cast<uintptr_t>(dst) - dreg.remote_base, dreg.key, wctx)) ==
             -FI_EAGAIN &&
         now_ns() < deadline) {
    fi_cq_tagged_entry x[8];
    CqError err;
    e.read(x, 8, &err);
  }
  if (rc != 0) return inconclusive(fi_error_text("fi_writedata", static_cast<int>(rc)));
  in_provider = true;
  bool local = false, remote = false;
  bool recv_open = rx_cq_data;  // our receive, until the write consumed it or it was cancelled
  size_t got = 0;
  while ((!local || !remote) && now_ns() < deadline) {
    fi_cq_tagged_entry x[8];
    CqError err;
    const int n = e.read(x, 8, &err);
    if (n < 0) return inconclusive("the write failed: " + err.text);
    for (int k = 0; k < n; ++k) {
      if (x[k].op_context == wctx && !(x[k].flags & FI_REMOTE_CQ_DATA)) local = true;
      if (x[k].op_context == rctx) recv_open = false;
      if (x[k].flags & FI_REMOTE_CQ_DATA) {
        remote = true;
        got = x[k].len;
      }
    }
  }
  if (!local || !remote) return inconclusive("no completion within 2 s");
  if (recv_open) {
    // The NIC takes writes without a receive after all: ours goes back, cancelled.
    fi_cancel(&e.ep()->fid, rctx);
    const uint64_t until = now_ns() + 1000000000ull;
    while (recv_open && now_ns() < until) {
      fi_cq_tagged_entry x[8];
      CqError err;
      const int n = e.read(x, 8, &err);
      if (n < 0 && err.op_context == rctx) recv_open = false;
      for (int k = 0; k < n; ++k)
        if (x[k].op_context == rctx) recv_open = false;
    }
  }
  if (recv_open) {
    // Still posted: its memory and registration stay (a few KiB, once per process).
    (void)hold.release();
  } else {
    deregister_memory(&rreg);
  }
  deregister_memory(&sreg);
  deregister_memory(&dreg);
  if (got == kLen) return "";
  char why[256];
  snprintf(why, sizeof(why),
           "a write of %zu bytes was reported as %zu bytes (the provider keeps only part of a "
           "write's length: rdma-core's efa provider without length_hi support)",
           kLen, got);
  return why;
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
  s->rx_cq_data = (s->ep->domain().info()->mode & FI_RX_CQ_DATA) != 0;
  s->msg_limit = s->ep->msg_limit();  // FI_OPT_MAX_MSG_SIZE where answered (efa-direct: one MTU)
  // The control pool's buffers take the largest control message, and an eager message of up to
  // NCCL_FABRIC_EAGER_MAX (less where the provider's messages are smaller: efa-direct's MTU).
  size_t payload = sizeof(ConnectMsg) + 64;
  if (sizeof(AckMsg) + 64 > payload) payload = sizeof(AckMsg) + 64;
  if (sizeof(CtsWire) > payload) payload = sizeof(CtsWire);
  const size_t eager = static_cast<size_t>(params.get_int(ParamId::kEagerMax));
  if (eager > payload) payload = eager;
  NF_CHECK(ctrl_open(*s, payload));
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
  // No single write larger than the device takes (FI_OPT_MAX_RMA_SIZE where the provider answers
  // it: efa-direct's sends stop at one MTU, its writes do not).
  const uint64_t rma = ep->rma_limit() != 0 ? ep->rma_limit() : max_msg_size;
  max_write_size = static_cast<size_t>(rma < kMaxWriteSize ? rma : kMaxWriteSize);
}

namespace {

// An error completion that belongs to no operation of ours fails what it names, and only that:
// - a peer's write that failed to land (remote CQ data): the receive its immediate names;
// - one of our sends that reports no completion (an injected one): its tag names the peer comm it
//   went to, and the path to that peer process failed, so every connection with it fails;
// - anything else: reported once per endpoint; no comm is failed.
void route_stray_error(SharedEp& sep, const CqError& err) {
  if ((err.flags & FI_REMOTE_CQ_DATA) && sep.writer != nullptr &&
      sep.writer->on_write_error(sep, err))
    return;
  if ((err.flags & FI_SEND) && (err.flags & FI_TAGGED)) {
    // A SENDRECV send (an injected one): the tag names the receiving comm.
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
          if (sep.writer != nullptr)
            sep.writer->on_write(sep, entries[i]);
          else
            NF_INFO(kSubsysNet,
                    "a peer's write arrived on an endpoint no protocol writes to: ignored");
          // FI_RX_CQ_DATA: the write took one of the pool's receives, which goes back to work.
          // (Only then: shm 1.17 puts a foreign value in op_context of some writes.)
          if (sep.rx_cq_data && entries[i].op_context != nullptr &&
              is_ctrl_rx(static_cast<OpCtx*>(entries[i].op_context)))
            ctrl_rx_done(sep, static_cast<OpCtx*>(entries[i].op_context), &entries[i], nullptr);
        } else if (entries[i].op_context != nullptr) {
          complete_op(sep, static_cast<OpCtx*>(entries[i].op_context), &entries[i]);
        }
      }
      if (n < max) break;
    }
  }
  if (sep.zombie_done) sep.sweep_zombies();
  ctrl_fill(sep);
  return Status::kOk;
}

void sep_progress_all(SharedEp& sep) {
  if (!ok(sep_progress(sep))) return;
  for (Comm* c : sep.comms)
    if (!c->closing && c->role != CommRole::kListen) (void)comm_tail(*c);
}

}  // namespace nf
