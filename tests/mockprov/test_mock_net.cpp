// The mock's wire between processes (mock_net.h): every message exactly once and intact, in any
// order, over loopback UDP, also when a fifth of the datagrams are dropped and a tenth sent twice;
// a message to a peer that is gone is given up, not kept forever. Two channels of one process
// stand for two processes (the socket does not know the difference).
#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "mock_net.h"
#include "mock_opwire.h"

using mockefa::net::Channel;
using mockefa::net::Options;
using mockefa::net::Peer;

namespace {

constexpr uint32_t kLo = 0x7f000001;

std::vector<uint8_t> message(uint64_t k, size_t len) {
  std::vector<uint8_t> v(len);
  uint64_t x = k * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < len; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

// Sends n messages of random sizes from a to b; both progress until every one is acknowledged
// (bounded by 30 s); checks each arrived once with its bytes.
void exchange(Channel& a, Channel& b, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::map<uint64_t, uint64_t> id_to_k;           // a's message id -> k
  std::map<uint64_t, std::vector<uint8_t>> sent;  // k -> bytes
  std::map<uint64_t, int> got;                    // k -> times delivered
  int acked = 0, lost = 0, bad = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto on_b = [&](const Peer& from, const uint8_t* p, size_t len) {
    CHECK(from == a.self());
    uint64_t k = 0;
    REQUIRE(len >= sizeof(k));
    std::memcpy(&k, p, sizeof(k));
    auto it = sent.find(k);
    if (it == sent.end() || it->second.size() != len || std::memcmp(it->second.data(), p, len) != 0)
      ++bad;
    ++got[k];
  };
  auto on_a_done = [&](uint64_t, bool ok) { ok ? ++acked : ++lost; };
  auto none = [](const Peer&, const uint8_t*, size_t) {};
  auto no_done = [](uint64_t, bool) {};
  for (int k = 0; k < n; ++k) {
    const size_t len = 8 + rng() % (mockefa::net::kMaxPayload - 8);
    std::vector<uint8_t> m = message(static_cast<uint64_t>(k), len);
    const uint64_t kk = static_cast<uint64_t>(k);
    std::memcpy(m.data(), &kk, sizeof(kk));
    sent[kk] = m;
    const uint64_t id = a.send(b.self(), m.data(), m.size());
    REQUIRE(id != 0);
    id_to_k[id] = kk;
    // A window of 64 in flight, as a sender with a bounded queue would keep.
    while (a.in_flight() >= 64 && std::chrono::steady_clock::now() < deadline) {
      b.progress(on_b, no_done);
      a.progress(none, on_a_done);
    }
  }
  while (acked + lost < n && std::chrono::steady_clock::now() < deadline) {
    b.progress(on_b, no_done);
    a.progress(none, on_a_done);
  }
  CHECK(acked == n);
  CHECK(lost == 0);
  CHECK(bad == 0);
  CHECK(got.size() == static_cast<size_t>(n));
  int twice = 0;
  for (const auto& kv : got) twice += kv.second != 1;
  CHECK(twice == 0);
}

}  // namespace

TEST_CASE("mock wire: every message once and intact over loopback UDP", "[mocknet]") {
  Channel a, b;
  REQUIRE(a.open(kLo, 0, Options()) == 0);
  REQUIRE(b.open(kLo, 0, Options()) == 0);
  exchange(a, b, 500, 1);
  CHECK(a.stats().lost == 0);
}

TEST_CASE("mock wire: a fifth of the datagrams dropped and a tenth doubled, both ways",
          "[mocknet]") {
  Options o;
  o.loss = 0.2;
  o.dup = 0.1;
  o.rto_us = 2000;
  Channel a, b;
  o.seed = 7;
  REQUIRE(a.open(kLo, 0, o) == 0);
  o.seed = 8;
  REQUIRE(b.open(kLo, 0, o) == 0);
  exchange(a, b, 500, 2);
  CHECK(a.stats().retransmits > 0);
  CHECK(b.stats().duplicates > 0);
  CHECK(a.stats().injected_drops > 0);
}

TEST_CASE("mock wire: a message to a peer that is gone is given up", "[mocknet]") {
  Options o;
  o.rto_us = 1000;
  o.give_up_us = 200000;
  Channel a, b;
  REQUIRE(a.open(kLo, 0, o) == 0);
  REQUIRE(b.open(kLo, 0, o) == 0);
  const Peer gone = b.self();
  b.close();
  const uint8_t byte = 1;
  const uint64_t id = a.send(gone, &byte, 1);
  REQUIRE(id != 0);
  int lost = 0, acked = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (lost + acked == 0 && std::chrono::steady_clock::now() < deadline) {
    a.progress([](const Peer&, const uint8_t*, size_t) {},
               [&](uint64_t got, bool ok) {
                 CHECK(got == id);
                 ok ? ++acked : ++lost;
               });
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(lost == 1);
  CHECK(acked == 0);
  CHECK(a.in_flight() == 0);
  // Too large, or closed: refused at once.
  std::vector<uint8_t> big(mockefa::net::kMaxPayload + 1);
  CHECK(a.send(gone, big.data(), big.size()) == 0);
}

TEST_CASE(
    "mock wire: a probe (0 bytes) is answered by a live peer, never delivered, and given up "
    "on a gone one",
    "[mocknet]") {
  Options o;
  o.rto_us = 1000;
  o.give_up_us = 200000;
  Channel a, b, c;
  REQUIRE(a.open(kLo, 0, o) == 0);
  REQUIRE(b.open(kLo, 0, o) == 0);
  REQUIRE(c.open(kLo, 0, o) == 0);
  const Peer gone = c.self();
  c.close();
  const uint64_t live = a.send(b.self(), nullptr, 0), dead = a.send(gone, nullptr, 0);
  REQUIRE(live != 0);
  REQUIRE(dead != 0);
  std::map<uint64_t, bool> done;
  int delivered = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (done.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    b.progress([&](const Peer&, const uint8_t*, size_t) { ++delivered; }, [](uint64_t, bool) {});
    a.progress([](const Peer&, const uint8_t*, size_t) {},
               [&](uint64_t id, bool ok) { done[id] = ok; });
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(done.size() == 2);
  CHECK(done[live]);
  CHECK_FALSE(done[dead]);
  CHECK(delivered == 0);
  CHECK(b.stats().probes_answered == 1);
}

// ---- Operations as frames, and their reassembly (mock_opwire.h) ------------------------------

namespace ow = mockefa::opwire;

TEST_CASE("mock opwire: frames round-trip; malformed ones are refused with a reason", "[mocknet]") {
  ow::OpFrame f;
  f.kind = ow::Kind::kWrite;
  f.flags = ow::kHasData;
  f.op_id = 42;
  f.data = 0xabcd;
  f.rma_addr = 0x1000;
  f.rma_key = 7;
  f.total = 100;
  f.offset = 40;
  f.piece = 60;
  std::vector<uint8_t> payload = message(3, 60), frame;
  REQUIRE(ow::encode(f, payload.data(), &frame));
  ow::OpFrame g;
  const uint8_t* p = nullptr;
  std::string why;
  REQUIRE(ow::decode(frame.data(), frame.size(), &g, &p, &why));
  CHECK(g.op_id == 42);
  CHECK(g.kind == ow::Kind::kWrite);
  CHECK(g.data == 0xabcd);
  CHECK(std::memcmp(p, payload.data(), 60) == 0);
  // A piece past the end of its operation cannot even be encoded.
  f.piece = 61;
  CHECK_FALSE(ow::encode(f, message(1, 61).data(), &frame));
  f.piece = 60;
  REQUIRE(ow::encode(f, payload.data(), &frame));
  auto refused = [&](std::vector<uint8_t> bad, const char* expect) {
    ow::OpFrame h;
    const uint8_t* q = nullptr;
    std::string w;
    const bool ok = ow::decode(bad.data(), bad.size(), &h, &q, &w);
    INFO(expect << ": " << w);
    CHECK_FALSE(ok);
    CHECK(w.find(expect) != std::string::npos);
  };
  refused(std::vector<uint8_t>(frame.begin(), frame.begin() + 100), "shorter than its header");
  std::vector<uint8_t> b = frame;
  b[0] ^= 1;
  refused(b, "magic");
  b = frame;
  b[5] = 9;  // kind
  refused(b, "unknown kind");
  b = frame;
  b.pop_back();
  refused(b, "a piece of 60 bytes");
  b = frame;
  ow::OpFrame h;
  std::memcpy(&h, b.data(), sizeof(h));
  h.offset = 50;  // 50 + 60 > 100
  std::memcpy(b.data(), &h, sizeof(h));
  refused(b, "outside its operation");
  h.offset = 0;
  h.total = (uint64_t{1} << 32) + 1;
  std::memcpy(b.data(), &h, sizeof(h));
  refused(b, "an operation of");
  h.total = 100;
  h.kind = ow::Kind::kRead;
  std::memcpy(b.data(), &h, sizeof(h));
  refused(b, "read request with payload");
}

TEST_CASE("mock opwire: pieces in any order, duplicated, come back whole once; bad ones refused",
          "[mocknet]") {
  std::mt19937_64 rng(11);
  ow::Reassembly r(1 << 20);
  for (int round = 0; round < 50; ++round) {
    const uint64_t total = 1 + rng() % 200000;
    const std::vector<uint8_t> bytes = message(static_cast<uint64_t>(round), total);
    const uint32_t step = static_cast<uint32_t>(1 + rng() % 30000);
    std::vector<ow::OpFrame> pieces;
    for (uint64_t off = 0; off < total; off += step) {
      ow::OpFrame f;
      f.kind = ow::Kind::kSend;
      f.op_id = static_cast<uint64_t>(round);
      f.total = total;
      f.offset = off;
      f.piece = static_cast<uint32_t>(std::min<uint64_t>(step, total - off));
      pieces.push_back(f);
      if (rng() % 4 == 0) pieces.push_back(f);  // duplicated on the path
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    int done = 0;
    std::vector<uint8_t> whole;
    for (const ow::OpFrame& f : pieces) {
      const auto a = r.add(9, f, bytes.data() + f.offset, &whole);
      if (a == ow::Reassembly::Add::kDone) {
        ++done;
        CHECK(whole == bytes);
      } else {
        CHECK(a != ow::Reassembly::Add::kRefused);
      }
    }
    // A duplicate after completion starts a new operation of that id: the wire never does this
    // (it delivers each message once), so only the count matters here.
    CHECK(done >= 1);
    r.drop(9);
    CHECK(r.held() == 0);
  }
  // Refusals: another total for the same operation, an overlapping piece, past the limit.
  ow::Reassembly s(1000);
  ow::OpFrame f;
  f.kind = ow::Kind::kWrite;
  f.op_id = 1;
  f.total = 600;
  f.offset = 0;
  f.piece = 300;
  std::vector<uint8_t> w, buf = message(5, 600);
  CHECK(s.add(1, f, buf.data(), &w) == ow::Reassembly::Add::kMore);
  CHECK(s.held() == 600);
  ow::OpFrame g = f;
  g.total = 700;
  g.offset = 300;
  CHECK(s.add(1, g, buf.data(), &w) == ow::Reassembly::Add::kRefused);
  g = f;
  g.offset = 200;  // overlaps [0, 300)
  CHECK(s.add(1, g, buf.data(), &w) == ow::Reassembly::Add::kRefused);
  g = f;
  g.kind = ow::Kind::kSend;
  g.offset = 300;
  CHECK(s.add(1, g, buf.data(), &w) == ow::Reassembly::Add::kRefused);
  ow::OpFrame big = f;
  big.op_id = 2;
  big.total = 500;  // 600 + 500 > 1000
  big.piece = 100;
  CHECK(s.add(1, big, buf.data(), &w) == ow::Reassembly::Add::kRefused);
  g = f;
  g.offset = 300;
  CHECK(s.add(1, g, buf.data() + 300, &w) == ow::Reassembly::Add::kDone);
  CHECK(w == buf);
  CHECK(s.held() == 0);
  CHECK(s.pending() == 0);
}
