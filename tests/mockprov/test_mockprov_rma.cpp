// Tests of the mock EFA provider: memory registration checks and RMA.
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

TEST_CASE("mr: closing an MR an op still uses fails the op and is counted", "[mockprov][mr][checker]") {
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

TEST_CASE("rma: first RMA to a peer waits for the handshake (-FI_EAGAIN, 1.17 behaviour)", "[mockprov][rma]") {
  Fresh fresh;
  RmaSetup s(4096);
  Pair& p = *s.p;
  CHECK(fi_write(p.a.ep, s.local.data(), 4096, s.lmr->desc(), p.a2b, s.raddr(), s.rmr->key(), nullptr) ==
        -FI_EAGAIN);
  CHECK(counters().eagain_handshake == 1);
  // Only the initiator polls: the peer never answers, so still -FI_EAGAIN.
  p.a.progress();
  CHECK(fi_write(p.a.ep, s.local.data(), 4096, s.lmr->desc(), p.a2b, s.raddr(), s.rmr->key(), nullptr) ==
        -FI_EAGAIN);
  p.b.progress();  // the peer answers the handshake
  p.a.progress();  // and the initiator receives the answer
  int ctx = 0;
  REQUIRE(fi_write(p.a.ep, s.local.data(), 4096, s.lmr->desc(), p.a2b, s.raddr(), s.rmr->key(), &ctx) == 0);
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
  REQUIRE(fi_writedata(p.a.ep, s.local.data() + 100, 1000, s.lmr->desc(), 0xabcdef01, p.a2b, s.raddr(100),
                       s.rmr->key(), &wctx) == 0);  // queued behind the handshake
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
  REQUIRE(fi_read(p.a.ep, back.data(), 1000, bmr.desc(), p.a2b, s.raddr(100), s.rmr->key(), &rctx) == 0);
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

TEST_CASE("rma: target refuses bad keys, bounds and access with EFA errors", "[mockprov][rma][checker]") {
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
    CHECK(std::string(fi_cq_strerror(p.a.tx, c.err.prov_errno, nullptr, buf, sizeof buf)).find("Remote") == 0);
    CHECK(violations(kind) == 1);
  };
  SECTION("unknown key") {
    REQUIRE(fi_write(p.a.ep, s.local.data(), 64, s.lmr->desc(), p.a2b, s.raddr(), s.rmr->key() + 999, nullptr) == 0);
    expect_remote_error(MOCKEFA_V_RMA_KEY);
  }
  SECTION("key of a registration in another domain") {
    REQUIRE(fi_write(p.a.ep, s.local.data(), 64, s.lmr->desc(), p.a2b, s.raddr(), s.lmr->key(), nullptr) == 0);
    expect_remote_error(MOCKEFA_V_RMA_KEY);
  }
  SECTION("range past the registration") {
    REQUIRE(fi_write(p.a.ep, s.local.data(), 64, s.lmr->desc(), p.a2b, s.raddr(4096 - 32), s.rmr->key(),
                     nullptr) == 0);
    expect_remote_error(MOCKEFA_V_RMA_BOUNDS);
  }
  SECTION("read of memory registered without FI_REMOTE_READ") {
    REQUIRE(fi_read(p.a.ep, s.local.data(), 64, s.lmr->desc(), p.a2b, s.raddr(), s.rmr->key(), nullptr) == 0);
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
    CHECK(fi_writedata(p.a.ep, s.local.data(), 8, s.lmr->desc(), uint64_t{1} << 32, p.a2b, s.raddr(), s.rmr->key(),
                       nullptr) == -FI_EINVAL);
    CHECK(fi_tsenddata(p.a.ep, s.local.data(), 8, s.lmr->desc(), uint64_t{1} << 40, p.a2b, 0, nullptr) ==
          -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_CQ_DATA) == 2);
    CHECK(fi_writedata(p.a.ep, s.local.data(), 8, s.lmr->desc(), 0xffffffffull, p.a2b, s.raddr(), s.rmr->key(),
                       nullptr) == 0);
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
    CHECK(fi_write(p.a.ep, s.local.data(), 8, nullptr, p.a2b, s.raddr(), s.rmr->key(), nullptr) == -FI_EINVAL);
    CHECK(fi_read(p.a.ep, s.local.data(), 8, nullptr, p.a2b, s.raddr(), s.rmr->key(), nullptr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_NO_DESC) == 2);
  }
  SECTION("fi_writedata larger than one device write") {
    Env small;
    small.set("MOCKEFA_MAX_WRITEDATA", "1024");
    Node n(s.info.get());
    fi_addr_t to_b = n.insert(p.b);
    Mr m(n.domain, s.local.data(), 4096);
    CHECK(fi_writedata(n.ep, s.local.data(), 2048, m.desc(), 1, to_b, s.raddr(), s.rmr->key(), nullptr) ==
          -FI_EINVAL);
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
  REQUIRE(fi_writedata(p.a.ep, s.local.data(), 2048, s.lmr->desc(), 9, p.a2b, s.raddr(), s.rmr->key(), nullptr) ==
          0);
  Completion w;
  REQUIRE(wait_cq(p.a.tx, &w));  // the target never polled
  CHECK(s.remote == s.local);
  Completion t;
  REQUIRE(wait_cq(p.b.rx, &t));  // the target event waits for the target's own read
  CHECK(t.e.data == 9);
}
