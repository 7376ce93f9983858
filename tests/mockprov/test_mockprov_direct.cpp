// Tests of the mock's `efa-direct` fabric (libfabric >= 2.1, efa-semantics §1.4): which hints
// list it, in which order, and what its endpoints refuse. Built against libfabric 1.x headers the
// mock has no efa-direct at all, and the single case below checks exactly that.
#include <algorithm>
#include <vector>

#include "test_mockprov_util.h"

using namespace mt;

namespace {

constexpr int kMrDirect = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;

// Hints an efa-direct application gives: no FI_TAGGED, FI_CONTEXT2 offered, every mr_mode bit.
InfoPtr direct_hints(uint64_t caps = FI_MSG, uint64_t mode = FI_CONTEXT2) {
  InfoPtr h = make_hints(caps, kMrDirect);
  h->mode = mode;
  return h;
}

// The fabric names of a list, in order.
std::vector<std::string> fabrics(const fi_info* i) {
  std::vector<std::string> out;
  for (; i; i = i->next) out.emplace_back(i->fabric_attr->name);
  return out;
}

size_t count_direct(const fi_info* i) {
  size_t n = 0;
  for (; i; i = i->next) n += std::string(i->fabric_attr->name) == "efa-direct";
  return n;
}

}  // namespace

#if FI_MAJOR_VERSION < 2

TEST_CASE("efa-direct: not listed when built against libfabric 1.x headers", "[mockprov][direct]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_NDOMAINS", "2").set("MOCKEFA_RMA", "device");
  for (uint64_t caps : {uint64_t{FI_MSG}, uint64_t{FI_MSG | FI_RMA}, uint64_t{0}}) {
    InfoPtr hints = direct_hints(caps, FI_CONTEXT2 | FI_RX_CQ_DATA);
    InfoPtr info = getinfo(hints.get());
    REQUIRE(info);
    CHECK(count_direct(info.get()) == 0);
    CHECK(fabrics(info.get()) == std::vector<std::string>{"efa", "efa"});
    CHECK(info->mode == 0);
  }
  InfoPtr named = direct_hints();
  named->fabric_attr->name = strdup("efa-direct");
  int rc = 0;
  CHECK_FALSE(getinfo(named.get(), &rc));
  CHECK(rc == -FI_ENODATA);
}

#else

namespace {

// A RMA-capable efa-direct entry needs a NIC with RDMA read and write.
InfoPtr direct_info(uint64_t caps = FI_MSG | FI_RMA, uint64_t mode = FI_CONTEXT2) {
  InfoPtr hints = direct_hints(caps, mode);
  hints->fabric_attr->name = strdup("efa-direct");
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  REQUIRE(std::string(info->fabric_attr->name) == "efa-direct");
  return info;
}

// Bounded wait for n successful entries on cq (error entries fail the test).
std::vector<fi_cq_tagged_entry> drain(fid_cq* cq, size_t n,
                                      std::initializer_list<const Node*> others) {
  std::vector<fi_cq_tagged_entry> out;
  for (int i = 0; i < kMaxPolls && out.size() < n; ++i) {
    for (const Node* o : others) o->progress();
    fi_cq_tagged_entry e;
    ssize_t r = fi_cq_read(cq, &e, 1);
    if (r == 1) out.push_back(e);
    REQUIRE(r != -FI_EAVAIL);
  }
  return out;
}

}  // namespace

TEST_CASE("efa-direct: listed before efa, one entry per NIC, with its own attributes",
          "[mockprov][direct]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_NDOMAINS", "2").set("MOCKEFA_RMA", "device");
  InfoPtr hints = direct_hints(FI_MSG | FI_RMA);
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  CHECK(fabrics(info.get()) == std::vector<std::string>{"efa-direct", "efa-direct", "efa", "efa"});
  const fi_info* d0 = info.get();
  const fi_info* d1 = d0->next;
  const fi_info* e0 = d1->next;
  CHECK(std::string(d0->domain_attr->name) == "rdmap16s27-rdm");
  CHECK(std::string(d1->domain_attr->name) == "rdmap32s27-rdm");
  CHECK(std::string(e0->domain_attr->name) == "rdmap16s27-rdm");
  CHECK(std::string(d0->fabric_attr->prov_name) == "mockefa");
  CHECK(d0->mode == FI_CONTEXT2);
  CHECK(e0->mode == 0);
  CHECK((d0->caps & (FI_TAGGED | FI_ATOMIC | FI_DIRECTED_RECV | FI_MULTI_RECV | FI_HMEM)) == 0);
  CHECK((d0->caps & (FI_MSG | FI_SEND | FI_RECV | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ |
                     FI_REMOTE_WRITE | FI_LOCAL_COMM | FI_REMOTE_COMM)) ==
        (FI_MSG | FI_SEND | FI_RECV | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ |
         FI_REMOTE_WRITE | FI_LOCAL_COMM | FI_REMOTE_COMM));
  CHECK(d0->domain_attr->mr_mode == kMrDirect);
  CHECK(d0->ep_attr->max_msg_size == (size_t{1} << 30));  // max(MTU, max RDMA) with FI_RMA
  CHECK(d0->tx_attr->inject_size == 32);
  CHECK(d0->tx_attr->iov_limit == 2);
  CHECK(d0->rx_attr->iov_limit == 2);
  CHECK(d0->tx_attr->rma_iov_limit == 1);
  CHECK(d0->tx_attr->msg_order == 0);
  CHECK(d0->rx_attr->msg_order == 0);
  CHECK(d0->domain_attr->control_progress == FI_PROGRESS_AUTO);
  CHECK(d0->domain_attr->data_progress == FI_PROGRESS_AUTO);
  CHECK(e0->domain_attr->data_progress == FI_PROGRESS_MANUAL);
  CHECK(d0->domain_attr->cq_data_size == 4);
  CHECK(d0->nic != nullptr);

  SECTION("without FI_RMA: max_msg_size is the MTU") {
    InfoPtr h = direct_hints(FI_MSG);
    InfoPtr i = getinfo(h.get());
    REQUIRE(i);
    REQUIRE(std::string(i->fabric_attr->name) == "efa-direct");
    CHECK(i->ep_attr->max_msg_size == 8760);
    CHECK((i->caps & FI_RMA) == 0);
  }
  SECTION("FI_RX_CQ_DATA is echoed when offered") {
    InfoPtr h = direct_hints(FI_MSG, FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA);
    InfoPtr i = getinfo(h.get());
    REQUIRE(i);
    CHECK(i->mode == (FI_CONTEXT2 | FI_RX_CQ_DATA));
  }
  SECTION("fabric_attr->name selects one fabric") {
    InfoPtr h = direct_hints(FI_MSG | FI_RMA);
    h->fabric_attr->name = strdup("efa-direct");
    InfoPtr i = getinfo(h.get());
    CHECK(fabrics(i.get()) == std::vector<std::string>{"efa-direct", "efa-direct"});
    InfoPtr h2 = direct_hints(FI_MSG | FI_RMA);
    h2->fabric_attr->name = strdup("efa");
    InfoPtr i2 = getinfo(h2.get());
    CHECK(fabrics(i2.get()) == std::vector<std::string>{"efa", "efa"});
  }
  SECTION("a domain name picks that NIC's entries") {
    InfoPtr h = direct_hints(FI_MSG);
    h->domain_attr->name = strdup("rdmap32s27-rdm");
    InfoPtr i = getinfo(h.get());
    CHECK(fabrics(i.get()) == std::vector<std::string>{"efa-direct", "efa"});
    CHECK(std::string(i->domain_attr->name) == "rdmap32s27-rdm");
  }
}

TEST_CASE("efa-direct: hints like the plugin's (FI_TAGGED) never get it", "[mockprov][direct]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_NDOMAINS", "2").set("MOCKEFA_RMA", "device");
  for (bool rma : {false, true}) {
    for (bool hmem : {false, true}) {
      // src/fabric's make_hints: the SENDRECV/RDMA hint sets of the plugin.
      InfoPtr h = make_hints(FI_TAGGED | (rma ? FI_RMA | FI_WRITE | FI_REMOTE_WRITE : 0) |
                                 (hmem ? FI_HMEM | FI_READ | FI_REMOTE_READ : 0),
                             kMrDirect | FI_MR_ENDPOINT | (hmem ? FI_MR_HMEM : 0));
      h->mode = FI_CONTEXT | FI_CONTEXT2;
      h->domain_attr->threading = FI_THREAD_SAFE;
      h->tx_attr->msg_order = FI_ORDER_SAS;
      h->rx_attr->msg_order = FI_ORDER_SAS;
      InfoPtr i = getinfo(h.get());
      REQUIRE(i);
      CHECK(count_direct(i.get()) == 0);
      CHECK(fabrics(i.get()).size() == 2);
    }
  }
  InfoPtr tagged = direct_hints(FI_TAGGED);
  tagged->fabric_attr->name = strdup("efa-direct");
  int rc = 0;
  CHECK_FALSE(getinfo(tagged.get(), &rc));
  CHECK(rc == -FI_ENODATA);
}

TEST_CASE("efa-direct: each filter of §1.4 skips the entry", "[mockprov][direct]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_RMA", "device");
  auto direct_count = [](const fi_info* h) {
    int rc = 0;
    InfoPtr i = getinfo(h, &rc);
    return i ? count_direct(i.get()) : 0;
  };
  CHECK(direct_count(direct_hints(FI_MSG).get()) == 1);
  CHECK(direct_count(direct_hints(FI_MSG | FI_DIRECTED_RECV).get()) == 0);
  CHECK(direct_count(direct_hints(FI_MSG | FI_ATOMIC).get()) == 0);
  CHECK(direct_count(direct_hints(FI_MSG | FI_MULTI_RECV).get()) == 0);
  CHECK(direct_count(direct_hints(FI_MSG, 0).get()) == 0);
  CHECK(direct_count(direct_hints(FI_MSG, FI_CONTEXT).get()) == 0);
  for (int drop : {FI_MR_LOCAL, FI_MR_ALLOCATED, FI_MR_PROV_KEY, FI_MR_VIRT_ADDR}) {
    InfoPtr h = direct_hints(FI_MSG);
    h->domain_attr->mr_mode = kMrDirect & ~drop;
    CHECK(direct_count(h.get()) == 0);
    // The legacy FI_LOCAL_MR mode bit does not stand in for FI_MR_LOCAL in a hint that names
    // mr_mode bits (libfabric's ofi_check_mr_mode; fabtests' getinfo_mr_mode1 found the mock
    // granting FI_MR_LOCAL to such a hint).
    h->mode |= 1ULL << 55;
    CHECK(direct_count(h.get()) == 0);
  }
  {
    InfoPtr h = direct_hints(FI_MSG);
    h->tx_attr->msg_order = FI_ORDER_SAS;
    CHECK(direct_count(h.get()) == 0);
  }
  {
    InfoPtr h = direct_hints(FI_MSG);
    h->rx_attr->msg_order = FI_ORDER_SAS;
    CHECK(direct_count(h.get()) == 0);
  }
  {
    InfoPtr h = direct_hints(FI_MSG);
    h->ep_attr->max_msg_size = 8761;
    CHECK(direct_count(h.get()) == 0);
    InfoPtr r = direct_hints(FI_MSG | FI_RMA);
    r->ep_attr->max_msg_size = 8761;
    CHECK(direct_count(r.get()) == 1);
  }
  {
    InfoPtr h = direct_hints(FI_MSG);
    h->tx_attr->inject_size = 33;
    CHECK(direct_count(h.get()) == 0);
    InfoPtr v = direct_hints(FI_MSG);
    v->tx_attr->iov_limit = 3;
    CHECK(direct_count(v.get()) == 0);
  }
  {
    InfoPtr h = direct_hints(FI_MSG);
    h->domain_attr->data_progress = FI_PROGRESS_AUTO;
    InfoPtr i = getinfo(h.get());
    REQUIRE(i);  // efa refuses AUTO (2.1+); efa-direct is AUTO
    CHECK(fabrics(i.get()) == std::vector<std::string>{"efa-direct"});
    InfoPtr m = direct_hints(FI_MSG);
    m->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    InfoPtr im = getinfo(m.get());
    REQUIRE(im);
    CHECK(count_direct(im.get()) == 1);
    CHECK(im->domain_attr->data_progress == FI_PROGRESS_MANUAL);  // the hint's level comes back
  }
  SECTION("HMEM: asked only, needs P2P and FI_MR_HMEM") {
    InfoPtr h = direct_hints(FI_MSG | FI_HMEM);
    h->domain_attr->mr_mode = kMrDirect | FI_MR_HMEM;
    InfoPtr i = getinfo(h.get());
    REQUIRE(i);
    CHECK(std::string(i->fabric_attr->name) == "efa-direct");
    CHECK((i->caps & FI_HMEM) != 0);
    CHECK(i->domain_attr->mr_mode == (kMrDirect | FI_MR_HMEM));
    InfoPtr plain = getinfo(direct_hints(FI_MSG).get());
    REQUIRE(plain);
    CHECK((plain->caps & FI_HMEM) == 0);  // only if asked
    InfoPtr no_hmem_bit = direct_hints(FI_MSG | FI_HMEM);
    CHECK(direct_count(no_hmem_bit.get()) == 0);
    Env nop2p;
    nop2p.set("MOCKEFA_GDR", "nop2p");
    CHECK(direct_count(h.get()) == 0);
  }
  SECTION("FI_RMA needs a NIC with RDMA read and write") {
    CHECK(direct_count(direct_hints(FI_MSG | FI_RMA).get()) == 1);
    Env e2;
    e2.set("MOCKEFA_RMA", "emulated");
    CHECK(direct_count(direct_hints(FI_MSG | FI_RMA).get()) == 0);
    Env e3;
    e3.set("MOCKEFA_RMA", "device").set("MOCKEFA_DEVICE", "old");
    CHECK(direct_count(direct_hints(FI_MSG | FI_RMA).get()) == 0);
    InfoPtr i = getinfo(direct_hints(FI_MSG).get());
    REQUIRE(i);
    REQUIRE(std::string(i->fabric_attr->name) == "efa-direct");
    CHECK((i->caps & (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_READ)) == 0);
  }
  SECTION("a NIC without unsolicited write recv needs FI_RX_CQ_DATA for FI_RMA") {
    Env e2;
    e2.set("MOCKEFA_NO_UNSOLICITED_WRITE_RECV", "1");
    CHECK(direct_count(direct_hints(FI_MSG | FI_RMA).get()) == 0);
    CHECK(direct_count(direct_hints(FI_MSG).get()) == 1);
    InfoPtr i = getinfo(direct_hints(FI_MSG | FI_RMA, FI_CONTEXT2 | FI_RX_CQ_DATA).get());
    REQUIRE(i);
    CHECK(std::string(i->fabric_attr->name) == "efa-direct");
    CHECK((i->mode & FI_RX_CQ_DATA) != 0);
  }
}

TEST_CASE("efa-direct: sends and receives, AUTO progress, no handshake", "[mockprov][direct]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_RMA", "device").set("MOCKEFA_DIRECT_REORDER", "0");
  InfoPtr info = direct_info();
  Pair p(info.get());
  std::vector<uint8_t> src = pattern(8760, 3), dst(8760, 0);
  Mr ms(p.a.domain, src.data(), src.size());
  Mr md(p.b.domain, dst.data(), dst.size());
  fi_context2 rc{}, sc{}, wc{};
  REQUIRE(fi_recv(p.b.ep, dst.data(), dst.size(), md.desc(), FI_ADDR_UNSPEC, &rc) == 0);
  REQUIRE(fi_send(p.a.ep, src.data(), src.size(), ms.desc(), p.a2b, &sc) == 0);
  // The sender's own CQ reads move the send (the device does it; b never polled).
  Completion c;
  REQUIRE(wait_cq(p.a.tx, &c));
  CHECK_FALSE(c.error);
  CHECK(c.e.op_context == &sc);
  CHECK(dst == src);
  REQUIRE(wait_cq(p.b.rx, &c));
  CHECK(c.e.op_context == &rc);
  CHECK(c.e.len == 8760);
  // First RMA to a peer needs no handshake (no -FI_EAGAIN).
  CHECK(fi_write(p.a.ep, src.data(), 64, ms.desc(), p.a2b, reinterpret_cast<uintptr_t>(dst.data()),
                 md.key(), &wc) == 0);
  REQUIRE(wait_cq(p.a.tx, &c));
  CHECK_FALSE(c.error);
  CHECK(c.e.op_context == &wc);
  CHECK(counters().violations_total == 0);
}

TEST_CASE("efa-direct: endpoint refusals are refused and counted", "[mockprov][direct]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_RMA", "device");
  InfoPtr info = direct_info();
  Pair p(info.get());
  std::vector<uint8_t> buf(16384, 1);
  Mr m(p.a.domain, buf.data(), buf.size());
  Mr mb(p.b.domain, buf.data(), buf.size());
  fi_context2 ctx{};
  const uint64_t raddr = reinterpret_cast<uintptr_t>(buf.data());

  SECTION("a send larger than the MTU") {
    CHECK(fi_send(p.a.ep, buf.data(), 8761, m.desc(), p.a2b, &ctx) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_MSG_SIZE) == 1);
    iovec iov[2] = {{buf.data(), 8000}, {buf.data() + 8000, 761}};
    void* desc[2] = {m.desc(), m.desc()};
    CHECK(fi_sendv(p.a.ep, iov, desc, 2, p.a2b, &ctx) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_MSG_SIZE) == 2);
  }
  SECTION("an inject larger than 32 bytes, and any inline RMA write") {
    CHECK(fi_inject(p.a.ep, buf.data(), 33, p.a2b) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_INJECT_SIZE) == 1);
    iovec iov{buf.data(), 33};
    void* desc = m.desc();
    fi_msg msg{&iov, &desc, 1, p.a2b, &ctx, 0};
    CHECK(fi_sendmsg(p.a.ep, &msg, FI_INJECT) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_INJECT_SIZE) == 2);
    CHECK(fi_inject_write(p.a.ep, buf.data(), 8, p.a2b, raddr, mb.key()) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_INJECT_SIZE) == 3);
    CHECK(fi_inject(p.a.ep, buf.data(), 32, p.a2b) == 0);
  }
  SECTION("a buffer without a descriptor") {
    CHECK(fi_send(p.a.ep, buf.data(), 8, nullptr, p.a2b, &ctx) == -FI_EINVAL);
    CHECK(fi_recv(p.b.ep, buf.data(), 8, nullptr, FI_ADDR_UNSPEC, &ctx) == -FI_EINVAL);
    CHECK(fi_write(p.a.ep, buf.data(), 8, nullptr, p.a2b, raddr, mb.key(), &ctx) == -FI_EINVAL);
    CHECK(fi_read(p.a.ep, buf.data(), 8, nullptr, p.a2b, raddr, mb.key(), &ctx) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_NO_DESC) == 4);
  }
  SECTION("a NULL context (FI_CONTEXT2)") {
    CHECK(fi_send(p.a.ep, buf.data(), 8, m.desc(), p.a2b, nullptr) == -FI_EINVAL);
    CHECK(fi_recv(p.b.ep, buf.data(), 8, mb.desc(), FI_ADDR_UNSPEC, nullptr) == -FI_EINVAL);
    CHECK(fi_write(p.a.ep, buf.data(), 8, m.desc(), p.a2b, raddr, mb.key(), nullptr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_NO_CONTEXT) == 3);
  }
  SECTION("tagged calls") {
    CHECK(fi_tsend(p.a.ep, buf.data(), 8, m.desc(), p.a2b, 1, &ctx) == -FI_ENOSYS);
    CHECK(fi_trecv(p.b.ep, buf.data(), 8, mb.desc(), FI_ADDR_UNSPEC, 1, 0, &ctx) == -FI_ENOSYS);
    CHECK(fi_tinject(p.a.ep, buf.data(), 8, p.a2b, 1) == -FI_ENOSYS);
    CHECK(violations(MOCKEFA_V_MISSING_CAP) == 3);
  }
  SECTION("more than 2 iovs, more than 1 for RMA") {
    iovec iov[3] = {{buf.data(), 8}, {buf.data() + 8, 8}, {buf.data() + 16, 8}};
    void* desc[3] = {m.desc(), m.desc(), m.desc()};
    CHECK(fi_sendv(p.a.ep, iov, desc, 3, p.a2b, &ctx) == -FI_EINVAL);
    CHECK(fi_writev(p.a.ep, iov, desc, 2, p.a2b, raddr, mb.key(), &ctx) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_IOV_LIMIT) == 2);
  }
  SECTION("size options stay within efa-direct's limits") {
    size_t v = 8761;
    CHECK(fi_setopt(&p.a.ep->fid, FI_OPT_ENDPOINT, 12 /* MAX_MSG_SIZE */, &v, sizeof v) ==
          -FI_EINVAL);
    v = 8;
    CHECK(fi_setopt(&p.a.ep->fid, FI_OPT_ENDPOINT, 18 /* INJECT_RMA_SIZE */, &v, sizeof v) ==
          -FI_EINVAL);
    CHECK(fi_setopt(&p.a.ep->fid, FI_OPT_ENDPOINT, 13 /* MAX_TAGGED_SIZE */, &v, sizeof v) ==
          -FI_ENOPROTOOPT);
    v = 4096;
    CHECK(fi_setopt(&p.a.ep->fid, FI_OPT_ENDPOINT, 12 /* MAX_MSG_SIZE */, &v, sizeof v) == 0);
    CHECK(fi_send(p.a.ep, buf.data(), 4097, m.desc(), p.a2b, &ctx) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_MSG_SIZE) == 1);
  }
  SECTION("the provider writes into the context; an application that does is caught") {
    fi_context2 rc{};
    REQUIRE(fi_recv(p.b.ep, buf.data() + 8192, 64, mb.desc(), FI_ADDR_UNSPEC, &rc) == 0);
    CHECK((rc.internal[0] != nullptr || rc.internal[1] != nullptr));
    rc.internal[0] = nullptr;  // the application reuses memory the provider owns
    rc.internal[1] = nullptr;
    REQUIRE(fi_send(p.a.ep, buf.data(), 8, m.desc(), p.a2b, &ctx) == 0);
    Completion c;
    REQUIRE(wait_cq(p.b.rx, &c, {&p.a}));
    CHECK(c.e.op_context == &rc);
    CHECK(violations(MOCKEFA_V_CTX_CLOBBERED) == 1);
    REQUIRE(wait_cq(p.a.tx, &c));
    CHECK(violations(MOCKEFA_V_CTX_CLOBBERED) == 1);  // the send's context was left alone
  }
}

TEST_CASE("efa-direct: RMA to a target without the initiator in its AV fails",
          "[mockprov][direct]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_RMA", "device");
  InfoPtr info = direct_info();
  Node a(info.get()), b(info.get());
  const fi_addr_t a2b = a.insert(b);  // b never inserts a
  std::vector<uint8_t> buf(64, 5);
  Mr ma(a.domain, buf.data(), buf.size());
  Mr mb(b.domain, buf.data(), buf.size());
  fi_context2 w{}, r{};
  const uint64_t raddr = reinterpret_cast<uintptr_t>(buf.data());
  REQUIRE(fi_write(a.ep, buf.data(), 16, ma.desc(), a2b, raddr, mb.key(), &w) == 0);
  REQUIRE(fi_read(a.ep, buf.data(), 16, ma.desc(), a2b, raddr, mb.key(), &r) == 0);
  for (int k = 0; k < 2; ++k) {
    Completion c;
    REQUIRE(wait_cq(a.tx, &c, {&b}));
    REQUIRE(c.error);
    CHECK((c.err.op_context == &w || c.err.op_context == &r));
    CHECK(c.err.err == FI_ENOTCONN);  // EFA's to_fi_errno(REMOTE_ERROR_UNKNOWN_PEER)
    CHECK(c.err.prov_errno == 14);
    CHECK(c.err_data.find("REMOTE_ERROR_UNKNOWN_PEER") != std::string::npos);
  }
  CHECK(violations(MOCKEFA_V_UNKNOWN_PEER) == 2);
  // Once b knows a, the same write goes through.
  b.insert(a);
  REQUIRE(fi_write(a.ep, buf.data(), 16, ma.desc(), a2b, raddr, mb.key(), &w) == 0);
  Completion c;
  REQUIRE(wait_cq(a.tx, &c, {&b}));
  CHECK_FALSE(c.error);
}

TEST_CASE("efa-direct: write-with-immediate and unsolicited write recv", "[mockprov][direct]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_RMA", "device");
  std::vector<uint8_t> src = pattern(256, 9), dst(256, 0);
  fi_context2 w{}, rc{};
  SECTION("unsolicited (default): a target event with a NULL context, no receive taken") {
    InfoPtr info = direct_info();
    Pair p(info.get());
    Mr ms(p.a.domain, src.data(), src.size());
    Mr md(p.b.domain, dst.data(), dst.size());
    REQUIRE(fi_writedata(p.a.ep, src.data(), 256, ms.desc(), 0x1234, p.a2b,
                         reinterpret_cast<uintptr_t>(dst.data()), md.key(), &w) == 0);
    Completion c;
    REQUIRE(wait_cq(p.b.rx, &c, {&p.a}));
    CHECK_FALSE(c.error);
    CHECK(c.e.op_context == nullptr);
    CHECK(c.e.flags == (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA));
    CHECK(c.e.data == 0x1234);
    CHECK(dst == src);
  }
  SECTION("MOCKEFA_NO_UNSOLICITED_WRITE_RECV: each one consumes a posted receive") {
    Env knob;
    knob.set("MOCKEFA_NO_UNSOLICITED_WRITE_RECV", "1");
    InfoPtr info = direct_info(FI_MSG | FI_RMA, FI_CONTEXT2 | FI_RX_CQ_DATA);
    Pair p(info.get());
    Mr ms(p.a.domain, src.data(), src.size());
    Mr md(p.b.domain, dst.data(), dst.size());
    const uint64_t raddr = reinterpret_cast<uintptr_t>(dst.data());
    // No receive posted at b: refused by the device (RNR), counted.
    REQUIRE(fi_writedata(p.a.ep, src.data(), 256, ms.desc(), 7, p.a2b, raddr, md.key(), &w) == 0);
    Completion c;
    REQUIRE(wait_cq(p.a.tx, &c, {&p.b}));
    REQUIRE(c.error);
    CHECK(c.err.op_context == &w);
    CHECK(c.err.prov_errno == 10);
    CHECK(c.err.err == FI_ENORX);
    CHECK(violations(MOCKEFA_V_WRITE_RECV) == 1);
    // With a receive posted, the write's event is that receive's completion.
    uint8_t rbuf[8];
    Mr mr(p.b.domain, rbuf, sizeof rbuf);
    REQUIRE(fi_recv(p.b.ep, rbuf, sizeof rbuf, mr.desc(), FI_ADDR_UNSPEC, &rc) == 0);
    REQUIRE(fi_writedata(p.a.ep, src.data(), 256, ms.desc(), 8, p.a2b, raddr, md.key(), &w) == 0);
    REQUIRE(wait_cq(p.b.rx, &c, {&p.a}));
    CHECK_FALSE(c.error);
    CHECK(c.e.op_context == &rc);
    CHECK(c.e.flags == (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA));
    CHECK(c.e.len == 256);
    CHECK(c.e.data == 8);
    CHECK(dst == src);
    REQUIRE(wait_cq(p.a.tx, &c, {&p.b}));
    CHECK_FALSE(c.error);
    CHECK(violations(MOCKEFA_V_WRITE_RECV) == 1);
  }
}

TEST_CASE("efa-direct: ops between an efa and an efa-direct endpoint fail", "[mockprov][direct]") {
  Fresh fresh;
  InfoPtr dinfo = direct_info(FI_MSG);
  InfoPtr hints = direct_hints(FI_MSG);
  hints->fabric_attr->name = strdup("efa");
  InfoPtr einfo = getinfo(hints.get());
  REQUIRE(einfo);
  Node e(einfo.get()), d(dinfo.get());
  const fi_addr_t e2d = e.insert(d);
  d.insert(e);
  uint64_t v = 1;
  Mr m(e.domain, &v, sizeof v);
  fi_context2 ctx{};
  REQUIRE(fi_send(e.ep, &v, sizeof v, m.desc(), e2d, &ctx) == 0);
  Completion c;
  REQUIRE(wait_cq(e.tx, &c, {&d}));
  CHECK(c.error);
  CHECK(violations(MOCKEFA_V_FABRIC_MISMATCH) == 1);
}

TEST_CASE("efa-direct: delivery and completions are out of order", "[mockprov][direct]") {
  Fresh fresh;
  constexpr size_t kN = 16;
  for (bool reorder : {true, false}) {
    Env env;
    env.set("MOCKEFA_DIRECT_REORDER", reorder ? "1" : "0");
    InfoPtr info = direct_info(FI_MSG);
    Pair p(info.get());
    std::vector<uint64_t> out(kN), in(kN, ~uint64_t{0});
    for (size_t i = 0; i < kN; ++i) out[i] = i;
    Mr mo(p.a.domain, out.data(), out.size() * 8);
    Mr mi(p.b.domain, in.data(), in.size() * 8);
    std::vector<fi_context2> rctx(kN), sctx(kN);
    for (size_t i = 0; i < kN; ++i)
      REQUIRE(fi_recv(p.b.ep, &in[i], 8, mi.desc(), FI_ADDR_UNSPEC, &rctx[i]) == 0);
    for (size_t i = 0; i < kN; ++i)
      REQUIRE(fi_send(p.a.ep, &out[i], 8, mo.desc(), p.a2b, &sctx[i]) == 0);
    std::vector<fi_cq_tagged_entry> tx = drain(p.a.tx, kN, {&p.b});
    std::vector<fi_cq_tagged_entry> rx = drain(p.b.rx, kN, {&p.a});
    REQUIRE(tx.size() == kN);
    REQUIRE(rx.size() == kN);
    bool landed_in_order = true, tx_in_order = true, rx_in_order = true;
    std::vector<uint64_t> seen(in);
    std::sort(seen.begin(), seen.end());
    CHECK(seen == out);  // every message landed once
    for (size_t i = 0; i < kN; ++i) {
      landed_in_order = landed_in_order && in[i] == i;
      tx_in_order = tx_in_order && tx[i].op_context == &sctx[i];
      rx_in_order = rx_in_order && rx[i].op_context == &rctx[i];
    }
    if (reorder) {
      CHECK_FALSE(landed_in_order);
      CHECK_FALSE((tx_in_order && rx_in_order));
    } else {
      CHECK(landed_in_order);
      CHECK(tx_in_order);
      CHECK(rx_in_order);
    }
    CHECK(counters().violations_total == 0);
  }
}

#endif
