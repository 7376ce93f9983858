// Tests of the mock EFA provider itself: fi_getinfo filtering, objects, messages.
// RMA/MR tests are in test_mockprov_rma.cpp, fault injection in test_mockprov_faults.cpp.
#include <rdma/fi_ext.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "test_mockprov_util.h"

using namespace mt;

TEST_CASE("getinfo reports an EFA-like RDM entry", "[mockprov][info]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  const fi_info* i = info.get();
  CHECK(i->next == nullptr);
  CHECK(std::string(i->fabric_attr->name) == "efa");
  CHECK(std::string(i->fabric_attr->prov_name) == "mockefa");
  CHECK(std::string(i->domain_attr->name) == "rdmap16s27-rdm");
  CHECK(i->ep_attr->type == FI_EP_RDM);
  CHECK(i->ep_attr->protocol == FI_PROTO_EFA);
  CHECK(i->addr_format == FI_ADDR_EFA);
  CHECK(i->src_addrlen == 32);
  CHECK(i->mode == 0);
  const uint64_t want = FI_MSG | FI_TAGGED | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ |
                        FI_REMOTE_WRITE | FI_SEND | FI_RECV | FI_DIRECTED_RECV | FI_LOCAL_COMM |
                        FI_REMOTE_COMM;
  CHECK(i->caps == want);
  CHECK((i->caps & (FI_HMEM | FI_SOURCE | FI_ATOMIC)) == 0);
  CHECK(i->domain_attr->mr_mode == kMrAll);
  CHECK(i->domain_attr->cq_data_size == 4);
  CHECK(i->domain_attr->mr_key_size == 4);
  CHECK(i->domain_attr->threading == FI_THREAD_SAFE);
  CHECK(i->domain_attr->data_progress == FI_PROGRESS_MANUAL);
  CHECK(i->domain_attr->control_progress == FI_PROGRESS_MANUAL);
  CHECK(i->domain_attr->av_type == FI_AV_TABLE);
  CHECK(i->domain_attr->mr_iov_limit == 1);
  CHECK(i->tx_attr->inject_size == 4096);
  CHECK(i->tx_attr->iov_limit == 4);
  CHECK(i->tx_attr->rma_iov_limit == 1);
  CHECK(i->rx_attr->iov_limit == 4);
  CHECK(i->tx_attr->msg_order == 0);  // the hints asked for none
  CHECK(i->ep_attr->max_msg_size == SIZE_MAX);
  CHECK(i->ep_attr->mem_tag_format == 0xAAAAAAAAAAAAAAAAull);
  REQUIRE(i->nic);
  CHECK(std::string(i->nic->device_attr->name) == "rdmap16s27");
  CHECK(std::string(i->nic->device_attr->vendor_id) == "0x1d0f");
  CHECK(i->nic->bus_attr->bus_type == FI_BUS_PCI);
  CHECK(i->nic->bus_attr->attr.pci.bus_id == 0x10);
  CHECK(i->nic->bus_attr->attr.pci.device_id == 0x1b);
  CHECK(i->nic->link_attr->speed == 100000000000ull);
  auto* prov = static_cast<const mockefa_nic_attr*>(i->nic->prov_attr);
  REQUIRE(prov);
  CHECK(prov->magic == MOCKEFA_NIC_ATTR_MAGIC);
  CHECK(std::string(prov->info.pci_bus_id) == "0000:10:1b.0");
  CHECK(std::string(prov->info.pci_path) == "/sys/devices/pci0000:10/0000:10:1b.0");
}

TEST_CASE("getinfo: node and service as EFA reads them, domain caps EFA lacks",
          "[mockprov][info]") {
  // EFA reads node as an IPv6 GID and service as a QPN; FI_SOURCE selects NICs by GID (fabtests'
  // getinfo_no_hints5, src_dest1 and caps3 found the mock ignoring node, service and domain caps).
  Env env;
  env.set("MOCKEFA_NDOMAINS", "2");
  Fresh fresh;
  InfoPtr hints = make_hints();
  const char* nic0 = "fe80::4a1:b5ff:fe7e:1000";
  const char* nic1 = "fe80::4a1:b5ff:fe7e:1001";
  fi_info* out = nullptr;
  REQUIRE(fi_getinfo(kApi, nic1, "7", 0, hints.get(), &out) == 0);
  uint8_t gid1[16];
  REQUIRE(inet_pton(AF_INET6, nic1, gid1) == 1);
  int n = 0;
  for (fi_info* i = out; i; i = i->next, ++n) {
    REQUIRE(i->dest_addrlen == 32);
    REQUIRE(i->dest_addr != nullptr);
    CHECK(std::memcmp(i->dest_addr, gid1, 16) == 0);
    uint16_t qpn = 0;
    std::memcpy(&qpn, static_cast<const uint8_t*>(i->dest_addr) + 16, 2);
    CHECK(qpn == 7);
  }
  CHECK(n >= 2);  // every NIC, each with that destination
  fi_freeinfo(out);
  out = nullptr;
  // Not an IPv6 address: the mock answers -FI_EINVAL as EFA does (libfabric's core may report
  // the whole call as -FI_ENODATA); either way nothing comes back.
  const int rc = fi_getinfo(kApi, "localhost", "7", 0, hints.get(), &out);
  CHECK((rc == -FI_EINVAL || rc == -FI_ENODATA));
  CHECK(out == nullptr);
  // FI_SOURCE: only the NIC with that GID.
  REQUIRE(fi_getinfo(kApi, nic1, nullptr, FI_SOURCE, hints.get(), &out) == 0);
  for (fi_info* i = out; i; i = i->next) {
    REQUIRE(i->src_addr != nullptr);
    CHECK(std::memcmp(i->src_addr, gid1, 16) == 0);
    CHECK(i->dest_addr == nullptr);
  }
  fi_freeinfo(out);
  out = nullptr;
  CHECK(fi_getinfo(kApi, "fe80::1", nullptr, FI_SOURCE, hints.get(), &out) == -FI_ENODATA);
  CHECK(fi_getinfo(kApi, nic0, nullptr, FI_SOURCE, hints.get(), &out) == 0);
  fi_freeinfo(out);
  out = nullptr;
  // Domain capabilities: LOCAL_COMM and REMOTE_COMM, nothing else (no FI_SHARED_AV).
  hints->domain_attr->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
  CHECK(fi_getinfo(kApi, nullptr, nullptr, 0, hints.get(), &out) == 0);
  fi_freeinfo(out);
  out = nullptr;
  hints->domain_attr->caps = FI_SHARED_AV;
  CHECK(fi_getinfo(kApi, nullptr, nullptr, 0, hints.get(), &out) == -FI_ENODATA);
}

TEST_CASE("getinfo: fi_dupinfo and fi_tostr carry the nic", "[mockprov][info]") {
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  InfoPtr dup(fi_dupinfo(info.get()));
  REQUIRE(dup);
  REQUIRE(dup->nic);
  CHECK(dup->nic != info->nic);
  CHECK(std::string(dup->nic->device_attr->name) == "rdmap16s27");
  CHECK(static_cast<const mockefa_nic_attr*>(dup->nic->prov_attr)->magic == MOCKEFA_NIC_ATTR_MAGIC);
  std::string s = fi_tostr(info.get(), FI_TYPE_INFO);
  CHECK(s.find("name: efa") != std::string::npos);
  CHECK(s.find("rdmap16s27-rdm") != std::string::npos);
  CHECK(s.find("bus_id: 16") != std::string::npos);
}

TEST_CASE("getinfo: mr_mode filtering follows EFA", "[mockprov][info]") {
  Fresh fresh;
  int rc = 0;
  SECTION("an RMA target must offer ALLOCATED|PROV_KEY|VIRT_ADDR") {
    for (int missing : {FI_MR_ALLOCATED, FI_MR_PROV_KEY, FI_MR_VIRT_ADDR}) {
      InfoPtr hints = make_hints(kCaps, kMrAll & ~missing);
      CHECK_FALSE(getinfo(hints.get(), &rc));
      CHECK(rc == -FI_ENODATA);
    }
  }
  SECTION("not an RMA target: mr_mode 0 is fine and comes back 0") {
    InfoPtr hints = make_hints(FI_MSG | FI_TAGGED, 0);
    InfoPtr info = getinfo(hints.get(), &rc);
    REQUIRE(info);
    CHECK(info->domain_attr->mr_mode == 0);
    CHECK((info->caps & (FI_RMA | FI_REMOTE_WRITE)) == 0);
    CHECK((info->caps & (FI_SEND | FI_RECV)) == (FI_SEND | FI_RECV));
  }
  SECTION("RMA initiator only (FI_RMA|FI_READ|FI_WRITE) needs nothing") {
    InfoPtr hints = make_hints(FI_MSG | FI_RMA | FI_READ | FI_WRITE, FI_MR_LOCAL);
    InfoPtr info = getinfo(hints.get(), &rc);
    REQUIRE(info);
    CHECK(info->domain_attr->mr_mode == FI_MR_LOCAL);
    CHECK((info->caps & (FI_REMOTE_READ | FI_REMOTE_WRITE)) == 0);
  }
  SECTION("FI_MR_LOCAL is optional and echoed only if offered") {
    InfoPtr hints = make_hints(kCaps, kMrAll & ~FI_MR_LOCAL);
    InfoPtr info = getinfo(hints.get(), &rc);
    REQUIRE(info);
    CHECK(info->domain_attr->mr_mode == (FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR));
  }
  SECTION("MOCKEFA_REQUIRE_MR_LOCAL=1 makes FI_MR_LOCAL mandatory") {
    Env env;
    env.set("MOCKEFA_REQUIRE_MR_LOCAL", "1");
    InfoPtr hints = make_hints(kCaps, kMrAll & ~FI_MR_LOCAL);
    CHECK_FALSE(getinfo(hints.get(), &rc));
    CHECK(rc == -FI_ENODATA);
  }
  SECTION("FI_HMEM needs FI_MR_HMEM, and is granted only when asked") {
    InfoPtr no_hmem_mode = make_hints(kCaps | FI_HMEM, kMrAll);
    CHECK_FALSE(getinfo(no_hmem_mode.get(), &rc));
    InfoPtr hints = make_hints(kCaps | FI_HMEM, kMrAll | FI_MR_HMEM);
    InfoPtr info = getinfo(hints.get(), &rc);
    REQUIRE(info);
    CHECK((info->caps & FI_HMEM) != 0);
    CHECK(info->domain_attr->mr_mode == (kMrAll | FI_MR_HMEM));
  }
  SECTION("MOCKEFA_GDR=nocuda offers no FI_HMEM") {
    Env env;
    env.set("MOCKEFA_GDR", "nocuda");
    InfoPtr hints = make_hints(kCaps | FI_HMEM, kMrAll | FI_MR_HMEM);
    CHECK_FALSE(getinfo(hints.get(), &rc));
  }
}

TEST_CASE("getinfo: caps and attribute filtering", "[mockprov][info]") {
  Fresh fresh;
  int rc = 0;
  SECTION("caps the mock lacks give no match") {
    for (uint64_t extra : {FI_ATOMIC, FI_MULTICAST, FI_RMA_EVENT, FI_COLLECTIVE}) {
      InfoPtr hints = make_hints(kCaps | extra);
      CHECK_FALSE(getinfo(hints.get(), &rc));
      CHECK(rc == -FI_ENODATA);
    }
  }
  SECTION("direction bits are added, FI_SOURCE only when asked") {
    InfoPtr hints = make_hints(FI_TAGGED | FI_RMA);
    InfoPtr info = getinfo(hints.get());
    REQUIRE(info);
    CHECK(info->caps == (FI_TAGGED | FI_RMA | FI_SEND | FI_RECV | FI_READ | FI_WRITE |
                         FI_REMOTE_READ | FI_REMOTE_WRITE | FI_LOCAL_COMM | FI_REMOTE_COMM));
    InfoPtr src = make_hints(FI_TAGGED | FI_SOURCE);
    InfoPtr info2 = getinfo(src.get());
    REQUIRE(info2);
    CHECK((info2->caps & FI_SOURCE) != 0);
  }
  SECTION("RMA ordering is refused, SAS is fine") {
    InfoPtr hints = make_hints();
    hints->tx_attr->msg_order = FI_ORDER_RMA_RAW;
    CHECK_FALSE(getinfo(hints.get(), &rc));
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    InfoPtr info = getinfo(hints.get());
    REQUIRE(info);
    CHECK(info->tx_attr->msg_order == FI_ORDER_SAS);
  }
  SECTION("limits above the mock's give no match") {
    InfoPtr h1 = make_hints();
    h1->domain_attr->cq_data_size = 8;
    CHECK_FALSE(getinfo(h1.get()));
    InfoPtr h2 = make_hints();
    h2->tx_attr->inject_size = 8192;
    CHECK_FALSE(getinfo(h2.get()));
    InfoPtr h3 = make_hints();
    h3->tx_attr->iov_limit = 5;
    CHECK_FALSE(getinfo(h3.get()));
    InfoPtr h4 = make_hints();
    h4->tx_attr->rma_iov_limit = 2;
    CHECK_FALSE(getinfo(h4.get()));
    InfoPtr h5 = make_hints();
    h5->domain_attr->mr_key_size = 8;
    CHECK_FALSE(getinfo(h5.get()));
  }
  SECTION("endpoint type, progress, fabric and domain names") {
    InfoPtr h1 = make_hints();
    h1->ep_attr->type = FI_EP_MSG;
    CHECK_FALSE(getinfo(h1.get()));
    InfoPtr h2 = make_hints();
    h2->domain_attr->data_progress = FI_PROGRESS_AUTO;
    CHECK_FALSE(getinfo(h2.get()));
    InfoPtr h3 = make_hints();
    h3->fabric_attr->name = strdup("tcp");
    CHECK_FALSE(getinfo(h3.get()));
    InfoPtr h4 = make_hints();
    h4->fabric_attr->name = strdup("efa");
    CHECK(getinfo(h4.get()));
    InfoPtr h5 = make_hints();
    h5->domain_attr->name = strdup("rdmap99s27-rdm");
    CHECK_FALSE(getinfo(h5.get()));
  }
  SECTION("requested values are echoed") {
    InfoPtr hints = make_hints();
    hints->tx_attr->inject_size = 256;
    hints->tx_attr->size = 128;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->av_type = FI_AV_MAP;  // EFA 2.1+ answers TABLE anyway
    InfoPtr info = getinfo(hints.get());
    REQUIRE(info);
    CHECK(info->tx_attr->inject_size == 256);
    CHECK(info->tx_attr->size == 128);
    CHECK(info->domain_attr->threading == FI_THREAD_DOMAIN);
    CHECK(info->domain_attr->av_type == FI_AV_TABLE);
  }
}

TEST_CASE("addresses: getname, AV insert/lookup/straddr", "[mockprov][av]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  CHECK(p.a.name != p.b.name);
  CHECK(std::memcmp(p.a.name.data(), p.b.name.data(), 16) == 0);  // same NIC, same GID
  size_t small = 8;
  uint8_t buf[64];
  CHECK(fi_getname(&p.a.ep->fid, buf, &small) == -FI_ETOOSMALL);
  CHECK(small == 32);
  fi_addr_t again = FI_ADDR_NOTAVAIL;
  REQUIRE(fi_av_insert(p.a.av, p.b.name.data(), 1, &again, 0, nullptr) == 1);
  CHECK(again == p.a2b);  // EFA hands back the existing entry
  size_t len = sizeof buf;
  REQUIRE(fi_av_lookup(p.a.av, p.a2b, buf, &len) == 0);
  CHECK(len == 32);
  CHECK(std::memcmp(buf, p.b.name.data(), 32) == 0);
  char str[128];
  size_t slen = sizeof str;
  REQUIRE(fi_av_straddr(p.a.av, p.b.name.data(), str, &slen) == str);
  CHECK(std::string(str).rfind("fi_addr_efa://[fe80::", 0) == 0);
  CHECK(slen == std::strlen(str) + 1);
  len = sizeof buf;
  CHECK(fi_av_lookup(p.a.av, 1234, buf, &len) == -FI_EINVAL);
}

TEST_CASE("objects: enable needs AV and CQs; busy objects refuse to close", "[mockprov][objects]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  REQUIRE(fi_fabric(info->fabric_attr, &fabric, nullptr) == 0);
  REQUIRE(fi_domain(fabric, info.get(), &domain, nullptr) == 0);
  fid_ep* ep = nullptr;
  REQUIRE(fi_endpoint(domain, info.get(), &ep, nullptr) == 0);
  CHECK(fi_enable(ep) == -FI_ENOAV);
  fid_av* av = nullptr;
  fi_av_attr av_attr{};
  REQUIRE(fi_av_open(domain, &av_attr, &av, nullptr) == 0);
  REQUIRE(fi_ep_bind(ep, &av->fid, 0) == 0);
  CHECK(fi_enable(ep) == -FI_ENOCQ);
  fid_cq* cq = nullptr;
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  REQUIRE(fi_cq_open(domain, &cq_attr, &cq, nullptr) == 0);
  REQUIRE(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) == 0);
  REQUIRE(fi_enable(ep) == 0);
  CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT) == -FI_EOPBADSTATE);  // binding after enable
  CHECK(fi_close(&cq->fid) == -FI_EBUSY);
  CHECK(fi_close(&domain->fid) == -FI_EBUSY);
  CHECK(fi_close(&fabric->fid) == -FI_EBUSY);
  CHECK(violations(MOCKEFA_V_BUSY_CLOSE) == 3);
  mockefa_counters c = counters();
  CHECK(c.open_eps >= 1);
  CHECK(fi_close(&ep->fid) == 0);
  CHECK(fi_close(&av->fid) == 0);
  CHECK(fi_close(&cq->fid) == 0);
  CHECK(fi_close(&domain->fid) == 0);
  CHECK(fi_close(&fabric->fid) == 0);
  CHECK(counters().open_eps == c.open_eps - 1);
}

TEST_CASE("tagged: expected receive, data and completion fields", "[mockprov][tagged]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  std::vector<uint8_t> src = pattern(1000, 3), dst(1000, 0);
  Mr smr(p.a.domain, src.data(), src.size()), rmr(p.b.domain, dst.data(), dst.size());
  int rctx = 0, sctx = 0;
  REQUIRE(fi_trecv(p.b.ep, dst.data(), dst.size(), rmr.desc(), FI_ADDR_UNSPEC, 0x1234, 0, &rctx) ==
          0);
  REQUIRE(fi_tsenddata(p.a.ep, src.data(), src.size(), smr.desc(), 0xfeedbeef, p.a2b, 0x1234,
                       &sctx) == 0);
  fi_cq_tagged_entry e{};
  fi_addr_t from = FI_ADDR_NOTAVAIL;
  ssize_t r = -FI_EAGAIN;
  for (int i = 0; i < kMaxPolls && r == -FI_EAGAIN; ++i) r = fi_cq_readfrom(p.b.rx, &e, 1, &from);
  REQUIRE(r == 1);
  CHECK(e.op_context == &rctx);
  CHECK(e.flags == (FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA));
  CHECK(e.len == 1000);
  CHECK(e.buf == dst.data());
  CHECK(e.data == 0xfeedbeef);
  CHECK(e.tag == 0x1234);
  CHECK(from == p.b2a);
  CHECK(dst == src);
  Completion c;
  REQUIRE(wait_cq(p.a.tx, &c));
  CHECK_FALSE(c.error);
  CHECK(c.e.op_context == &sctx);
  CHECK(c.e.flags == (FI_SEND | FI_TAGGED));
  CHECK(counters().violations_total == 0);
}

TEST_CASE("tagged: matching with ignore bits, directed receive, unexpected queue",
          "[mockprov][tagged]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Node a(info.get()), b(info.get()), c(info.get());
  fi_addr_t a2c = a.insert(c), b2c = b.insert(c), c2a = c.insert(a);
  c.insert(b);
  uint64_t va = 0xA, vb = 0xB, got1 = 0, got2 = 0, got3 = 0;
  Mr ma(a.domain, &va, 8), mb(b.domain, &vb, 8), mc(c.domain, &got1, 8), mc2(c.domain, &got2, 8),
      mc3(c.domain, &got3, 8);
  // Both arrive before any receive is posted: they wait in c's unexpected queue.
  REQUIRE(fi_tsend(a.ep, &va, 8, ma.desc(), a2c, 0x100, nullptr) == 0);
  REQUIRE(fi_tsend(b.ep, &vb, 8, mb.desc(), b2c, 0x200, nullptr) == 0);
  c.progress();
  CHECK(counters().unexpected_msgs == 2);
  // Eager messages: the senders complete without a matching receive.
  Completion done;
  REQUIRE(wait_cq(a.tx, &done));
  REQUIRE(wait_cq(b.tx, &done));
  int k1 = 0, k2 = 0, k3 = 0;
  // Tag 0x2xx from anyone (ignore low byte): b's message even though a's is older.
  REQUIRE(fi_trecv(c.ep, &got1, 8, mc.desc(), FI_ADDR_UNSPEC, 0x2ff, 0xff, &k1) == 0);
  Completion r1;
  REQUIRE(wait_cq(c.rx, &r1));
  CHECK(r1.e.op_context == &k1);
  CHECK(r1.e.tag == 0x200);
  CHECK(got1 == 0xB);
  // Directed: only from a.
  REQUIRE(fi_trecv(c.ep, &got2, 8, mc2.desc(), c2a, 0, ~0ull, &k2) == 0);
  Completion r2;
  REQUIRE(wait_cq(c.rx, &r2));
  CHECK(r2.e.op_context == &k2);
  CHECK(got2 == 0xA);
  // Nothing left: a receive for tag 0x300 stays pending.
  REQUIRE(fi_trecv(c.ep, &got3, 8, mc3.desc(), FI_ADDR_UNSPEC, 0x300, 0, &k3) == 0);
  CHECK(stays_quiet(c.rx, 5, {&a, &b}));
  REQUIRE(fi_cancel(&c.ep->fid, &k3) == 0);
  Completion r3;
  REQUIRE(wait_cq(c.rx, &r3));
  REQUIRE(r3.error);
  CHECK(r3.err.err == FI_ECANCELED);
  CHECK(r3.err.op_context == &k3);
}

TEST_CASE("RNR: a full unexpected queue costs the message a back-off and its sender EAGAIN",
          "[mockprov][rnr]") {
  // Two messages fit c's unexpected queue; the third finds c not ready: it waits on the wire for
  // the back-off (1 s here), and a's sends to c return -FI_EAGAIN meanwhile, as EFA's RNR
  // back-off does; b, another sender, is not held back by a's back-off.
  Env env;
  env.set("MOCKEFA_UNEXPECTED_LIMIT", "2").set("MOCKEFA_RNR_DELAY_US", "1000000");
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Node a(info.get()), b(info.get()), c(info.get());
  fi_addr_t a2c = a.insert(c), b2c = b.insert(c);
  c.insert(a);
  c.insert(b);
  uint64_t v[4] = {1, 2, 3, 4}, got[4] = {0, 0, 0, 0};
  Mr ma(a.domain, v, sizeof(v)), mb(b.domain, v, sizeof(v)), mc(c.domain, got, sizeof(got));
  for (int i = 0; i < 3; ++i)
    REQUIRE(fi_tsend(a.ep, &v[i], 8, ma.desc(), a2c, 0x100 + i, nullptr) == 0);
  c.progress();
  a.progress();
  c.progress();
  CHECK(counters().unexpected_msgs == 2);
  CHECK(counters().rnr_events == 1);
  CHECK(counters().rnr_backoff_us == 1000000);
  // a is in back-off toward c.
  CHECK(fi_tsend(a.ep, &v[3], 8, ma.desc(), a2c, 0x103, nullptr) == -FI_EAGAIN);
  CHECK(counters().eagain_rnr == 1);
  // b is not.
  REQUIRE(fi_tsend(b.ep, &v[3], 8, mb.desc(), b2c, 0x200, nullptr) == 0);
  int k[4];
  for (int i = 0; i < 3; ++i)
    REQUIRE(fi_trecv(c.ep, &got[i], 8, mc.desc(), FI_ADDR_UNSPEC, 0x100 + i, 0, &k[i]) == 0);
  REQUIRE(fi_trecv(c.ep, &got[3], 8, mc.desc(), FI_ADDR_UNSPEC, 0x200, 0, &k[3]) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<void*> done;
  while (done.size() < 4 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    a.progress();
    b.progress();
    fi_cq_tagged_entry e;
    if (fi_cq_read(c.rx, &e, 1) == 1) {
      done.push_back(e.op_context);
      // The third of a's messages is the last: it waited for its back-off.
      if (e.op_context == &k[2])
        CHECK(std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(500));
    }
  }
  REQUIRE(done.size() == 4);
  CHECK(done.back() == &k[2]);
  CHECK(got[0] == 1);
  CHECK(got[1] == 2);
  CHECK(got[2] == 3);
  CHECK(got[3] == 4);
  // The back-off is over: a sends to c again.
  int k4 = 0;
  REQUIRE(fi_trecv(c.ep, &got[0], 8, mc.desc(), FI_ADDR_UNSPEC, 0x103, 0, &k4) == 0);
  CHECK(fi_tsend(a.ep, &v[3], 8, ma.desc(), a2c, 0x103, nullptr) == 0);
  Completion r;
  REQUIRE(wait_cq(c.rx, &r, {&a}));
  CHECK(r.e.op_context == &k4);
  CHECK(got[0] == 4);
  CHECK(counters().rnr_events == 1);
}

TEST_CASE("tagged: truncation is an FI_ETRUNC error completion with olen", "[mockprov][tagged]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  std::vector<uint8_t> src = pattern(300, 9), dst(100, 0);
  Mr smr(p.a.domain, src.data(), src.size()), rmr(p.b.domain, dst.data(), dst.size());
  int rctx = 0;
  REQUIRE(fi_trecv(p.b.ep, dst.data(), dst.size(), rmr.desc(), FI_ADDR_UNSPEC, 7, 0, &rctx) == 0);
  REQUIRE(fi_tsend(p.a.ep, src.data(), src.size(), smr.desc(), p.a2b, 7, nullptr) == 0);
  Completion c;
  REQUIRE(wait_cq(p.b.rx, &c));
  REQUIRE(c.error);
  CHECK(c.err.err == FI_ETRUNC);
  CHECK(c.err.prov_errno == -FI_ETRUNC);
  CHECK(c.err.olen == 200);
  CHECK(c.err.len == 100);
  CHECK(c.err.op_context == &rctx);
  CHECK(c.err.tag == 7);
  CHECK(std::equal(dst.begin(), dst.end(), src.begin()));
  Completion s;
  REQUIRE(wait_cq(p.a.tx, &s));
  CHECK_FALSE(s.error);  // the sender sees success, as on EFA
  CHECK(counters().truncations == 1);
}

TEST_CASE("progress: nothing moves without CQ reads; a polling receiver completes the sender",
          "[mockprov][progress]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  std::vector<uint8_t> src = pattern(64 * 1024, 1), dst(64 * 1024, 0);  // above the eager size
  Mr smr(p.a.domain, src.data(), src.size()), rmr(p.b.domain, dst.data(), dst.size());
  REQUIRE(fi_tsend(p.a.ep, src.data(), src.size(), smr.desc(), p.a2b, 1, nullptr) == 0);
  // The sender alone can poll forever: its receiver never ran.
  CHECK(stays_quiet(p.a.tx, 20));
  // Receiver polls without a receive: the rendezvous message waits, the sender stays incomplete.
  CHECK(stays_quiet(p.b.rx, 3));
  CHECK(stays_quiet(p.a.tx, 3));
  REQUIRE(fi_trecv(p.b.ep, dst.data(), dst.size(), rmr.desc(), FI_ADDR_UNSPEC, 1, 0, nullptr) == 0);
  CHECK(dst != src);  // posting the receive moves no data
  Completion r;
  REQUIRE(wait_cq(p.b.rx, &r));  // only the receiver polls
  CHECK(dst == src);
  // One read on the sender's side finds its completion.
  fi_cq_tagged_entry e;
  CHECK(fi_cq_read(p.a.tx, &e, 1) == 1);
}

TEST_CASE("msg: send/recv, iovecs, senddata, inject, zero-length and SAS order",
          "[mockprov][msg]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get(), FI_CQ_FORMAT_DATA);
  std::vector<uint8_t> src = pattern(256, 5), dst(256, 0);
  Mr smr(p.a.domain, src.data(), src.size()), rmr(p.b.domain, dst.data(), dst.size());

  SECTION("two iovecs each side") {
    iovec siov[2] = {{src.data(), 100}, {src.data() + 100, 156}};
    void* sdesc[2] = {smr.desc(), smr.desc()};
    iovec riov[2] = {{dst.data(), 56}, {dst.data() + 56, 200}};
    void* rdesc[2] = {rmr.desc(), rmr.desc()};
    REQUIRE(fi_recvv(p.b.ep, riov, rdesc, 2, FI_ADDR_UNSPEC, nullptr) == 0);
    REQUIRE(fi_sendv(p.a.ep, siov, sdesc, 2, p.a2b, nullptr) == 0);
    fi_cq_data_entry e{};
    ssize_t r = -FI_EAGAIN;
    for (int i = 0; i < kMaxPolls && r == -FI_EAGAIN; ++i) r = fi_cq_read(p.b.rx, &e, 1);
    REQUIRE(r == 1);
    CHECK(e.flags == (FI_RECV | FI_MSG));
    CHECK(e.len == 256);
    CHECK(dst == src);
  }
  SECTION("senddata and inject; the inject buffer is free at once") {
    uint64_t v = 0x1111;
    REQUIRE(fi_recv(p.b.ep, dst.data(), 8, rmr.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
    REQUIRE(fi_inject(p.a.ep, &v, sizeof v, p.a2b) == 0);
    v = 0x2222;  // must not change what was sent
    REQUIRE(fi_recv(p.b.ep, dst.data() + 8, 8, rmr.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
    REQUIRE(fi_senddata(p.a.ep, src.data(), 8, smr.desc(), 42, p.a2b, nullptr) == 0);
    fi_cq_data_entry e[2]{};
    ssize_t got = 0;
    for (int i = 0; i < kMaxPolls && got < 2; ++i) {
      ssize_t r = fi_cq_read(p.b.rx, &e[got], 2 - static_cast<size_t>(got));
      if (r > 0) got += r;
    }
    REQUIRE(got == 2);
    uint64_t first = 0;
    std::memcpy(&first, dst.data(), 8);
    CHECK(first == 0x1111);
    CHECK(e[1].flags == (FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA));
    CHECK(e[1].data == 42);
    fi_cq_data_entry s{};
    int n = 0;
    for (int i = 0; i < 20; ++i) n += fi_cq_read(p.a.tx, &s, 1) == 1;
    CHECK(n == 1);  // the senddata only: fi_inject has no completion
  }
  SECTION("zero-length send with NULL buffer and NULL desc under FI_MR_LOCAL") {
    REQUIRE(fi_recv(p.b.ep, nullptr, 0, nullptr, FI_ADDR_UNSPEC, nullptr) == 0);
    REQUIRE(fi_send(p.a.ep, nullptr, 0, nullptr, p.a2b, nullptr) == 0);
    fi_cq_data_entry e{};
    ssize_t r = -FI_EAGAIN;
    for (int i = 0; i < kMaxPolls && r == -FI_EAGAIN; ++i) r = fi_cq_read(p.b.rx, &e, 1);
    REQUIRE(r == 1);
    CHECK(e.len == 0);
    CHECK(counters().violations_total == 0);
  }
  SECTION("send-after-send order holds for many messages") {
    constexpr int kN = 16;
    for (int i = 0; i < kN; ++i)
      REQUIRE(fi_recv(p.b.ep, dst.data() + i, 1, rmr.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
    for (int i = 0; i < kN; ++i)
      REQUIRE(fi_send(p.a.ep, src.data() + i, 1, smr.desc(), p.a2b, nullptr) == 0);
    int got = 0;
    fi_cq_data_entry e{};
    for (int i = 0; i < kMaxPolls && got < kN; ++i) got += fi_cq_read(p.b.rx, &e, 1) == 1;
    REQUIRE(got == kN);
    CHECK(std::equal(dst.begin(), dst.begin() + kN, src.begin()));
  }
}

TEST_CASE("checker: MOCKEFA_CTX_REUSE=1 takes a context again on efa, as EFA does",
          "[mockprov][checker]") {
  // fabtests' bandwidth loops post a receive with the context of one still in flight; EFA's efa
  // fabric (mode 0) takes it, and both complete with that context.
  Env env;
  env.set("MOCKEFA_CTX_REUSE", "1");
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  uint64_t a1 = 1, a2 = 2, b1 = 0, b2 = 0;
  Mr ma1(p.a.domain, &a1, 8), ma2(p.a.domain, &a2, 8), mb1(p.b.domain, &b1, 8),
      mb2(p.b.domain, &b2, 8);
  int ctx = 0;
  REQUIRE(fi_trecv(p.b.ep, &b1, 8, mb1.desc(), FI_ADDR_UNSPEC, 1, 0, &ctx) == 0);
  REQUIRE(fi_trecv(p.b.ep, &b2, 8, mb2.desc(), FI_ADDR_UNSPEC, 1, 0, &ctx) == 0);
  CHECK(violations(MOCKEFA_V_CTX_REUSE) == 0);
  REQUIRE(fi_tsend(p.a.ep, &a1, 8, ma1.desc(), p.a2b, 1, nullptr) == 0);
  REQUIRE(fi_tsend(p.a.ep, &a2, 8, ma2.desc(), p.a2b, 1, nullptr) == 0);
  Completion r1, r2, s;
  REQUIRE(wait_cq(p.b.rx, &r1, {&p.a}));
  REQUIRE(wait_cq(p.b.rx, &r2, {&p.a}));
  CHECK(r1.e.op_context == &ctx);
  CHECK(r2.e.op_context == &ctx);
  CHECK(b1 == 1);
  CHECK(b2 == 2);
  REQUIRE(wait_cq(p.a.tx, &s, {&p.b}));
  REQUIRE(wait_cq(p.a.tx, &s, {&p.b}));
  // Both were read: the context is free, and taken once more; in flight, once more again.
  REQUIRE(fi_trecv(p.b.ep, &b1, 8, mb1.desc(), FI_ADDR_UNSPEC, 3, 0, &ctx) == 0);
  REQUIRE(fi_trecv(p.b.ep, &b2, 8, mb2.desc(), FI_ADDR_UNSPEC, 3, 0, &ctx) == 0);
  CHECK(violations(MOCKEFA_V_CTX_REUSE) == 0);
  REQUIRE(fi_cancel(&p.b.ep->fid, &ctx) == 0);
  REQUIRE(fi_cancel(&p.b.ep->fid, &ctx) == 0);
  Completion c;
  REQUIRE(wait_cq(p.b.rx, &c));
  REQUIRE(wait_cq(p.b.rx, &c));
}

TEST_CASE("checker: context reuse while in flight is refused", "[mockprov][checker]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  uint64_t a = 1, b = 0;
  Mr ma(p.a.domain, &a, 8), mb(p.b.domain, &b, 8);
  int ctx = 0;
  REQUIRE(fi_trecv(p.b.ep, &b, 8, mb.desc(), FI_ADDR_UNSPEC, 1, 0, &ctx) == 0);
  CHECK(fi_trecv(p.b.ep, &b, 8, mb.desc(), FI_ADDR_UNSPEC, 2, 0, &ctx) == -FI_EINVAL);
  CHECK(violations(MOCKEFA_V_CTX_REUSE) == 1);
  // Another endpoint's contexts are its own business.
  REQUIRE(fi_tsend(p.a.ep, &a, 8, ma.desc(), p.a2b, 1, &ctx) == 0);
  CHECK(violations(MOCKEFA_V_CTX_REUSE) == 1);
  Completion r, s;
  REQUIRE(wait_cq(p.b.rx, &r));
  REQUIRE(wait_cq(p.a.tx, &s));
  CHECK(r.e.op_context == &ctx);
  CHECK(s.e.op_context == &ctx);
  // Once the completion was read the context is free again.
  REQUIRE(fi_trecv(p.b.ep, &b, 8, mb.desc(), FI_ADDR_UNSPEC, 2, 0, &ctx) == 0);
  CHECK(violations(MOCKEFA_V_CTX_REUSE) == 1);
  REQUIRE(fi_cancel(&p.b.ep->fid, &ctx) == 0);
  Completion c;
  REQUIRE(wait_cq(p.b.rx, &c));
  CHECK(c.error);
}

TEST_CASE("cq: CONTEXT and MSG formats, selective completion", "[mockprov][cq]") {
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  SECTION("FI_CQ_FORMAT_CONTEXT writes only op_context") {
    Pair p(info.get(), FI_CQ_FORMAT_CONTEXT);
    int ctx = 0;
    REQUIRE(fi_recv(p.b.ep, nullptr, 0, nullptr, FI_ADDR_UNSPEC, &ctx) == 0);
    REQUIRE(fi_send(p.a.ep, nullptr, 0, nullptr, p.a2b, nullptr) == 0);
    fi_cq_entry e[2] = {{nullptr}, {reinterpret_cast<void*>(0x1)}};
    ssize_t r = -FI_EAGAIN;
    for (int i = 0; i < kMaxPolls && r == -FI_EAGAIN; ++i) r = fi_cq_read(p.b.rx, e, 2);
    REQUIRE(r == 1);
    CHECK(e[0].op_context == &ctx);
    CHECK(e[1].op_context == reinterpret_cast<void*>(0x1));  // nothing written past one entry
  }
  SECTION("FI_CQ_FORMAT_MSG carries flags and len") {
    Pair p(info.get(), FI_CQ_FORMAT_MSG);
    uint32_t v = 7, got = 0;
    Mr ma(p.a.domain, &v, 4), mb(p.b.domain, &got, 4);
    REQUIRE(fi_trecv(p.b.ep, &got, 4, mb.desc(), FI_ADDR_UNSPEC, 0, 0, nullptr) == 0);
    REQUIRE(fi_tsend(p.a.ep, &v, 4, ma.desc(), p.a2b, 0, nullptr) == 0);
    fi_cq_msg_entry e{};
    ssize_t r = -FI_EAGAIN;
    for (int i = 0; i < kMaxPolls && r == -FI_EAGAIN; ++i) r = fi_cq_read(p.b.rx, &e, 1);
    REQUIRE(r == 1);
    CHECK(e.flags == (FI_RECV | FI_TAGGED));
    CHECK(e.len == 4);
    CHECK(got == 7);
  }
  SECTION("FI_SELECTIVE_COMPLETION: only ops with FI_COMPLETION report success") {
    fid_fabric* fabric = nullptr;
    fid_domain* domain = nullptr;
    REQUIRE(fi_fabric(info->fabric_attr, &fabric, nullptr) == 0);
    REQUIRE(fi_domain(fabric, info.get(), &domain, nullptr) == 0);
    fi_av_attr av_attr{};
    fid_av* av = nullptr;
    REQUIRE(fi_av_open(domain, &av_attr, &av, nullptr) == 0);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    fid_cq* cq = nullptr;
    REQUIRE(fi_cq_open(domain, &cq_attr, &cq, nullptr) == 0);
    fid_ep* ep = nullptr;
    REQUIRE(fi_endpoint(domain, info.get(), &ep, nullptr) == 0);
    REQUIRE(fi_ep_bind(ep, &av->fid, 0) == 0);
    REQUIRE(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION) == 0);
    REQUIRE(fi_enable(ep) == 0);
    uint8_t name[32];
    size_t len = sizeof name;
    REQUIRE(fi_getname(&ep->fid, name, &len) == 0);
    fi_addr_t self = FI_ADDR_NOTAVAIL;
    REQUIRE(fi_av_insert(av, name, 1, &self, 0, nullptr) == 1);
    int quiet = 0, loud = 0;
    REQUIRE(fi_recv(ep, nullptr, 0, nullptr, FI_ADDR_UNSPEC, &quiet) == 0);
    REQUIRE(fi_send(ep, nullptr, 0, nullptr, self, &quiet) ==
            -FI_EINVAL);  // same endpoint, ctx in flight
    iovec iov{nullptr, 0};
    fi_msg m{&iov, nullptr, 1, self, &loud, 0};
    REQUIRE(fi_sendmsg(ep, &m, FI_COMPLETION) == 0);
    std::vector<void*> seen;
    fi_cq_tagged_entry e{};
    for (int i = 0; i < 20; ++i)
      if (fi_cq_read(cq, &e, 1) == 1) seen.push_back(e.op_context);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0] == &loud);
    // The silent receive completed too: its context is free again.
    REQUIRE(fi_recv(ep, nullptr, 0, nullptr, FI_ADDR_UNSPEC, &quiet) == 0);
    CHECK(violations(MOCKEFA_V_CTX_REUSE) == 1);
    CHECK(fi_close(&ep->fid) == 0);
    CHECK(fi_close(&cq->fid) == 0);
    CHECK(fi_close(&av->fid) == 0);
    CHECK(fi_close(&domain->fid) == 0);
    CHECK(fi_close(&fabric->fid) == 0);
  }
}

TEST_CASE("counters: open-object gauges return to where they were", "[mockprov][api]") {
  Fresh fresh;
  mockefa_counters before = counters();
  {
    InfoPtr hints = make_hints();
    InfoPtr info = getinfo(hints.get());
    Pair p(info.get());
    uint64_t v = 0;
    Mr m(p.a.domain, &v, 8);
    mockefa_counters during = counters();
    CHECK(during.open_eps == before.open_eps + 2);
    CHECK(during.open_cqs == before.open_cqs + 4);
    CHECK(during.open_mrs == before.open_mrs + 1);
    CHECK(during.open_domains == before.open_domains + 2);
  }
  mockefa_counters after = counters();
  CHECK(after.open_fabrics == before.open_fabrics);
  CHECK(after.open_domains == before.open_domains);
  CHECK(after.open_avs == before.open_avs);
  CHECK(after.open_cqs == before.open_cqs);
  CHECK(after.open_eps == before.open_eps);
  CHECK(after.open_mrs == before.open_mrs);
}

TEST_CASE("net: MOCKEFA_NET=udp carries messages and RMA over the wire, and says where",
          "[mockprov][net]") {
  // The same operations as in one process, but each endpoint has a UDP channel, its address says
  // where it listens, and every operation travels as messages of the wire (README, "Across
  // processes"): the way two processes or two network namespaces talk.
  Env env;
  env.set("MOCKEFA_NET", "udp").set("MOCKEFA_RMA", "emulated");
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  REQUIRE(p.a.name.size() == 32);
  CHECK(p.a.name[30] == 'N');  // the net marker in the bytes EFA leaves unused
  CHECK(p.a.name[31] == 'T');
  // A tagged message with CQ data larger than one datagram, in order after a small one (SAS).
  std::vector<uint8_t> big = pattern(200000, 5), small = pattern(100, 9);
  std::vector<uint8_t> rbig(200000, 0), rsmall(100, 0);
  Mr sb(p.a.domain, big.data(), big.size()), ss(p.a.domain, small.data(), small.size());
  Mr rb(p.b.domain, rbig.data(), rbig.size()), rs(p.b.domain, rsmall.data(), rsmall.size());
  int k1 = 0, k2 = 0;
  REQUIRE(fi_trecv(p.b.ep, rsmall.data(), rsmall.size(), rs.desc(), FI_ADDR_UNSPEC, 7, 0, &k1) ==
          0);
  REQUIRE(fi_trecv(p.b.ep, rbig.data(), rbig.size(), rb.desc(), FI_ADDR_UNSPEC, 7, 0, &k2) == 0);
  REQUIRE(fi_tsend(p.a.ep, small.data(), small.size(), ss.desc(), p.a2b, 7, nullptr) == 0);
  REQUIRE(fi_tsenddata(p.a.ep, big.data(), big.size(), sb.desc(), 0x1234, p.a2b, 7, nullptr) == 0);
  Completion c1, c2, s1, s2;
  REQUIRE(wait_cq(p.b.rx, &c1, {&p.a}, 20000));
  REQUIRE(wait_cq(p.b.rx, &c2, {&p.a}, 20000));
  CHECK(c1.e.op_context == &k1);
  CHECK(c2.e.op_context == &k2);
  CHECK(c2.e.data == 0x1234);
  CHECK(rsmall == small);
  CHECK(rbig == big);
  REQUIRE(wait_cq(p.a.tx, &s1, {&p.b}, 20000));
  REQUIRE(wait_cq(p.a.tx, &s2, {&p.b}, 20000));
  CHECK_FALSE(s1.error);
  CHECK_FALSE(s2.error);
  // An RMA write with CQ data, then a read back; a write with a wrong key fails at the initiator.
  std::vector<uint8_t> target(100000, 0), back(100000, 0);
  Mr tm(p.b.domain, target.data(), target.size()), bm(p.a.domain, back.data(), back.size());
  REQUIRE(post_retry(
              [&] {
                return fi_writedata(p.a.ep, big.data(), target.size(), sb.desc(), 0x55, p.a2b,
                                    reinterpret_cast<uint64_t>(target.data()), tm.key(), nullptr);
              },
              {&p.a, &p.b}) == 0);
  Completion w, ev;
  REQUIRE(wait_cq(p.b.rx, &ev, {&p.a}, 20000));
  CHECK(ev.e.data == 0x55);
  CHECK(ev.e.flags & FI_REMOTE_CQ_DATA);
  REQUIRE(wait_cq(p.a.tx, &w, {&p.b}, 20000));
  CHECK_FALSE(w.error);
  CHECK(std::memcmp(target.data(), big.data(), target.size()) == 0);
  REQUIRE(post_retry(
              [&] {
                return fi_read(p.a.ep, back.data(), back.size(), bm.desc(), p.a2b,
                               reinterpret_cast<uint64_t>(target.data()), tm.key(), nullptr);
              },
              {&p.a, &p.b}) == 0);
  Completion r;
  REQUIRE(wait_cq(p.a.tx, &r, {&p.b}, 20000));
  CHECK_FALSE(r.error);
  CHECK(back == target);
  REQUIRE(post_retry(
              [&] {
                return fi_write(p.a.ep, big.data(), 64, sb.desc(), p.a2b,
                                reinterpret_cast<uint64_t>(target.data()), tm.key() + 1, nullptr);
              },
              {&p.a, &p.b}) == 0);
  Completion bad;
  REQUIRE(wait_cq(p.a.tx, &bad, {&p.b}, 20000));
  CHECK(bad.error);
}

TEST_CASE("net: messages of one sender are taken in its order, whatever the wire did",
          "[mockprov][net]") {
  // A third of the datagrams lost (so a big message's last piece often comes after a later small
  // message) and the target's passes shuffled: the receives, posted for one tag, must still get
  // the messages in the order they were sent (FI_ORDER_SAS). Before 2026-11-29 a message took its
  // id when its last piece came, and the shuffled passes let the lower id arrive first.
  Env env;
  env.set("MOCKEFA_NET", "udp").set("MOCKEFA_NET_LOSS", "30").set("MOCKEFA_WIRE_REORDER", "1");
  Fresh fresh;
  InfoPtr hints = make_hints();
  hints->tx_attr->msg_order = FI_ORDER_SAS;  // as the plugin asks (without it, no order is due)
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  constexpr int kN = 12;
  std::vector<std::vector<uint8_t>> sent, got;
  std::vector<std::unique_ptr<Mr>> mrs;
  std::vector<int> ctx(kN);
  for (int i = 0; i < kN; ++i) {
    // Big and small in turn: 180,000 bytes (four pieces) and 16 bytes.
    sent.push_back(pattern(i % 2 == 0 ? 180000 : 16, static_cast<uint8_t>(i)));
    got.emplace_back(180000, 0);
  }
  for (int i = 0; i < kN; ++i) {
    mrs.emplace_back(new Mr(p.b.domain, got[i].data(), got[i].size()));
    REQUIRE(fi_trecv(p.b.ep, got[i].data(), got[i].size(), mrs.back()->desc(), FI_ADDR_UNSPEC, 3, 0,
                     &ctx[i]) == 0);
  }
  for (int i = 0; i < kN; ++i) {
    mrs.emplace_back(new Mr(p.a.domain, sent[i].data(), sent[i].size()));
    REQUIRE(fi_tsend(p.a.ep, sent[i].data(), sent[i].size(), mrs.back()->desc(), p.a2b, 3,
                     nullptr) == 0);
  }
  int done = 0;
  for (int n = 0; n < 200000 && done < kN; ++n) {
    p.a.progress();
    fi_cq_tagged_entry e;
    if (fi_cq_read(p.b.rx, &e, 1) == 1) ++done;
  }
  REQUIRE(done == kN);
  for (int i = 0; i < kN; ++i) {
    INFO("receive " << i);
    CHECK(std::memcmp(got[i].data(), sent[i].data(), sent[i].size()) == 0);
  }
  Completion s;
  for (int i = 0; i < kN; ++i) REQUIRE(wait_cq(p.a.tx, &s, {&p.b}, 200000));
}

TEST_CASE("net: an operation the target has no room to put together fails at its initiator",
          "[mockprov][net]") {
  // The target holds at most 1 MiB of unfinished operations here: a 2 MiB message cannot be put
  // together, and its sender must hear so (receiver not ready) rather than wait for ever.
  Env env;
  env.set("MOCKEFA_NET", "udp").set("MOCKEFA_NET_REASM_KIB", "1024");
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  std::vector<uint8_t> big = pattern(2 << 20, 1), rbuf(2 << 20, 0);
  Mr sm(p.a.domain, big.data(), big.size()), rm(p.b.domain, rbuf.data(), rbuf.size());
  int rk = 0;
  REQUIRE(fi_trecv(p.b.ep, rbuf.data(), rbuf.size(), rm.desc(), FI_ADDR_UNSPEC, 1, 0, &rk) == 0);
  REQUIRE(fi_tsend(p.a.ep, big.data(), big.size(), sm.desc(), p.a2b, 1, nullptr) == 0);
  Completion s;
  REQUIRE(wait_cq(p.a.tx, &s, {&p.b}, 200000));
  CHECK(s.error);
  CHECK(stays_quiet(p.b.rx, 50, {&p.a}));
  REQUIRE(fi_cancel(&p.b.ep->fid, &rk) == 0);
  Completion c;
  REQUIRE(wait_cq(p.b.rx, &c));
  CHECK(c.err.err == FI_ECANCELED);
}

TEST_CASE("net: an operation whose target stops after taking its messages fails at its initiator",
          "[mockprov][net]") {
  // The target acknowledges the message's datagrams, holds it (no receive posted, so no result
  // yet), then stops for good: a process killed, or one that closed its endpoint. Nothing of the
  // initiator's is unacknowledged, so retransmission cannot find the loss; before 2026-11-29 the
  // send waited for its result forever (fabtests' fi_rdm_tagged_bw hung in its finalize under
  // MOCKEFA_NET_LOSS=10, about 1 run in 10). A probe to a peer that owes results finds it gone.
  Env env;
  env.set("MOCKEFA_NET", "udp").set("MOCKEFA_NET_GIVE_UP_MS", "300");
  Fresh fresh;
  InfoPtr hints = make_hints();
  InfoPtr info = getinfo(hints.get());
  Pair p(info.get());
  std::vector<uint8_t> msg = pattern(100000, 4);  // above the eager size: no result until matched
  Mr sm(p.a.domain, msg.data(), msg.size());
  REQUIRE(fi_tsend(p.a.ep, msg.data(), msg.size(), sm.desc(), p.a2b, 1, nullptr) == 0);
  // Both sides pass a while: the message crosses and is acknowledged, and the target holds it.
  CHECK(stays_quiet(p.a.tx, 200, {&p.b}));
  // Then the target never runs again. The initiator must hear within a few give-up times.
  Completion s;
  bool done = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done && std::chrono::steady_clock::now() < until) {
    done = wait_cq(p.a.tx, &s, {}, 1000);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(done);
  CHECK(s.error);
  CHECK(s.err.prov_errno == 15);  // EFA's "unreachable remote"
}
