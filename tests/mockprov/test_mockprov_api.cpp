// Tests of the mock EFA provider: what depends on the API version the application asked for
// (MOCKEFA_DEVICE=old's device RDMA default, FI_MR_DMABUF from 1.20), device RDMA and the
// emulated-RMA options, and the 128-byte in-order options (MOCKEFA_INORDER128).
//
// libfabric 1.17 refuses fi_getinfo for 1.18 or 1.20, and a provider built on 1.17 headers is
// skipped for them anyway. The behaviour at those versions is then exercised through
// getinfo_at(), which stamps the version into fabric_attr->api_version (what the core passes to
// the provider's fi_fabric); the cases that ask fi_getinfo itself for 1.18/1.20 run only where
// the headers and the library are new enough, and say so with a WARN elsewhere.
#include <sys/mman.h>
#include <unistd.h>

#include "mock_dmabuf.h"
#include "test_mockprov_util.h"

using namespace mt;

namespace {

constexpr uint32_t kApi117 = FI_VERSION(1, 17);
constexpr uint32_t kApi118 = FI_VERSION(1, 18);
constexpr uint32_t kApi119 = FI_VERSION(1, 19);
constexpr uint32_t kApi120 = FI_VERSION(1, 20);
constexpr int kOptEfaBase = -(0xefa << 16);
constexpr int kOptEmulatedRead = kOptEfaBase + 1;
constexpr int kOptEmulatedWrite = kOptEfaBase + 2;
constexpr int kOptUseDeviceRdma = kOptEfaBase + 4;
constexpr int kOptSendrecvInOrder128 = kOptEfaBase + 5;
constexpr int kOptWriteInOrder128 = kOptEfaBase + 6;

// Hints without FI_MR_LOCAL: RMA of a few bytes from stack buffers needs only the target's key.
InfoPtr hints_plain() {
  return make_hints(kCaps, FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR);
}

bool real_api_possible(uint32_t api) {
  if (max_api() >= api) return true;
  WARN("fi_getinfo(" << FI_MAJOR(api) << "." << FI_MINOR(api) << ") impossible here (headers "
                     << FI_MAJOR_VERSION << "." << FI_MINOR_VERSION << ", library "
                     << FI_MAJOR(fi_version()) << "." << FI_MINOR(fi_version())
                     << "): covered only with the version stamped into fabric_attr");
  return false;
}

bool get_bool(const Node& n, int opt) {
  bool v = false;
  size_t len = sizeof v;
  REQUIRE(fi_getopt(&n.ep->fid, FI_OPT_ENDPOINT, opt, &v, &len) == 0);
  CHECK(len == sizeof v);
  return v;
}

int set_bool(const Node& n, int opt, bool v) {
  return fi_setopt(&n.ep->fid, FI_OPT_ENDPOINT, opt, &v, sizeof v);
}

const char* nic_device_id(const fi_info* info) {
  REQUIRE(info->nic);
  REQUIRE(info->nic->device_attr);
  return info->nic->device_attr->device_id;
}

// Whether an RMA op of `a` on b's memory completes while only `a` polls (device RDMA), and then
// that it does complete once b polls too (emulated RMA waits for the target).
bool rma_needs_no_target(Pair& p, bool write) {
  uint64_t local = 0x1111, remote = 0x2222;
  Mr rmr(p.b.domain, &remote, sizeof remote);
  Mr lmr(p.a.domain, &local, sizeof local);
  const uint64_t raddr = reinterpret_cast<uint64_t>(&remote);
  if (write)
    REQUIRE(fi_write(p.a.ep, &local, 8, lmr.desc(), p.a2b, raddr, rmr.key(), nullptr) == 0);
  else
    REQUIRE(fi_read(p.a.ep, &local, 8, lmr.desc(), p.a2b, raddr, rmr.key(), nullptr) == 0);
  const bool alone = !stays_quiet(p.a.tx, 20);
  if (!alone) {
    Completion c;
    REQUIRE(wait_cq(p.a.tx, &c, {&p.b}));
    CHECK_FALSE(c.error);
  }
  CHECK(local == remote);
  return alone;
}

}  // namespace

TEST_CASE("api version: fi_fabric records the version the application gave fi_getinfo",
          "[mockprov][api][version]") {
  Fresh fresh;
  REQUIRE(api().last_api_version);
  InfoPtr hints = make_hints();
  SECTION("the newest version possible here") {
    InfoPtr info = getinfo(hints.get(), nullptr, max_api());
    REQUIRE(info);
    CHECK(info->fabric_attr->api_version == max_api());
    Node n(info.get());
    CHECK(api().last_api_version() == max_api());
    CHECK(n.fabric->api_version == max_api());
  }
  SECTION("an older one") {
    InfoPtr info = getinfo(hints.get(), nullptr, FI_VERSION(1, 9));
    REQUIRE(info);
    Node n(info.get());
    CHECK(api().last_api_version() == FI_VERSION(1, 9));
  }
  SECTION("1.20, stamped into fabric_attr where fi_getinfo cannot be asked for it") {
    bool stamped = false;
    InfoPtr info = getinfo_at(hints.get(), kApi120, &stamped);
    REQUIRE(info);
    Node n(info.get());
    CHECK(api().last_api_version() == kApi120);
    CHECK(n.fabric->api_version == kApi120);  // the core copies it from the attr
  }
}

TEST_CASE("MOCKEFA_DEVICE=old: device RDMA off by default at API 1.17, RDMA read on from 1.18",
          "[mockprov][api][version][options]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_DEVICE", "old").set("MOCKEFA_HANDSHAKE", "none");
  InfoPtr hints = hints_plain();
  SECTION("API 1.17: EMULATED_READ and _WRITE true, WRITE_IN_ORDER_128 refused") {
    InfoPtr info = getinfo(hints.get(), nullptr, kApi117);
    REQUIRE(info);
    CHECK(std::string(nic_device_id(info.get())) == "0xefa0");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(get_bool(n, kOptEmulatedRead));
    CHECK(get_bool(n, kOptEmulatedWrite));
    CHECK(set_bool(n, kOptWriteInOrder128, true) == -FI_EOPNOTSUPP);
    CHECK(set_bool(n, kOptWriteInOrder128, false) == 0);
    // The NIC does have RDMA read: the application may opt in, writes stay emulated.
    CHECK(set_bool(n, kOptUseDeviceRdma, true) == 0);
    CHECK_FALSE(get_bool(n, kOptEmulatedRead));
    CHECK(get_bool(n, kOptEmulatedWrite));
    CHECK(set_bool(n, kOptWriteInOrder128, true) == -FI_EOPNOTSUPP);
    REQUIRE(fi_enable(n.ep) == 0);
    CHECK_FALSE(get_bool(n, kOptEmulatedRead));  // valid after fi_enable too
    CHECK(counters().violations_total == 0);
  }
  SECTION("API 1.17: reads and writes both wait for the target's progress") {
    InfoPtr info = getinfo(hints.get(), nullptr, kApi117);
    REQUIRE(info);
    Pair p(info.get());
    CHECK_FALSE(rma_needs_no_target(p, false));
    CHECK_FALSE(rma_needs_no_target(p, true));
  }
  SECTION("API 1.18 (stamped): EMULATED_READ false, _WRITE true; reads go through the device") {
    InfoPtr info = getinfo_at(hints.get(), kApi118);
    REQUIRE(info);
    {
      Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
      CHECK_FALSE(get_bool(n, kOptEmulatedRead));
      CHECK(get_bool(n, kOptEmulatedWrite));
      CHECK(set_bool(n, kOptWriteInOrder128, true) == -FI_EOPNOTSUPP);
      CHECK(set_bool(n, kOptUseDeviceRdma, false) == 0);
      CHECK(get_bool(n, kOptEmulatedRead));
      CHECK(get_bool(n, kOptEmulatedWrite));
    }
    Pair p(info.get());
    CHECK(rma_needs_no_target(p, false));
    CHECK_FALSE(rma_needs_no_target(p, true));
  }
  SECTION("API 1.18 asked of fi_getinfo") {
    if (!real_api_possible(kApi118)) return;
    InfoPtr info = getinfo(hints.get(), nullptr, kApi118);
    REQUIRE(info);
    CHECK(info->fabric_attr->api_version == kApi118);
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(api().last_api_version() == kApi118);
    CHECK_FALSE(get_bool(n, kOptEmulatedRead));
    CHECK(get_bool(n, kOptEmulatedWrite));
    CHECK(set_bool(n, kOptWriteInOrder128, true) == -FI_EOPNOTSUPP);
  }
}

TEST_CASE("MOCKEFA_DEVICE=new (default): MOCKEFA_RMA decides, whatever the API version",
          "[mockprov][api][options]") {
  Fresh fresh;
  Env env;
  InfoPtr hints = hints_plain();
  const uint32_t version = GENERATE(kApi117, kApi118);
  SECTION("MOCKEFA_RMA=emulated (default): no RDMA at all") {
    InfoPtr info = getinfo_at(hints.get(), version);
    REQUIRE(info);
    CHECK(std::string(nic_device_id(info.get())) == "0xefa1");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(get_bool(n, kOptEmulatedRead));
    CHECK(get_bool(n, kOptEmulatedWrite));
    CHECK(set_bool(n, kOptUseDeviceRdma, true) == -FI_EOPNOTSUPP);
    CHECK(set_bool(n, kOptUseDeviceRdma, false) == 0);
  }
  SECTION("MOCKEFA_RMA=device: read and write through the device") {
    env.set("MOCKEFA_RMA", "device").set("MOCKEFA_HANDSHAKE", "none");
    InfoPtr info = getinfo_at(hints.get(), version);
    REQUIRE(info);
    {
      Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
      CHECK_FALSE(get_bool(n, kOptEmulatedRead));
      CHECK_FALSE(get_bool(n, kOptEmulatedWrite));
    }
    Pair p(info.get());
    CHECK(rma_needs_no_target(p, false));
    CHECK(rma_needs_no_target(p, true));
  }
  SECTION("MOCKEFA_DEVICE=new said out loud is the same") {
    env.set("MOCKEFA_DEVICE", "new").set("MOCKEFA_RMA", "device");
    InfoPtr info = getinfo_at(hints.get(), version);
    REQUIRE(info);
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK_FALSE(get_bool(n, kOptEmulatedRead));
    CHECK_FALSE(get_bool(n, kOptEmulatedWrite));
  }
}

TEST_CASE(
    "FI_OPT_EFA_USE_DEVICE_RDMA: before fi_enable; EMULATED_* follow it; FI_EFA_USE_DEVICE_RDMA",
    "[mockprov][options]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_RMA", "device");
  InfoPtr hints = hints_plain();
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  SECTION("switching it per endpoint") {
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(set_bool(n, kOptUseDeviceRdma, false) == 0);
    CHECK(get_bool(n, kOptEmulatedRead));
    CHECK(get_bool(n, kOptEmulatedWrite));
    CHECK(set_bool(n, kOptUseDeviceRdma, true) == 0);
    CHECK_FALSE(get_bool(n, kOptEmulatedRead));
    CHECK_FALSE(get_bool(n, kOptEmulatedWrite));
    int wrong = 1;
    CHECK(fi_setopt(&n.ep->fid, FI_OPT_ENDPOINT, kOptUseDeviceRdma, &wrong, sizeof wrong) ==
          -FI_EINVAL);
    size_t len = 1;
    bool v = false;
    CHECK(fi_getopt(&n.ep->fid, FI_OPT_ENDPOINT, kOptUseDeviceRdma, &v, &len) ==
          -FI_ENOPROTOOPT);  // set only (2.1+)
    REQUIRE(fi_enable(n.ep) == 0);
    CHECK(set_bool(n, kOptUseDeviceRdma, false) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_OPT_STATE) == 1);
    CHECK_FALSE(get_bool(n, kOptEmulatedWrite));
  }
  SECTION("FI_EFA_USE_DEVICE_RDMA=0 is the default, and wins over a conflicting setopt") {
    env.set("FI_EFA_USE_DEVICE_RDMA", "0");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(get_bool(n, kOptEmulatedRead));
    CHECK(get_bool(n, kOptEmulatedWrite));
    CHECK(set_bool(n, kOptUseDeviceRdma, true) == -FI_EINVAL);
    CHECK(set_bool(n, kOptUseDeviceRdma, false) == 0);
    CHECK(get_bool(n, kOptEmulatedWrite));
    CHECK(counters().violations_total == 0);
  }
  SECTION("FI_EFA_USE_DEVICE_RDMA=1 on an old device at API 1.17 turns RDMA read on") {
    env.set("MOCKEFA_DEVICE", "old").set("FI_EFA_USE_DEVICE_RDMA", "yes");
    InfoPtr old_info = getinfo(hints.get(), nullptr, kApi117);
    REQUIRE(old_info);
    Node n(old_info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK_FALSE(get_bool(n, kOptEmulatedRead));
    CHECK(get_bool(n, kOptEmulatedWrite));
    CHECK(set_bool(n, kOptUseDeviceRdma, false) == -FI_EINVAL);
    CHECK(counters().violations_total == 0);
  }
  SECTION(
      "FI_EFA_USE_DEVICE_RDMA=1 on a NIC without RDMA: EFA aborts, the mock counts and uses 0") {
    env.set("MOCKEFA_RMA", "emulated").set("FI_EFA_USE_DEVICE_RDMA", "1");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(violations(MOCKEFA_V_DEVICE_RDMA_ENV) == 1);
    CHECK(std::string(api().violation_name(MOCKEFA_V_DEVICE_RDMA_ENV)) == "device_rdma_env");
    CHECK(get_bool(n, kOptEmulatedRead));
    CHECK(get_bool(n, kOptEmulatedWrite));
    CHECK(set_bool(n, kOptUseDeviceRdma, true) != 0);
  }
  SECTION(
      "FI_EFA_USE_DEVICE_RDMA not a boolean: EFA aborts, the mock counts and keeps the default") {
    env.set("FI_EFA_USE_DEVICE_RDMA", "maybe");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(violations(MOCKEFA_V_DEVICE_RDMA_ENV) == 1);
    CHECK_FALSE(get_bool(n, kOptEmulatedWrite));
  }
}

TEST_CASE("128-byte in-order options: MOCKEFA_INORDER128, before fi_enable, getopt",
          "[mockprov][options]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_RMA", "device");
  InfoPtr hints = hints_plain();
  InfoPtr info = getinfo(hints.get());
  REQUIRE(info);
  SECTION("auto: WRITE_IN_ORDER granted with device RDMA write, SENDRECV always refused") {
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK_FALSE(get_bool(n, kOptWriteInOrder128));
    CHECK(set_bool(n, kOptWriteInOrder128, true) == 0);
    CHECK(get_bool(n, kOptWriteInOrder128));
    CHECK(set_bool(n, kOptWriteInOrder128, false) == 0);
    CHECK_FALSE(get_bool(n, kOptWriteInOrder128));
    CHECK(set_bool(n, kOptSendrecvInOrder128, true) == -FI_EOPNOTSUPP);
    CHECK(set_bool(n, kOptSendrecvInOrder128, false) == 0);
    CHECK_FALSE(get_bool(n, kOptSendrecvInOrder128));
    CHECK(set_bool(n, kOptUseDeviceRdma, false) == 0);
    CHECK(set_bool(n, kOptWriteInOrder128, true) == -FI_EOPNOTSUPP);  // writes now emulated
    CHECK(counters().violations_total == 0);
  }
  SECTION("no: a NIC without the capability refuses WRITE_IN_ORDER even with device RDMA write") {
    env.set("MOCKEFA_INORDER128", "no");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK_FALSE(get_bool(n, kOptEmulatedWrite));
    CHECK(set_bool(n, kOptWriteInOrder128, true) == -FI_EOPNOTSUPP);
    CHECK(set_bool(n, kOptWriteInOrder128, false) == 0);
    CHECK_FALSE(get_bool(n, kOptWriteInOrder128));
    CHECK(set_bool(n, kOptSendrecvInOrder128, true) == -FI_EOPNOTSUPP);
  }
  SECTION("emulated writes: refused") {
    env.set("MOCKEFA_RMA", "emulated");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(set_bool(n, kOptWriteInOrder128, true) == -FI_EOPNOTSUPP);
  }
  SECTION("after fi_enable: -FI_EINVAL, counted as opt_state; the value stays readable") {
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    REQUIRE(set_bool(n, kOptWriteInOrder128, true) == 0);
    REQUIRE(fi_enable(n.ep) == 0);
    CHECK(set_bool(n, kOptWriteInOrder128, false) == -FI_EINVAL);
    CHECK(set_bool(n, kOptSendrecvInOrder128, false) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_OPT_STATE) == 2);
    CHECK(get_bool(n, kOptWriteInOrder128));
    CHECK_FALSE(get_bool(n, kOptSendrecvInOrder128));
  }
  SECTION("MOCKEFA_LEGACY_OPTS: unknown to 1.17") {
    env.set("MOCKEFA_LEGACY_OPTS", "1");
    Node n(info.get(), FI_CQ_FORMAT_TAGGED, false);
    CHECK(set_bool(n, kOptWriteInOrder128, false) == -FI_ENOPROTOOPT);
    bool v = false;
    size_t len = sizeof v;
    CHECK(fi_getopt(&n.ep->fid, FI_OPT_ENDPOINT, kOptWriteInOrder128, &v, &len) == -FI_ENOPROTOOPT);
  }
}

TEST_CASE("FI_MR_DMABUF: refused below API 1.20 (EFA: -FI_EBADFLAGS), whatever the profile",
          "[mockprov][api][version][mr][dmabuf]") {
  Fresh fresh;
  InfoPtr hints = make_hints(kCaps | FI_HMEM, kMrAll | FI_MR_HMEM);
  std::vector<uint8_t> mem(4096);
  const int fd = memfd_create("not-a-fakecuda-dmabuf", MFD_CLOEXEC);  // taken on trust
  REQUIRE(fd >= 0);
  fi_mr_dmabuf db{fd, 0, mem.size(), mem.data()};
  fi_mr_attr attr{};
  attr.mr_iov = reinterpret_cast<const iovec*>(&db);  // the 1.20 union member `dmabuf`
  attr.iov_count = 1;
  attr.access = FI_REMOTE_WRITE;
  attr.iface = FI_HMEM_CUDA;
  fid_mr* mr = nullptr;
  SECTION("API 1.17") {
    InfoPtr info = getinfo(hints.get(), nullptr, kApi117);
    REQUIRE(info);
    Node n(info.get());
    CHECK(fi_mr_regattr(n.domain, &attr, FI_MR_DMABUF, &mr) == -FI_EBADFLAGS);
    CHECK(violations(MOCKEFA_V_API_VERSION) == 1);
    std::string text(256, '\0');
    text.resize(api().last_violation(&text[0], text.size()));
    CHECK(text.find("api_version: ") == 0);
    CHECK(std::string(api().violation_name(MOCKEFA_V_API_VERSION)) == "api_version");
    // Without the flag the same call is an ordinary registration.
    iovec iov{mem.data(), mem.size()};
    attr.mr_iov = &iov;
    REQUIRE(fi_mr_regattr(n.domain, &attr, 0, &mr) == 0);
    CHECK(fi_close(&mr->fid) == 0);
  }
  SECTION("API 1.19 (stamped), MOCKEFA_DMABUF=1 and MOCKEFA_RMA=device do not matter") {
    Env env;
    env.set("MOCKEFA_DMABUF", "1").set("MOCKEFA_RMA", "device");
    InfoPtr info = getinfo_at(hints.get(), kApi119);
    REQUIRE(info);
    Node n(info.get());
    CHECK(fi_mr_regattr(n.domain, &attr, FI_MR_DMABUF, &mr) == -FI_EBADFLAGS);
    CHECK(violations(MOCKEFA_V_API_VERSION) == 1);
  }
  SECTION("API 1.20 (stamped where needed): accepted") {
    InfoPtr info = getinfo_at(hints.get(), kApi120);
    REQUIRE(info);
    Node n(info.get());
    REQUIRE(fi_mr_regattr(n.domain, &attr, FI_MR_DMABUF, &mr) == 0);
    CHECK(fi_close(&mr->fid) == 0);
    CHECK(counters().violations_total == 0);
  }
  SECTION("API 1.20 asked of fi_getinfo") {
    if (real_api_possible(kApi120)) {
      InfoPtr info = getinfo(hints.get(), nullptr, kApi120);
      REQUIRE(info);
      Node n(info.get());
      REQUIRE(fi_mr_regattr(n.domain, &attr, FI_MR_DMABUF, &mr) == 0);
      CHECK(fi_close(&mr->fid) == 0);
    }
  }
  close(fd);
}
