// The mock's wire between processes (mock_net.h): every message exactly once and intact, in any
// order, over loopback UDP, also when a fifth of the datagrams are dropped and a tenth sent twice;
// a message to a peer that is gone is given up, not kept forever. Two channels of one process
// stand for two processes (the socket does not know the difference).
#include <arpa/inet.h>

#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "mock_net.h"

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
