// Tests of the mock EFA provider: memory registration checks and RMA.
#include <algorithm>
#include <map>
#include <set>

#include "test_mockprov_util.h"

using namespace mt;

TEST_CASE("mr: keys, descriptors and registration variants", "[mockprov][mr]") {
  Fresh fresh;
  InfoPtr hints = make_hints(kCaps | FI_HMEM, kMrAll | FI_MR_HMEM);
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  Node n(info.get());
  std::vector<uint8_t> buf(4096);
  Mr m1(n.domain, buf.data(), 1024), m2(n.domain, buf.data() + 1024, 1024);
  CHECK(m1.key() != m2.key());
  CHECK(m1.key() <= UINT32_MAX);
  CHECK(m1.desc() != nullptr);
  CHECK(counters().open_mrs >= 2);
  iovec two[2] = {{buf.data(), 10}, {buf.data() + 100, 10}};
  fid_mr* mr = nullptr;
  CHECK(fi_mr_regv(n.domain, two, 2, FI_SEND, 0, 0, 0, &mr, nullptr) == -FI_EINVAL);
  CHECK(fi_mr_regv(n.domain, two, 1, FI_SEND, 0, 0, 0, &mr, nullptr) == 0);
  CHECK(fi_close(&mr->fid) == 0);
  CHECK(fi_mr_reg(n.domain, buf.data(), 10, FI_SEND, 0, 0, FI_MORE, &mr, nullptr) == -FI_EBADFLAGS);

  fi_mr_attr attr{};
  iovec iov{buf.data() + 2048, 2048};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = FI_SEND | FI_RECV | FI_REMOTE_WRITE;
  attr.iface = FI_HMEM_CUDA;
  attr.device.cuda = 0;
  SECTION("CUDA registrations are accepted with host memory behind them") {
    REQUIRE(fi_mr_regattr(n.domain, &attr, 0, &mr) == 0);
    CHECK(fi_mr_key(mr) <= UINT32_MAX);
    CHECK(fi_close(&mr->fid) == 0);
  }
  SECTION("without P2P, CUDA keys start at 2^32 as on EFA") {
    Env env;
    env.set("MOCKEFA_GDR", "nop2p");
    Node n2(info.get());
    REQUIRE(fi_mr_regattr(n2.domain, &attr, 0, &mr) == 0);
    CHECK(fi_mr_key(mr) >= (uint64_t{1} << 32));
    CHECK(fi_close(&mr->fid) == 0);
  }
}

TEST_CASE("mr: FI_MR_LOCAL checks on send/recv", "[mockprov][mr][checker]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  std::vector<uint8_t> buf(1024);
  Mr mr(p.a.domain, buf.data(), 512), other(p.b.domain, buf.data(), 1024);
  SECTION("missing descriptor") {
    CHECK(fi_tsend(p.a.ep, buf.data(), 16, nullptr, p.a2b, 0, nullptr) == -FI_EINVAL);
    CHECK(fi_trecv(p.a.ep, buf.data(), 16, nullptr, FI_ADDR_UNSPEC, 0, 0, nullptr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_NO_DESC) == 2);
    char text[256];
    CHECK(api().last_violation(text, sizeof text) > 0);
    CHECK(std::string(text).rfind("no_desc", 0) == 0);
  }
  SECTION("descriptor not covering the buffer") {
    CHECK(fi_tsend(p.a.ep, buf.data() + 500, 16, mr.desc(), p.a2b, 0, nullptr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_DESC_RANGE) == 1);
  }
  SECTION("descriptor that is not a live MR of this domain") {
    int junk = 0;
    CHECK(fi_tsend(p.a.ep, buf.data(), 16, &junk, p.a2b, 0, nullptr) == -FI_EINVAL);
    CHECK(fi_tsend(p.a.ep, buf.data(), 16, other.desc(), p.a2b, 0, nullptr) == -FI_EINVAL);
    void* stale = mr.desc();
    mr.close();
    CHECK(fi_tsend(p.a.ep, buf.data(), 16, stale, p.a2b, 0, nullptr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_BAD_DESC) == 3);
  }
  CHECK(counters().ops_posted == 0);
}

TEST_CASE("mr: without FI_MR_LOCAL a NULL descriptor is fine", "[mockprov][mr]") {
  Fresh fresh;
  InfoPtr hints = make_hints(kCaps, kMrAll & ~FI_MR_LOCAL);
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  uint64_t v = 77, got = 0;
  REQUIRE(fi_trecv(p.b.ep, &got, 8, nullptr, FI_ADDR_UNSPEC, 0, 0, nullptr) == 0);
  REQUIRE(fi_tsend(p.a.ep, &v, 8, nullptr, p.a2b, 0, nullptr) == 0);
  Completion c;
  REQUIRE(wait_cq(p.b.rx, &c));
  CHECK(got == 77);
  CHECK(counters().violations_total == 0);
}

TEST_CASE("mr: closing an MR an op still uses fails the op and is counted",
          "[mockprov][mr][checker]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  std::vector<uint8_t> src(64 * 1024, 1);  // rendezvous size: the sender waits for the receive
  auto mr = std::make_unique<Mr>(p.a.domain, src.data(), src.size());
  REQUIRE(fi_tsend(p.a.ep, src.data(), src.size(), mr->desc(), p.a2b, 0, nullptr) == 0);
  p.b.progress();
  mr->close();
  CHECK(violations(MOCKEFA_V_MR_IN_USE) == 1);
  std::vector<uint8_t> dst(src.size());
  Mr rmr(p.b.domain, dst.data(), dst.size());
  REQUIRE(fi_trecv(p.b.ep, dst.data(), dst.size(), rmr.desc(), FI_ADDR_UNSPEC, 0, 0, nullptr) == 0);
  Completion r, s;
  REQUIRE(wait_cq(p.b.rx, &r));
  CHECK(r.error);
  REQUIRE(wait_cq(p.a.tx, &s));
  REQUIRE(s.error);
  CHECK(s.err.prov_errno == 5);
  CHECK(s.err.err == FI_EINVAL);
}

namespace {

// Registers a target buffer on b and returns after the a->b handshake, which EFA's RMA needs.
struct RmaSetup {
  InfoPtr info;
  std::unique_ptr<Pair> p;
  std::vector<uint8_t> local, remote;
  std::unique_ptr<Mr> lmr, rmr;
  explicit RmaSetup(size_t n, uint64_t remote_access = FI_REMOTE_READ | FI_REMOTE_WRITE) {
    InfoPtr hints = make_hints();
    info = getinfo(hints.get());
    REQUIRE(info);
    p = std::make_unique<Pair>(info.get());
    local = pattern(n, 11);
    remote.assign(n, 0);
    lmr = std::make_unique<Mr>(p->a.domain, local.data(), n);
    rmr = std::make_unique<Mr>(p->b.domain, remote.data(), n, remote_access);
  }
  uint64_t raddr(size_t off = 0) const { return reinterpret_cast<uint64_t>(remote.data() + off); }
};

}  // namespace

TEST_CASE("rma: first RMA to a peer waits for the handshake (-FI_EAGAIN, 1.17 behaviour)",
          "[mockprov][rma]") {
  Fresh fresh;
  RmaSetup s(4096);
  Pair& p = *s.p;
  CHECK(fi_write(p.a.ep, s.local.data(), 4096, s.lmr->desc(), p.a2b, s.raddr(), s.rmr->key(),
                 nullptr) == -FI_EAGAIN);
  CHECK(counters().eagain_handshake == 1);
  // Only the initiator polls: the peer never answers, so still -FI_EAGAIN.
  p.a.progress();
  CHECK(fi_write(p.a.ep, s.local.data(), 4096, s.lmr->desc(), p.a2b, s.raddr(), s.rmr->key(),
                 nullptr) == -FI_EAGAIN);
  p.b.progress();  // the peer answers the handshake
  p.a.progress();  // and the initiator receives the answer
  int ctx = 0;
  REQUIRE(fi_write(p.a.ep, s.local.data(), 4096, s.lmr->desc(), p.a2b, s.raddr(), s.rmr->key(),
                   &ctx) == 0);
  SECTION("emulated RMA: data lands only when the target progresses") {
    CHECK(stays_quiet(p.a.tx, 10));
    CHECK(s.remote != s.local);
    p.b.progress();
    CHECK(s.remote == s.local);
    Completion c;
    REQUIRE(wait_cq(p.a.tx, &c));
    CHECK(c.e.op_context == &ctx);
    CHECK(c.e.flags == (FI_RMA | FI_WRITE));
    // A write without CQ data gives the target no event.
    CHECK(stays_quiet(p.b.rx, 5, {&p.a}));
  }
}

TEST_CASE("rma: writedata target completion, read, queued handshake", "[mockprov][rma]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_HANDSHAKE", "queue");
  RmaSetup s(8192);
  Pair& p = *s.p;
  int wctx = 0;
  REQUIRE(fi_writedata(p.a.ep, s.local.data() + 100, 1000, s.lmr->desc(), 0xabcdef01, p.a2b,
                       s.raddr(100), s.rmr->key(), &wctx) == 0);  // queued behind the handshake
  Completion t;
  REQUIRE(wait_cq(p.b.rx, &t, {&p.a}));
  REQUIRE_FALSE(t.error);
  CHECK(t.e.op_context == nullptr);
  CHECK(t.e.flags == (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA));
  CHECK(t.e.len == 1000);
  CHECK(t.e.data == 0xabcdef01);
  CHECK(t.e.buf == nullptr);
  CHECK(std::equal(s.remote.begin() + 100, s.remote.begin() + 1100, s.local.begin() + 100));
  CHECK(s.remote[99] == 0);
  CHECK(s.remote[1100] == 0);
  Completion w;
  REQUIRE(wait_cq(p.a.tx, &w));
  CHECK(w.e.op_context == &wctx);

  // Read the target's memory back into a fresh local buffer.
  std::vector<uint8_t> back(1000, 0);
  Mr bmr(p.a.domain, back.data(), back.size());
  int rctx = 0;
  REQUIRE(fi_read(p.a.ep, back.data(), 1000, bmr.desc(), p.a2b, s.raddr(100), s.rmr->key(),
                  &rctx) == 0);
  Completion r;
  REQUIRE(wait_cq(p.a.tx, &r, {&p.b}));
  CHECK(r.e.op_context == &rctx);
  CHECK(r.e.flags == (FI_RMA | FI_READ));
  CHECK(std::equal(back.begin(), back.end(), s.local.begin() + 100));

  // Zero-byte writedata: NULL buffer and descriptor, still one target event with len 0.
  REQUIRE(fi_writedata(p.a.ep, nullptr, 0, nullptr, 5, p.a2b, 0, 0, nullptr) == 0);
  Completion z;
  REQUIRE(wait_cq(p.b.rx, &z, {&p.a}));
  CHECK(z.e.len == 0);
  CHECK(z.e.data == 5);
  CHECK(counters().violations_total == 0);
}

TEST_CASE("rma: target refuses bad keys, bounds and access with EFA errors",
          "[mockprov][rma][checker]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_HANDSHAKE", "none");
  RmaSetup s(4096, FI_REMOTE_WRITE);  // no FI_REMOTE_READ
  Pair& p = *s.p;
  auto expect_remote_error = [&](int kind) {
    Completion c;
    REQUIRE(wait_cq(p.a.tx, &c, {&p.b}));
    REQUIRE(c.error);
    CHECK(c.err.err == FI_EINVAL);
    CHECK(c.err.prov_errno == 7);
    CHECK(c.err_data.find("fi_addr_efa://") != std::string::npos);
    char buf[256];
    CHECK(std::string(fi_cq_strerror(p.a.tx, c.err.prov_errno, nullptr, buf, sizeof buf))
              .find("Remote") == 0);
    CHECK(violations(kind) == 1);
  };
  SECTION("unknown key") {
    REQUIRE(fi_write(p.a.ep, s.local.data(), 64, s.lmr->desc(), p.a2b, s.raddr(),
                     s.rmr->key() + 999, nullptr) == 0);
    expect_remote_error(MOCKEFA_V_RMA_KEY);
  }
  SECTION("key of a registration in another domain") {
    REQUIRE(fi_write(p.a.ep, s.local.data(), 64, s.lmr->desc(), p.a2b, s.raddr(), s.lmr->key(),
                     nullptr) == 0);
    expect_remote_error(MOCKEFA_V_RMA_KEY);
  }
  SECTION("range past the registration") {
    REQUIRE(fi_write(p.a.ep, s.local.data(), 64, s.lmr->desc(), p.a2b, s.raddr(4096 - 32),
                     s.rmr->key(), nullptr) == 0);
    expect_remote_error(MOCKEFA_V_RMA_BOUNDS);
  }
  SECTION("read of memory registered without FI_REMOTE_READ") {
    REQUIRE(fi_read(p.a.ep, s.local.data(), 64, s.lmr->desc(), p.a2b, s.raddr(), s.rmr->key(),
                    nullptr) == 0);
    expect_remote_error(MOCKEFA_V_RMA_ACCESS);
  }
  CHECK(std::all_of(s.remote.begin(), s.remote.end(), [](uint8_t b) { return b == 0; }));
}

TEST_CASE("rma: local checks refuse at post time", "[mockprov][rma][checker]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_HANDSHAKE", "none");
  RmaSetup s(4096);
  Pair& p = *s.p;
  SECTION("CQ data must fit in 4 bytes") {
    CHECK(fi_writedata(p.a.ep, s.local.data(), 8, s.lmr->desc(), uint64_t{1} << 32, p.a2b,
                       s.raddr(), s.rmr->key(), nullptr) == -FI_EINVAL);
    CHECK(fi_tsenddata(p.a.ep, s.local.data(), 8, s.lmr->desc(), uint64_t{1} << 40, p.a2b, 0,
                       nullptr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_CQ_DATA) == 2);
    CHECK(fi_writedata(p.a.ep, s.local.data(), 8, s.lmr->desc(), 0xffffffffull, p.a2b, s.raddr(),
                       s.rmr->key(), nullptr) == 0);
  }
  SECTION("one remote iov only") {
    fi_rma_iov r[2] = {{s.raddr(), 8, s.rmr->key()}, {s.raddr(8), 8, s.rmr->key()}};
    iovec l{s.local.data(), 16};
    void* d = s.lmr->desc();
    fi_msg_rma m{&l, &d, 1, p.a2b, r, 2, nullptr, 0};
    CHECK(fi_writemsg(p.a.ep, &m, 0) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_IOV_LIMIT) == 1);
  }
  SECTION("missing local descriptor under FI_MR_LOCAL") {
    CHECK(fi_write(p.a.ep, s.local.data(), 8, nullptr, p.a2b, s.raddr(), s.rmr->key(), nullptr) ==
          -FI_EINVAL);
    CHECK(fi_read(p.a.ep, s.local.data(), 8, nullptr, p.a2b, s.raddr(), s.rmr->key(), nullptr) ==
          -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_NO_DESC) == 2);
  }
  SECTION("fi_writedata larger than one device write") {
    Env small;
    small.set("MOCKEFA_MAX_WRITEDATA", "1024");
    Node n(s.info.get());
    fi_addr_t to_b = n.insert(p.b);
    Mr m(n.domain, s.local.data(), 4096);
    CHECK(fi_writedata(n.ep, s.local.data(), 2048, m.desc(), 1, to_b, s.raddr(), s.rmr->key(),
                       nullptr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_WRITEDATA_SIZE) == 1);
  }
}

TEST_CASE("rma: device mode needs no target progress for the data", "[mockprov][rma]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_RMA", "device").set("MOCKEFA_HANDSHAKE", "none");
  RmaSetup s(2048);
  Pair& p = *s.p;
  bool emulated = true;
  size_t len = sizeof emulated;
  REQUIRE(fi_getopt(&p.a.ep->fid, FI_OPT_ENDPOINT, -(0xefa << 16) + 2, &emulated, &len) == 0);
  CHECK_FALSE(emulated);
  REQUIRE(fi_writedata(p.a.ep, s.local.data(), 2048, s.lmr->desc(), 9, p.a2b, s.raddr(),
                       s.rmr->key(), nullptr) == 0);
  Completion w;
  REQUIRE(wait_cq(p.a.tx, &w));  // the target never polled
  CHECK(s.remote == s.local);
  Completion t;
  REQUIRE(wait_cq(p.b.rx, &t));  // the target event waits for the target's own read
  CHECK(t.e.data == 9);
}

namespace {

// Reads n entries from cq (errors included), progressing `others` in between; bounded.
std::vector<Completion> collect(fid_cq* cq, size_t n,
                                std::initializer_list<const Node*> others = {}) {
  std::vector<Completion> out;
  while (out.size() < n) {
    Completion c;
    if (!wait_cq(cq, &c, others)) break;
    out.push_back(c);
  }
  return out;
}

// Knob sets the zero-byte and cross-domain RMA tests also run under.
struct Knobs {
  const char* name;
  std::vector<std::pair<const char*, const char*>> env;
};
const std::vector<Knobs>& knob_sets() {
  static const std::vector<Knobs> k = {
      {"plain", {}},
      {"cq reorder + cq delay", {{"MOCKEFA_CQ_REORDER", "1"}, {"MOCKEFA_CQ_DELAY", "2"}}},
      {"wire reorder + land chunk + wire delay",
       {{"MOCKEFA_WIRE_REORDER", "1"},
        {"MOCKEFA_LAND_CHUNK", "4096"},
        {"MOCKEFA_WIRE_DELAY", "1"}}},
  };
  return k;
}

// The infos of the first n mock NICs (MOCKEFA_NDOMAINS must be at least n).
std::vector<const fi_info*> nic_infos(const fi_info* info, size_t n) {
  std::vector<const fi_info*> all;
  for (const fi_info* i = info; i; i = i->next) all.push_back(i);
  REQUIRE(all.size() >= n);
  all.resize(n);
  return all;
}

}  // namespace

TEST_CASE("rma: zero-byte fi_writedata completes at both sides, emulated and device",
          "[mockprov][rma]") {
  const std::string mode = GENERATE(as<std::string>{}, "emulated", "device");
  const size_t knob = GENERATE(range(size_t{0}, size_t{3}));
  const Knobs& k = knob_sets()[knob];
  CAPTURE(mode, k.name);
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_RMA", mode);  // handshake: the default, -FI_EAGAIN until it is done
  for (const auto& kv : k.env) env.set(kv.first, kv.second);
  RmaSetup s(64 * 1024);
  Pair& p = *s.p;

  int ctx_null = 0, ctx_buf = 0, ctx_msg = 0, ctx_big = 0;
  // 1. NULL buffer, NULL descriptor, address and key 0: EFA checks no key for 0 bytes.
  REQUIRE(
      post_retry(
          [&] { return fi_writedata(p.a.ep, nullptr, 0, nullptr, 0x10, p.a2b, 0, 0, &ctx_null); },
          {&p.a, &p.b}) == 0);
  // 2. A real (registered) buffer and a valid remote address and key, still 0 bytes.
  REQUIRE(fi_writedata(p.a.ep, s.local.data(), 0, s.lmr->desc(), 0x20, p.a2b, s.raddr(8),
                       s.rmr->key(), &ctx_buf) == 0);
  // 3. fi_writemsg with FI_REMOTE_CQ_DATA and one empty iov.
  iovec l{s.local.data(), 0};
  void* d = s.lmr->desc();
  fi_rma_iov r{s.raddr(16), 0, s.rmr->key()};
  fi_msg_rma m{&l, &d, 1, p.a2b, &r, 1, &ctx_msg, 0x30};
  REQUIRE(fi_writemsg(p.a.ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION) == 0);
  // 4. A big writedata alongside, so the zero-byte ones can overtake it (or not).
  REQUIRE(fi_writedata(p.a.ep, s.local.data(), s.local.size(), s.lmr->desc(), 0x40, p.a2b,
                       s.raddr(), s.rmr->key(), &ctx_big) == 0);

  std::vector<Completion> tgt = collect(p.b.rx, 4, {&p.a});
  REQUIRE(tgt.size() == 4);
  std::map<uint64_t, fi_cq_tagged_entry> by_data;
  for (const Completion& c : tgt) {
    REQUIRE_FALSE(c.error);
    CHECK(c.e.flags == (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA));
    CHECK(c.e.op_context == nullptr);
    CHECK(c.e.buf == nullptr);
    by_data[c.e.data] = c.e;
  }
  REQUIRE(by_data.size() == 4);
  for (uint64_t z : {0x10, 0x20, 0x30}) {
    REQUIRE(by_data.count(z) == 1);
    CHECK(by_data[z].len == 0);
  }
  REQUIRE(by_data.count(0x40) == 1);
  CHECK(by_data[0x40].len == s.local.size());
  CHECK(s.remote == s.local);  // the big one landed whole before its event

  std::vector<Completion> ini = collect(p.a.tx, 4, {&p.b});
  REQUIRE(ini.size() == 4);
  std::set<void*> ctxs;
  for (const Completion& c : ini) {
    REQUIRE_FALSE(c.error);
    CHECK(c.e.flags == (FI_RMA | FI_WRITE));
    CHECK(c.e.len == (c.e.op_context == &ctx_big ? s.local.size() : 0));
    ctxs.insert(c.e.op_context);
  }
  CHECK(ctxs == std::set<void*>{&ctx_null, &ctx_buf, &ctx_msg, &ctx_big});
  CHECK(stays_quiet(p.b.rx, 5, {&p.a}));  // exactly one event per write
  CHECK(counters().violations_total == 0);
  CHECK(counters().error_completions == 0);
}

TEST_CASE("counters: nic_tx_bytes/nic_tx_ops count accepted tx ops by the poster's NIC",
          "[mockprov][api][domains]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_NDOMAINS", "4");  // handshake: the default, so RMA first answers -FI_EAGAIN
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  std::vector<const fi_info*> all = nic_infos(info.get(), 4);
  Node n0(all[0]), n1(all[1]), n2(all[2]), n3(all[3]);
  const fi_addr_t n0_to_n1 = n0.insert(n1), n1_to_n2 = n1.insert(n2), n2_to_n3 = n2.insert(n3),
                  n3_to_n0 = n3.insert(n0);
  std::vector<uint8_t> src = pattern(4096, 3), dst1(4096), dst2(4096, 0), back(4096);
  Mr m0(n0.domain, src.data(), src.size()), m1(n1.domain, dst1.data(), dst1.size());
  Mr m1s(n1.domain, src.data(), src.size()), m1b(n1.domain, back.data(), back.size());
  Mr m2(n2.domain, dst2.data(), dst2.size());
  const uint64_t raddr2 = reinterpret_cast<uint64_t>(dst2.data());
  auto ops = [](int nic) { return counters().nic_tx_ops[nic]; };
  auto bytes = [](int nic) { return counters().nic_tx_bytes[nic]; };

  // NIC 0: messages to NIC 1 (send, tsend, inject, tinject); the receives on NIC 1 do not count.
  REQUIRE(fi_recv(n1.ep, dst1.data(), 1024, m1.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
  REQUIRE(fi_recv(n1.ep, dst1.data() + 1024, 1024, m1.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
  REQUIRE(fi_trecv(n1.ep, dst1.data() + 2048, 1024, m1.desc(), FI_ADDR_UNSPEC, 0, 0, nullptr) == 0);
  REQUIRE(fi_trecv(n1.ep, dst1.data() + 3072, 1024, m1.desc(), FI_ADDR_UNSPEC, 0, 0, nullptr) == 0);
  REQUIRE(fi_send(n0.ep, src.data(), 100, m0.desc(), n0_to_n1, nullptr) == 0);
  REQUIRE(fi_tsend(n0.ep, src.data(), 200, m0.desc(), n0_to_n1, 0, nullptr) == 0);
  REQUIRE(fi_inject(n0.ep, src.data(), 10, n0_to_n1) == 0);
  REQUIRE(fi_tinject(n0.ep, src.data(), 20, n0_to_n1, 0) == 0);
  CHECK(ops(0) == 4);
  CHECK(bytes(0) == 330);
  CHECK(ops(1) == 0);
  REQUIRE(collect(n1.rx, 4).size() == 4);
  REQUIRE(collect(n0.tx, 2, {&n1}).size() == 2);

  // NIC 1: RMA into NIC 2. The first one meets the handshake: -FI_EAGAIN is not counted.
  REQUIRE(fi_write(n1.ep, src.data(), 300, m1s.desc(), n1_to_n2, raddr2, m2.key(), nullptr) ==
          -FI_EAGAIN);
  CHECK(ops(1) == 0);
  CHECK(bytes(1) == 0);
  REQUIRE(post_retry(
              [&] {
                return fi_write(n1.ep, src.data(), 300, m1s.desc(), n1_to_n2, raddr2, m2.key(),
                                nullptr);
              },
              {&n1, &n2}) == 0);
  REQUIRE(fi_writedata(n1.ep, src.data(), 400, m1s.desc(), 7, n1_to_n2, raddr2, m2.key(),
                       nullptr) == 0);
  REQUIRE(fi_inject_write(n1.ep, src.data(), 30, n1_to_n2, raddr2, m2.key()) == 0);
  REQUIRE(fi_inject_writedata(n1.ep, src.data(), 40, 8, n1_to_n2, raddr2, m2.key()) == 0);
  // A read is a transmit op of the reader's NIC (1), not of the NIC that owns the memory (2).
  REQUIRE(fi_read(n1.ep, back.data(), 500, m1b.desc(), n1_to_n2, raddr2, m2.key(), nullptr) == 0);
  CHECK(ops(1) == 5);
  CHECK(bytes(1) == 300 + 400 + 30 + 40 + 500);
  CHECK(ops(2) == 0);
  REQUIRE(collect(n1.tx, 3, {&n2}).size() == 3);  // write, writedata, read; injects give none
  REQUIRE(collect(n2.rx, 2, {&n1}).size() == 2);  // the two writedata events

  // NIC 2: a zero-byte writedata is one op of 0 bytes.
  REQUIRE(post_retry(
              [&] { return fi_writedata(n2.ep, nullptr, 0, nullptr, 9, n2_to_n3, 0, 0, nullptr); },
              {&n2, &n3}) == 0);
  CHECK(ops(2) == 1);
  CHECK(bytes(2) == 0);
  REQUIRE(collect(n3.rx, 1, {&n2}).size() == 1);
  REQUIRE(collect(n2.tx, 1, {&n3}).size() == 1);

  // NIC 3: a post the checker refuses counts nothing.
  CHECK(fi_tsend(n3.ep, src.data(), 64, m0.desc(), n3_to_n0, 0, nullptr) ==
        -FI_EINVAL);  // NIC 0's MR
  CHECK(violations(MOCKEFA_V_BAD_DESC) == 1);
  CHECK(ops(3) == 0);
  CHECK(bytes(3) == 0);

  mockefa_counters c = counters();
  uint64_t sum_ops = 0;
  for (int i = 0; i < 32; ++i) sum_ops += c.nic_tx_ops[i];
  CHECK(sum_ops == c.tx_posted);
  for (int i = 4; i < 32; ++i) {
    CHECK(c.nic_tx_ops[i] == 0);
    CHECK(c.nic_tx_bytes[i] == 0);
  }
  api().reset_counters();
  c = counters();
  for (int i = 0; i < 32; ++i) {
    CHECK(c.nic_tx_ops[i] == 0);
    CHECK(c.nic_tx_bytes[i] == 0);
  }
  CHECK(c.open_eps >= 4);  // gauges kept
}

TEST_CASE("domains: four NICs, fi_writedata across them, each target domain checks its own keys",
          "[mockprov][rma][domains]") {
  const std::string mode = GENERATE(as<std::string>{}, "emulated", "device");
  const size_t knob = GENERATE(range(size_t{0}, size_t{3}));
  const Knobs& k = knob_sets()[knob];
  CAPTURE(mode, k.name);
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_NDOMAINS", "4").set("MOCKEFA_RMA", mode);
  for (const auto& kv : k.env) env.set(kv.first, kv.second);
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  std::vector<const fi_info*> all = nic_infos(info.get(), 4);
  std::vector<std::unique_ptr<Node>> n;
  for (int i = 0; i < 4; ++i) n.push_back(std::make_unique<Node>(all[i]));
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j)
      CHECK(std::memcmp(n[i]->name.data(), n[j]->name.data(), 16) != 0);

  constexpr size_t kLen = 8192;
  std::vector<std::vector<uint8_t>> src, dst;
  std::vector<std::unique_ptr<Mr>> smr, dmr;
  for (int i = 0; i < 4; ++i) {
    src.push_back(pattern(kLen, static_cast<uint8_t>(40 + i)));
    dst.emplace_back(kLen, 0);
  }
  for (int i = 0; i < 4; ++i) {
    smr.push_back(std::make_unique<Mr>(n[i]->domain, src[i].data(), kLen));
    dmr.push_back(std::make_unique<Mr>(n[i]->domain, dst[i].data(), kLen, FI_REMOTE_WRITE));
  }
  auto raddr = [&](int j) { return reinterpret_cast<uint64_t>(dst[j].data()); };

  // Every NIC writes to every other NIC, with the target domain's key: 12 writes, 3 per target.
  std::vector<std::vector<fi_addr_t>> to(4, std::vector<fi_addr_t>(4, FI_ADDR_NOTAVAIL));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      if (i != j) to[i][j] = n[i]->insert(*n[j]);
  std::vector<const Node*> everyone;
  for (auto& x : n) everyone.push_back(x.get());
  auto progress_all = [&] {
    for (const Node* x : everyone) x->progress();
  };
  std::vector<int> ctx(16, 0);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      if (i == j) continue;
      // Each initiator writes its own quarter of the target's buffer; data = (i << 4) | j.
      const size_t off = static_cast<size_t>(i) * (kLen / 4);
      ssize_t r = -FI_EAGAIN;
      for (int t = 0; t < kMaxPolls && r == -FI_EAGAIN; ++t) {
        r = fi_writedata(n[i]->ep, src[i].data() + off, kLen / 4, smr[i]->desc(),
                         static_cast<uint64_t>(i << 4 | j), to[i][j], raddr(j) + off, dmr[j]->key(),
                         &ctx[i * 4 + j]);
        if (r == -FI_EAGAIN) progress_all();
      }
      REQUIRE(r == 0);
    }
  }
  for (int j = 0; j < 4; ++j) {
    std::vector<Completion> t =
        collect(n[j]->rx, 3, {everyone[0], everyone[1], everyone[2], everyone[3]});
    REQUIRE(t.size() == 3);
    std::set<uint64_t> datas;
    for (const Completion& c : t) {
      REQUIRE_FALSE(c.error);
      CHECK(c.e.flags == (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA));
      CHECK(c.e.len == kLen / 4);
      CHECK((c.e.data & 0xf) == static_cast<uint64_t>(j));
      datas.insert(c.e.data >> 4);
    }
    CHECK(datas.size() == 3);
    CHECK(datas.count(static_cast<uint64_t>(j)) == 0);
    for (int i = 0; i < 4; ++i) {
      const size_t off = static_cast<size_t>(i) * (kLen / 4);
      const auto from = dst[j].begin() + off;
      if (i == j)
        CHECK(std::all_of(from, from + kLen / 4,
                          [](uint8_t b) { return b == 0; }));  // nobody writes here
      else
        CHECK(std::equal(from, from + kLen / 4, src[i].begin() + off));
    }
  }
  for (int i = 0; i < 4; ++i) {
    std::vector<Completion> w =
        collect(n[i]->tx, 3, {everyone[0], everyone[1], everyone[2], everyone[3]});
    REQUIRE(w.size() == 3);
    for (const Completion& c : w) CHECK_FALSE(c.error);
    CHECK(counters().nic_tx_ops[i] == 3);
    CHECK(counters().nic_tx_bytes[i] == 3 * kLen / 4);
  }
  CHECK(counters().violations_total == 0);

  // A key registered on NIC 1's domain, used for a write to the endpoint on NIC 2: the address
  // lies inside NIC 1's registration, but NIC 2 does not know the key.
  std::fill(dst[1].begin(), dst[1].end(), 0);
  std::fill(dst[2].begin(), dst[2].end(), 0);
  int bad = 0;
  REQUIRE(fi_writedata(n[0]->ep, src[0].data(), 256, smr[0]->desc(), 0x77, to[0][2], raddr(1),
                       dmr[1]->key(), &bad) == 0);
  Completion e;
  REQUIRE(wait_cq(n[0]->tx, &e, {everyone[1], everyone[2], everyone[3]}));
  REQUIRE(e.error);
  CHECK(e.err.op_context == &bad);
  CHECK(e.err.err == FI_EINVAL);
  CHECK(e.err.prov_errno == 7);
  CHECK(violations(MOCKEFA_V_RMA_KEY) == 1);
  CHECK(counters().violations_total == 1);
  CHECK(stays_quiet(n[2]->rx, 5, {everyone[0]}));  // no writedata event at the target
  CHECK(stays_quiet(n[1]->rx, 5, {everyone[0]}));
  CHECK(std::all_of(dst[1].begin(), dst[1].end(), [](uint8_t b) { return b == 0; }));
  CHECK(std::all_of(dst[2].begin(), dst[2].end(), [](uint8_t b) { return b == 0; }));
  // The same write with NIC 2's own key goes through.
  REQUIRE(fi_writedata(n[0]->ep, src[0].data(), 256, smr[0]->desc(), 0x78, to[0][2], raddr(2),
                       dmr[2]->key(), &bad) == 0);
  Completion ok;
  REQUIRE(wait_cq(n[2]->rx, &ok, {everyone[0]}));
  REQUIRE_FALSE(ok.error);
  CHECK(ok.e.data == 0x78);
  CHECK(std::equal(dst[2].begin(), dst[2].begin() + 256, src[0].begin()));
  REQUIRE(wait_cq(n[0]->tx, &ok, {everyone[2]}));
  CHECK_FALSE(ok.error);
  CHECK(violations(MOCKEFA_V_RMA_KEY) == 1);
}
