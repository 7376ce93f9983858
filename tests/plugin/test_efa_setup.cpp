// The plugin's EFA endpoint set-up, against the mock EFA provider: the API version it asks for,
// the event queue every endpoint gets (EFA abort()s on an operation-less error without one), the
// protocol it picks where RMA writes are emulated, and the LL128 policy where the 128-byte in-order
// option is refused. Each case is one child (the mock lives in one process). Also an shm endpoint
// whose name is already taken in /dev/shm (issue 33).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "harness.h"
#include "mockprov/mockefa.h"

using namespace nft;

namespace {

// Transfers of `size` bytes (received on rp's rc into rbuf, sent from sp's sc), each polled to its
// end, until one fails; at most 40. 1: one failed; 0: none did; -1: a request was still pending
// 20 s after it was posted.
int transfer_until_failure(nfc::NetPlugin& rp, void* rc, void* rbuf, void* rmh, nfc::NetPlugin& sp,
                           void* sc, void* sbuf, void* smh, size_t size) {
  for (int i = 0; i < 40; ++i) {
    std::vector<void*> reqs;
    void* req = nullptr;
    if (post_recv1(rp, rc, rbuf, size, 1, rmh, &req) != 0) return 1;
    reqs.push_back(req);
    if (post_send(sp, sc, sbuf, size, 1, smh, &req) != 0) return 1;
    reqs.push_back(req);
    std::vector<int> sizes;
    std::vector<bool> bad;
    const int n = settle(sp, reqs, &sizes, &bad, 20000);
    if (n != 0) return n > 0 ? 1 : -1;
  }
  return 0;
}

// Sends stderr (where the plugin's log goes in these tests) to a file until text() is called,
// which restores it and returns what was written (and copies it to the real stderr).
class Capture {
 public:
  Capture() {
    char name[] = "/tmp/nf-efa-setup-XXXXXX";
    fd_ = mkstemp(name);
    if (fd_ >= 0) unlink(name);
    saved_ = dup(2);
    if (fd_ >= 0) dup2(fd_, 2);
  }
  std::string text() {
    if (saved_ >= 0) {
      fflush(stderr);
      dup2(saved_, 2);
      close(saved_);
      saved_ = -1;
    }
    std::string out;
    if (fd_ < 0) return out;
    lseek(fd_, 0, SEEK_SET);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd_, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    if (write(2, out.data(), out.size()) < 0) {
    }
    return out;
  }
  ~Capture() {
    text();
    if (fd_ >= 0) close(fd_);
  }

 private:
  int fd_ = -1;
  int saved_ = -1;
};

bool has(const std::string& log, const char* what) { return log.find(what) != std::string::npos; }

// One message each way through a mock pair; returns 0 when it arrived intact.
int one_transfer(nfc::NetPlugin& p, void* sc, void* rc, size_t size) {
  std::vector<unsigned char> sbuf(size), rbuf(size);
  void* smh = nullptr;
  void* rmh = nullptr;
  CHILD_CHECK(p.reg_mr(sc, sbuf.data(), size, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
  CHILD_CHECK(p.reg_mr(rc, rbuf.data(), size, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
  fill(sbuf.data(), size, 0, 1);
  void* data[1] = {rbuf.data()};
  size_t cap[1] = {size};
  int tag[1] = {7};
  void* mhs[1] = {rmh};
  std::vector<void*> reqs(2);
  CHILD_CHECK(post_recv(p, rc, 1, data, cap, tag, mhs, &reqs[0]) == 0, "irecv");
  CHILD_CHECK(post_send(p, sc, sbuf.data(), size, 7, smh, &reqs[1]) == 0, "isend");
  std::vector<int> got;
  CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfer");
  CHILD_CHECK(verify(rbuf.data(), size, 0, 1) == SIZE_MAX, "content");
  CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess, "deregMr");
  return 0;
}

// The cases here are about what auto decides and the mock's default NIC: both are set first (a
// later entry of `env` wins), whatever the suite's wrapper scripts exported.
PairOptions mock_with(std::vector<std::pair<std::string, std::string>> env) {
  PairOptions opt = mock_options();
  opt.env.push_back({"NCCL_FABRIC_PROTOCOL", "auto"});
  opt.env.push_back({"MOCKEFA_RMA", "emulated"});
  for (auto& e : env) opt.env.push_back(e);
  return opt;
}

// The child's stderr from before the plugin's init (whose messages the LL128 policy writes).
Capture* g_capture = nullptr;
PairOptions captured(PairOptions opt) {
  opt.before_init = [] {
    g_capture = new Capture();
    return 0;
  };
  return opt;
}
std::string captured_text() { return g_capture != nullptr ? g_capture->text() : std::string(); }

// An shm endpoint of this process that holds the name its next shm endpoint would get. It lives
// until the process leaves (a global keeps it reachable for LeakSanitizer).
// Shm endpoints of this process that hold the names its next shm endpoints would get. They live
// until the process leaves (globals keep them reachable for LeakSanitizer).
struct ShmSquatters {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  std::vector<fid_ep*> eps;
  std::vector<std::string> names;
};
ShmSquatters* g_squatters = nullptr;

// libfabric's shm (up to 2.2) names an endpoint "fi_shm://<pid>:<uid>:<n>", n counting the
// process's shm endpoints, and makes its region /dev/shm/<pid>:<uid>:<n> at fi_enable. A region of
// that name whose owner is alive fails fi_enable with -FI_EBUSY (prov/util/src/util_shm.c,
// smr_create and smr_retry_map); the owner is "alive" too when the region was left by a killed
// process whose pid this process now has, which is how CI met it. This creates `count` such
// regions: endpoints of ours, renamed (fi_setname) to the names of the `count` shm endpoints this
// process opens next, and enabled. Returns 0, or 1 after printing why.
int squat_next_shm_names(int count) {
  ShmSquatters* s = new ShmSquatters();
  g_squatters = s;
  fi_info* hints = fi_allocinfo();
  CHILD_CHECK(hints != nullptr, "fi_allocinfo");
  hints->fabric_attr->prov_name = strdup("shm");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_TAGGED;
  int rc = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &s->info);
  fi_freeinfo(hints);
  CHILD_CHECK(rc == 0, "fi_getinfo(shm): %d", rc);
  CHILD_CHECK(fi_fabric(s->info->fabric_attr, &s->fabric, nullptr) == 0, "fi_fabric");
  CHILD_CHECK(fi_domain(s->fabric, s->info, &s->domain, nullptr) == 0, "fi_domain");
  fi_av_attr av_attr = {};
  av_attr.type = FI_AV_TABLE;
  CHILD_CHECK(fi_av_open(s->domain, &av_attr, &s->av, nullptr) == 0, "fi_av_open");
  fi_cq_attr cq_attr = {};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  CHILD_CHECK(fi_cq_open(s->domain, &cq_attr, &s->cq, nullptr) == 0, "fi_cq_open");
  // All of ours first: each takes a number, and the process's next endpoints come after them.
  s->eps.assign(count, nullptr);
  for (fid_ep*& ep : s->eps)
    CHILD_CHECK(fi_endpoint(s->domain, s->info, &ep, nullptr) == 0, "fi_endpoint");
  char name[256] = {};
  size_t len = sizeof(name) - 1;
  CHILD_CHECK(fi_getname(&s->eps[0]->fid, name, &len) == 0, "fi_getname");
  const std::string first(name);
  const size_t colon = first.rfind(':');
  CHILD_CHECK(
      first.rfind("fi_shm://", 0) == 0 && colon != std::string::npos && colon + 1 < first.size(),
      "shm endpoint name '%s' is not fi_shm://<pid>:<uid>:<n>", first.c_str());
  const long n = strtol(first.c_str() + colon + 1, nullptr, 10);
  for (int i = 0; i < count; ++i) {
    fid_ep* ep = s->eps[i];
    s->names.push_back(first.substr(0, colon + 1) + std::to_string(n + count + i));
    const std::string& taken = s->names.back();
    CHILD_CHECK(fi_setname(&ep->fid, const_cast<char*>(taken.c_str()), taken.size() + 1) == 0,
                "fi_setname(%s)", taken.c_str());
    CHILD_CHECK(fi_ep_bind(ep, &s->av->fid, 0) == 0, "fi_ep_bind(av)");
    CHILD_CHECK(fi_ep_bind(ep, &s->cq->fid, FI_TRANSMIT | FI_RECV) == 0, "fi_ep_bind(cq)");
    CHILD_CHECK(fi_enable(ep) == 0, "fi_enable(%s)", taken.c_str());
  }
  return 0;
}

// The plugin's WARNs in a child (set_log_sink in before_init), printed as the plugin would, and
// appended to g_warn_file where the parent named one.
std::vector<std::string> g_warns;
std::string g_warn_file;
void keep_warn(bool warn, const char* text) {
  if (!warn) return;
  g_warns.push_back(text);
  fprintf(stderr, "[pid %d] NCCL WARN %s\n", static_cast<int>(getpid()), text);
  if (g_warn_file.empty()) return;
  FILE* f = fopen(g_warn_file.c_str(), "a");
  if (f == nullptr) return;
  fprintf(f, "%s\n", text);
  fclose(f);
}
bool warned(const std::string& a, const std::string& b) {
  for (const std::string& w : g_warns)
    if (w.find(a) != std::string::npos && w.find(b) != std::string::npos) return true;
  return false;
}

// One message each way between the two ranks of a pair; returns 0 when both arrived intact.
int exchange(Side& s, size_t size) {
  nfc::NetPlugin& p = s.plugin;
  void* sc = s.send_comms[0];
  void* rc = s.recv_comms[0];
  std::vector<unsigned char> sbuf(size), rbuf(size);
  void* smh = nullptr;
  void* rmh = nullptr;
  CHILD_CHECK(p.reg_mr(sc, sbuf.data(), size, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
  CHILD_CHECK(p.reg_mr(rc, rbuf.data(), size, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
  fill(sbuf.data(), size, s.rank, 1);
  void* data[1] = {rbuf.data()};
  size_t cap[1] = {size};
  int tag[1] = {7};
  void* mhs[1] = {rmh};
  std::vector<void*> reqs(2);
  CHILD_CHECK(post_recv(p, rc, 1, data, cap, tag, mhs, &reqs[0]) == 0, "irecv");
  CHILD_CHECK(post_send(p, sc, sbuf.data(), size, 7, smh, &reqs[1]) == 0, "isend");
  std::vector<int> got;
  CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfer");
  CHILD_CHECK(verify(rbuf.data(), size, 1 - s.rank, 1) == SIZE_MAX, "content");
  CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess, "deregMr");
  return 0;
}

}  // namespace

TEST_CASE(
    "the plugin asks for the newest API version the headers and the library share, and "
    "logs it",
    "[plugin][efa][api]") {
  const uint32_t lib = fi_version();
  const uint32_t built = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  const uint32_t expect = lib < built ? lib : built;
  INFO("library " << FI_MAJOR(lib) << "." << FI_MINOR(lib) << ", headers " << FI_MAJOR_VERSION
                  << "." << FI_MINOR_VERSION);
  if (FI_MAJOR_VERSION >= 2) CHECK(expect >= FI_VERSION(1, 18));  // what issue 17 demands of 2.x
  std::string log;
  CHECK(run_single(
      mock_options(),
      [&](nfc::NetPlugin& p) {
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        CHILD_CHECK(api.last_api_version != nullptr, "the mock has no last_api_version");
        const uint32_t got = api.last_api_version();
        CHILD_CHECK(got == expect, "fabric opened at API %u.%u, expected %u.%u", FI_MAJOR(got),
                    FI_MINOR(got), FI_MAJOR(expect), FI_MINOR(expect));
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        dlclose(api.handle);
        return 0;
      },
      &log));

  SECTION("NCCL_FABRIC_API_VERSION caps it, and a bad value fails init with a clear error") {
    CHECK(run_single(
        mock_with({{"NCCL_FABRIC_API_VERSION", "1.17"}}),
        [&](nfc::NetPlugin& p) {
          mockefa_api api;
          void* sc = nullptr;
          void* rc = nullptr;
          CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
          CHILD_CHECK(api.last_api_version() == FI_VERSION(1, 17), "not capped at 1.17");
          CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
          dlclose(api.handle);
          return 0;
        },
        &log));
    for (const char* bad : {"1.5", "two", "1.x", "1.18.1"}) {
      INFO(bad);
      PairOptions opt = mock_with({{"NCCL_FABRIC_API_VERSION", bad}});
      CHECK(run_single(
                opt, [&](nfc::NetPlugin&) { return 0; }, &log) == false);
    }
  }
}

TEST_CASE(
    "every endpoint has an event queue: an error that belongs to no operation is reported, the "
    "connection it concerns fails through its operations, and the process goes on",
    "[plugin][efa][eq]") {
  std::string log;
  // The mock raises, on the endpoint's 11th transmit (after the handshake), an EQ error naming that
  // op's peer (as EFA does for a failed handshake); without an EQ it would count a no_eq violation
  // (EFA: abort()).
  PairOptions opt =
      mock_with({{"MOCKEFA_EQ_ERROR_AFTER", "10"}, {"NCCL_FABRIC_PROTOCOL", "sendrecv"}});
  CHECK(run_single(
      opt,
      [&](nfc::NetPlugin& p) {
        Capture cap;
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        const size_t size = 4096;
        std::vector<unsigned char> sbuf(size), rbuf(size);
        void* smh = nullptr;
        void* rmh = nullptr;
        CHILD_CHECK(p.reg_mr(sc, sbuf.data(), size, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
        CHILD_CHECK(p.reg_mr(rc, rbuf.data(), size, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
        // Sends until one fails: each is polled to the end (NULL from isend means "later").
        const int failed =
            transfer_until_failure(p, rc, rbuf.data(), rmh, p, sc, sbuf.data(), smh, size);
        CHILD_CHECK(failed >= 0, "a request still pending 20 s after the EQ error");
        CHILD_CHECK(failed == 1, "no request failed after the EQ error");
        mockefa_counters c;
        api.get_counters(&c);
        CHILD_CHECK(c.faults[MOCKEFA_F_EQ_ERROR] == 1, "the mock raised %llu EQ errors",
                    static_cast<unsigned long long>(c.faults[MOCKEFA_F_EQ_ERROR]));
        CHILD_CHECK(c.violations[MOCKEFA_V_NO_EQ] == 0, "an endpoint had no event queue");
        const std::string text = cap.text();
        CHILD_CHECK(has(text, "Failure posting handshake to peer"), "no WARN naming the EQ error");
        // Deregistering and closing the failed comms is clean and bounded (as NCCL does after an
        // error: its buffers go back, then the comms).
        CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                    "deregMr on failed comms");
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        api.get_counters(&c);
        CHILD_CHECK(c.violations_total == 0, "%llu violations",
                    static_cast<unsigned long long>(c.violations_total));
        dlclose(api.handle);
        return 0;
      },
      &log));
}

TEST_CASE(
    "an EQ error that names no peer (EFA writes none) fails only the connection it concerns: "
    "two peers, one lost, the other's transfers go on (issue 35)",
    "[plugin][efa][eq]") {
  std::string log;
  PairOptions opt = mock_with({{"NCCL_FABRIC_PROTOCOL", "sendrecv"}});
  CHECK(run_single(
      opt,
      [&](nfc::NetPlugin& p) {
        Capture cap;
        mockefa_api api;
        CHILD_CHECK(mockefa_load_api(getenv("NF_MOCKPROV_LIB"), &api) == 0, "mock API");
        // Two peers with endpoints of their own (a context each), opened before the fault.
        nfc::NetPlugin q, r;
        std::string err;
        CHILD_CHECK(q.load(plugin_path(), 0, &err) && q.init() == ncclSuccess, "peer q: %s",
                    err.c_str());
        CHILD_CHECK(r.load(plugin_path(), 0, &err) && r.init() == ncclSuccess, "peer r: %s",
                    err.c_str());
        void* sq = nullptr;
        void* rq = nullptr;
        void* sr = nullptr;
        void* rr = nullptr;
        // q and r listen first (their endpoints open without the fault); then p's endpoint opens
        // with it: its 11th transmit, after both handshakes, raises an EQ error like EFA's for a
        // failed handshake with that transmit's peer, and every op to that peer fails.
        char hq[NCCL_NET_HANDLE_MAXSIZE] = {}, hr[NCCL_NET_HANDLE_MAXSIZE] = {};
        void* lq = nullptr;
        void* lr = nullptr;
        CHILD_CHECK(q.listen(0, hq, &lq) == ncclSuccess && r.listen(0, hr, &lr) == ncclSuccess,
                    "listen");
        mockefa_faults f;
        api.get_faults(&f);
        f.eq_error_after = 10;
        api.set_faults(&f);
        const auto start = std::chrono::steady_clock::now();
        while ((sq == nullptr || rq == nullptr || sr == nullptr || rr == nullptr) &&
               std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
          if (sq == nullptr) CHILD_CHECK(p.connect(0, hq, &sq) == ncclSuccess, "connect q");
          if (sr == nullptr) CHILD_CHECK(p.connect(0, hr, &sr) == ncclSuccess, "connect r");
          if (rq == nullptr) CHILD_CHECK(q.accept(lq, &rq) == ncclSuccess, "accept q");
          if (rr == nullptr) CHILD_CHECK(r.accept(lr, &rr) == ncclSuccess, "accept r");
        }
        api.set_faults(nullptr);
        CHILD_CHECK(sq && rq && sr && rr, "not connected within 20 s");
        q.close_listen(lq);
        r.close_listen(lr);
        const size_t size = 4096;
        std::vector<unsigned char> sbuf(size), qbuf(size), rbuf(size);
        void* smq = nullptr;
        void* smr = nullptr;
        void* qmh = nullptr;
        void* rmh = nullptr;
        CHILD_CHECK(p.reg_mr(sq, sbuf.data(), size, NCCL_PTR_HOST, &smq) == ncclSuccess &&
                        p.reg_mr(sr, sbuf.data(), size, NCCL_PTR_HOST, &smr) == ncclSuccess &&
                        q.reg_mr(rq, qbuf.data(), size, NCCL_PTR_HOST, &qmh) == ncclSuccess &&
                        r.reg_mr(rr, rbuf.data(), size, NCCL_PTR_HOST, &rmh) == ncclSuccess,
                    "regMr");
        // Messages to q only, until one fails: the op that raises the error goes to q.
        const int failed =
            transfer_until_failure(q, rq, qbuf.data(), qmh, p, sq, sbuf.data(), smq, size);
        CHILD_CHECK(failed >= 0, "a request still pending 20 s after the EQ error");
        CHILD_CHECK(failed == 1, "no transfer to the lost peer failed");
        mockefa_counters c;
        api.get_counters(&c);
        CHILD_CHECK(c.faults[MOCKEFA_F_EQ_ERROR] == 1, "the mock raised %llu EQ errors",
                    static_cast<unsigned long long>(c.faults[MOCKEFA_F_EQ_ERROR]));
        // The other peer was not lost: its connection carries messages, every byte checked.
        for (int i = 0; i < 4; ++i) {
          fill(sbuf.data(), size, 0, i);
          std::vector<void*> reqs;
          void* req = nullptr;
          CHILD_CHECK(post_recv1(r, rr, rbuf.data(), size, 1, rmh, &req) == 0,
                      "irecv from the live peer failed");
          reqs.push_back(req);
          CHILD_CHECK(post_send(p, sr, sbuf.data(), size, 1, smr, &req) == 0,
                      "isend to the live peer failed");
          reqs.push_back(req);
          std::vector<int> sizes;
          CHILD_CHECK(wait_all(p, reqs, &sizes) == 0,
                      "a transfer with the live peer failed after the other peer's EQ error");
          CHILD_CHECK(verify(rbuf.data(), size, 0, i) == SIZE_MAX, "content");
        }
        CHILD_CHECK(has(cap.text(), "names no peer"), "no WARN about the EQ error");
        p.dereg_mr(sq, smq);
        p.dereg_mr(sr, smr);
        q.dereg_mr(rq, qmh);
        r.dereg_mr(rr, rmh);
        p.close_send(sq);
        p.close_send(sr);
        q.close_recv(rq);
        r.close_recv(rr);
        q.finalize();  // their contexts (NCCL finalizes each)
        r.finalize();
        dlclose(api.handle);
        return 0;
      },
      &log));
  INFO(log);
}

TEST_CASE(
    "where RMA writes are emulated, auto picks SENDRECV and says why; with device writes, "
    "RDMA",
    "[plugin][efa][rma]") {
  std::string log;
  struct Case {
    const char* rma;
    const char* expect;
  } cases[] = {{"emulated", "protocol SENDRECV"}, {"device", "protocol RDMA"}};
  for (const Case& k : cases) {
    INFO("MOCKEFA_RMA=" << k.rma);
    PairOptions opt = captured(mock_with({{"MOCKEFA_RMA", k.rma}, {"NCCL_DEBUG", "INFO"}}));
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          void* sc = nullptr;
          void* rc = nullptr;
          CHILD_CHECK(mock_pair(p, nullptr, &sc, &rc) == 0, "mock pair");
          CHILD_CHECK(one_transfer(p, sc, rc, 100000) == 0, "transfer");
          CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
          const std::string text = captured_text();
          CHILD_CHECK(has(text, k.expect), "no '%s' in the log", k.expect);
          if (strcmp(k.rma, "emulated") == 0)
            CHILD_CHECK(has(text, "emulates RMA writes (FI_OPT_EFA_EMULATED_WRITE)"),
                        "the INFO line does not say why");
          return 0;
        },
        &log));
  }
}

TEST_CASE(
    "LL128: excluded through NCCL_PROTO where the 128-byte in-order option is refused, "
    "left alone where granted, the user's NCCL_PROTO warned about",
    "[plugin][efa][ll128]") {
  std::string log;
  SECTION("granted (device writes, RDMA protocol): NCCL_PROTO untouched") {
    PairOptions opt = mock_with({{"MOCKEFA_RMA", "device"}, {"NCCL_PROTO", ""}});
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          int n = 0;
          CHILD_CHECK(p.devices(&n) == ncclSuccess, "devices");
          CHILD_CHECK(getenv("NCCL_PROTO") == nullptr, "NCCL_PROTO set to %s",
                      getenv("NCCL_PROTO"));
          return 0;
        },
        &log));
  }
  SECTION("refused by the NIC (MOCKEFA_INORDER128=no): NCCL_PROTO=^LL128 with a WARN") {
    PairOptions opt = captured(
        mock_with({{"MOCKEFA_RMA", "device"}, {"MOCKEFA_INORDER128", "no"}, {"NCCL_PROTO", ""}}));
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          int n = 0;
          CHILD_CHECK(p.devices(&n) == ncclSuccess, "devices");
          const char* v = getenv("NCCL_PROTO");
          CHILD_CHECK(v != nullptr && strcmp(v, "^LL128") == 0, "NCCL_PROTO=%s", v ? v : "(unset)");
          const char* why = getenv("NCCL_FABRIC_INTERNAL_LL128_OFF");
          CHILD_CHECK(why != nullptr && strcmp(why, "set-proto") == 0, "tuner flag %s",
                      why ? why : "-");
          CHILD_CHECK(has(captured_text(), "NCCL_PROTO is set to ^LL128"), "no WARN");
          return 0;
        },
        &log));
  }
  SECTION("SENDRECV on a provider that refuses the send/recv variant: excluded too") {
    PairOptions opt = mock_with({{"MOCKEFA_RMA", "emulated"}, {"NCCL_PROTO", ""}});
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          int n = 0;
          CHILD_CHECK(p.devices(&n) == ncclSuccess, "devices");
          const char* v = getenv("NCCL_PROTO");
          CHILD_CHECK(v != nullptr && strcmp(v, "^LL128") == 0, "NCCL_PROTO=%s", v ? v : "(unset)");
          return 0;
        },
        &log));
  }
  SECTION("the user's NCCL_PROTO allowing LL128 stands, with a WARN naming the risk") {
    PairOptions opt = captured(mock_with(
        {{"MOCKEFA_RMA", "device"}, {"MOCKEFA_INORDER128", "no"}, {"NCCL_PROTO", "LL128,Simple"}}));
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          int n = 0;
          CHILD_CHECK(p.devices(&n) == ncclSuccess, "devices");
          const char* v = getenv("NCCL_PROTO");
          CHILD_CHECK(v != nullptr && strcmp(v, "LL128,Simple") == 0, "NCCL_PROTO changed to %s",
                      v);
          CHILD_CHECK(has(captured_text(), "silently corrupted"), "no WARN about the risk");
          return 0;
        },
        &log));
  }
  SECTION("the user's NCCL_PROTO excluding LL128: no WARN") {
    PairOptions opt = captured(mock_with({{"MOCKEFA_RMA", "device"},
                                          {"MOCKEFA_INORDER128", "no"},
                                          {"NCCL_PROTO", "^ll128"},
                                          {"NCCL_DEBUG", "INFO"}}));
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          int n = 0;
          CHILD_CHECK(p.devices(&n) == ncclSuccess, "devices");
          const std::string text = captured_text();
          CHILD_CHECK(has(text, "LL128: the RDMA protocol needs"),
                      "the policy did not run (no INFO)");
          CHILD_CHECK(!has(text, "silently corrupted"), "a WARN although LL128 is excluded");
          return 0;
        },
        &log));
  }
  SECTION("a provider without EFA's options (tcp;ofi_rxm) is not restricted") {
    PairOptions opt;
    opt.provider = "tcp;ofi_rxm";
    opt.env = {{"NCCL_PROTO", ""}, {"NCCL_FABRIC_PROTOCOL", "auto"}};
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          int n = 0;
          CHILD_CHECK(p.devices(&n) == ncclSuccess, "devices");
          CHILD_CHECK(getenv("NCCL_PROTO") == nullptr, "NCCL_PROTO set to %s",
                      getenv("NCCL_PROTO"));
          return 0;
        },
        &log));
  }
}

namespace {

// One connection between p (this process's first context) and a second context of the plugin
// whose NCCL_FABRIC_PROTOCOL is `other` (a peer configured otherwise: NCCL calls init once per
// communicator, and a context reads the environment when it is made). `p_listens` picks the
// direction. 1: connected; 0: refused (connect failed, nothing accepted); -1: setup failed.
int connect_to_other(nfc::NetPlugin& p, const char* other, bool p_listens) {
  setenv("NCCL_FABRIC_PROTOCOL", other, 1);
  nfc::NetPlugin q;
  std::string err;
  CHILD_CHECK(q.load(plugin_path(), 0, &err), "%s", err.c_str());
  CHILD_CHECK(q.init() == ncclSuccess, "second init");
  nfc::NetPlugin& l = p_listens ? p : q;
  nfc::NetPlugin& c = p_listens ? q : p;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  CHILD_CHECK(l.listen(0, handle, &lc) == ncclSuccess, "listen");
  void* sc = nullptr;
  void* rc = nullptr;
  bool refused = false;
  const auto start = std::chrono::steady_clock::now();
  while ((sc == nullptr || rc == nullptr) && !refused &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    if (sc == nullptr && c.connect(0, handle, &sc) != ncclSuccess) refused = true;
    if (rc == nullptr) CHILD_CHECK(l.accept(lc, &rc) == ncclSuccess, "accept");
  }
  // A refused connect leaves the listener waiting: nothing was accepted.
  for (int k = 0; k < 20 && refused && rc == nullptr; ++k) {
    CHILD_CHECK(l.accept(lc, &rc) == ncclSuccess, "accept");
    usleep(1000);
  }
  const int result = sc != nullptr && rc != nullptr ? 1 : refused && rc == nullptr ? 0 : -1;
  if (sc != nullptr) c.close_send(sc);
  if (rc != nullptr) l.close_recv(rc);
  l.close_listen(lc);
  q.finalize();
  return result;
}

}  // namespace

TEST_CASE(
    "LL128 left on by the RDMA writes' 128-byte ordering: a peer that offers only SENDRECV, "
    "whose sends are not ordered, is refused (issue 35)",
    "[plugin][efa][ll128]") {
  // EFA grants FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES with device writes, and refuses the
  // SENDRECV option (efa 2.4+; the mock too). NCCL_PROTO stays as it was, so LL128 stays on;
  // a connection that fell back to SENDRECV would carry LL128 lines unordered.
  for (bool p_listens : {true, false}) {
    INFO((p_listens ? "this side listens" : "this side connects"));
    std::string log;
    PairOptions opt = captured(mock_with({{"MOCKEFA_RMA", "device"},
                                          {"NCCL_FABRIC_EFA_FABRIC", "efa"},
                                          {"NCCL_PROTO", ""},
                                          {"NCCL_DEBUG", "WARN"}}));
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          int n = 0;
          CHILD_CHECK(p.devices(&n) == ncclSuccess, "devices");
          CHILD_CHECK(getenv("NCCL_PROTO") == nullptr, "NCCL_PROTO set to %s",
                      getenv("NCCL_PROTO"));
          const int r = connect_to_other(p, "sendrecv", p_listens);
          CHILD_CHECK(r == 0, "%s", r == 1 ? "connected over SENDRECV with LL128 on" : "no result");
          if (p_listens)
            CHILD_CHECK(has(captured_text(), "NCCL_PROTO=^LL128"),
                        "the refusal's WARN does not say how to let it in");
          return 0;
        },
        &log));
    INFO(log);
  }
  SECTION("LL128 excluded by the user: the SENDRECV peer connects") {
    std::string log;
    PairOptions opt = mock_with(
        {{"MOCKEFA_RMA", "device"}, {"NCCL_FABRIC_EFA_FABRIC", "efa"}, {"NCCL_PROTO", "^LL128"}});
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          int n = 0;
          CHILD_CHECK(p.devices(&n) == ncclSuccess, "devices");
          CHILD_CHECK(connect_to_other(p, "sendrecv", true) == 1, "refused");
          return 0;
        },
        &log));
    INFO(log);
  }
}

TEST_CASE(
    "write lengths cut to 16 bits (rdma-core without length_hi): found at open; auto falls back "
    "to SENDRECV, a forced RDMA protocol fails with a WARN (issue 35)",
    "[plugin][efa][writelen]") {
  SECTION("auto: every size arrives whole, over SENDRECV, with a WARN") {
    std::string log;
    PairOptions opt = captured(mock_with({{"MOCKEFA_RMA", "device"},
                                          {"NCCL_FABRIC_EFA_FABRIC", "efa"},
                                          {"MOCKEFA_WRITE_LEN_BITS", "16"},
                                          {"NCCL_PROTO", ""}}));
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          Capture cap;
          void* sc = nullptr;
          void* rc = nullptr;
          CHILD_CHECK(mock_pair(p, nullptr, &sc, &rc) == 0, "mock pair");
          const size_t kBuf = 1 << 20;
          std::vector<unsigned char> sbuf(kBuf), rbuf(kBuf);
          void* smh = nullptr;
          void* rmh = nullptr;
          CHILD_CHECK(p.reg_mr(sc, sbuf.data(), kBuf, NCCL_PTR_HOST, &smh) == ncclSuccess &&
                          p.reg_mr(rc, rbuf.data(), kBuf, NCCL_PTR_HOST, &rmh) == ncclSuccess,
                      "regMr");
          int msg = 0;
          for (size_t size : {size_t{65536}, size_t{131072}, size_t{100000}, kBuf}) {
            fill(sbuf.data(), size, 0, msg);
            int got = -1;
            CHILD_CHECK(
                transfer1(p, sc, sbuf.data(), size, smh, rc, rbuf.data(), kBuf, rmh, 1, &got) == 0,
                "transfer of %zu bytes", size);
            CHILD_CHECK(static_cast<size_t>(got) == size, "received %d of %zu bytes", got, size);
            CHILD_CHECK(verify(rbuf.data(), size, 0, msg) == SIZE_MAX, "content");
            ++msg;
          }
          CHILD_CHECK(has(captured_text(), "the RDMA protocol is off"), "no WARN");
          CHILD_CHECK(has(captured_text(), "length_hi"), "the WARN does not say why");
          p.dereg_mr(sc, smh);
          p.dereg_mr(rc, rmh);
          p.close_send(sc);
          p.close_recv(rc);
          return 0;
        },
        &log));
    INFO(log);
  }
  SECTION("NCCL_FABRIC_PROTOCOL=rdma: listen fails with a WARN") {
    std::string log;
    PairOptions opt = mock_with({{"MOCKEFA_RMA", "device"},
                                 {"NCCL_FABRIC_EFA_FABRIC", "efa"},
                                 {"MOCKEFA_WRITE_LEN_BITS", "16"},
                                 {"NCCL_FABRIC_PROTOCOL", "rdma"}});
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          Capture cap;
          char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
          void* lc = nullptr;
          CHILD_CHECK(p.listen(0, handle, &lc) != ncclSuccess, "listen succeeded");
          CHILD_CHECK(has(cap.text(), "cannot use its RMA writes"), "no WARN");
          return 0;
        },
        &log));
    INFO(log);
  }
}

// Not EFA, but the same kind of check: a provider whose own size check is broken. shm cannot fail
// a message larger than its tagged receive (libfabric 1.x hangs, 2.1 crashes in fi_trecv), so the
// oversize case of test_handles.cpp skips shm under SENDRECV; the user gets this WARN instead.
TEST_CASE("SENDRECV on shm WARNs that an oversized message is not caught; auto does not",
          "[plugin][handles]") {
  struct Case {
    const char* protocol;
    bool warn;
  } cases[] = {{"sendrecv", true}, {"auto", false}};
  for (const Case& k : cases) {
    INFO("NCCL_FABRIC_PROTOCOL=" << k.protocol);
    PairOptions opt;
    opt.provider = "shm";
    opt.env = {{"NCCL_FABRIC_PROTOCOL", k.protocol}};
    opt = captured(opt);
    std::string log;
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          int n = 0;
          CHILD_CHECK(p.devices(&n) == ncclSuccess && n > 0, "devices");
          char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
          void* lc = nullptr;
          CHILD_CHECK(p.listen(0, handle, &lc) == ncclSuccess, "listen");
          CHILD_CHECK(p.close_listen(lc) == ncclSuccess, "closeListen");
          const bool warned = has(captured_text(), "a message larger than the receive NCCL posted");
          CHILD_CHECK(warned == k.warn, "WARN %s", warned ? "given" : "missing");
          return 0;
        },
        &log));
  }
}

TEST_CASE(
    "a first-generation EFA device: device RDMA reads only from API 1.18, which the plugin "
    "asks for where the library has it",
    "[plugin][efa][api]") {
  std::string log;
  const uint32_t lib = fi_version();
  const uint32_t built = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  const bool can_118 = (lib < built ? lib : built) >= FI_VERSION(1, 18);
  struct Case {
    const char* api;
    const char* expect;
  } cases[] = {{"1.17", "RMA writes emulated, reads emulated"},
               {"auto", "RMA writes emulated, reads by the device"}};
  for (const Case& k : cases) {
    if (strcmp(k.api, "auto") == 0 && !can_118) {
      WARN(
          "built against or running on libfabric below 1.18: API 1.18 cannot be asked for here "
          "(CI's libfabric 2.1 build runs this part)");
      continue;
    }
    INFO("NCCL_FABRIC_API_VERSION=" << k.api);
    PairOptions opt = captured(mock_with(
        {{"MOCKEFA_DEVICE", "old"}, {"NCCL_FABRIC_API_VERSION", k.api}, {"NCCL_DEBUG", "INFO"}}));
    CHECK(run_single(
        opt,
        [&](nfc::NetPlugin& p) {
          void* sc = nullptr;
          void* rc = nullptr;
          CHILD_CHECK(mock_pair(p, nullptr, &sc, &rc) == 0, "mock pair");
          // Writes are emulated either way: auto picks SENDRECV, and the transfer works.
          CHILD_CHECK(one_transfer(p, sc, rc, 100000) == 0, "transfer");
          CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
          const std::string text = captured_text();
          CHILD_CHECK(has(text, k.expect), "no '%s' in the log", k.expect);
          CHILD_CHECK(has(text, "protocol SENDRECV"), "auto did not pick SENDRECV");
          return 0;
        },
        &log));
  }
}

// Issue 33: CI's listener got the pid of an shm process killed earlier, whose region
// (/dev/shm/<pid>:0:<n>) was still there, and fi_enable failed with -FI_EBUSY. Here each rank
// holds the name of its next shm endpoint itself before the plugin loads: the same refusal, every
// time. The plugin opens another endpoint (another name), WARNs, and the pair connects.
TEST_CASE("an shm endpoint name already in use in /dev/shm: the plugin takes another and WARNs",
          "[plugin][shm]") {
  PairOptions opt;
  opt.provider = "shm";
  opt.before_init = [] {
    nfc::set_log_sink(keep_warn);
    return squat_next_shm_names(1);
  };
  std::string log;
  const bool ok = run_pair(
      opt,
      [&](Side& s) {
        CHILD_CHECK(exchange(s, 4096) == 0, "exchange");
        // libfabric 2.3's shm takes another name itself: the plugin sees no -FI_EBUSY there.
        if (fi_version() < FI_VERSION(2, 3))
          CHILD_CHECK(warned("in use", g_squatters->names[0]), "no WARN that '%s' is in use",
                      g_squatters->names[0].c_str());
        return 0;
      },
      &log);
  INFO(log);
  CHECK(ok);
}

// The plugin's tries are bounded (8, kEnableTries in src/fabric/fabric.cpp): with every one of
// those names taken, init fails with a WARN that says what to remove, and the process goes on.
TEST_CASE("shm endpoint names in use on every try: init fails with a clear WARN, no abort",
          "[plugin][shm]") {
  if (fi_version() >= FI_VERSION(2, 3)) {
    WARN("libfabric 2.3's shm takes another name itself: the plugin sees no -FI_EBUSY");
    return;
  }
  char path[] = "/tmp/nf-shm-busy-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  g_warn_file = path;
  PairOptions opt;
  opt.provider = "shm";
  opt.before_init = [] {
    nfc::set_log_sink(keep_warn);
    return squat_next_shm_names(8);
  };
  std::string log;
  const bool ok = run_single(
      opt, [](nfc::NetPlugin&) { return 0; }, &log);
  g_warn_file.clear();
  std::string warns;
  if (FILE* f = fopen(path, "r")) {
    char line[2048];
    while (fgets(line, sizeof(line), f) != nullptr) warns += line;
    fclose(f);
  }
  unlink(path);
  INFO(warns);
  CHECK_FALSE(ok);
  // Exit 1: the harness's check of init failed; a signal or a timeout reads -1.
  CHECK(log == "provider 'shm': child exit 1");
  CHECK(has(warns, "on 8 endpoints in a row"));
  CHECK(has(warns, "/dev/shm/"));
}
