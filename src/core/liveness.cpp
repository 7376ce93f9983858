#include "core/liveness.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <rdma/fi_errno.h>

#include "core/stats.h"
#include "fabric/errors.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/random.h"

namespace nf {
namespace {

constexpr uint64_t kMinIntervalNs = 100000000ull;

int take_tx(Liveness& lv, int owner) {
  for (int k = 0; k < kProbeTx; ++k) {
    if (lv.tx_owner[k] == -1) {
      lv.tx_owner[k] = owner;
      return k;
    }
  }
  return -1;
}

// Sends tx slot k (already filled, `len` bytes) to addr. False when the provider took nothing.
bool send_tx(SharedEp& sep, Liveness& lv, int k, size_t len, fi_addr_t addr, int* err) {
  lv.tx[k].h = ctrl_hdr(kCtrlProbe, 0, 0);
  ssize_t rc =
      fi_send(sep.ep->ep(), &lv.tx[k].h, kCtrlHdrSize + len, lv.tx_reg.desc, addr, &lv.tx_ops[k]);
  if (rc == 0) return true;
  lv.tx_owner[k] = -1;
  *err = static_cast<int>(rc < 0 ? -rc : rc);
  return false;
}

ProbePeer* find_peer(Liveness& lv, fi_addr_t addr, size_t* index) {
  for (size_t i = 0; i < lv.peers.size(); ++i) {
    if (lv.peers[i].addr == addr) {
      if (index) *index = i;
      return &lv.peers[i];
    }
  }
  return nullptr;
}

// A flood from a stranger must not flood the log too: a WARN at the 1st, 2nd, 4th, 8th, ...
// (as for malformed control messages, ctrl.cpp).
bool warn_now(uint64_t count) { return (count & (count - 1)) == 0; }

void answer_ping(SharedEp& sep, Liveness& lv, const ProbeMsg& ping) {
  fi_addr_t to = FI_ADDR_UNSPEC;
  // Only peers this endpoint met (a connection, or a refused connect it answered) are answered:
  // the address a ping claims is the sender's word only, so a ping from anyone else would make an
  // AV entry (on EFA a device address handle, for the endpoint's life) and send a pong where the
  // stranger chose (issue 36).
  if (!sep.known_peer(ping.addr, ping.addr_len, &to)) {
    ++lv.pings_unknown;
    stats_unsolicited(Unsolicited::kPingUnknown);
    if (warn_now(lv.pings_unknown))
      NF_WARN(
          "ignored %llu liveness ping(s) that claim an address no connection of this endpoint "
          "has (the latest: %s): not answered, nothing added to the address vector "
          "(docs/troubleshooting.md#unknown-ping)",
          static_cast<unsigned long long>(lv.pings_unknown),
          sep.ep->address_text(ping.addr, ping.addr_len).c_str());
    return;
  }
  const int k = take_tx(lv, -2);
  if (k < 0) return;  // every slot busy: the prober pings again
  ProbeMsg& m = lv.tx[k].m;
  memset(&m, 0, kProbeFixed);
  m.magic = kProbeMagic;
  m.version = kWireVersion;
  m.kind = kProbePong;
  m.token = ping.token;
  m.seq = ping.seq;
  int err = 0;
  send_tx(sep, lv, k, kProbeFixed, to, &err);
}

}  // namespace

Status live_setup(SharedEp& sep, int64_t timeout_s) {
  std::unique_ptr<Liveness> lv(new Liveness());
  lv->timeout_ns = static_cast<uint64_t>(timeout_s) * 1000000000ull;
  lv->interval_ns = lv->timeout_ns / 5 > kMinIntervalNs ? lv->timeout_ns / 5 : kMinIntervalNs;
  lv->tx.reset(new Liveness::Tx[kProbeTx]);
  memset(lv->tx.get(), 0, sizeof(Liveness::Tx) * kProbeTx);
  NF_CHECK(register_memory(sep.ep->domain(), sep.ep->ep(), lv->tx.get(),
                           sizeof(Liveness::Tx) * kProbeTx, &lv->tx_reg));
  Status s;
  lv->self_len = sizeof(lv->self);
  s = sep.ep->name(lv->self, &lv->self_len);
  if (!ok(s) || lv->self_len > kMaxAddrLen) {
    deregister_memory(&lv->tx_reg);
    return ok(s) ? Status::kInternalError : s;
  }
  for (int k = 0; k < kProbeTx; ++k) {
    lv->tx_ops[k].req = nullptr;
    lv->tx_ops[k].index = static_cast<uint32_t>(k);
    lv->tx_owner[k] = -1;
  }
  sep.live = std::move(lv);
  return Status::kOk;
}

void live_teardown(SharedEp& sep) {
  if (!sep.live) return;
  deregister_memory(&sep.live->tx_reg);
  sep.live.reset();
}

void live_on_probe(SharedEp& sep, const void* buf, size_t len) {
  Liveness& lv = *sep.live;
  ProbeMsg m;
  std::string why;
  if (!decode_probe(buf, len, &m, &why)) {
    uint32_t head[2] = {0, 0};
    memcpy(head, buf, len < sizeof(head) ? len : sizeof(head));
    if (lv.bad_probes++ == 0)
      NF_WARN("ignored a malformed liveness probe (%zu bytes, starting 0x%08x 0x%08x): %s", len,
              head[0], head[1], why.c_str());
  } else if (m.kind == kProbePing) {
    answer_ping(sep, lv, m);
  } else {
    uint64_t seq = 0;
    if (m.token < lv.peers.size() && live_pong_seq(lv.peers[m.token], m.seq, &seq)) {
      live_answered(lv.peers[m.token], seq, now_ns());
      return;
    }
    // Not an answer to a ping of ours: a stale or forged pong must not keep a dead peer alive.
    ++lv.pongs_refused;
    stats_unsolicited(Unsolicited::kPongRefused);
    if (warn_now(lv.pongs_refused))
      NF_WARN(
          "ignored %llu liveness pong(s) that answer no ping of this endpoint (token %u, wrong "
          "nonce or no such peer) (docs/troubleshooting.md#unknown-ping)",
          static_cast<unsigned long long>(lv.pongs_refused), m.token);
  }
}

void live_on_completion(SharedEp& sep, OpCtx* op, const fi_cq_tagged_entry* e, const CqError* err) {
  (void)e;
  Liveness& lv = *sep.live;
  const int k = static_cast<int>(op->index);
  const int owner = lv.tx_owner[k];
  lv.tx_owner[k] = -1;
  if (owner < 0 || static_cast<size_t>(owner) >= lv.peers.size()) return;  // a pong
  ProbePeer& p = lv.peers[static_cast<size_t>(owner)];
  live_ping_done(p);
  if (err != nullptr && is_connection_error(err->err, err->prov_errno))
    peer_failed(sep, p.addr, Status::kRemoteError,
                std::string("a liveness probe to it failed: ") + err->text);
}

void peer_failed(SharedEp& sep, fi_addr_t peer, Status s, const std::string& seen) {
  int ncomms = 0, sends = 0, recvs = 0;
  std::string name;
  for (Comm* c : sep.comms) {
    if (c->role == CommRole::kListen || c->peer != peer || !ok(c->failed)) continue;
    int ps = 0, pr = 0;
    comm_pending(*c, &ps, &pr);
    sends += ps;
    recvs += pr;
    c->failed = s;
    if (name.empty()) name = c->peer_name;
    ++ncomms;
  }
  if (sep.live) {
    if (ProbePeer* p = find_peer(*sep.live, peer, nullptr)) p->first_unanswered_ns = 0;
  }
  if (ncomms == 0) return;
  ++sep.peer_failures;
  NF_WARN(
      "peer %s failed: %s; %d connection(s) with it fail, with %d send(s) and %d receive(s) "
      "pending (NCCL_FABRIC_PEER_TIMEOUT, docs/troubleshooting.md#peer-failure)",
      name.c_str(), seen.c_str(), ncomms, sends, recvs);
}

void eq_check(SharedEp& sep) {
  for (int rail = 0; rail < sep.nrails; ++rail) {
    EqError err;
    int rc;
    while ((rc = sep.rail(rail)->read_eq(&err)) != 0) {
      ++sep.eq_errors;
      if (rc < 0) {
        // The queue itself failed: only the first time is worth a line; nothing is failed for it.
        if (sep.eq_errors == 1)
          NF_WARN(
              "the event queue of a shared endpoint (%s) failed: %s; errors that belong to no "
              "operation may go unseen",
              sep.rail(rail)->domain().name().c_str(), err.text.c_str());
        break;
      }
      // The peer the provider names, if it names one of ours.
      std::vector<fi_addr_t> named;
      for (Comm* c : sep.comms) {
        if (c->role == CommRole::kListen || c->peer == FI_ADDR_UNSPEC || c->peer_name.empty())
          continue;
        if (err.text.find(c->peer_name) == std::string::npos) continue;
        bool seen = false;
        for (fi_addr_t a : named) seen = seen || a == c->peer;
        if (!seen) named.push_back(c->peer);
      }
      const std::string what = "the provider reported on its event queue: " + err.text;
      if (!named.empty()) {
        for (fi_addr_t a : named) peer_failed(sep, a, Status::kRemoteError, what);
        continue;
      }
      // No peer named, which is how EFA writes every EQ error (err and prov_errno only, e.g. a
      // failed handshake with some peer). Failing every connection of the endpoint would take down
      // every communicator on this NIC for one peer (issue 35). The connections it concerns fail
      // on their own: their operations complete in error (EFA fails every op to a peer it could
      // not reach), and the liveness probes, sent to every peer now, find a peer that is gone.
      size_t peers = 0;
      if (sep.live) {
        for (ProbePeer& p : sep.live->peers) {
          p.last_ping_ns = 0;  // due now
          ++peers;
        }
        sep.live->last_check_ns = 0;
      }
      ++sep.eq_unnamed;
      if (sep.eq_unnamed == 1)
        NF_WARN(
            "an error that names no peer, on the event queue of %s: %s; the connections it "
            "concerns fail through their own operations' errors or the liveness probes, sent "
            "now to %zu peer(s)%s (docs/troubleshooting.md#eq-error)",
            sep.rail(rail)->domain().name().c_str(), err.text.c_str(), peers,
            sep.live && sep.live->timeout_ns > 0 ? "" : " (probing is off: operations only)");
      else
        NF_INFO(kSubsysNet, "event queue of %s: %s (%llu such errors so far)",
                sep.rail(rail)->domain().name().c_str(), err.text.c_str(),
                static_cast<unsigned long long>(sep.eq_unnamed));
      live_check(sep);
    }
  }
}

void live_check(SharedEp& sep) {
  if (!sep.live) return;
  // The clock is read here, under the lock: a time the caller read before it waited for the lock
  // can be older than a ping another thread sent meanwhile, and `now - sent` would wrap (the
  // keeper, waiting while a close held the lock, once declared a live peer dead for
  // "18446744073.7 s" that way).
  const uint64_t now = now_ns();
  Liveness& lv = *sep.live;
  if (lv.timeout_ns == 0) return;
  if (now >= lv.last_check_ns && now - lv.last_check_ns < kKeeperTickNs / 2) return;
  lv.last_check_ns = now;
  for (ProbePeer& p : lv.peers) {
    p.pending = false;
    p.events = 0;
  }
  for (Comm* c : sep.comms) {
    if (c->role == CommRole::kListen || c->peer == FI_ADDR_UNSPEC || !ok(c->failed)) continue;
    ProbePeer* p = find_peer(lv, c->peer, nullptr);
    int ps = 0, pr = 0;
    const bool pending = comm_pending(*c, &ps, &pr);
    if (p == nullptr) {
      if (!pending) continue;
      lv.peers.push_back(ProbePeer());
      p = &lv.peers.back();
      p->addr = c->peer;
      p->key = random_u64();
    }
    p->pending = p->pending || pending;
    p->events += c->events;
  }
  for (size_t i = 0; i < lv.peers.size(); ++i) {
    ProbePeer& p = lv.peers[i];
    const LiveStep step = live_step(p, p.pending, p.events, now, lv.timeout_ns, lv.interval_ns);
    if (step == LiveStep::kDead) {
      char why[160];
      snprintf(why, sizeof(why), "no answer to a liveness probe for %.1f s",
               static_cast<double>(now - p.first_unanswered_ns) / 1e9);
      peer_failed(sep, p.addr, Status::kTimeout, why);
      continue;
    }
    if (step != LiveStep::kPing) continue;
    const int k = take_tx(lv, static_cast<int>(i));
    if (k < 0) continue;
    ProbeMsg& m = lv.tx[k].m;
    memset(&m, 0, sizeof(m));
    m.magic = kProbeMagic;
    m.version = kWireVersion;
    m.kind = kProbePing;
    m.addr_len = static_cast<uint8_t>(lv.self_len);
    m.token = static_cast<uint32_t>(i);
    m.seq = live_wire_seq(p, p.seq + 1);
    memcpy(m.addr, lv.self, lv.self_len);
    int err = 0;
    if (send_tx(sep, lv, k, kProbeFixed + lv.self_len, p.addr, &err)) {
      live_ping_sent(p, now);
    } else if (err != FI_EAGAIN && is_connection_error(err, 0)) {
      peer_failed(sep, p.addr, Status::kRemoteError, fi_error_text("fi_send(liveness probe)", err));
    }
  }
}

// The clock (first_unanswered_ns) runs while requests toward the peer are pending and a ping to it
// is unanswered, from the ping's sending or from the last sign of life since: a pong to an older
// ping, a completion on its connections. It stops (0) when the newest ping is answered or nothing
// is pending. A sign of life does not stop it while the newest ping is unanswered: that ping may
// never come back (a stopped peer's full socket takes nothing; EFA gives a send back only at the
// peer's acknowledgement), and no new ping goes while it is out, so a clock stopped then would
// never start again (before 2026-11-29 traffic that was in flight at the stop did just that: a
// stopped peer was never declared dead; tests/unit/test_liveness.cpp).
LiveStep live_step(ProbePeer& p, bool pending, uint64_t events, uint64_t now, uint64_t timeout_ns,
                   uint64_t interval_ns) {
  // Completions on its connections since the last check (data arriving, sends taken) are as good
  // as a pong: on a slow or lossy link a pong may wait behind megabytes of data, and a peer
  // that moves data is not dead. A stopped peer moves nothing once the socket buffers are full.
  const bool progressed = events != p.last_events;
  p.last_events = events;
  const bool unanswered = p.answered < p.seq;
  if (!pending) {
    p.first_unanswered_ns = 0;  // nothing waits on it
    return LiveStep::kWait;
  }
  if (unanswered && (progressed || p.first_unanswered_ns == 0)) {
    p.first_unanswered_ns = now;  // alive until now, or pending again from now
  } else if (!unanswered && progressed) {
    p.first_unanswered_ns = 0;
  }
  if (p.first_unanswered_ns != 0 && now > p.first_unanswered_ns &&
      now - p.first_unanswered_ns > timeout_ns)
    return LiveStep::kDead;
  if (p.tx_busy || (now >= p.last_ping_ns && now - p.last_ping_ns < interval_ns))
    return LiveStep::kWait;
  // The clock runs from the first ping due, whether or not the provider takes it: a provider
  // that refuses sends to a broken connection (rxm: -FI_EAGAIN) must not stop it.
  if (p.first_unanswered_ns == 0) p.first_unanswered_ns = now;
  return LiveStep::kPing;
}

void live_ping_sent(ProbePeer& p, uint64_t now) {
  ++p.seq;
  p.tx_busy = true;
  p.last_ping_ns = now;
}

void live_ping_done(ProbePeer& p) { p.tx_busy = false; }

void live_answered(ProbePeer& p, uint64_t seq, uint64_t now) {
  if (seq > p.seq) return;  // not a ping of ours
  if (seq > p.answered) p.answered = seq;
  // Alive: the clock stops if it answered the newest ping, else runs on from now for that one.
  p.first_unanswered_ns = p.answered == p.seq ? 0 : now;
}

namespace {

uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint32_t nonce_of(const ProbePeer& p, uint64_t seq) {
  return static_cast<uint32_t>(mix64(p.key ^ mix64(seq)) >> 32);
}

}  // namespace

uint64_t live_wire_seq(const ProbePeer& p, uint64_t seq) {
  return (static_cast<uint64_t>(nonce_of(p, seq)) << 32) | (seq & 0xffffffffull);
}

bool live_pong_seq(const ProbePeer& p, uint64_t wire, uint64_t* seq) {
  if (p.seq == 0) return false;
  // The newest ping whose low 32 bits match: within 2^32 pings of the newest.
  uint64_t s = (p.seq & ~0xffffffffull) | (wire & 0xffffffffull);
  if (s > p.seq) {
    if (s < (uint64_t{1} << 32)) return false;
    s -= uint64_t{1} << 32;
  }
  if (s == 0 || static_cast<uint32_t>(wire >> 32) != nonce_of(p, s)) return false;
  *seq = s;
  return true;
}

// ---- The keeper thread ------------------------------------------------------------------------

namespace {

// Requests of an open comm not yet given back to NCCL, or operations of a closed one the provider
// still holds. A listen comm's handshake receives wait for a peer, not for progress.
bool awaits_progress(const SharedEp& sep) {
  for (const auto& z : sep.zombies)
    if (z->in_flight > 0) return true;
  for (const Comm* c : sep.comms)
    if (c->role != CommRole::kListen && c->pool && c->pool->in_use() > 0) return true;
  return false;
}

class Keeper {
 public:
  ~Keeper() { stop(); }

  void add(SharedEp* sep) {
    std::lock_guard<std::mutex> lock(mu_);
    seps_.push_back(sep);
    if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { run(); });
    cv_.notify_all();
  }

  void remove(SharedEp* sep) {
    std::lock_guard<std::mutex> lock(mu_);  // waits for a pass that may be using it
    for (size_t i = 0; i < seps_.size(); ++i) {
      if (seps_[i] == sep) {
        seps_[i] = seps_.back();
        seps_.pop_back();
        break;
      }
    }
  }

  void with_endpoints(const std::function<void(const std::vector<SharedEp*>&)>& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fn(seps_);
  }

  // At unload or exit: the thread must be gone before libfabric is.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      if (seps_.empty()) {
        cv_.wait(lock);
        continue;
      }
      // Every tick, or every kKeeperBusyNs while the last pass found work: a transfer nobody
      // else progresses (the peer closed, or NCCL is not calling) still moves at a useful rate.
      cv_.wait_for(lock, std::chrono::nanoseconds(busy_ ? kKeeperBusyNs : kKeeperTickNs));
      if (stopping_) break;
      busy_ = false;
      for (SharedEp* sep : seps_) {
        // The registry lock is held: remove() (and so the endpoint's destruction) waits for us.
        // Politely: NCCL's progress thread is not made to queue behind us (util/ticket_lock.h).
        sep->mu.lock_politely();
        std::lock_guard<TicketLock> slock(sep->mu, std::adopt_lock);
        // Idle: nobody else polled it since our last pass (a counter: the data path reads no
        // clock for the keeper's sake).
        if (sep->polls == sep->keeper_polls) {
          const uint64_t before = sep->events;
          sep_progress_all(*sep);
          // Completions came, or operations wait that only progress completes: a provider that
          // moves a message in steps (rxm's rendezvous) gives no completion between them, and
          // at one step per tick 32 MiB took over a second (test_peers' close).
          sep->keeper_busy = sep->events != before || awaits_progress(*sep);
          busy_ = busy_ || sep->keeper_busy;
        } else {
          sep->keeper_busy = false;
        }
        sep->keeper_polls = sep->polls;
        eq_check(*sep);
        live_check(*sep);
        stats_watch(*sep, now_ns());
      }
      stats_tick(seps_, now_ns());
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SharedEp*> seps_;
  std::thread thread_;
  bool stopping_ = false;
  bool busy_ = false;
};

Keeper& keeper() {
  static Keeper k;
  return k;
}

}  // namespace

void keeper_add(SharedEp* sep) { keeper().add(sep); }
void keeper_remove(SharedEp* sep) { keeper().remove(sep); }
void keeper_with_endpoints(const std::function<void(const std::vector<SharedEp*>&)>& fn) {
  keeper().with_endpoints(fn);
}

}  // namespace nf
