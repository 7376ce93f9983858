// The RDMA protocol's own behaviour (docs/protocol.md, "RDMA protocol"): striping over rails,
// grouped receives mixing eager and written buffers, and clear-to-send messages that break the
// rules. Everything else the plugin tests check runs on both protocols (Makefile.am runs the
// whole plugin suite a second time with NCCL_FABRIC_PROTOCOL=sendrecv).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "mockprov/mockefa.h"

using namespace nft;

namespace {

PairOptions rdma_mock(int nics, int rails) {
  PairOptions opt = mock_options();
  opt.env.push_back({"NCCL_FABRIC_PROTOCOL", "rdma"});
  opt.env.push_back({"MOCKEFA_NDOMAINS", std::to_string(nics)});
  opt.env.push_back({"NCCL_FABRIC_RAILS", std::to_string(rails)});
  return opt;
}

// Groups of 1..8 buffers with distinct tags and sizes on both sides of the eager limit (8 KiB);
// each group's sends go in another order than its buffers, each smaller than its buffer.
int groups_send(nfc::NetPlugin& p, void* sc, std::vector<unsigned char>& sbuf, void* smh,
                std::vector<void*>* reqs) {
  const size_t kSlot = 300000;
  int msg = 0;
  for (int n = 1; n <= 8; ++n) {
    for (int k = 0; k < n; ++k) {
      const int j = (n == 5) ? n - 1 - k : (k * 5 + 2) % n;  // a permutation of 0..n-1
      const size_t size = (j % 2 == 0) ? 1000 + 37 * static_cast<size_t>(j)
                                       : 100000 + 4099 * static_cast<size_t>(j);
      unsigned char* b = sbuf.data() + static_cast<size_t>(msg) * kSlot;
      fill(b, size, n, j);
      void* r = nullptr;
      CHILD_CHECK(post_send(p, sc, b, size, 200 + 10 * n + j, smh, &r) == 0,
                  "isend group %d buffer %d", n, j);
      reqs->push_back(r);
      ++msg;
    }
  }
  return 0;
}

int groups_recv(nfc::NetPlugin& p, void* rc, std::vector<unsigned char>& rbuf, void* rmh,
                std::vector<void*>* reqs, std::vector<int>* counts) {
  const size_t kSlot = 300000;
  int slot = 0;
  for (int n = 1; n <= 8; ++n) {
    void* data[8];
    size_t caps[8];
    int tags[8];
    void* mhs[8];
    for (int j = 0; j < n; ++j) {
      data[j] = rbuf.data() + static_cast<size_t>(slot + j) * kSlot;
      caps[j] = kSlot - 64;
      tags[j] = 200 + 10 * n + j;
      mhs[j] = rmh;
    }
    void* r = nullptr;
    CHILD_CHECK(post_recv(p, rc, n, data, caps, tags, mhs, &r) == 0, "irecv group of %d", n);
    reqs->push_back(r);
    counts->push_back(n);
    slot += n;
  }
  return 0;
}

int groups_verify(const std::vector<unsigned char>& rbuf, int n, int first_slot, const int* sizes) {
  const size_t kSlot = 300000;
  for (int j = 0; j < n; ++j) {
    const size_t size =
        (j % 2 == 0) ? 1000 + 37 * static_cast<size_t>(j) : 100000 + 4099 * static_cast<size_t>(j);
    CHILD_CHECK(static_cast<size_t>(sizes[j]) == size, "group %d buffer %d: size %d, expected %zu",
                n, j, sizes[j], size);
    const unsigned char* b = rbuf.data() + static_cast<size_t>(first_slot + j) * kSlot;
    CHILD_CHECK(verify(b, size, n, j) == SIZE_MAX, "group %d buffer %d: content", n, j);
    for (size_t k = size; k < kSlot; ++k)
      CHILD_CHECK(b[k] == 0, "group %d buffer %d: byte %zu written past the message", n, j, k);
  }
  return 0;
}

// Waits for the receives one by one (sizes of every buffer) while polling the sends too.
int groups_wait(nfc::NetPlugin& p, std::vector<void*>& rreqs, const std::vector<int>& counts,
                std::vector<void*>& sreqs, const std::vector<unsigned char>& rbuf) {
  int slot = 0;
  for (size_t g = 0; g < rreqs.size(); ++g) {
    int sizes[64] = {0};
    int done = 0;
    for (int spins = 0; !done; ++spins) {
      CHILD_CHECK(p.test(rreqs[g], &done, sizes) == ncclSuccess, "test of group %zu", g);
      for (void*& s : sreqs) {
        if (s == nullptr) continue;
        int sd = 0;
        CHILD_CHECK(p.test(s, &sd, nullptr) == ncclSuccess, "test of a send");
        if (sd) s = nullptr;
      }
      CHILD_CHECK(spins < 50000000, "group %zu never completed", g);
    }
    if (groups_verify(rbuf, counts[g], slot, sizes) != 0) return 1;
    slot += counts[g];
  }
  std::vector<int> unused;
  std::vector<void*> left;
  for (void* s : sreqs)
    if (s) left.push_back(s);
  CHILD_CHECK(wait_all(p, left, &unused) == 0, "sends");
  return 0;
}

int groups_single(nfc::NetPlugin& p) {
  void* sc = nullptr;
  void* rc = nullptr;
  std::string err;
  CHILD_CHECK(nfc::connect_pair(p, 0, &sc, &rc, kTimeoutMs, &err), "connect: %s", err.c_str());
  std::vector<unsigned char> sbuf(36 * 300000), rbuf(36 * 300000, 0);
  void* smh = nullptr;
  void* rmh = nullptr;
  CHILD_CHECK(p.reg_mr(sc, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
  CHILD_CHECK(p.reg_mr(rc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
  std::vector<void*> rreqs, sreqs;
  std::vector<int> counts;
  if (groups_recv(p, rc, rbuf, rmh, &rreqs, &counts) != 0) return 1;
  if (groups_send(p, sc, sbuf, smh, &sreqs) != 0) return 1;
  if (groups_wait(p, rreqs, counts, sreqs, rbuf) != 0) return 1;
  CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess, "deregMr");
  CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
  return 0;
}

}  // namespace

TEST_CASE("RDMA: grouped receives of 1 to 8 buffers, eager and written, each tag in its buffer",
          "[plugin][rdma]") {
  SECTION("mock EFA, completions and wire reordered") {
    PairOptions opt = rdma_mock(1, 1);
    opt.env.push_back({"MOCKEFA_CQ_REORDER", "1"});
    opt.env.push_back({"MOCKEFA_WIRE_REORDER", "1"});
    std::string log;
    CHECK(run_single(opt, groups_single, &log));
    INFO(log);
  }
  SECTION("mock EFA whose write events carry a junk op_context (as shm 1.17 does)") {
    PairOptions opt = rdma_mock(1, 1);
    opt.env.push_back({"MOCKEFA_WRITE_EVENT_CONTEXT", "1"});
    std::string log;
    CHECK(run_single(opt, groups_single, &log));
    INFO(log);
  }
  for (const std::string& prov : real_providers()) {
    SECTION(prov) {
      PairOptions opt;
      opt.provider = prov;
      opt.env.push_back({"NCCL_FABRIC_PROTOCOL", "rdma"});
      std::string log;
      CHECK(run_pair(
          opt,
          [](Side& s) {
            nfc::NetPlugin& p = s.plugin;
            std::vector<unsigned char> buf(36 * 300000, 0);
            void* mh = nullptr;
            void* comm = s.rank == 0 ? s.send_comms[0] : s.recv_comms[0];
            CHILD_CHECK(p.reg_mr(comm, buf.data(), buf.size(), NCCL_PTR_HOST, &mh) == ncclSuccess,
                        "regMr");
            std::vector<void*> reqs;
            std::vector<int> counts;
            if (s.rank == 0) {
              if (groups_send(p, comm, buf, mh, &reqs) != 0) return 1;
              std::vector<int> unused;
              CHILD_CHECK(wait_all(p, reqs, &unused) == 0, "sends");
            } else {
              if (groups_recv(p, comm, buf, mh, &reqs, &counts) != 0) return 1;
              std::vector<void*> none;
              if (groups_wait(p, reqs, counts, none, buf) != 0) return 1;
            }
            CHILD_CHECK(s.oob.barrier(kTimeoutMs), "barrier before deregMr");
            CHILD_CHECK(p.dereg_mr(comm, mh) == ncclSuccess, "deregMr");
            return 0;
          },
          &log));
      INFO(log);
    }
  }
}

TEST_CASE("RDMA: a device of 4 rails stripes large messages over its 4 NICs within 10 %",
          "[plugin][rdma][mock]") {
  std::string log;
  CHECK(run_single(
      rdma_mock(4, 4),
      [](nfc::NetPlugin& p) {
        int n = 0;
        CHILD_CHECK(p.devices(&n) == ncclSuccess && n == 1, "%d devices for 4 NICs as 4 rails", n);
        nfc::NetProps props;
        CHILD_CHECK(p.properties(0, &props) == ncclSuccess, "getProperties");
        CHILD_CHECK(props.speed == 400000, "a 4-rail device says %d Mb/s, expected 4 x 100 Gb/s",
                    props.speed);
        CHILD_CHECK(props.name.find('+') != std::string::npos, "device name %s",
                    props.name.c_str());
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        const size_t kSize = 4 << 20;
        const int kMsgs = 24;
        std::vector<unsigned char> sbuf(kSize * 4), rbuf(kSize * 4);
        void* smh = nullptr;
        void* rmh = nullptr;
        CHILD_CHECK(p.reg_mr(sc, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh) == ncclSuccess,
                    "regMr");
        CHILD_CHECK(p.reg_mr(rc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh) == ncclSuccess,
                    "regMr");
        api.reset_counters();
        for (int m = 0; m < kMsgs; m += 4) {
          std::vector<void*> reqs;
          for (int k = 0; k < 4; ++k) {
            void* data[1] = {rbuf.data() + static_cast<size_t>(k) * kSize};
            size_t cap[1] = {kSize};
            int tag[1] = {5};
            void* mhs[1] = {rmh};
            void* r = nullptr;
            CHILD_CHECK(post_recv(p, rc, 1, data, cap, tag, mhs, &r) == 0, "irecv");
            reqs.push_back(r);
          }
          for (int k = 0; k < 4; ++k) {
            unsigned char* b = sbuf.data() + static_cast<size_t>(k) * kSize;
            fill(b, kSize - 1000 * static_cast<size_t>(k), 0, m + k);
            void* r = nullptr;
            CHILD_CHECK(post_send(p, sc, b, kSize - 1000 * static_cast<size_t>(k), 5, smh, &r) == 0,
                        "isend");
            reqs.push_back(r);
          }
          std::vector<int> got;
          CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfers");
          for (int k = 0; k < 4; ++k) {
            const size_t size = kSize - 1000 * static_cast<size_t>(k);
            CHILD_CHECK(static_cast<size_t>(got[static_cast<size_t>(k)]) == size, "size %d",
                        got[static_cast<size_t>(k)]);
            CHILD_CHECK(
                verify(rbuf.data() + static_cast<size_t>(k) * kSize, size, 0, m + k) == SIZE_MAX,
                "content");
          }
        }
        mockefa_counters c;
        api.get_counters(&c);
        uint64_t total = 0;
        for (int i = 0; i < 4; ++i) total += c.nic_tx_bytes[i];
        CHILD_CHECK(total >= static_cast<uint64_t>(kMsgs) * (kSize - 3000), "only %llu bytes sent",
                    (unsigned long long)total);
        const double mean = static_cast<double>(total) / 4;
        for (int i = 0; i < 4; ++i) {
          const double share = static_cast<double>(c.nic_tx_bytes[i]);
          fprintf(stderr, "NIC %d: %llu bytes in %llu ops\n", i,
                  (unsigned long long)c.nic_tx_bytes[i], (unsigned long long)c.nic_tx_ops[i]);
          CHILD_CHECK(share > 0.9 * mean && share < 1.1 * mean,
                      "NIC %d carried %.0f bytes, mean %.0f", i, share, mean);
        }
        CHILD_CHECK(c.violations_total == 0, "%llu violations",
                    (unsigned long long)c.violations_total);
        CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                    "deregMr");
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        dlclose(api.handle);
        return 0;
      },
      &log));
  INFO(log);
}

TEST_CASE("RDMA: a hostile clear-to-send is refused and nothing lands outside the buffer",
          "[plugin][rdma][mock]") {
  for (const char* fault : {"size", "count", "addr", "key"}) {
    SECTION(fault) {
      PairOptions opt = rdma_mock(1, 1);
      opt.env.push_back({"NCCL_FABRIC_TEST_CTS_FAULT", fault});
      std::string log;
      CHECK(run_single(
          opt,
          [](nfc::NetPlugin& p) {
            void* sc = nullptr;
            void* rc = nullptr;
            std::string err;
            CHILD_CHECK(nfc::connect_pair(p, 0, &sc, &rc, kTimeoutMs, &err), "connect: %s",
                        err.c_str());
            const size_t kCap = 256 << 10;  // above the eager limit: the sender needs the CTS
            std::vector<unsigned char> sbuf(kCap, 0xab), rbuf(kCap * 4, 0);
            void* smh = nullptr;
            void* rmh = nullptr;
            CHILD_CHECK(p.reg_mr(sc, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh) == ncclSuccess,
                        "regMr");
            CHILD_CHECK(p.reg_mr(rc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh) == ncclSuccess,
                        "regMr");
            void* data[1] = {rbuf.data() + kCap};
            size_t cap[1] = {kCap};
            int tag[1] = {1};
            void* mhs[1] = {rmh};
            void* rreq = nullptr;
            CHILD_CHECK(post_recv(p, rc, 1, data, cap, tag, mhs, &rreq) == 0, "irecv");
            // The send fails: at isend (a refused CTS) or at test (the NIC refused the write).
            void* sreq = nullptr;
            int rcode = 0;
            for (int i = 0; i < 2000000 && sreq == nullptr && rcode == 0; ++i) {
              rcode = p.isend(sc, sbuf.data(), kCap, 1, smh, &sreq);
              int d = 0;
              p.test(rreq, &d, nullptr);
            }
            if (rcode == 0) {
              CHILD_CHECK(sreq != nullptr, "isend neither posted nor failed");
              int r = wait_request(p, sreq, nullptr, 20000);
              CHILD_CHECK(r != 0 && r != -1, "the send completed (%d) though its CTS was corrupted",
                          r);
            }
            int done = 0;
            CHILD_CHECK(p.test(rreq, &done, nullptr) == ncclSuccess && done == 0,
                        "the receive completed");
            for (size_t i = 0; i < rbuf.size(); ++i)
              CHILD_CHECK(rbuf[i] == 0, "byte %zu of the receive side was written", i);
            CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                        "deregMr");
            CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess,
                        "close");
            return 0;
          },
          &log));
      INFO(log);
    }
  }
}

TEST_CASE("RDMA: a large message goes as several writes in flight on one rail",
          "[plugin][rdma][mock]") {
  std::string log;
  PairOptions opt = rdma_mock(1, 1);
  opt.env.push_back({"MOCKEFA_WIRE_REORDER", "1"});
  opt.env.push_back({"MOCKEFA_CQ_REORDER", "1"});
  opt.env.push_back({"NCCL_FABRIC_WRITE_CHUNK", "262144"});
  CHECK(run_single(
      opt,
      [](nfc::NetPlugin& p) {
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        const size_t kSize = 16 << 20;
        std::vector<unsigned char> sbuf(kSize), rbuf(kSize);
        void* smh = nullptr;
        void* rmh = nullptr;
        CHILD_CHECK(p.reg_mr(sc, sbuf.data(), kSize, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
        CHILD_CHECK(p.reg_mr(rc, rbuf.data(), kSize, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
        // NCCL_FABRIC_WRITE_CHUNK at 256 KiB: 16 MiB takes 8 writes (the most a message takes);
        // 768 KiB less 5 bytes, 3; 256 KiB, one.
        const size_t sizes[] = {kSize, (768u << 10) - 5, 256u << 10};
        const uint64_t writes[] = {8, 3, 1};
        for (int m = 0; m < 3; ++m) {
          fill(sbuf.data(), sizes[m], 3, m);
          memset(rbuf.data(), 0, kSize);
          void* data[1] = {rbuf.data()};
          size_t cap[1] = {kSize};
          int tag[1] = {9};
          void* mhs[1] = {rmh};
          void* rr = nullptr;
          void* sr = nullptr;
          CHILD_CHECK(post_recv(p, rc, 1, data, cap, tag, mhs, &rr) == 0, "irecv");
          api.reset_counters();
          CHILD_CHECK(post_send(p, sc, sbuf.data(), sizes[m], 9, smh, &sr) == 0, "isend");
          std::vector<void*> reqs = {rr, sr};
          std::vector<int> got;
          CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfer %d", m);
          CHILD_CHECK(static_cast<size_t>(got[0]) == sizes[m], "size %d", got[0]);
          CHILD_CHECK(verify(rbuf.data(), sizes[m], 3, m) == SIZE_MAX, "content of message %d", m);
          CHILD_CHECK(sizes[m] == kSize || rbuf[sizes[m]] == 0, "wrote past the message");
          mockefa_counters c;
          api.get_counters(&c);
          CHILD_CHECK(c.nic_tx_ops[0] == writes[m], "message %d took %llu writes, expected %llu", m,
                      (unsigned long long)c.nic_tx_ops[0], (unsigned long long)writes[m]);
          CHILD_CHECK(c.violations_total == 0, "%llu violations",
                      (unsigned long long)c.violations_total);
        }
        CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                    "deregMr");
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        dlclose(api.handle);
        return 0;
      },
      &log));
  INFO(log);
}

// NCCL's abort path deregisters a send buffer, then closes the comm. A send whose writes could not
// all be posted at once waits on the comm's deferred list; once its posted writes complete, no
// operation counts a use of the registration, and deregMr freed it (issue 34): the rest of the
// writes then went out with a freed handle and a closed descriptor. The mock's transmit queue of
// one operation defers the send; injected EAGAIN on every post keeps it deferred while its first
// write completes; deregMr comes then. The send must still finish with every byte right and no
// call the mock (EFA) refuses. Under ASan the freed handle is a use-after-free.
TEST_CASE("RDMA: deregMr while a send still has writes to post keeps its registration",
          "[plugin][rdma][mock]") {
  std::string log;
  PairOptions opt = rdma_mock(1, 1);
  opt.env.push_back({"NCCL_FABRIC_WRITE_CHUNK", "65536"});
  opt.env.push_back({"MOCKEFA_TX_SIZE", "1"});
  const bool ok = run_single(
      opt,
      [](nfc::NetPlugin& p) {
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        const size_t kSize = 1 << 20;  // 16 writes of 64 KiB
        std::vector<unsigned char> sbuf(kSize), rbuf(kSize);
        void* smh = nullptr;
        void* rmh = nullptr;
        CHILD_CHECK(p.reg_mr(sc, sbuf.data(), kSize, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
        CHILD_CHECK(p.reg_mr(rc, rbuf.data(), kSize, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
        fill(sbuf.data(), kSize, 5, 1);
        void* data[1] = {rbuf.data()};
        size_t cap[1] = {kSize};
        int tag[1] = {3};
        void* mhs[1] = {rmh};
        void* rr = nullptr;
        void* sr = nullptr;
        CHILD_CHECK(post_recv(p, rc, 1, data, cap, tag, mhs, &rr) == 0, "irecv");
        api.reset_counters();
        CHILD_CHECK(post_send(p, sc, sbuf.data(), kSize, 3, smh, &sr) == 0, "isend");
        mockefa_counters k;
        api.get_counters(&k);
        CHILD_CHECK(k.tx_posted < 16, "all %llu writes were posted at once: nothing deferred",
                    (unsigned long long)k.tx_posted);
        mockefa_faults normal, stuck;
        api.get_faults(&normal);
        stuck = normal;
        stuck.eagain_every = 1;  // every post answers -FI_EAGAIN
        api.set_faults_all(&stuck);
        // Progress until the posted writes have completed (their completions are read).
        int done = 0;
        int size = 0;
        for (int i = 0; i < 200; ++i) {
          CHILD_CHECK(p.test(sr, &done, &size) == ncclSuccess && !done, "send ended early");
          usleep(500);
        }
        CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess, "deregMr");
        usleep(20000);  // the keeper progresses the endpoint meanwhile
        api.set_faults_all(&normal);
        std::vector<void*> reqs = {rr, sr};
        std::vector<int> got;
        CHILD_CHECK(wait_all(p, reqs, &got) == 0, "the transfer after deregMr");
        CHILD_CHECK(static_cast<size_t>(got[0]) == kSize, "size %d", got[0]);
        CHILD_CHECK(verify(rbuf.data(), kSize, 5, 1) == SIZE_MAX, "content");
        api.get_counters(&k);
        char last[512] = "";
        api.last_violation(last, sizeof(last));
        CHILD_CHECK(k.violations_total == 0, "%llu violations; last: %s",
                    (unsigned long long)k.violations_total, last);
        CHILD_CHECK(p.dereg_mr(rc, rmh) == ncclSuccess, "deregMr");
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        dlclose(api.handle);
        return 0;
      },
      &log);
  INFO(log);
  CHECK(ok);
}

// A NULL isend posted nothing: the caller may post another message instead (NCCL never does, it
// retries the same call, but a caller that does must get what it posted). Issue 34's outside
// driver did this and judged the result against the message it had abandoned. Here a 1 MiB send
// is answered NULL (no receive posted yet) twice, 150 ms apart (the second call asks the receiver
// for a clear-to-send with an RTS notice), then the caller sends 7 bytes instead: the first
// receive gets the 7 bytes, and the 1 MiB message, sent next, lands in the second receive. The
// plugin says once that the NULL-answered isend was not retried, and not for a message of another
// tag sent between the NULL answer and its retry.
TEST_CASE("RDMA: after a NULL isend, the message posted next is the one delivered",
          "[plugin][rdma][mock]") {
  std::string log;
  PairOptions opt = rdma_mock(1, 1);
  const bool ok = run_single(
      opt,
      [](nfc::NetPlugin& p) {
        nfc::set_log_sink(capture_log);
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        const size_t kBig = 1 << 20, kSlot = 2 << 20;
        std::vector<unsigned char> sbuf(2 * kBig), rbuf(2 * kSlot);
        void* smh = nullptr;
        void* rmh = nullptr;
        CHILD_CHECK(p.reg_mr(sc, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh) == ncclSuccess,
                    "regMr");
        CHILD_CHECK(p.reg_mr(rc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh) == ncclSuccess,
                    "regMr");
        unsigned char* big = sbuf.data();
        unsigned char* small = sbuf.data() + kBig;
        fill(big, kBig, 1, 0);
        fill(small, 7, 1, 1);
        void* sr = nullptr;
        void* other_req = nullptr;
        for (int i = 0; i < 2; ++i) {
          CHILD_CHECK(p.isend(sc, big, kBig, 1, smh, &sr) == ncclSuccess, "isend");
          CHILD_CHECK(sr == nullptr, "a 1 MiB isend before any receive was posted");
          // Between the NULL answer and its retry, a message of another tag (eager): legal,
          // messages pair with receives per tag; not reported.
          if (i == 0)
            CHILD_CHECK(post_send(p, sc, small, 7, 2, smh, &other_req) == 0, "isend of tag 2");
          usleep(150000);
        }
        void* small_req = nullptr;
        CHILD_CHECK(post_send(p, sc, small, 7, 1, smh, &small_req) == 0, "isend of 7 B");
        std::vector<void*> reqs;
        for (int i = 0; i < 2; ++i) {
          void* rr = nullptr;
          CHILD_CHECK(post_recv1(p, rc, rbuf.data() + i * kSlot, kSlot, 1, rmh, &rr) == 0,
                      "irecv %d", i);
          reqs.push_back(rr);
        }
        void* big_req = nullptr;
        CHILD_CHECK(post_send(p, sc, big, kBig, 1, smh, &big_req) == 0, "isend of 1 MiB");
        std::vector<unsigned char> obuf(64);
        void* omh = nullptr;
        CHILD_CHECK(p.reg_mr(rc, obuf.data(), obuf.size(), NCCL_PTR_HOST, &omh) == ncclSuccess,
                    "regMr");
        void* other_rr = nullptr;
        CHILD_CHECK(post_recv1(p, rc, obuf.data(), obuf.size(), 2, omh, &other_rr) == 0,
                    "irecv of tag 2");
        reqs.push_back(other_rr);
        reqs.push_back(small_req);
        reqs.push_back(big_req);
        reqs.push_back(other_req);
        std::vector<int> got;
        CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfers");
        CHILD_CHECK(got[0] == 7, "receive 0 got %d bytes, not the 7 posted first", got[0]);
        CHILD_CHECK(verify(rbuf.data(), 7, 1, 1) == SIZE_MAX, "receive 0's content");
        CHILD_CHECK(static_cast<size_t>(got[1]) == kBig, "receive 1 got %d bytes", got[1]);
        CHILD_CHECK(verify(rbuf.data() + kSlot, kBig, 1, 0) == SIZE_MAX, "receive 1's content");
        CHILD_CHECK(got[2] == 7 && verify(obuf.data(), 7, 1, 1) == SIZE_MAX, "tag 2's receive");
        CHILD_CHECK(p.dereg_mr(rc, omh) == ncclSuccess, "deregMr");
        // The second NULL answer was retried with the same arguments (no report); the 7-byte
        // isend after it was not: said once, with both messages' sizes.
        const std::string l = captured_log();
        size_t reports = 0;
        for (size_t at = l.find("not retried"); at != std::string::npos;
             at = l.find("not retried", at + 1))
          ++reports;
        CHILD_CHECK(reports == 1 && l.find("isend of 7 bytes (tag 1) to ") != std::string::npos &&
                        l.find("follows an isend of 1048576 bytes of the same tag that was "
                               "answered NULL and not retried") != std::string::npos,
                    "%zu reports of the isend not retried in:\n%s", reports, l.c_str());
        CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                    "deregMr");
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        dlclose(api.handle);
        return 0;
      },
      &log);
  INFO(log);
  CHECK(ok);
}

// Compact eager messages (docs/protocol.md) carry the low 16 bits of their per-tag index, which
// the receiver completes from the receives it has posted. 70000 messages of one tag (the index
// wraps past 65535 twice over 16 bits) interleaved with a second tag, of sizes on both sides of
// shm's 4096-byte inline limit and the eager limit, with the receives posted up to 24 messages
// behind the sends (those wait in control buffers), each checked for size and content. On each
// real provider with compact messages granted (the default) and refused.
TEST_CASE("RDMA: compact eager messages keep 70000 messages of two tags in order",
          "[plugin][rdma]") {
  for (const std::string& prov : real_providers()) {
    for (const char* compact : {"1", "0"}) {
      SECTION(prov + ", NCCL_FABRIC_COMPACT_EAGER=" + compact) {
        PairOptions opt;
        opt.provider = prov;
        opt.env.push_back({"NCCL_FABRIC_PROTOCOL", "rdma"});
        opt.env.push_back({"NCCL_FABRIC_COMPACT_EAGER", compact});
        std::string log;
        CHECK(run_pair(
            opt,
            [](Side& s) {
              nfc::NetPlugin& p = s.plugin;
              const int kMsgs = 70000;
              const size_t kSizes[] = {0, 1, 100, 4080, 4096, 4097, 8192, 20000};
              const size_t kSlot = 20480;
              const int kWindow = 24;
              std::vector<unsigned char> buf(static_cast<size_t>(kWindow) * kSlot, 0);
              void* mh = nullptr;
              void* comm = s.rank == 0 ? s.send_comms[0] : s.recv_comms[0];
              CHILD_CHECK(p.reg_mr(comm, buf.data(), buf.size(), NCCL_PTR_HOST, &mh) == ncclSuccess,
                          "regMr");
              std::vector<void*> reqs(kWindow, nullptr);
              int next = 0;  // next message to post
              for (int done = 0; done < kMsgs;) {
                // Post up to the window, then wait for the oldest (as NCCL's proxy does).
                while (next < kMsgs && next - done < kWindow) {
                  unsigned char* b = buf.data() + static_cast<size_t>(next % kWindow) * kSlot;
                  const size_t size = kSizes[(next / 2) % 8];
                  const int tag = 7 + (next % 2);
                  void* r = nullptr;
                  if (s.rank == 0) {
                    fill(b, size, next % 1000, next);
                    CHILD_CHECK(post_send(p, comm, b, size, tag, mh, &r) == 0, "isend %d", next);
                  } else {
                    void* data[1] = {b};
                    size_t caps[1] = {kSlot};
                    int tags[1] = {tag};
                    void* mhs[1] = {mh};
                    CHILD_CHECK(post_recv(p, comm, 1, data, caps, tags, mhs, &r) == 0, "irecv %d",
                                next);
                  }
                  reqs[static_cast<size_t>(next % kWindow)] = r;
                  ++next;
                }
                int sizes[1] = {-1};
                CHILD_CHECK(wait_request(p, reqs[static_cast<size_t>(done % kWindow)], sizes) == 0,
                            "message %d", done);
                if (s.rank == 1) {
                  const size_t size = kSizes[(done / 2) % 8];
                  const unsigned char* b = buf.data() + static_cast<size_t>(done % kWindow) * kSlot;
                  CHILD_CHECK(sizes[0] == static_cast<int>(size), "message %d: %d bytes, not %zu",
                              done, sizes[0], size);
                  CHILD_CHECK(verify(b, size, done % 1000, done) == SIZE_MAX, "message %d: content",
                              done);
                }
                ++done;
              }
              CHILD_CHECK(s.oob.barrier(kTimeoutMs), "barrier before deregMr");
              CHILD_CHECK(p.dereg_mr(comm, mh) == ncclSuccess, "deregMr");
              return 0;
            },
            &log));
        INFO(log);
      }
    }
  }
}
