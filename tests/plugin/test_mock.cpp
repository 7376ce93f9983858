// The plugin against the mock EFA provider (tests/mockprov): EFA's rules (FI_MR_LOCAL
// descriptors, 4-byte CQ data, the inject limit, no ordering of completions) and its faults.
// The mock lives in one process, so each case runs both ends in one child, in one thread, the
// way NCCL's single-thread GDR check drives connect and accept.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "mockprov/mockefa.h"

using namespace nft;

namespace {

struct Pair {
  nfc::NetPlugin& p;
  void* sc;
  void* rc;
};

// Sizes around EFA's limits (inject 4096, MTU ~8 KiB), each verified byte for byte.
int sizes_workload(Pair& x) {
  const size_t sizes[] = {0, 1, 8, 4095, 4096, 4097, 8192, 65537, 1 << 20, (4 << 20) + 1};
  const size_t cap = (4 << 20) + 128;  // the largest receive below posts size + 64
  std::vector<unsigned char> sbuf(cap), rbuf(cap);
  void* smh = nullptr;
  void* rmh = nullptr;
  CHILD_CHECK(x.p.reg_mr(x.sc, sbuf.data(), cap, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
  CHILD_CHECK(x.p.reg_mr(x.rc, rbuf.data(), cap, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
  int msg = 0;
  for (size_t size : sizes) {
    fill(sbuf.data(), size, 0, msg);
    memset(rbuf.data(), 0, size + 64);
    std::vector<void*> reqs(2);
    void* data[1] = {rbuf.data()};
    size_t c[1] = {size + 64};
    int tag[1] = {3};
    void* mhs[1] = {rmh};
    CHILD_CHECK(post_recv(x.p, x.rc, 1, data, c, tag, mhs, &reqs[0]) == 0, "irecv %zu", size);
    CHILD_CHECK(post_send(x.p, x.sc, sbuf.data(), size, 3, smh, &reqs[1]) == 0, "isend %zu", size);
    std::vector<int> got;
    CHILD_CHECK(wait_all(x.p, reqs, &got) == 0, "transfer of %zu bytes", size);
    CHILD_CHECK(static_cast<size_t>(got[0]) == size, "size %zu reported as %d", size, got[0]);
    CHILD_CHECK(verify(rbuf.data(), size, 0, msg) == SIZE_MAX, "content of %zu bytes", size);
    ++msg;
  }
  CHILD_CHECK(x.p.dereg_mr(x.sc, smh) == ncclSuccess, "deregMr");
  CHILD_CHECK(x.p.dereg_mr(x.rc, rmh) == ncclSuccess, "deregMr");
  return 0;
}

// A grouped receive of 8 plus 32 single receives in flight; sends posted in another tag order.
// With errors_expected, failures must reach test() and everything else must still be right.
int window_workload(Pair& x, bool errors_expected, int* errors_seen) {
  const int kGroup = 8, kWindow = 32;
  const size_t kSize = 20000;
  const int total = kGroup + kWindow;
  std::vector<unsigned char> sbuf(total * kSize), rbuf(total * kSize, 0);
  void* smh = nullptr;
  void* rmh = nullptr;
  CHILD_CHECK(x.p.reg_mr(x.sc, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh) == ncclSuccess,
              "regMr");
  CHILD_CHECK(x.p.reg_mr(x.rc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh) == ncclSuccess,
              "regMr");
  auto at = [&](std::vector<unsigned char>& b, int k) {
    return b.data() + static_cast<size_t>(k) * kSize;
  };
  std::vector<void*> reqs;
  void* data[8];
  size_t caps[8];
  int tags[8];
  void* mhs[8];
  for (int i = 0; i < kGroup; ++i) {
    data[i] = at(rbuf, i);
    caps[i] = kSize;
    tags[i] = 50 + i;
    mhs[i] = rmh;
  }
  void* r = nullptr;
  CHILD_CHECK(post_recv(x.p, x.rc, kGroup, data, caps, tags, mhs, &r) == 0, "grouped irecv");
  reqs.push_back(r);
  for (int w = 0; w < kWindow; ++w) {
    void* d[1] = {at(rbuf, kGroup + w)};
    size_t c[1] = {kSize};
    int t[1] = {7};
    void* m[1] = {rmh};
    CHILD_CHECK(post_recv(x.p, x.rc, 1, d, c, t, m, &r) == 0, "irecv %d", w);
    reqs.push_back(r);
  }
  const size_t nrecv = reqs.size();
  for (int i = kGroup - 1; i >= 0; --i) {
    fill(at(sbuf, i), kSize - i, 0, i);
    CHILD_CHECK(
        post_send(x.p, x.sc, at(sbuf, i), kSize - i, 50 + i, smh, &r) == 0 || errors_expected,
        "isend group %d", i);
    if (r) reqs.push_back(r);
  }
  for (int w = 0; w < kWindow; ++w) {
    fill(at(sbuf, kGroup + w), kSize - w, 0, kGroup + w);
    int rc = post_send(x.p, x.sc, at(sbuf, kGroup + w), kSize - w, 7, smh, &r);
    CHILD_CHECK(rc == 0 || errors_expected, "isend %d", w);
    if (rc == 0) reqs.push_back(r);
  }
  std::vector<int> got;
  std::vector<bool> failed;
  int errors;
  if (errors_expected) {
    // A failed operation fails its connection: every request still pending on it fails too, so
    // everything settles (before issue 16, a send waiting for a failed receive stayed pending).
    std::vector<void*> sends(reqs.begin() + static_cast<long>(nrecv), reqs.end());
    std::vector<int> ssz;
    std::vector<bool> sfail;
    int send_errors = settle(x.p, sends, &ssz, &sfail);
    std::vector<void*> recvs(reqs.begin(), reqs.begin() + static_cast<long>(nrecv));
    int recv_errors = settle(x.p, recvs, &got, &failed);
    CHILD_CHECK(send_errors >= 0 && recv_errors >= 0, "requests still pending after %d s",
                kTimeoutMs / 1000);
    errors = send_errors + recv_errors;
  } else {
    errors = settle(x.p, reqs, &got, &failed);
    CHILD_CHECK(errors >= 0, "requests did not settle in time");
  }
  *errors_seen = errors;
  if (!errors_expected)
    CHILD_CHECK(errors == 0, "%d requests failed with no fault injected", errors);
  // What completed without error is right: for the group, sizes are checked through the content.
  if (!failed[0] && got[0] >= 0) {
    for (int i = 0; i < kGroup; ++i)
      CHILD_CHECK(verify(at(rbuf, i), kSize - i, 0, i) == SIZE_MAX, "group buffer %d content", i);
  }
  int last = -1;  // the message the previous successful receive got
  for (size_t k = 1; k < nrecv; ++k) {
    if (failed[k] || got[k] < 0) continue;  // failed, or never arrived
    const int w = static_cast<int>(k) - 1;
    // Under faults, a failed send loses its message (as on EFA) and a failed receive takes none,
    // so later messages of the tag may match another receive than their own (with a shared
    // endpoint, sends and receives count towards the same MOCKEFA_ERROR_EVERY). What arrives is
    // still a whole message, and messages arrive in sending order.
    const int m = errors_expected ? static_cast<int>(kSize) - got[k] : w;
    CHILD_CHECK(static_cast<size_t>(got[k]) == kSize - m && m > last && m >= 0 && m < kWindow,
                "receive %d: %d bytes", w, got[k]);
    CHILD_CHECK(verify(at(rbuf, kGroup + w), kSize - m, 0, kGroup + m) == SIZE_MAX,
                "receive %d content", w);
    last = m;
  }
  CHILD_CHECK(x.p.dereg_mr(x.sc, smh) == ncclSuccess, "deregMr");
  CHILD_CHECK(x.p.dereg_mr(x.rc, rmh) == ncclSuccess, "deregMr");
  return 0;
}

// Three connections at once, interleaved; a message larger than its receive; receives left
// posted at close. The mock's checker watches all of it.
int more_workload(nfc::NetPlugin& p, mockefa_api& api) {
  const int kComms = 3;
  void* sc[kComms];
  void* rc[kComms];
  std::string err;
  for (int i = 0; i < kComms; ++i)
    CHILD_CHECK(nfc::connect_pair(p, 0, &sc[i], &rc[i], kTimeoutMs, &err), "%s", err.c_str());
  const size_t kSize = 12345;
  std::vector<unsigned char> sbuf(kComms * kSize), rbuf(kComms * kSize + 4096, 0);
  void* smh[kComms];
  void* rmh[kComms];
  for (int i = 0; i < kComms; ++i) {
    CHILD_CHECK(p.reg_mr(sc[i], sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh[i]) == ncclSuccess,
                "regMr");
    CHILD_CHECK(p.reg_mr(rc[i], rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh[i]) == ncclSuccess,
                "regMr");
  }
  for (int round = 0; round < 4; ++round) {
    std::vector<void*> reqs;
    for (int i = 0; i < kComms; ++i) {
      void* d[1] = {rbuf.data() + i * kSize};
      size_t c[1] = {kSize};
      int t[1] = {i};
      void* m[1] = {rmh[i]};
      void* r = nullptr;
      CHILD_CHECK(post_recv(p, rc[i], 1, d, c, t, m, &r) == 0, "irecv");
      reqs.push_back(r);
    }
    for (int i = kComms - 1; i >= 0; --i) {
      fill(sbuf.data() + i * kSize, kSize, i, round);
      void* r = nullptr;
      CHILD_CHECK(post_send(p, sc[i], sbuf.data() + i * kSize, kSize, i, smh[i], &r) == 0, "isend");
      reqs.push_back(r);
    }
    std::vector<int> got;
    CHILD_CHECK(wait_all(p, reqs, &got) == 0, "round %d", round);
    for (int i = 0; i < kComms; ++i)
      CHILD_CHECK(verify(rbuf.data() + i * kSize, kSize, i, round) == SIZE_MAX, "comm %d round %d",
                  i, round);
  }
  // Truncation: 4096 bytes into a 100-byte receive fails at the receiver, nothing past it written.
  memset(rbuf.data(), 0, rbuf.size());
  {
    void* d[1] = {rbuf.data()};
    size_t c[1] = {100};
    int t[1] = {9};
    void* m[1] = {rmh[0]};
    void* rr = nullptr;
    void* sr = nullptr;
    CHILD_CHECK(post_recv(p, rc[0], 1, d, c, t, m, &rr) == 0, "irecv");
    CHILD_CHECK(post_send(p, sc[0], sbuf.data(), 4096, 9, smh[0], &sr) == 0, "isend");
    int r = wait_request(p, rr, nullptr, 10000);
    CHILD_CHECK(r != 0 && r != -1, "truncation gave %d", r);
    for (size_t i = 100; i < rbuf.size(); ++i) CHILD_CHECK(rbuf[i] == 0, "byte %zu written", i);
    wait_request(p, sr, nullptr, 2000);  // the sender may hear of it or not
  }
  // Receives still posted when the comms close.
  for (int i = 0; i < kComms; ++i) {
    void* d[1] = {rbuf.data()};
    size_t c[1] = {64};
    int t[1] = {77};
    void* m[1] = {rmh[i]};
    void* r = nullptr;
    CHILD_CHECK(post_recv(p, rc[i], 1, d, c, t, m, &r) == 0, "irecv");
  }
  for (int i = 0; i < kComms; ++i) {
    CHILD_CHECK(p.dereg_mr(sc[i], smh[i]) == ncclSuccess, "deregMr");
    CHILD_CHECK(p.dereg_mr(rc[i], rmh[i]) == ncclSuccess, "deregMr with a receive posted");
    CHILD_CHECK(p.close_send(sc[i]) == ncclSuccess, "closeSend");
    CHILD_CHECK(p.close_recv(rc[i]) == ncclSuccess, "closeRecv");
  }
  mockefa_counters c;
  api.get_counters(&c);
  char last[512] = "";
  api.last_violation(last, sizeof(last));
  CHILD_CHECK(c.violations_total == 0, "%llu violations; last: %s",
              static_cast<unsigned long long>(c.violations_total), last);
  // The context's shared endpoint stays open until finalize, with its probe sends (liveness.h)
  // and its pool of control receives (core/ctrl.h), one registration each, and one more chunk of
  // the pool's, added while eager messages waited for their receives; every other registration
  // (each comm has three or more) is gone.
  CHILD_CHECK(c.open_eps <= 1 && c.open_mrs <= 3, "left open: %llu endpoints, %llu registrations",
              static_cast<unsigned long long>(c.open_eps),
              static_cast<unsigned long long>(c.open_mrs));
  return 0;
}

enum class Expect { kClean, kErrorsReachCaller, kViolations };

struct Scenario {
  const char* name;
  std::vector<std::pair<std::string, std::string>> env;  // read when endpoints open
  bool faults_after_connect;  // error/unreachable: applied once the comms exist
  uint64_t error_every;
  uint64_t unreachable_after;
  Expect expect;
};

int run_scenario(const Scenario& sc, nfc::NetPlugin& p) {
  mockefa_api api;
  CHILD_CHECK(mockefa_load_api(getenv("NF_MOCKPROV_LIB"), &api) == 0,
              "the mock provider is not loaded from NF_MOCKPROV_LIB=%s", getenv("NF_MOCKPROV_LIB"));
  api.reset_counters();
  Pair x{p, nullptr, nullptr};
  std::string err;
  CHILD_CHECK(nfc::connect_pair(p, 0, &x.sc, &x.rc, kTimeoutMs, &err), "%s", err.c_str());
  if (sc.faults_after_connect) {
    mockefa_faults f;
    api.get_faults(&f);
    f.error_every = sc.error_every;
    f.unreachable_after = sc.unreachable_after;
    // Both comms of this process share the context's one endpoint.
    CHILD_CHECK(api.set_faults_all(&f) >= 1, "faults not applied to the open endpoint");
  }
  int errors = 0;
  if (sc.expect == Expect::kClean) {
    CHILD_CHECK(sizes_workload(x) == 0, "sizes");
    CHILD_CHECK(window_workload(x, false, &errors) == 0, "window");
  } else if (sc.expect == Expect::kErrorsReachCaller) {
    CHILD_CHECK(window_workload(x, true, &errors) == 0, "window under faults");
    CHILD_CHECK(errors > 0, "faults were injected but no request reported an error");
  } else {
    // The plugin was told to break FI_MR_LOCAL: the mock must refuse the sends and count it.
    std::vector<unsigned char> buf(8192);
    void* mh = nullptr;
    CHILD_CHECK(p.reg_mr(x.sc, buf.data(), buf.size(), NCCL_PTR_HOST, &mh) == ncclSuccess, "regMr");
    void* r = nullptr;
    ncclResult_t res = p.isend(x.sc, buf.data(), 8192, 0, mh, &r);
    CHILD_CHECK(res != ncclSuccess, "a send with no descriptor was accepted");
    p.dereg_mr(x.sc, mh);
  }
  mockefa_counters c;
  api.get_counters(&c);
  char last[512] = "";
  api.last_violation(last, sizeof(last));
  if (sc.expect == Expect::kViolations) {
    CHILD_CHECK(c.violations[MOCKEFA_V_NO_DESC] > 0, "the checker saw no missing descriptor");
  } else {
    CHILD_CHECK(c.violations_total == 0, "the plugin broke an EFA rule %llu times; last: %s",
                static_cast<unsigned long long>(c.violations_total), last);
  }
  fprintf(stderr,
          "[%s] ops %llu, completions %llu, error completions %llu, faults %llu, EAGAIN %llu, "
          "errors seen by test() %d, violations %llu\n",
          sc.name, static_cast<unsigned long long>(c.ops_posted),
          static_cast<unsigned long long>(c.completions),
          static_cast<unsigned long long>(c.error_completions),
          static_cast<unsigned long long>(c.faults_total),
          static_cast<unsigned long long>(c.eagain_returned), errors,
          static_cast<unsigned long long>(c.violations_total));
  CHILD_CHECK(p.close_send(x.sc) == ncclSuccess, "closeSend");
  CHILD_CHECK(p.close_recv(x.rc) == ncclSuccess, "closeRecv");
  dlclose(api.handle);
  return 0;
}

void check_scenario(const Scenario& sc) {
  PairOptions opt;
  opt.provider = "mockefa";
  opt.env = sc.env;
  opt.env.push_back({"FI_PROVIDER", "mockefa"});
  std::string log;
  INFO("scenario " << sc.name);
  CHECK(run_single(
      opt, [&](nfc::NetPlugin& p) { return run_scenario(sc, p); }, &log));
  if (!log.empty()) WARN(log);
}

}  // namespace

TEST_CASE("the plugin follows EFA's rules on the mock provider", "[plugin][mock]") {
  REQUIRE(getenv("NF_MOCKPROV_LIB") != nullptr);
  check_scenario({"no fault", {}, false, 0, MOCKEFA_NEVER, Expect::kClean});
}

TEST_CASE("injected EAGAIN, delays and reordering are absorbed with every byte right",
          "[plugin][mock]") {
  const std::vector<Scenario> scenarios = {
      {"EAGAIN every 3rd post",
       {{"MOCKEFA_EAGAIN_EVERY", "3"}},
       false,
       0,
       MOCKEFA_NEVER,
       Expect::kClean},
      {"completions held back",
       {{"MOCKEFA_CQ_DELAY", "3"}},
       false,
       0,
       MOCKEFA_NEVER,
       Expect::kClean},
      {"completions reordered",
       {{"MOCKEFA_CQ_REORDER", "1"}, {"MOCKEFA_SEED", "7"}},
       false,
       0,
       MOCKEFA_NEVER,
       Expect::kClean},
      {"wire delayed and reordered",
       {{"MOCKEFA_WIRE_DELAY", "2"}, {"MOCKEFA_WIRE_REORDER", "1"}},
       false,
       0,
       MOCKEFA_NEVER,
       Expect::kClean},
      {"payload lands in pieces",
       {{"MOCKEFA_LAND_CHUNK", "4096"}, {"MOCKEFA_WIRE_REORDER", "1"}},
       false,
       0,
       MOCKEFA_NEVER,
       Expect::kClean},
      {"all at once",
       {{"MOCKEFA_EAGAIN_EVERY", "5"},
        {"MOCKEFA_CQ_DELAY", "2"},
        {"MOCKEFA_CQ_REORDER", "1"},
        {"MOCKEFA_WIRE_DELAY", "1"},
        {"MOCKEFA_WIRE_REORDER", "1"},
        {"MOCKEFA_LAND_CHUNK", "8192"}},
       false,
       0,
       MOCKEFA_NEVER,
       Expect::kClean},
  };
  for (const Scenario& s : scenarios) check_scenario(s);
}

TEST_CASE("injected errors and an unreachable peer reach test() as errors", "[plugin][mock]") {
  check_scenario({"error every 7th op", {}, true, 7, MOCKEFA_NEVER, Expect::kErrorsReachCaller});
  check_scenario({"peer unreachable", {}, true, 0, 4, Expect::kErrorsReachCaller});
}

TEST_CASE("several comms, truncation and close with receives posted, on the mock",
          "[plugin][mock]") {
  std::string log;
  CHECK(run_single(
      mock_options(),
      [](nfc::NetPlugin& p) {
        mockefa_api api;
        CHILD_CHECK(mockefa_load_api(getenv("NF_MOCKPROV_LIB"), &api) == 0, "mock not loaded");
        api.reset_counters();
        int rc = more_workload(p, api);
        dlclose(api.handle);
        return rc;
      },
      &log));
}

TEST_CASE("every ABI version moves data on the mock", "[plugin][mock][abi]") {
  for (int v = 6; v <= 11; ++v) {
    PairOptions opt = mock_options();
    opt.abi_version = v;
    std::string log;
    INFO("ABI v" << v);
    CHECK(run_single(
        opt,
        [](nfc::NetPlugin& p) {
          mockefa_api api;
          CHILD_CHECK(mockefa_load_api(getenv("NF_MOCKPROV_LIB"), &api) == 0, "mock not loaded");
          Pair x{p, nullptr, nullptr};
          std::string err;
          CHILD_CHECK(nfc::connect_pair(p, 0, &x.sc, &x.rc, kTimeoutMs, &err), "%s", err.c_str());
          int errors = 0;
          CHILD_CHECK(window_workload(x, false, &errors) == 0, "window");
          mockefa_counters c;
          api.get_counters(&c);
          CHILD_CHECK(c.violations_total == 0, "%llu violations",
                      static_cast<unsigned long long>(c.violations_total));
          CHILD_CHECK(p.close_send(x.sc) == ncclSuccess && p.close_recv(x.rc) == ncclSuccess,
                      "close");
          dlclose(api.handle);
          return 0;
        },
        &log));
  }
}

TEST_CASE("the mock's checker catches a plugin that breaks FI_MR_LOCAL", "[plugin][mock]") {
  check_scenario({"descriptors dropped on purpose",
                  {{"NCCL_FABRIC_TEST_DROP_DESC", "1"}},
                  false,
                  0,
                  MOCKEFA_NEVER,
                  Expect::kViolations});
}

TEST_CASE("each mock NIC is its own NCCL device with a unique name, and each carries traffic",
          "[plugin][mock]") {
  PairOptions opt = mock_options();
  opt.env.push_back({"MOCKEFA_NDOMAINS", "4"});
  std::string log;
  CHECK(run_single(
      opt,
      [](nfc::NetPlugin& p) {
        int n = 0;
        CHILD_CHECK(p.devices(&n) == ncclSuccess && n == 4, "%d devices for 4 mock NICs", n);
        std::vector<std::string> names;
        for (int d = 0; d < n; ++d) {
          nfc::NetProps props;
          CHILD_CHECK(p.properties(d, &props) == ncclSuccess, "getProperties(%d)", d);
          for (const std::string& other : names)
            CHILD_CHECK(other != props.name, "device name %s repeats", props.name.c_str());
          names.push_back(props.name);
          CHILD_CHECK(props.speed == 100000, "device %d speed %d Mb/s, the mock says 100 Gb/s", d,
                      props.speed);
          void* sc = nullptr;
          void* rc = nullptr;
          std::string err;
          CHILD_CHECK(nfc::connect_pair(p, d, &sc, &rc, kTimeoutMs, &err), "device %d: %s", d,
                      err.c_str());
          Pair x{p, sc, rc};
          int errors = 0;
          CHILD_CHECK(window_workload(x, false, &errors) == 0, "traffic on device %d", d);
          CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        }
        return 0;
      },
      &log));
}
