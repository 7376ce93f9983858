// Tests of the mock EFA provider: fault injection, fi_close with ops in flight, several NICs,
// size limits and endpoint options.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "test_mockprov_util.h"

using namespace mt;

namespace {

constexpr int kOptCudaApiPermitted = 10;
constexpr int kOptMaxMsgSize = 12;
constexpr int kOptEfaEmulatedWrite = -(0xefa << 16) + 2;

// Pair over the default hints with FI_ORDER_SAS (a plugin's usual request).
struct Fixture {
  InfoPtr info;
  std::unique_ptr<Pair> p;
  Fixture() {
    InfoPtr hints = make_hints();
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    info = getinfo(hints.get());
    REQUIRE(info);
    p = std::make_unique<Pair>(info.get());
  }
};

}  // namespace

TEST_CASE("faults: every k-th post gets -FI_EAGAIN until the CQ is read", "[mockprov][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_EAGAIN_EVERY", "3");
  Fixture f;
  Pair& p = *f.p;
  uint64_t v = 0;
  Mr m(p.a.domain, &v, 8);
  CHECK(fi_tsend(p.a.ep, &v, 8, m.desc(), p.a2b, 0, nullptr) == 0);
  CHECK(fi_tsend(p.a.ep, &v, 8, m.desc(), p.a2b, 0, nullptr) == 0);
  CHECK(fi_tsend(p.a.ep, &v, 8, m.desc(), p.a2b, 0, nullptr) == -FI_EAGAIN);
  CHECK(fi_tsend(p.a.ep, &v, 8, m.desc(), p.a2b, 0, nullptr) == -FI_EAGAIN);  // no poll yet
  p.a.progress();
  CHECK(fi_tsend(p.a.ep, &v, 8, m.desc(), p.a2b, 0, nullptr) == 0);
  CHECK(faults(MOCKEFA_F_EAGAIN) == 1);
  CHECK(counters().eagain_returned == 2);
  CHECK(counters().tx_posted == 3);
}

TEST_CASE("faults: error every k-th op, with EFA err/prov_errno and err_data",
          "[mockprov][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_ERROR_EVERY", "2");
  Fixture f;
  Pair& p = *f.p;
  uint64_t v[2] = {1, 2};
  Mr m(p.a.domain, v, sizeof v);
  int c1 = 0, c2 = 0;
  REQUIRE(fi_tsend(p.a.ep, &v[0], 8, m.desc(), p.a2b, 0, &c1) == 0);
  REQUIRE(fi_tsend(p.a.ep, &v[1], 8, m.desc(), p.a2b, 0, &c2) == 0);
  // The failure is asynchronous: it shows at the initiator's next CQ read.
  fi_cq_tagged_entry e[2];
  ssize_t r = fi_cq_read(p.a.tx, e, 2);
  REQUIRE(r == -FI_EAVAIL);
  fi_cq_err_entry err{};
  REQUIRE(fi_cq_readerr(p.a.tx, &err, 0) == 1);
  CHECK(err.op_context == &c2);
  CHECK(err.err == FI_EREMOTEIO);
  CHECK(err.prov_errno == 12);
  REQUIRE(err.err_data);
  std::string text(static_cast<const char*>(err.err_data));
  CHECK(text.find("My EFA addr: fi_addr_efa://") != std::string::npos);
  CHECK(text.find("Peer EFA addr: fi_addr_efa://") != std::string::npos);
  CHECK(std::string(fi_cq_strerror(p.a.tx, err.prov_errno, err.err_data, nullptr, 0)) == text);
  err = fi_cq_err_entry{};
  CHECK(fi_cq_readerr(p.a.tx, &err, 0) == -FI_EAGAIN);
  CHECK(faults(MOCKEFA_F_ERROR) == 1);
  Completion ok;
  REQUIRE(wait_cq(p.a.tx, &ok, {&p.b}));
  CHECK(ok.e.op_context == &c1);
}

TEST_CASE("faults: err_data into a caller buffer is truncated and terminated",
          "[mockprov][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_ERROR_EVERY", "1").set("MOCKEFA_ERROR_PROV_ERRNO", "9");
  Fixture f;
  Pair& p = *f.p;
  REQUIRE(fi_tsend(p.a.ep, nullptr, 0, nullptr, p.a2b, 0, nullptr) == 0);
  CHECK(fi_cq_read(p.a.tx, nullptr, 0) == -FI_EAVAIL);
  char small[16];
  fi_cq_err_entry err{};
  err.err_data = small;
  err.err_data_size = sizeof small;
  REQUIRE(fi_cq_readerr(p.a.tx, &err, 0) == 1);
  CHECK(err.err == FI_ENOTCONN);
  CHECK(err.prov_errno == 9);
  CHECK(err.err_data == small);
  CHECK(err.err_data_size == sizeof small);
  CHECK(std::strlen(small) == sizeof small - 1);
}

TEST_CASE("faults: delayed and reordered completions", "[mockprov][faults]") {
  Fresh fresh;
  SECTION("MOCKEFA_CQ_DELAY holds each completion back for n reads") {
    Env env;
    env.set("MOCKEFA_CQ_DELAY", "3");
    Fixture f;
    Pair& p = *f.p;
    uint64_t v = 5, got = 0;
    Mr ma(p.a.domain, &v, 8), mb(p.b.domain, &got, 8);
    REQUIRE(fi_trecv(p.b.ep, &got, 8, mb.desc(), FI_ADDR_UNSPEC, 0, 0, nullptr) == 0);
    REQUIRE(fi_tsend(p.a.ep, &v, 8, ma.desc(), p.a2b, 0, nullptr) == 0);
    fi_cq_tagged_entry e;
    int reads = 0;
    ssize_t r = -FI_EAGAIN;
    while (r == -FI_EAGAIN && reads < kMaxPolls) {
      r = fi_cq_read(p.b.rx, &e, 1);
      ++reads;
    }
    REQUIRE(r == 1);
    CHECK(reads == 4);  // generated on the first read, hidden for three
    CHECK(got == 5);    // the data was there before the completion said so
    CHECK(faults(MOCKEFA_F_CQ_DELAY) >= 1);
  }
  SECTION("MOCKEFA_CQ_REORDER hands out ready completions shuffled") {
    Env env;
    env.set("MOCKEFA_CQ_REORDER", "1");
    Fixture f;
    Pair& p = *f.p;
    constexpr int kN = 16;
    uint64_t v[kN];
    Mr m(p.a.domain, v, sizeof v);
    for (int i = 0; i < kN; ++i)
      REQUIRE(fi_tinject(p.a.ep, &v[i], 8, p.a2b, static_cast<uint64_t>(i)) == 0);
    uint64_t got[kN];
    Mr mb(p.b.domain, got, sizeof got);
    for (int i = 0; i < kN; ++i)
      REQUIRE(fi_trecv(p.b.ep, &got[i], 8, mb.desc(), FI_ADDR_UNSPEC, static_cast<uint64_t>(i), 0,
                       &got[i]) == 0);
    p.b.progress();  // all complete in one pass; the read below shuffles them
    std::vector<uint64_t> order;
    fi_cq_tagged_entry e[kN];
    for (int i = 0; i < kMaxPolls && order.size() < kN; ++i) {
      ssize_t r = fi_cq_read(p.b.rx, e, kN);
      for (ssize_t j = 0; j < r; ++j) order.push_back(e[j].tag);
    }
    REQUIRE(order.size() == kN);
    CHECK_FALSE(std::is_sorted(order.begin(), order.end()));
    std::sort(order.begin(), order.end());
    for (int i = 0; i < kN; ++i) CHECK(order[i] == static_cast<uint64_t>(i));
    CHECK(faults(MOCKEFA_F_CQ_REORDER) >= 1);
  }
}

TEST_CASE("faults: a peer becomes unreachable after n ops", "[mockprov][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_UNREACHABLE_AFTER", "2");
  Fixture f;
  Pair& p = *f.p;
  uint64_t v = 0;
  Mr m(p.a.domain, &v, 8);
  for (int i = 0; i < 2; ++i) REQUIRE(fi_tsend(p.a.ep, &v, 8, m.desc(), p.a2b, 0, nullptr) == 0);
  Completion c;
  for (int i = 0; i < 2; ++i) {
    REQUIRE(wait_cq(p.a.tx, &c, {&p.b}));
    CHECK_FALSE(c.error);
  }
  int ctx = 0;
  REQUIRE(fi_tsend(p.a.ep, &v, 8, m.desc(), p.a2b, 0, &ctx) ==
          0);  // accepted: the failure comes later
  REQUIRE(wait_cq(p.a.tx, &c, {&p.b}));
  REQUIRE(c.error);
  CHECK(c.err.err == FI_EHOSTUNREACH);
  CHECK(c.err.prov_errno == 15);
  CHECK(c.err.op_context == &ctx);
  CHECK(faults(MOCKEFA_F_UNREACHABLE) == 1);
}

TEST_CASE("faults: sends to an address with no endpoint fail asynchronously",
          "[mockprov][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_UNREACH_POLLS", "5");
  Fixture f;
  Pair& p = *f.p;
  std::vector<uint8_t> ghost = p.b.name;
  ghost[17] ^= 0x55;  // another QPN on the same NIC
  fi_addr_t to_ghost = FI_ADDR_NOTAVAIL;
  REQUIRE(fi_av_insert(p.a.av, ghost.data(), 1, &to_ghost, 0, nullptr) == 1);
  REQUIRE(fi_tsend(p.a.ep, nullptr, 0, nullptr, to_ghost, 0, nullptr) == 0);
  Completion c;
  REQUIRE(wait_cq(p.a.tx, &c));
  REQUIRE(c.error);
  CHECK(c.err.err == FI_EHOSTUNREACH);
}

TEST_CASE("faults: payload lands in pieces, completion order differs from post order",
          "[mockprov][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_LAND_CHUNK", "4096")
      .set("MOCKEFA_WIRE_REORDER", "1")
      .set("MOCKEFA_HANDSHAKE", "none");
  Fixture f;
  Pair& p = *f.p;
  std::vector<uint8_t> src = pattern(64 * 1024, 21), dst(64 * 1024 + 64, 0);
  Mr sm(p.a.domain, src.data(), src.size()), dm(p.b.domain, dst.data(), dst.size());
  const uint64_t base = reinterpret_cast<uint64_t>(dst.data());
  REQUIRE(fi_writedata(p.a.ep, src.data(), src.size(), sm.desc(), 1, p.a2b, base, dm.key(),
                       nullptr) == 0);
  REQUIRE(fi_writedata(p.a.ep, src.data(), 64, sm.desc(), 2, p.a2b, base + src.size(), dm.key(),
                       nullptr) == 0);
  // After one target pass: the small write is complete, the big one only partly landed.
  fi_cq_tagged_entry e;
  REQUIRE(fi_cq_read(p.b.rx, &e, 1) == 1);
  CHECK(e.data == 2);
  size_t landed = 0;
  for (size_t i = 0; i < src.size(); i += 4096)
    landed += std::equal(src.begin() + i, src.begin() + i + 4096, dst.begin() + i);
  CHECK(landed >= 1);
  CHECK(landed < 16);
  Completion big;
  REQUIRE(wait_cq(p.b.rx, &big));
  CHECK(big.e.data == 1);
  CHECK(big.e.len == src.size());
  CHECK(std::equal(src.begin(), src.end(), dst.begin()));
  CHECK(faults(MOCKEFA_F_CHUNKED) >= 1);
  CHECK(faults(MOCKEFA_F_WIRE_REORDER) >= 1);
}

TEST_CASE("faults: wire delay and SAS order under reordering", "[mockprov][faults]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_WIRE_DELAY", "2").set("MOCKEFA_WIRE_REORDER", "1");
  Fixture f;
  Pair& p = *f.p;
  constexpr int kN = 8;
  uint8_t src[kN], dst[kN] = {};
  for (int i = 0; i < kN; ++i) src[i] = static_cast<uint8_t>(i + 1);
  Mr sm(p.a.domain, src, kN), dm(p.b.domain, dst, kN);
  for (int i = 0; i < kN; ++i)
    REQUIRE(fi_trecv(p.b.ep, &dst[i], 1, dm.desc(), FI_ADDR_UNSPEC, 0, 0, nullptr) == 0);
  for (int i = 0; i < kN; ++i)
    REQUIRE(fi_tsend(p.a.ep, &src[i], 1, sm.desc(), p.a2b, 0, nullptr) == 0);
  fi_cq_read(p.b.rx, nullptr, 0);  // two progress passes of the receiver: the delay runs out
  fi_cq_read(p.b.rx, nullptr, 0);
  CHECK(dst[0] == 0);  // but nothing has arrived yet
  int got = 0;
  fi_cq_tagged_entry e;
  for (int i = 0; i < kMaxPolls && got < kN; ++i) got += fi_cq_read(p.b.rx, &e, 1) == 1;
  REQUIRE(got == kN);
  for (int i = 0; i < kN; ++i) CHECK(dst[i] == src[i]);  // FI_ORDER_SAS: matched in send order
  CHECK(faults(MOCKEFA_F_WIRE_DELAY) == kN);
}

TEST_CASE("faults: exported API sets knobs for new and for open endpoints",
          "[mockprov][faults][api]") {
  Fresh fresh;
  mockefa_faults fk{};
  api().get_faults(&fk);
  CHECK(fk.unreachable_after == MOCKEFA_NEVER);
  CHECK(fk.eagain_needs_poll == 1);
  Fixture f;
  Pair& p = *f.p;
  uint64_t v = 0;
  Mr m(p.a.domain, &v, 8);
  fk.eagain_every = 1;
  CHECK(api().set_faults_all(&fk) >= 2);
  CHECK(fi_tsend(p.a.ep, &v, 8, m.desc(), p.a2b, 0, nullptr) == -FI_EAGAIN);
  api().set_faults(nullptr);
  CHECK(api().set_faults_all(nullptr) >= 2);
  p.a.progress();
  CHECK(fi_tsend(p.a.ep, &v, 8, m.desc(), p.a2b, 0, nullptr) == 0);
  fk.eagain_every = 0;
  fk.error_every = 1;
  api().set_faults(&fk);
  Node n(f.info.get());  // opened now: takes the override, not the environment
  fi_addr_t to_b = n.insert(p.b);
  REQUIRE(fi_tsend(n.ep, nullptr, 0, nullptr, to_b, 0, nullptr) == 0);
  Completion c;
  REQUIRE(wait_cq(n.tx, &c));
  CHECK(c.error);
  CHECK(std::string(api().fault_name(MOCKEFA_F_ERROR)) == "error");
  CHECK(std::string(api().violation_name(MOCKEFA_V_CTX_REUSE)) == "ctx_reuse");
  CHECK(api().violation_name(MOCKEFA_V_COUNT) == nullptr);
}

TEST_CASE("close: endpoints close with ops in flight; peers see errors", "[mockprov][close]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_HANDSHAKE", "none").set("MOCKEFA_LAND_CHUNK", "1024");
  Fixture f;
  Pair& p = *f.p;
  std::vector<uint8_t> big = pattern(32 * 1024, 2), dst(32 * 1024), small(64);
  Mr bm(p.a.domain, big.data(), big.size()), sm(p.a.domain, small.data(), small.size());
  Mr dm(p.b.domain, dst.data(), dst.size());
  SECTION("sender closes: its sends, writes and receives vanish; a half-landed receive fails") {
    REQUIRE(fi_trecv(p.b.ep, dst.data(), dst.size(), dm.desc(), FI_ADDR_UNSPEC, 1, 0, nullptr) ==
            0);
    REQUIRE(fi_tsend(p.a.ep, big.data(), big.size(), bm.desc(), p.a2b, 1, nullptr) == 0);
    REQUIRE(fi_tsend(p.a.ep, big.data(), big.size(), bm.desc(), p.a2b, 2, nullptr) == 0);
    REQUIRE(fi_write(p.a.ep, small.data(), 64, sm.desc(), p.a2b,
                     reinterpret_cast<uint64_t>(dst.data()), dm.key(), nullptr) == 0);
    REQUIRE(fi_trecv(p.a.ep, small.data(), 64, sm.desc(), FI_ADDR_UNSPEC, 0, 0, nullptr) == 0);
    p.b.progress();  // first chunk of the matched message lands
    p.a.close_ep();
    Completion c;
    REQUIRE(wait_cq(p.b.rx, &c));
    REQUIRE(c.error);
    CHECK(c.err.err == FI_ECONNABORTED);
    CHECK(stays_quiet(p.b.rx, 5));
  }
  SECTION("receiver closes: the sender's pending ops fail with FI_ENOTCONN") {
    REQUIRE(fi_tsend(p.a.ep, big.data(), big.size(), bm.desc(), p.a2b, 1, nullptr) == 0);
    p.b.progress();  // rendezvous: waits in b's unexpected queue
    REQUIRE(fi_tsend(p.a.ep, small.data(), 64, sm.desc(), p.a2b, 2, nullptr) ==
            0);  // still on the wire
    p.b.close_ep();
    int errors = 0;
    Completion c;
    for (int i = 0; i < 2 && wait_cq(p.a.tx, &c); ++i) {
      REQUIRE(c.error);
      CHECK(c.err.err == FI_ENOTCONN);
      CHECK(c.err.prov_errno == 9);
      ++errors;
    }
    CHECK(errors == 2);
    CHECK(fi_tsend(p.a.ep, small.data(), 64, sm.desc(), p.a2b, 3, nullptr) == 0);
    REQUIRE(wait_cq(p.a.tx, &c));
    CHECK(c.err.err == FI_ENOTCONN);
  }
}

TEST_CASE("domains: MOCKEFA_NDOMAINS gives several NICs that talk to each other",
          "[mockprov][domains]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_NDOMAINS", "4").set("MOCKEFA_HANDSHAKE", "none");
  CHECK(api().num_nics() == 4);
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  std::vector<const fi_info*> all;
  for (const fi_info* i = info.get(); i; i = i->next) all.push_back(i);
  REQUIRE(all.size() == 4);
  const char* names[4] = {"rdmap16s27-rdm", "rdmap32s27-rdm", "rdmap144s27-rdm", "rdmap160s27-rdm"};
  for (int i = 0; i < 4; ++i) {
    CHECK(std::string(all[i]->domain_attr->name) == names[i]);
    mockefa_nic_info nic{};
    REQUIRE(api().get_nic_info(i, &nic) == 0);
    CHECK(std::string(nic.domain_name) == names[i]);
    CHECK(all[i]->nic->bus_attr->attr.pci.bus_id ==
          std::stoul(std::string(nic.pci_bus_id).substr(5, 2), nullptr, 16));
  }
  CHECK(api().get_nic_info(4, nullptr) == -1);
  InfoPtr one_hint = make_hints();
  one_hint->domain_attr->name = strdup("rdmap144s27-rdm");
  InfoPtr one = getinfo(one_hint.get());
  REQUIRE(one);
  CHECK(one->next == nullptr);

  Node n0(all[0]), n3(all[3]);
  CHECK(std::memcmp(n0.name.data(), n3.name.data(), 16) != 0);  // different GIDs
  fi_addr_t to3 = n0.insert(n3);
  uint64_t v = 99, got = 0;
  Mr m0(n0.domain, &v, 8), m3(n3.domain, &got, 8, FI_RECV | FI_REMOTE_WRITE);
  REQUIRE(fi_trecv(n3.ep, &got, 8, m3.desc(), FI_ADDR_UNSPEC, 0, 0, nullptr) == 0);
  REQUIRE(fi_tsend(n0.ep, &v, 8, m0.desc(), to3, 0, nullptr) == 0);
  Completion c;
  REQUIRE(wait_cq(n3.rx, &c));
  CHECK(got == 99);
  // A descriptor from one NIC's domain is not valid on another's.
  CHECK(fi_tsend(n0.ep, &got, 8, m3.desc(), to3, 0, nullptr) == -FI_EINVAL);
  CHECK(violations(MOCKEFA_V_BAD_DESC) == 1);
}

TEST_CASE("limits: message and inject sizes, FI_OPT_MAX_MSG_SIZE", "[mockprov][checker]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_MAX_MSG_SIZE", "4096");
  Fixture f;
  Pair& p = *f.p;
  CHECK(f.info->ep_attr->max_msg_size == 4096);
  std::vector<uint8_t> buf(8192);
  Mr m(p.a.domain, buf.data(), buf.size());
  CHECK(fi_tsend(p.a.ep, buf.data(), 4097, m.desc(), p.a2b, 0, nullptr) == -FI_EINVAL);
  CHECK(violations(MOCKEFA_V_MSG_SIZE) == 1);
  CHECK(fi_tinject(p.a.ep, buf.data(), 4097, p.a2b, 0) == -FI_EINVAL);
  CHECK(fi_inject(p.a.ep, buf.data(), 4097, p.a2b) == -FI_EINVAL);
  size_t lim = 1024;
  REQUIRE(fi_setopt(&p.a.ep->fid, FI_OPT_ENDPOINT, kOptMaxMsgSize, &lim, sizeof lim) == 0);
  CHECK(fi_send(p.a.ep, buf.data(), 2048, m.desc(), p.a2b, nullptr) == -FI_EINVAL);
  CHECK(violations(MOCKEFA_V_MSG_SIZE) == 4);
  size_t got = 0, len = sizeof got;
  REQUIRE(fi_getopt(&p.a.ep->fid, FI_OPT_ENDPOINT, kOptMaxMsgSize, &got, &len) == 0);
  CHECK(got == 1024);
  lim = 8192;
  CHECK(fi_setopt(&p.a.ep->fid, FI_OPT_ENDPOINT, kOptMaxMsgSize, &lim, sizeof lim) == -FI_EINVAL);
  Env env2;
  env2.set("MOCKEFA_MAX_MSG_SIZE", "1048576");
  InfoPtr hints2 = make_hints();
  InfoPtr info2 = getinfo(hints2.get());
  REQUIRE(info2);
  Node n(info2.get());
  fi_addr_t to_b = n.insert(p.b);
  Mr mn(n.domain, buf.data(), buf.size());
  CHECK(fi_tinject(n.ep, buf.data(), 4097, to_b, 0) == -FI_EINVAL);  // inject_size 4096
  CHECK(violations(MOCKEFA_V_INJECT_SIZE) == 1);
  CHECK(fi_tinject(n.ep, buf.data(), 4096, to_b, 0) == 0);
}

TEST_CASE("options: FI_OPT_CUDA_API_PERMITTED and EFA options follow the profile",
          "[mockprov][options]") {
  Fresh fresh;
  InfoPtr hints = make_hints(kCaps | FI_HMEM, kMrAll | FI_MR_HMEM);
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  bool off = false;
  auto set_cuda = [&](fid_ep* ep) {
    return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, kOptCudaApiPermitted, &off, sizeof off);
  };
  SECTION("p2p (default): allowed before fi_enable, refused after") {
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(set_cuda(n.ep) == 0);
    int bad = 0;
    CHECK(fi_setopt(&n.ep->fid, FI_OPT_ENDPOINT, kOptCudaApiPermitted, &bad, sizeof bad) ==
          -FI_EINVAL);
    REQUIRE(fi_enable(n.ep) == 0);
    CHECK(set_cuda(n.ep) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_OPT_STATE) == 1);
    size_t len = sizeof off;
    CHECK(fi_getopt(&n.ep->fid, FI_OPT_ENDPOINT, kOptCudaApiPermitted, &off, &len) ==
          -FI_ENOPROTOOPT);
    bool emulated = false;
    len = sizeof emulated;
    REQUIRE(fi_getopt(&n.ep->fid, FI_OPT_ENDPOINT, kOptEfaEmulatedWrite, &emulated, &len) == 0);
    CHECK(emulated);
    CHECK(fi_setopt(&n.ep->fid, FI_OPT_ENDPOINT, 12345, &off, sizeof off) == -FI_ENOPROTOOPT);
  }
  SECTION("no P2P: -FI_EOPNOTSUPP (no GDR)") {
    Env env;
    env.set("MOCKEFA_GDR", "nop2p");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(set_cuda(n.ep) == -FI_EOPNOTSUPP);
  }
  SECTION("no CUDA: -FI_EINVAL") {
    Env env;
    env.set("MOCKEFA_GDR", "nocuda");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(set_cuda(n.ep) == -FI_EINVAL);
  }
  SECTION("legacy (1.17) options: -FI_ENOPROTOOPT") {
    Env env;
    env.set("MOCKEFA_LEGACY_OPTS", "1");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(set_cuda(n.ep) == -FI_ENOPROTOOPT);
  }
}

TEST_CASE("checker: posts on a disabled endpoint and unknown addresses", "[mockprov][checker]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Node a(info.get(), FI_CQ_FORMAT_TAGGED, false), b(info.get());
  fi_addr_t to_b = a.insert(b);
  CHECK(fi_tsend(a.ep, nullptr, 0, nullptr, to_b, 0, nullptr) == -FI_EOPBADSTATE);
  CHECK(violations(MOCKEFA_V_NOT_ENABLED) == 1);
  REQUIRE(fi_enable(a.ep) == 0);
  CHECK(fi_tsend(a.ep, nullptr, 0, nullptr, to_b + 7, 0, nullptr) == -FI_EINVAL);
  CHECK(violations(MOCKEFA_V_BAD_ADDR) == 1);
  CHECK(fi_trecv(a.ep, nullptr, 0, nullptr, FI_ADDR_UNSPEC, 0, 0, nullptr) == 0);
  fi_msg_tagged m{};
  m.addr = FI_ADDR_UNSPEC;
  CHECK(fi_trecvmsg(a.ep, &m, FI_PEEK) == -FI_EOPNOTSUPP);
  CHECK(violations(MOCKEFA_V_UNSUPPORTED) == 1);
}

TEST_CASE("threads: two threads drive the two sides (FI_THREAD_SAFE)", "[mockprov][threads]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_LAND_CHUNK", "512").set("MOCKEFA_CQ_REORDER", "1");
  Fixture f;
  Pair& p = *f.p;
  constexpr int kN = 200;
  constexpr size_t kLen = 2048;
  std::vector<uint8_t> src = pattern(kLen * kN, 4), dst(kLen * kN, 0);
  Mr sm(p.a.domain, src.data(), src.size()), dm(p.b.domain, dst.data(), dst.size());
  // Bounded by time, not by a count of spins: on a loaded machine one thread may not run at all
  // while the other spins, and the mock moves data only while both sides poll.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto in_time = [&] { return std::chrono::steady_clock::now() < deadline; };
  int sent_done = 0, recv_done = 0;
  std::thread receiver([&] {
    int posted = 0;
    while (recv_done < kN && in_time()) {
      if (posted < kN && fi_trecv(p.b.ep, dst.data() + posted * kLen, kLen, dm.desc(),
                                  FI_ADDR_UNSPEC, static_cast<uint64_t>(posted), 0, nullptr) == 0)
        ++posted;
      fi_cq_tagged_entry e[8];
      ssize_t r = fi_cq_read(p.b.rx, e, 8);
      if (r > 0)
        recv_done += static_cast<int>(r);
      else
        std::this_thread::yield();
    }
  });
  int posted = 0;
  while (sent_done < kN && in_time()) {
    if (posted < kN && fi_tsend(p.a.ep, src.data() + posted * kLen, kLen, sm.desc(), p.a2b,
                                static_cast<uint64_t>(posted), nullptr) == 0)
      ++posted;
    fi_cq_tagged_entry e[8];
    ssize_t r = fi_cq_read(p.a.tx, e, 8);
    if (r > 0)
      sent_done += static_cast<int>(r);
    else
      std::this_thread::yield();
  }
  receiver.join();
  CHECK(sent_done == kN);
  CHECK(recv_done == kN);
  CHECK(src == dst);
  CHECK(counters().violations_total == 0);
}
