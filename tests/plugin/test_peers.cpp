// Issue 16: close is final, and peer failure has a bound. Two processes on tcp;ofi_rxm and shm,
// both protocols, and on the mock EFA provider between processes (MOCKEFA_NET=udp, issue 35): EFA's
// shape, where a dead or stopped peer is only silence (no connection to break, no reset) and the
// plugin's liveness probe is what finds it.
//
// - Close: buffers are mmap()ed and munmap()ed right after deregMr/close, as NCCL frees them: a
//   provider that writes (or reads) after close hits unmapped memory and the child dies, on any
//   build, with or without ASan.
// - Failure: the survivor (rank 0) kills or stops the other rank (rank 1) while requests toward it
//   are pending, and measures how long until they fail. NCCL_FABRIC_PEER_TIMEOUT is 2 s here.
//   A peer that is stopped for less than that, or idle (not calling the plugin at all, as in
//   NCCL's compute phase) for twice as long, must not be declared dead.
// Debugging: NF_PEERS_ONLY="tcp;ofi_rxm/rdma" runs one combination, NF_PEERS_TO=S sets the timeout.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace nft;

namespace {

using Clock = std::chrono::steady_clock;

const char* const kProtocols[] = {"sendrecv", "rdma"};
constexpr int kPeerTimeoutS = 2;
// The close test's timeout: a close waits up to half of it for operations in flight. The sender
// that closes first has only the peer's keeper thread moving its 32 MiB (0.2 s idle, more on a
// loaded CI machine); past the bound it would leave them to the provider (a zombie, WARN) and
// the unmapped buffer would break the connection.
constexpr int kCloseTimeoutS = 6;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Mapped {
  void* p = MAP_FAILED;
  size_t len = 0;
  explicit Mapped(size_t n) : len(n) {
    p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  unsigned char* at(size_t off) const { return static_cast<unsigned char*>(p) + off; }
  void unmap() {
    if (p != MAP_FAILED) munmap(p, len);
    p = MAP_FAILED;
  }
  ~Mapped() { unmap(); }
};

bool oob_byte(Side& s, char c) { return s.oob.send(&c, 1, kTimeoutMs); }
bool oob_wait(Side& s, char want) {
  char c = 0;
  return s.oob.recv(&c, 1, kTimeoutMs) && c == want;
}

// ---- Close is final -----------------------------------------------------------------------------

constexpr int kCloseMsgs = 32;
constexpr size_t kCloseSize = 1u << 20;

// Who closes first in a round: the sender right after posting, the receiver as soon as the sends
// are posted (its receives matched and in progress), or both at once.
enum class Order { kSenderFirst, kReceiverFirst, kTogether };

int close_round(Side& s, Order order, int round) {
  void* sc = nullptr;
  void* rc = nullptr;
  if (connect_more(s, &sc, &rc) != 0) return 1;
  Mapped buf(kCloseMsgs * kCloseSize);
  CHILD_CHECK(buf.p != MAP_FAILED, "mmap");
  void* mh = nullptr;
  if (s.rank == 0) {
    // Receiver: 32 receives of 1 MiB from rank 1.
    CHILD_CHECK(s.plugin.reg_mr(rc, buf.p, buf.len, NCCL_PTR_HOST, &mh) == ncclSuccess, "regMr");
    for (int i = 0; i < kCloseMsgs; ++i) {
      void* d[1] = {buf.at(static_cast<size_t>(i) * kCloseSize)};
      size_t cap[1] = {kCloseSize};
      int tag[1] = {7};
      void* m[1] = {mh};
      void* r = nullptr;
      CHILD_CHECK(post_recv(s.plugin, rc, 1, d, cap, tag, m, &r) == 0, "irecv %d", i);
    }
    CHILD_CHECK(oob_byte(s, 'P'), "oob");
    CHILD_CHECK(oob_wait(s, order == Order::kSenderFirst ? 'C' : 'S'), "oob");
  } else {
    CHILD_CHECK(s.plugin.reg_mr(sc, buf.p, buf.len, NCCL_PTR_HOST, &mh) == ncclSuccess, "regMr");
    for (int i = 0; i < kCloseMsgs; ++i)
      fill(buf.at(static_cast<size_t>(i) * kCloseSize), kCloseSize, 1, i);
    CHILD_CHECK(oob_wait(s, 'P'), "oob");
    for (int i = 0; i < kCloseMsgs; ++i) {
      void* r = nullptr;
      CHILD_CHECK(post_send(s.plugin, sc, buf.at(static_cast<size_t>(i) * kCloseSize), kCloseSize,
                            7, mh, &r) == 0,
                  "isend %d", i);
    }
    if (order != Order::kSenderFirst) CHILD_CHECK(oob_byte(s, 'S'), "oob");
  }
  // Torn down as after an abort: deregister, close, free, with operations in flight.
  const auto t = Clock::now();
  void* data_comm = s.rank == 0 ? rc : sc;
  CHILD_CHECK(s.plugin.dereg_mr(data_comm, mh) == ncclSuccess, "deregMr");
  if (s.rank == 0) {
    CHILD_CHECK(s.plugin.close_recv(rc) == ncclSuccess, "closeRecv");
  } else {
    CHILD_CHECK(s.plugin.close_send(sc) == ncclSuccess, "closeSend");
  }
  const double took = since(t);
  buf.unmap();
  fprintf(stderr, "[rank %d] round %d: close with 32 x 1 MiB in flight took %.3f s\n", s.rank,
          round, took);
  CHILD_CHECK(took < kCloseTimeoutS / 2.0 + 0.5,
              "close took %.2f s, more than NCCL_FABRIC_PEER_TIMEOUT/2", took);
  if (s.rank == 1 && order == Order::kSenderFirst) CHILD_CHECK(oob_byte(s, 'C'), "oob");
  if (s.rank == 0)
    CHILD_CHECK(s.plugin.close_send(sc) == ncclSuccess, "closeSend");
  else
    CHILD_CHECK(s.plugin.close_recv(rc) == ncclSuccess, "closeRecv");
  return 0;
}

// A checked transfer each way on the pair's first comms: the endpoint still works, and its
// progress would run into any late write of the closed comms.
int checked_traffic(Side& s, int msg) {
  const size_t n = 3u << 20;
  std::vector<unsigned char> sb(n), rb(n, 0);
  fill(sb.data(), n, s.rank, msg);
  void* smh = nullptr;
  void* rmh = nullptr;
  CHILD_CHECK(s.plugin.reg_mr(s.send_comms[0], sb.data(), n, NCCL_PTR_HOST, &smh) == ncclSuccess,
              "regMr");
  CHILD_CHECK(s.plugin.reg_mr(s.recv_comms[0], rb.data(), n, NCCL_PTR_HOST, &rmh) == ncclSuccess,
              "regMr");
  void* d[1] = {rb.data()};
  size_t cap[1] = {n};
  int tag[1] = {11};
  void* m[1] = {rmh};
  void* rr = nullptr;
  void* sr = nullptr;
  CHILD_CHECK(post_recv(s.plugin, s.recv_comms[0], 1, d, cap, tag, m, &rr) == 0, "irecv");
  CHILD_CHECK(post_send(s.plugin, s.send_comms[0], sb.data(), n, 11, smh, &sr) == 0, "isend");
  std::vector<void*> reqs = {rr, sr};
  std::vector<int> got;
  CHILD_CHECK(wait_all(s.plugin, reqs, &got) == 0, "transfer after the closes");
  CHILD_CHECK(static_cast<size_t>(got[0]) == n && verify(rb.data(), n, 1 - s.rank, msg) == SIZE_MAX,
              "content after the closes");
  CHILD_CHECK(s.plugin.dereg_mr(s.send_comms[0], smh) == ncclSuccess, "deregMr");
  CHILD_CHECK(s.plugin.dereg_mr(s.recv_comms[0], rmh) == ncclSuccess, "deregMr");
  return 0;
}

int close_body(Side& s) {
  const Order orders[] = {Order::kSenderFirst, Order::kReceiverFirst, Order::kTogether,
                          Order::kReceiverFirst};
  int round = 0;
  for (Order o : orders) {
    if (close_round(s, o, round) != 0) return 1;
    // Both sides progress the endpoint for a while: a late write would land now.
    if (checked_traffic(s, round) != 0) return 1;
    CHILD_CHECK(s.oob.barrier(kTimeoutMs), "barrier");
    ++round;
  }
  return 0;
}

// ---- Peer failure -------------------------------------------------------------------------------

enum class Fault {
  kKillWhileReceiving,  // rank 0 has a receive posted from rank 1; rank 1 is killed
  kKillWhileSending,    // rank 0 has a large send to rank 1 pending; rank 1 is killed
  kStopLong,            // rank 1 stopped for longer than the bound, rank 0 receiving
  kStopShort,           // rank 1 stopped for half the bound, then it sends: no failure
  kIdle,                // rank 1 calls nothing for twice the bound, then it sends: no failure
};

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::kKillWhileReceiving: return "kill -9 of the sender";
    case Fault::kKillWhileSending: return "kill -9 of the receiver";
    case Fault::kStopLong: return "SIGSTOP longer than the bound";
    case Fault::kStopShort: return "SIGSTOP shorter than the bound";
    case Fault::kIdle: return "idle peer (not calling the plugin)";
  }
  return "?";
}

constexpr size_t kFaultSize = 4u << 20;  // above every eager/inject limit: the send needs the peer

int fault_body(Side& s, Fault f) {
  std::vector<unsigned char> buf(kFaultSize, 0);
  if (s.rank == 1) {
    const int pid = getpid();
    CHILD_CHECK(s.oob.send(&pid, sizeof(pid), kTimeoutMs), "oob");
    if (f == Fault::kKillWhileReceiving || f == Fault::kKillWhileSending || f == Fault::kStopLong) {
      // Wait to be killed, calling nothing (the keeper thread answers probes until then).
      std::this_thread::sleep_for(std::chrono::seconds(60));
      return 1;
    }
    // Stopped, or idle, until rank 0 says go; then one message to it.
    CHILD_CHECK(oob_wait(s, 'G'), "oob go");
    fill(buf.data(), kFaultSize, 1, 77);
    void* mh = nullptr;
    CHILD_CHECK(
        s.plugin.reg_mr(s.send_comms[0], buf.data(), kFaultSize, NCCL_PTR_HOST, &mh) == ncclSuccess,
        "regMr");
    void* r = nullptr;
    CHILD_CHECK(post_send(s.plugin, s.send_comms[0], buf.data(), kFaultSize, 5, mh, &r) == 0,
                "isend");
    CHILD_CHECK(wait_request(s.plugin, r, nullptr) == 0, "send after the pause");
    CHILD_CHECK(s.plugin.dereg_mr(s.send_comms[0], mh) == ncclSuccess, "deregMr");
    CHILD_CHECK(oob_wait(s, 'D'), "oob done");
    return 0;
  }
  int victim = 0;
  CHILD_CHECK(s.oob.recv(&victim, sizeof(victim), kTimeoutMs) && victim > 0, "oob pid");
  void* mh = nullptr;
  const bool sending = f == Fault::kKillWhileSending;
  void* comm = sending ? s.send_comms[0] : s.recv_comms[0];
  CHILD_CHECK(s.plugin.reg_mr(comm, buf.data(), kFaultSize, NCCL_PTR_HOST, &mh) == ncclSuccess,
              "regMr");
  void* req = nullptr;
  if (!sending) {
    void* d[1] = {buf.data()};
    size_t cap[1] = {kFaultSize};
    int tag[1] = {5};
    void* m[1] = {mh};
    CHILD_CHECK(post_recv(s.plugin, comm, 1, d, cap, tag, m, &req) == 0, "irecv");
  }
  // Let the connection settle (an RDMA receive's CTS reaches the peer) before the fault.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  if (f == Fault::kKillWhileReceiving || f == Fault::kKillWhileSending) kill(victim, SIGKILL);
  if (f == Fault::kStopLong || f == Fault::kStopShort) kill(victim, SIGSTOP);
  bool resumed = false;
  bool go_sent = false;
  ncclResult_t res = ncclSuccess;
  int done = 0;
  int size = -1;
  while (!done && res == ncclSuccess) {
    const double t = since(t0);
    if (f == Fault::kStopShort && !resumed && t > kPeerTimeoutS / 2.0) {
      kill(victim, SIGCONT);
      resumed = true;
    }
    const double go_at = f == Fault::kIdle ? 2.0 * kPeerTimeoutS : kPeerTimeoutS / 2.0 + 0.1;
    if ((f == Fault::kStopShort || f == Fault::kIdle) && !go_sent && t > go_at) {
      CHILD_CHECK(oob_byte(s, 'G'), "oob go");
      go_sent = true;
    }
    if (req == nullptr) {
      // An RDMA isend waits for the receiver's clear-to-send: NCCL retries the same call.
      fill(buf.data(), 64, 0, 1);
      res = s.plugin.isend(comm, buf.data(), kFaultSize, 5, mh, &req);
      if (res != ncclSuccess) break;
      if (req == nullptr) {
        CHILD_CHECK(t < 20, "isend still answers NULL after %.1f s", t);
        continue;
      }
    }
    res = s.plugin.test(req, &done, &size);
    CHILD_CHECK(since(t0) < 20, "%s: the request still pends after 20 s", fault_name(f));
  }
  const double took = since(t0);
  fprintf(stderr, "[%s] %s after %.2f s (NCCL_FABRIC_PEER_TIMEOUT=%d)\n", fault_name(f),
          res != ncclSuccess ? "failed" : "completed", took, kPeerTimeoutS);
  if (f == Fault::kStopShort || f == Fault::kIdle) {
    CHILD_CHECK(res == ncclSuccess && done, "%s: a live peer was declared dead (%d after %.2f s)",
                fault_name(f), static_cast<int>(res), took);
    CHILD_CHECK(static_cast<size_t>(size) == kFaultSize &&
                    verify(buf.data(), kFaultSize, 1, 77) == SIZE_MAX,
                "content after the pause");
    CHILD_CHECK(oob_byte(s, 'D'), "oob done");
  } else {
    // A peer that stopped answering probes is a timeout where NCCL knows the code (2.30+, net
    // ABI v12), a remote error before; a connection the provider saw break is a remote error.
    const bool v12 = s.plugin.version() >= 12;
    const ncclResult_t timeout = v12 ? static_cast<ncclResult_t>(8) : ncclRemoteError;
    if (f == Fault::kStopLong)
      CHILD_CHECK(res == timeout, "%s: the pending request ended with %d, not %d", fault_name(f),
                  static_cast<int>(res), static_cast<int>(timeout));
    else
      CHILD_CHECK(res == ncclRemoteError || res == timeout,
                  "%s: the pending request ended with %d, not ncclRemoteError or %d", fault_name(f),
                  static_cast<int>(res), static_cast<int>(timeout));
    // The bound: the timeout, one probe interval and a keeper tick, with slack for a loaded CI.
    CHILD_CHECK(took < kPeerTimeoutS + 2.0, "%s: detected after %.2f s", fault_name(f), took);
    // Later calls fail at once, and the comms close promptly.
    void* r2 = nullptr;
    CHILD_CHECK(s.plugin.isend(s.send_comms[0], buf.data(), 10, 1, nullptr, &r2) == res,
                "isend after the failure");
    if (f == Fault::kStopLong) kill(victim, SIGKILL);
  }
  CHILD_CHECK(s.plugin.dereg_mr(comm, mh) == ncclSuccess, "deregMr");
  const auto tc = Clock::now();
  for (void* c : s.send_comms) CHILD_CHECK(s.plugin.close_send(c) == ncclSuccess, "closeSend");
  for (void* c : s.recv_comms) CHILD_CHECK(s.plugin.close_recv(c) == ncclSuccess, "closeRecv");
  s.send_comms.clear();
  s.recv_comms.clear();
  CHILD_CHECK(since(tc) < kPeerTimeoutS, "closing the comms took %.2f s", since(tc));
  return 0;
}

// NF_PEERS_ONLY="<provider>/<protocol>" runs one combination (debugging).
bool selected(const std::string& provider, const char* protocol) {
  const char* only = getenv("NF_PEERS_ONLY");
  return only == nullptr || provider + "/" + protocol == only;
}

// ---- Teardown of many comms to a live peer that takes none of their sends -----------------------

// Issue 34: every close waited up to half of NCCL_FABRIC_PEER_TIMEOUT for its sends, so tearing
// down N such comms took N times that (100 comms at the default timeout: 8 minutes). Rank 1 opens
// kTeardownComms comms to rank 0, which is alive (its keeper answers probes) but posts no receive,
// posts a 1 MiB send on each (no receive takes it: it stays in the provider), then deregisters and
// closes them all, as NCCL's abort does. The whole teardown must take about one bound, not N.
constexpr int kTeardownComms = 12;

int teardown_body(Side& s) {
  std::vector<void*> sc(kTeardownComms), rc(kTeardownComms);
  for (int i = 0; i < kTeardownComms; ++i)
    if (connect_more(s, &sc[static_cast<size_t>(i)], &rc[static_cast<size_t>(i)]) != 0) return 1;
  const size_t n = 1u << 20;
  Mapped buf(n);
  CHILD_CHECK(buf.p != MAP_FAILED, "mmap");
  if (s.rank == 1) {
    std::vector<void*> mh(kTeardownComms);
    for (int i = 0; i < kTeardownComms; ++i) {
      const size_t k = static_cast<size_t>(i);
      CHILD_CHECK(s.plugin.reg_mr(sc[k], buf.p, n, NCCL_PTR_HOST, &mh[k]) == ncclSuccess, "regMr");
      void* r = nullptr;
      CHILD_CHECK(post_send(s.plugin, sc[k], buf.p, n, 5, mh[k], &r) == 0, "isend %d", i);
    }
    const auto t = Clock::now();
    for (int i = 0; i < kTeardownComms; ++i) {
      const size_t k = static_cast<size_t>(i);
      CHILD_CHECK(s.plugin.dereg_mr(sc[k], mh[k]) == ncclSuccess, "deregMr");
      CHILD_CHECK(s.plugin.close_send(sc[k]) == ncclSuccess, "closeSend");
    }
    const double took = since(t);
    buf.unmap();
    const double bound = kPeerTimeoutS / 2.0;
    fprintf(stderr, "[rank 1] %d closes with a send each that no receive takes: %.2f s\n",
            kTeardownComms, took);
    CHILD_CHECK(took < 2 * bound + 1.0,
                "%d closes took %.2f s: each waited on its own (the bound is %.1f s for all)",
                kTeardownComms, took, bound);
    CHILD_CHECK(oob_byte(s, 'T'), "oob");
  } else {
    CHILD_CHECK(oob_wait(s, 'T'), "oob");
  }
  for (int i = 0; i < kTeardownComms; ++i) {
    const size_t k = static_cast<size_t>(i);
    if (s.rank == 0) CHILD_CHECK(s.plugin.close_send(sc[k]) == ncclSuccess, "closeSend");
    CHILD_CHECK(s.plugin.close_recv(rc[k]) == ncclSuccess, "closeRecv");
  }
  return 0;
}

bool mock_selected() {
  const char* no = getenv("NF_PEERS_NO_MOCK");
  return no == nullptr || std::string(no) != "1";
}

// The real providers, and the mock between processes over its UDP wire (NF_PEERS_NO_MOCK=1: not
// the mock; CI's libfabric 2.1.0 stage, which runs it in the sanitizer stage instead).
const std::vector<std::string>& pair_providers() {
  static const std::vector<std::string> p = [] {
    std::vector<std::string> v = real_providers();
    if (mock_selected()) v.push_back("mockefa");
    return v;
  }();
  return p;
}

PairOptions peer_options(const std::string& provider, const char* protocol,
                         int timeout_s = kPeerTimeoutS) {
  PairOptions opt;
  opt.provider = provider;
  opt.env = {{"NCCL_FABRIC_PROTOCOL", protocol},
             {"NCCL_FABRIC_PEER_TIMEOUT",
              getenv("NF_PEERS_TO") ? getenv("NF_PEERS_TO") : std::to_string(timeout_s)}};
  if (provider == "mockefa") {
    opt.env.push_back({"FI_PROVIDER", "mockefa"});
    opt.env.push_back({"MOCKEFA_NET", "udp"});
  }
  return opt;
}

// Each fault on its own pair of processes: rank 0's body judges (rank 1 may be killed).
void check_faults(const std::string& prov, const char* proto, std::initializer_list<Fault> faults) {
  for (Fault f : faults) {
    INFO(prov << " " << proto << ": " << fault_name(f));
    PairOptions opt = peer_options(prov, proto);
    opt.rank1_may_die = true;
    std::string log;
    CHECK(run_pair(
        opt, [f](Side& s) { return fault_body(s, f); }, &log));
    if (!log.empty()) WARN(log);
  }
}

}  // namespace

TEST_CASE("close is final: nothing touches a buffer after close returns; reconnecting works",
          "[peers][close]") {
  for (const std::string& prov : pair_providers()) {
    for (const char* proto : kProtocols) {
      if (!selected(prov, proto)) continue;
      INFO(prov << " " << proto);
      std::string log;
      CHECK(run_pair(peer_options(prov, proto, kCloseTimeoutS), close_body, &log));
      if (!log.empty()) WARN(log);
    }
  }
}

TEST_CASE("many closes to a live peer that takes nothing wait one bound in all, not one each",
          "[peers][close]") {
  // SENDRECV: its sends stay in the provider until a receive takes them (an RDMA send without a
  // clear-to-send posts nothing).
  for (const std::string& prov : pair_providers()) {
    if (!selected(prov, "sendrecv")) continue;
    INFO(prov);
    std::string log;
    CHECK(run_pair(peer_options(prov, "sendrecv"), teardown_body, &log));
    if (!log.empty()) WARN(log);
  }
}

TEST_CASE("a dead peer fails every pending request within NCCL_FABRIC_PEER_TIMEOUT",
          "[peers][failure]") {
  for (const std::string& prov : pair_providers()) {
    for (const char* proto : kProtocols) {
      if (!selected(prov, proto)) continue;
      check_faults(prov, proto, {Fault::kKillWhileReceiving, Fault::kKillWhileSending});
    }
  }
}

TEST_CASE("a stopped peer fails within the bound; a briefly stopped or idle one does not",
          "[peers][failure]") {
  for (const char* prov : {"tcp;ofi_rxm", "mockefa"}) {
    if (std::string(prov) == "mockefa" && !mock_selected()) continue;
    for (const char* proto : kProtocols) {
      if (!selected(prov, proto)) continue;
      check_faults(prov, proto, {Fault::kStopLong, Fault::kStopShort, Fault::kIdle});
    }
  }
}

TEST_CASE("a stopped peer is ncclTimeout where NCCL knows it (v12), ncclRemoteError before (v11)",
          "[peers][failure]") {
  // fault_body checks the code against the ABI version the pair loaded.
  for (int abi : {11, 12}) {
    if (!selected("tcp;ofi_rxm", "sendrecv")) continue;
    INFO("net ABI v" << abi);
    PairOptions opt = peer_options("tcp;ofi_rxm", "sendrecv");
    opt.abi_version = abi;
    opt.rank1_may_die = true;
    std::string log;
    CHECK(run_pair(
        opt, [](Side& s) { return fault_body(s, Fault::kStopLong); }, &log));
    if (!log.empty()) WARN(log);
  }
}
