// NCCL's threads, concurrently: a "progress thread" drives a comm's data path while a "service
// thread" registers and deregisters memory on the same comms, connects new comms on the same
// context and reads properties. CI runs this under ThreadSanitizer.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "harness.h"

using namespace nft;

namespace {

int threads_body(nfc::NetPlugin& p) {
  void* sc = nullptr;
  void* rc = nullptr;
  std::string err;
  CHILD_CHECK(nfc::connect_pair(p, 0, &sc, &rc, kTimeoutMs, &err), "%s", err.c_str());
  std::atomic<bool> stop{false};
  std::atomic<int> service_errors{0};

  std::thread service([&] {
    std::vector<unsigned char> scratch(1 << 16);
    int rounds = 0;
    while (!stop.load() || rounds < 3) {
      void* mh = nullptr;
      if (p.reg_mr(rounds % 2 ? sc : rc, scratch.data(), scratch.size(), NCCL_PTR_HOST, &mh) !=
              ncclSuccess ||
          p.dereg_mr(rounds % 2 ? sc : rc, mh) != ncclSuccess)
        ++service_errors;
      nfc::NetProps props;
      if (p.properties(0, &props) != ncclSuccess) ++service_errors;
      if (rounds % 4 == 0) {  // a new connection on the same context while data flows
        void* s2 = nullptr;
        void* r2 = nullptr;
        std::string e2;
        if (!nfc::connect_pair(p, 0, &s2, &r2, kTimeoutMs, &e2)) ++service_errors;
        if (s2) p.close_send(s2);
        if (r2) p.close_recv(r2);
      }
      ++rounds;
    }
  });

  // The progress thread: a window of transfers, verified.
  const int kWindow = 16;
  const size_t kSize = 30000;
  std::vector<unsigned char> sbuf(kWindow * kSize), rbuf(kWindow * kSize);
  void* smh = nullptr;
  void* rmh = nullptr;
  int rc_ = 0;
  if (p.reg_mr(sc, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh) != ncclSuccess ||
      p.reg_mr(rc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh) != ncclSuccess)
    rc_ = 1;
  for (int round = 0; round < 20 && rc_ == 0; ++round) {
    std::vector<void*> reqs;
    for (int w = 0; w < kWindow && rc_ == 0; ++w) {
      void* d[1] = {rbuf.data() + w * kSize};
      size_t c[1] = {kSize};
      int t[1] = {1};
      void* m[1] = {rmh};
      void* r = nullptr;
      if (post_recv(p, rc, 1, d, c, t, m, &r) != 0) rc_ = 2;
      reqs.push_back(r);
    }
    for (int w = 0; w < kWindow && rc_ == 0; ++w) {
      fill(sbuf.data() + w * kSize, kSize, 0, round * kWindow + w);
      void* r = nullptr;
      if (post_send(p, sc, sbuf.data() + w * kSize, kSize, 1, smh, &r) != 0) rc_ = 3;
      reqs.push_back(r);
    }
    if (rc_ == 0) {
      int wr = wait_all(p, reqs, nullptr);
      if (wr != 0) rc_ = 100 + wr;
    }
    for (int w = 0; w < kWindow && rc_ == 0; ++w)
      if (verify(rbuf.data() + w * kSize, kSize, 0, round * kWindow + w) != SIZE_MAX) rc_ = 5;
  }
  stop = true;
  service.join();
  CHILD_CHECK(rc_ == 0, "the data path failed while the service thread worked (step %d)", rc_);
  CHILD_CHECK(service_errors.load() == 0, "%d service-thread calls failed", service_errors.load());
  CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess, "deregMr");
  CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
  return 0;
}

}  // namespace

TEST_CASE("the data path runs while another thread registers, connects and queries",
          "[plugin][threads]") {
  PairOptions tcp;
  tcp.provider = "tcp;ofi_rxm";
  for (const PairOptions& opt : {tcp, mock_options()}) {
    std::string log;
    INFO("provider " << opt.provider);
    CHECK(run_single(opt, threads_body, &log));
  }
}
