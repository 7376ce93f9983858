// SENDRECV through the C ABI, two processes over loopback, on every real provider here.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "harness.h"

using namespace nft;

namespace {

const size_t kSizes[] = {0,
                         1,
                         7,
                         8,
                         63,
                         64,
                         65,
                         4095,
                         4096,
                         4097,
                         65535,
                         65536,
                         65537,
                         1 << 20,
                         (1 << 20) + 3,
                         4 << 20,
                         (16 << 20) - 1,
                         16 << 20};
constexpr size_t kSlack = 64;  // receive buffers are larger than the message
constexpr unsigned char kCanary = 0xA5;

// Rank 0 sends every size to rank 1, which checks each byte, the reported size, and that nothing
// past the message was written. Then the roles swap.
int sizes_body(Side& s) {
  nfc::NetPlugin& p = s.plugin;
  std::vector<unsigned char> buf((16 << 20) + kSlack);
  void* mh_send = nullptr;
  void* mh_recv = nullptr;
  CHILD_CHECK(
      p.reg_mr(s.send_comms[0], buf.data(), buf.size(), NCCL_PTR_HOST, &mh_send) == ncclSuccess,
      "regMr send");
  CHILD_CHECK(
      p.reg_mr(s.recv_comms[0], buf.data(), buf.size(), NCCL_PTR_HOST, &mh_recv) == ncclSuccess,
      "regMr recv");
  for (int round = 0; round < 2; ++round) {
    const bool sender = (s.rank == round);
    int msg = 0;
    for (size_t size : kSizes) {
      void* req = nullptr;
      if (sender) {
        fill(buf.data(), size, s.rank, msg);
        CHILD_CHECK(post_send(p, s.send_comms[0], buf.data(), size, s.rank, mh_send, &req) == 0,
                    "isend %zu", size);
        int sent = -1;
        CHILD_CHECK(wait_request(p, req, &sent) == 0, "send of %zu did not complete", size);
      } else {
        memset(buf.data(), kCanary, size + kSlack);
        void* data[1] = {buf.data()};
        size_t cap[1] = {size + kSlack};
        int tag[1] = {1 - s.rank};
        void* mhs[1] = {mh_recv};
        CHILD_CHECK(post_recv(p, s.recv_comms[0], 1, data, cap, tag, mhs, &req) == 0, "irecv %zu",
                    size);
        int got[64] = {0};
        CHILD_CHECK(wait_request(p, req, got) == 0, "receive of %zu did not complete", size);
        CHILD_CHECK(static_cast<size_t>(got[0]) == size, "size %zu reported as %d", size, got[0]);
        size_t bad = verify(buf.data(), size, 1 - s.rank, msg);
        CHILD_CHECK(bad == SIZE_MAX, "message of %zu bytes wrong at byte %zu", size, bad);
        for (size_t i = size; i < size + kSlack; ++i)
          CHILD_CHECK(buf[i] == kCanary, "byte %zu past a %zu-byte message was written", i, size);
      }
      // Keep the two processes in step so one buffer serves both directions.
      CHILD_CHECK(s.oob.barrier(kTimeoutMs), "barrier");
      ++msg;
    }
  }
  CHILD_CHECK(p.dereg_mr(s.send_comms[0], mh_send) == ncclSuccess, "deregMr");
  CHILD_CHECK(p.dereg_mr(s.recv_comms[0], mh_recv) == ncclSuccess, "deregMr");
  return 0;
}

// Grouped receives: one irecv of n buffers with distinct tags; the sends come in another order
// and each must land in the buffer of its tag, with its own size.
int grouped_body(Side& s) {
  nfc::NetPlugin& p = s.plugin;
  const int n = s.max_recvs;
  CHILD_CHECK(n >= 1 && n <= 8, "maxRecvs %d", n);
  const size_t kMax = 70000;
  std::vector<std::vector<unsigned char>> bufs(n, std::vector<unsigned char>(kMax));
  std::vector<void*> mhs(n, nullptr);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) {
      void* comm = s.rank == 0 ? s.send_comms[0] : s.recv_comms[0];
      CHILD_CHECK(p.reg_mr(comm, bufs[i].data(), kMax, NCCL_PTR_HOST, &mhs[i]) == ncclSuccess,
                  "regMr");
    }
    auto size_of = [&](int i) { return static_cast<size_t>(i * 9001 + round * 17 + 1); };
    if (s.rank == 0) {
      std::vector<void*> reqs;
      for (int i = n - 1; i >= 0; --i) {  // reverse tag order
        fill(bufs[i].data(), size_of(i), 0, round * 10 + i);
        void* req = nullptr;
        CHILD_CHECK(
            post_send(p, s.send_comms[0], bufs[i].data(), size_of(i), i + 100, mhs[i], &req) == 0,
            "isend");
        reqs.push_back(req);
      }
      for (void* r : reqs) CHILD_CHECK(wait_request(p, r, nullptr) == 0, "grouped send");
    } else {
      void* data[8];
      size_t caps[8];
      int tags[8];
      for (int i = 0; i < n; ++i) {
        data[i] = bufs[i].data();
        caps[i] = kMax;
        tags[i] = i + 100;
      }
      void* req = nullptr;
      CHILD_CHECK(post_recv(p, s.recv_comms[0], n, data, caps, tags, mhs.data(), &req) == 0,
                  "grouped irecv");
      int got[64] = {0};
      CHILD_CHECK(wait_request(p, req, got) == 0, "grouped receive");
      for (int i = 0; i < n; ++i) {
        CHILD_CHECK(static_cast<size_t>(got[i]) == size_of(i), "buffer %d: size %d, expected %zu",
                    i, got[i], size_of(i));
        CHILD_CHECK(verify(bufs[i].data(), got[i], 0, round * 10 + i) == SIZE_MAX,
                    "buffer %d content", i);
      }
    }
    CHILD_CHECK(s.oob.barrier(kTimeoutMs), "barrier");
    for (int i = 0; i < n; ++i) {
      void* comm = s.rank == 0 ? s.send_comms[0] : s.recv_comms[0];
      CHILD_CHECK(p.dereg_mr(comm, mhs[i]) == ncclSuccess, "deregMr");
    }
  }
  return 0;
}

// NCCL_NET_MAX_REQUESTS receives and sends in flight at once on every comm, several comms, both
// directions at the same time, with messages matched in posting order.
int window_body(Side& s) {
  nfc::NetPlugin& p = s.plugin;
  const int kWindow = 32;
  const size_t kSize = 65536 + 5;
  const int comms = static_cast<int>(s.send_comms.size());
  const size_t total = static_cast<size_t>(comms) * kWindow * kSize;
  std::vector<unsigned char> sbuf(total), rbuf(total);
  std::vector<void*> smh(comms), rmh(comms);
  for (int c = 0; c < comms; ++c) {
    CHILD_CHECK(
        p.reg_mr(s.send_comms[c], sbuf.data(), total, NCCL_PTR_HOST, &smh[c]) == ncclSuccess,
        "regMr");
    CHILD_CHECK(
        p.reg_mr(s.recv_comms[c], rbuf.data(), total, NCCL_PTR_HOST, &rmh[c]) == ncclSuccess,
        "regMr");
  }
  auto at = [&](std::vector<unsigned char>& b, int k) {
    return b.data() + static_cast<size_t>(k) * kSize;
  };
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> rreq(comms * kWindow), sreq(comms * kWindow);
    for (int c = 0; c < comms; ++c) {
      for (int w = 0; w < kWindow; ++w) {
        const int k = c * kWindow + w;
        void* data[1] = {at(rbuf, k)};
        size_t cap[1] = {kSize};
        int tag[1] = {7};
        void* mhs[1] = {rmh[c]};
        CHILD_CHECK(post_recv(p, s.recv_comms[c], 1, data, cap, tag, mhs, &rreq[k]) == 0,
                    "irecv %d", k);
      }
    }
    for (int c = 0; c < comms; ++c) {
      for (int w = 0; w < kWindow; ++w) {
        const int k = c * kWindow + w;
        // Sizes differ per message so a receive matched out of order shows.
        fill(at(sbuf, k), kSize - w, s.rank, round * 1000 + k);
        CHILD_CHECK(post_send(p, s.send_comms[c], at(sbuf, k), kSize - w, 7, smh[c], &sreq[k]) == 0,
                    "isend %d", k);
      }
    }
    std::vector<void*> all(rreq);
    all.insert(all.end(), sreq.begin(), sreq.end());
    std::vector<int> got;
    CHILD_CHECK(wait_all(p, all, &got) == 0, "round %d did not complete", round);
    for (int k = 0; k < comms * kWindow; ++k) {
      const int w = k % kWindow;
      CHILD_CHECK(static_cast<size_t>(got[k]) == kSize - w,
                  "receive %d: %d bytes, expected %zu (out of order?)", k, got[k], kSize - w);
      CHILD_CHECK(verify(at(rbuf, k), got[k], 1 - s.rank, round * 1000 + k) == SIZE_MAX,
                  "receive %d content", k);
    }
  }
  for (int c = 0; c < comms; ++c) {
    CHILD_CHECK(p.dereg_mr(s.send_comms[c], smh[c]) == ncclSuccess, "deregMr");
    CHILD_CHECK(p.dereg_mr(s.recv_comms[c], rmh[c]) == ncclSuccess, "deregMr");
  }
  return 0;
}

// The handle's listen id (bytes 20..23) and address (from byte 24, addr_len at 6..7).
struct HandleView {
  uint32_t listen_id;
  std::vector<unsigned char> addr;
};
HandleView view(const std::vector<char>& h) {
  HandleView v;
  uint16_t len = 0;
  memcpy(&len, h.data() + 6, sizeof(len));
  memcpy(&v.listen_id, h.data() + 20, sizeof(v.listen_id));
  v.addr.assign(h.data() + 24, h.data() + 24 + (len <= 96 ? len : 96));
  return v;
}

// Two connections to the same peer and open listen comms all live on one endpoint per process
// (every handle names the same address, each with its own comm id), and the tag multiplexing keeps
// their traffic apart: the same NCCL tag on both comms, posted interleaved, each message lands on
// its own comm. Closing a listen comm with its connect receive posted (cancelled) leaves the
// others working.
int shared_body(Side& s) {
  nfc::NetPlugin& p = s.plugin;
  CHILD_CHECK(s.send_comms.size() == 2 && s.recv_comms.size() == 2, "two comms each way");
  std::vector<std::vector<char>> h(2, std::vector<char>(NCCL_NET_HANDLE_MAXSIZE, 0));
  void* listens[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; ++i)
    CHILD_CHECK(p.listen(0, h[i].data(), &listens[i]) == ncclSuccess && listens[i], "listen");
  const HandleView a = view(h[0]), b = view(h[1]);
  CHILD_CHECK(a.addr == b.addr, "two listen comms of one context publish different endpoints");
  CHILD_CHECK(a.listen_id != b.listen_id && a.listen_id != 0 && b.listen_id != 0,
              "listen ids %u and %u", a.listen_id, b.listen_id);
  void* none = nullptr;
  // Polled once: its connect receive is posted on the shared endpoint, no peer ever comes.
  CHILD_CHECK(p.accept(listens[1], &none) == ncclSuccess && none == nullptr, "accept poll");

  const int kPerComm = 24;
  const size_t kSize = 4096 + 3;
  const int kTag = 5;  // the same on both comms
  std::vector<unsigned char> sbuf(2 * kPerComm * kSize), rbuf(2 * kPerComm * kSize);
  void* smh[2];
  void* rmh[2];
  for (int c = 0; c < 2; ++c) {
    CHILD_CHECK(
        p.reg_mr(s.send_comms[c], sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh[c]) == ncclSuccess,
        "regMr");
    CHILD_CHECK(
        p.reg_mr(s.recv_comms[c], rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh[c]) == ncclSuccess,
        "regMr");
  }
  auto at = [&](std::vector<unsigned char>& v, int c, int k) {
    return v.data() + (static_cast<size_t>(c) * kPerComm + static_cast<size_t>(k)) * kSize;
  };
  // Comm c's message k: its own size and content.
  auto size_of = [&](int c, int k) {
    return kSize - static_cast<size_t>(c) - 2 * static_cast<size_t>(k % 7);
  };
  auto msg_of = [&](int round, int c, int k) { return round * 100000 + c * 1000 + k; };
  for (int round = 0; round < 3; ++round) {
    if (round == 2) {
      // Close both extra listen comms (one with a posted receive) between rounds.
      CHILD_CHECK(p.close_listen(listens[0]) == ncclSuccess, "closeListen");
      CHILD_CHECK(p.close_listen(listens[1]) == ncclSuccess, "closeListen with a posted receive");
    }
    std::vector<void*> reqs;
    // Receives interleaved across the two comms, same tag.
    for (int k = 0; k < kPerComm; ++k) {
      for (int c = 0; c < 2; ++c) {
        void* data[1] = {at(rbuf, c, k)};
        size_t cap[1] = {kSize};
        int tag[1] = {kTag};
        void* mhs[1] = {rmh[c]};
        void* req = nullptr;
        CHILD_CHECK(post_recv(p, s.recv_comms[c], 1, data, cap, tag, mhs, &req) == 0, "irecv");
        reqs.push_back(req);
      }
    }
    CHILD_CHECK(s.oob.barrier(kTimeoutMs), "barrier");
    // Sends interleaved the other way round (comm 1 first).
    for (int k = 0; k < kPerComm; ++k) {
      for (int c = 1; c >= 0; --c) {
        fill(at(sbuf, c, k), size_of(c, k), s.rank, msg_of(round, c, k));
        void* req = nullptr;
        CHILD_CHECK(
            post_send(p, s.send_comms[c], at(sbuf, c, k), size_of(c, k), kTag, smh[c], &req) == 0,
            "isend");
        reqs.push_back(req);
      }
    }
    std::vector<int> got;
    CHILD_CHECK(wait_all(p, reqs, &got) == 0, "round %d did not complete", round);
    for (int k = 0; k < kPerComm; ++k) {
      for (int c = 0; c < 2; ++c) {
        const int i = 2 * k + c;
        CHILD_CHECK(static_cast<size_t>(got[i]) == size_of(c, k),
                    "comm %d message %d: %d bytes, expected %zu", c, k, got[i], size_of(c, k));
        CHILD_CHECK(
            verify(at(rbuf, c, k), size_of(c, k), 1 - s.rank, msg_of(round, c, k)) == SIZE_MAX,
            "comm %d message %d carries another comm's data", c, k);
      }
    }
    CHILD_CHECK(s.oob.barrier(kTimeoutMs), "barrier");
  }
  for (int c = 0; c < 2; ++c) {
    CHILD_CHECK(p.dereg_mr(s.send_comms[c], smh[c]) == ncclSuccess, "deregMr");
    CHILD_CHECK(p.dereg_mr(s.recv_comms[c], rmh[c]) == ncclSuccess, "deregMr");
  }
  return 0;
}

}  // namespace

TEST_CASE("every size from 0 B to 16 MiB arrives intact, with its size reported",
          "[plugin][sendrecv]") {
  for (const std::string& prov : real_providers()) {
    PairOptions opt;
    opt.provider = prov;
    std::string log;
    INFO("provider " << prov);
    CHECK(run_pair(opt, sizes_body, &log));
    if (!log.empty()) WARN(log);
  }
}

TEST_CASE("grouped receives put each tag in its own buffer", "[plugin][sendrecv]") {
  for (const std::string& prov : real_providers()) {
    for (const char* max_recvs : {"8", "3", "1"}) {
      PairOptions opt;
      opt.provider = prov;
      opt.env = {{"NCCL_FABRIC_MAX_RECVS", max_recvs}};
      std::string log;
      INFO("provider " << prov << " maxRecvs " << max_recvs);
      CHECK(run_pair(opt, grouped_body, &log));
    }
  }
}

TEST_CASE("32 requests in flight on several comms at once, matched in order",
          "[plugin][sendrecv]") {
  for (const std::string& prov : real_providers()) {
    PairOptions opt;
    opt.provider = prov;
    opt.comms = 3;
    std::string log;
    INFO("provider " << prov);
    CHECK(run_pair(opt, window_body, &log));
  }
}

TEST_CASE("every ABI version from v6 to v12 moves data", "[plugin][abi]") {
  for (int v = 6; v <= 12; ++v) {
    PairOptions opt;
    opt.provider = "tcp;ofi_rxm";
    opt.abi_version = v;
    opt.env = {{"NCCL_FABRIC_INJECT", v % 2 ? "0" : "1"}};  // both send paths
    std::string log;
    INFO("ABI v" << v);
    CHECK(run_pair(opt, window_body, &log));
  }
}

TEST_CASE("comms to one peer and a listen comm share an endpoint and keep their traffic apart",
          "[plugin][sendrecv][shared]") {
  for (const std::string& prov : real_providers()) {
    PairOptions opt;
    opt.provider = prov;
    opt.comms = 2;
    std::string log;
    INFO("provider " << prov);
    CHECK(run_pair(opt, shared_body, &log));
  }
}
