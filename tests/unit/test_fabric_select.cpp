// fabric/: which fabric discover_nics takes on the mock EFA provider (NCCL_FABRIC_EFA_FABRIC,
// issue 21), and the size limits an endpoint states. Built against libfabric 2.x headers the mock
// lists an efa-direct fabric before its efa entries (tests/mockprov/README.md); built against 1.x
// headers it has none, and the cases below check what the plugin then does.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fabric/fabric.h"
#include "util/params.h"

using namespace nf;

namespace {

// Sets environment variables for one scope and puts the old values back.
class Env {
 public:
  Env() = default;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  ~Env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        unsetenv(it->first.c_str());
    }
  }
  Env& set(const char* key, const char* value) {
    const char* old = getenv(key);
    saved_.emplace_back(key, old ? std::optional<std::string>(old) : std::nullopt);
    if (value != nullptr)
      setenv(key, value, 1);
    else
      unsetenv(key);
    return *this;
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// The mock is loaded by libfabric from FI_PROVIDER_PATH (make check exports it; by hand,
// NF_MOCKPROV_LIB is enough). False when neither is set: the cases then say so and pass.
bool mock_available() {
  if (getenv("FI_PROVIDER_PATH") != nullptr) return true;
  const char* lib = getenv("NF_MOCKPROV_LIB");
  if (lib == nullptr) return false;
  std::string dir(lib);
  setenv("FI_PROVIDER_PATH", dir.substr(0, dir.find_last_of('/')).c_str(), 1);
  return true;
}

// Two mock NICs; `rma`: "device" (RDMA read and write: efa-direct grants FI_RMA) or "emulated"
// (the default: it does not). Everything else as the mock's defaults.
struct MockNics {
  Env env;
  explicit MockNics(const char* rma = "device") {
    env.set("MOCKEFA_NDOMAINS", "2")
        .set("MOCKEFA_RMA", rma)
        .set("MOCKEFA_NO_UNSOLICITED_WRITE_RECV", nullptr)
        .set("NCCL_FABRIC_DOMAIN", nullptr);
  }
};

struct Found {
  Status status = Status::kSystemError;
  std::vector<Nic> nics;
  std::string report;
};

Found discover(EfaFabric choice, bool need_tagged, const std::string& domains = "") {
  Found f;
  f.status = discover_nics("mockefa", domains, false, &f.nics, &f.report, 0, choice, need_tagged);
  INFO("report: " << f.report);
  return f;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("NCCL_FABRIC_EFA_FABRIC: parsed by the registry and by parse_efa_fabric", "[fabric]") {
  Params p;
  CHECK(p.get_str(ParamId::kEfaFabric) == "auto");
  for (const char* v : {"auto", "efa", "efa-direct", "EFA-Direct"})
    CHECK(p.set(ParamId::kEfaFabric, v) == Status::kOk);
  CHECK(p.get_str(ParamId::kEfaFabric) == "efa-direct");
  CHECK(p.set(ParamId::kEfaFabric, "direct") == Status::kInvalidUsage);
  int64_t iv = 0;
  std::string sv, err;
  CHECK_FALSE(parse_param(param_def(ParamId::kEfaFabric), "efa_direct", &iv, &sv, &err));
  CHECK(contains(err, "NCCL_FABRIC_EFA_FABRIC='efa_direct'"));
  CHECK(contains(err, "auto, efa, efa-direct"));

  EfaFabric f = EfaFabric::kEfa;
  CHECK(parse_efa_fabric("auto", &f, &err));
  CHECK(f == EfaFabric::kAuto);
  CHECK(parse_efa_fabric("efa", &f, &err));
  CHECK(f == EfaFabric::kEfa);
  CHECK(parse_efa_fabric("efa-direct", &f, &err));
  CHECK(f == EfaFabric::kDirect);
  err.clear();
  CHECK_FALSE(parse_efa_fabric("verbs", &f, &err));
  CHECK(contains(err, "NCCL_FABRIC_EFA_FABRIC='verbs'"));
  CHECK(std::string(efa_fabric_str(EfaFabric::kDirect)) == "efa-direct");
  CHECK(std::string(efa_fabric_str(EfaFabric::kAuto)) == "auto");
}

#if FI_MAJOR_VERSION < 2

TEST_CASE("fabric choice on the mock built against libfabric 1.x: efa, efa-direct not offered",
          "[fabric][mock]") {
  if (!mock_available()) {
    WARN("no mock provider (FI_PROVIDER_PATH / NF_MOCKPROV_LIB unset): skipped");
    return;
  }
  MockNics mock("device");  // even with device RDMA: there is no efa-direct to take
  SECTION("auto") {
    Found f = discover(EfaFabric::kAuto, false);
    REQUIRE(f.status == Status::kOk);
    REQUIRE(f.nics.size() == 2);
    for (const Nic& n : f.nics) {
      CHECK(n.fabric == "efa");
      CHECK(n.tagged);
      CHECK_FALSE(n.rx_cq_data);
      CHECK(n.rma);
      CHECK(contains(n.fabric_why, "efa: efa-direct not offered"));
    }
    CHECK(contains(f.report, "efa-direct not offered"));
  }
  SECTION("efa, and sendrecv: the same") {
    for (bool tagged : {false, true}) {
      Found f = discover(tagged ? EfaFabric::kAuto : EfaFabric::kEfa, tagged);
      REQUIRE(f.status == Status::kOk);
      REQUIRE_FALSE(f.nics.empty());
      CHECK(f.nics[0].fabric == "efa");
      CHECK(contains(f.nics[0].fabric_why, "not offered"));
    }
  }
  SECTION("efa-direct forced: fails, and the report says why") {
    Found f = discover(EfaFabric::kDirect, false);
    CHECK(f.status != Status::kOk);
    CHECK(f.nics.empty());
    CHECK(contains(f.report,
                   "'mockefa': NCCL_FABRIC_EFA_FABRIC=efa-direct, but efa-direct not "
                   "offered"));
  }
}

TEST_CASE("Endpoint limits below API 1.20: ep_attr->max_msg_size for both", "[fabric][mock]") {
  if (!mock_available()) {
    WARN("no mock provider: skipped");
    return;
  }
  MockNics mock("device");
  Found f = discover(EfaFabric::kAuto, false);
  REQUIRE(f.status == Status::kOk);
  REQUIRE(f.nics[0].api_version < FI_VERSION(1, 20));
  std::shared_ptr<Domain> dom;
  REQUIRE(Domain::open(f.nics[0], &dom) == Status::kOk);
  CHECK(dom->fabric_name() == "efa");
  CHECK(dom->tagged());
  CHECK_FALSE(dom->rx_cq_data());
  std::unique_ptr<Endpoint> ep;
  REQUIRE(Endpoint::open(dom, 64, &ep) == Status::kOk);
  CHECK(ep->features().max_msg == 0);  // not asked: the option is 1.20's
  CHECK(ep->features().max_rma == 0);
  CHECK(ep->msg_limit() == dom->info()->ep_attr->max_msg_size);
  CHECK(ep->rma_limit() == dom->info()->ep_attr->max_msg_size);
}

#else

TEST_CASE("fabric choice on the mock built against libfabric 2.x", "[fabric][mock]") {
  if (!mock_available()) {
    WARN("no mock provider (FI_PROVIDER_PATH / NF_MOCKPROV_LIB unset): skipped");
    return;
  }
  SECTION("auto: efa-direct where it grants device RMA writes") {
    MockNics mock("device");
    Found f = discover(EfaFabric::kAuto, false);
    REQUIRE(f.status == Status::kOk);
    REQUIRE(f.nics.size() == 2);
    CHECK(f.nics[0].domain == "rdmap16s27-rdm");
    CHECK(f.nics[1].domain == "rdmap32s27-rdm");
    for (const Nic& n : f.nics) {
      CHECK(n.fabric == "efa-direct");
      CHECK(n.fabric_why == "efa-direct: offered with device RMA writes (auto)");
      CHECK_FALSE(n.tagged);
      CHECK(n.rma);
      CHECK(n.rx_cq_data);  // offered in the hints, and the mock echoes it
      CHECK((n.info->mode & FI_CONTEXT2) != 0);
      CHECK((n.info->domain_attr->mr_mode & FI_MR_LOCAL) != 0);
      CHECK(n.info->tx_attr->msg_order == 0);
      CHECK(n.info->tx_attr->inject_size == 32);
    }
    CHECK(contains(f.report, "efa-direct: offered with device RMA writes (auto)"));
  }
  SECTION("auto on a NIC without unsolicited write recv: efa-direct, FI_RX_CQ_DATA in mode") {
    MockNics mock("device");
    mock.env.set("MOCKEFA_NO_UNSOLICITED_WRITE_RECV", "1");
    Found f = discover(EfaFabric::kAuto, false);
    REQUIRE(f.status == Status::kOk);
    REQUIRE_FALSE(f.nics.empty());
    CHECK(f.nics[0].fabric == "efa-direct");
    CHECK(f.nics[0].rx_cq_data);
  }
  SECTION("auto without device RDMA: efa, efa-direct offered without RMA writes") {
    MockNics mock("emulated");
    Found f = discover(EfaFabric::kAuto, false);
    REQUIRE(f.status == Status::kOk);
    REQUIRE(f.nics.size() == 2);
    for (const Nic& n : f.nics) {
      CHECK(n.fabric == "efa");
      CHECK(n.fabric_why == "efa: efa-direct offered without RMA writes");
      CHECK(n.tagged);
      CHECK_FALSE(n.rx_cq_data);
    }
  }
  SECTION("efa: never efa-direct") {
    MockNics mock("device");
    Found f = discover(EfaFabric::kEfa, false);
    REQUIRE(f.status == Status::kOk);
    REQUIRE(f.nics.size() == 2);
    for (const Nic& n : f.nics) {
      CHECK(n.fabric == "efa");
      CHECK(n.fabric_why == "efa: NCCL_FABRIC_EFA_FABRIC=efa");
      CHECK(n.tagged);
      CHECK(n.rma);
    }
  }
  SECTION("auto with need_tagged (NCCL_FABRIC_PROTOCOL=sendrecv): efa, saying why") {
    MockNics mock("device");
    Found f = discover(EfaFabric::kAuto, true);
    REQUIRE(f.status == Status::kOk);
    REQUIRE(f.nics.size() == 2);
    for (const Nic& n : f.nics) {
      CHECK(n.fabric == "efa");
      CHECK(n.tagged);
      CHECK(n.fabric_why ==
            "efa: NCCL_FABRIC_PROTOCOL=sendrecv needs tagged messages, which efa-direct lacks");
    }
  }
  SECTION("efa-direct forced: taken where it grants RMA writes") {
    MockNics mock("device");
    Found f = discover(EfaFabric::kDirect, false);
    REQUIRE(f.status == Status::kOk);
    REQUIRE(f.nics.size() == 2);
    for (const Nic& n : f.nics) {
      CHECK(n.fabric == "efa-direct");
      CHECK(n.fabric_why == "efa-direct: NCCL_FABRIC_EFA_FABRIC=efa-direct");
      CHECK_FALSE(n.tagged);
    }
  }
  SECTION("efa-direct forced, one domain: the filter applies to efa-direct entries") {
    MockNics mock("device");
    Found f = discover(EfaFabric::kDirect, false, "rdmap32s27-rdm");
    REQUIRE(f.status == Status::kOk);
    REQUIRE(f.nics.size() == 1);
    CHECK(f.nics[0].domain == "rdmap32s27-rdm");
    CHECK(f.nics[0].fabric == "efa-direct");
  }
  SECTION("efa-direct forced without device RDMA: fails, saying so") {
    MockNics mock("emulated");
    Found f = discover(EfaFabric::kDirect, false);
    CHECK(f.status != Status::kOk);
    CHECK(f.nics.empty());
    CHECK(contains(f.report,
                   "'mockefa': NCCL_FABRIC_EFA_FABRIC=efa-direct, but efa-direct is "
                   "offered without RMA writes"));
  }
  SECTION("efa-direct forced with need_tagged: fails, naming sendrecv") {
    MockNics mock("device");
    Found f = discover(EfaFabric::kDirect, true);
    CHECK(f.status != Status::kOk);
    CHECK(contains(f.report, "NCCL_FABRIC_PROTOCOL=sendrecv needs tagged messages"));
  }
}

TEST_CASE("Endpoint limits on the mock's efa-direct: one MTU per send, 1 GiB per RMA",
          "[fabric][mock]") {
  if (!mock_available()) {
    WARN("no mock provider: skipped");
    return;
  }
  MockNics mock("device");
  Found f = discover(EfaFabric::kDirect, false);
  REQUIRE(f.status == Status::kOk);
  REQUIRE(f.nics[0].api_version >= FI_VERSION(1, 20));
  std::shared_ptr<Domain> dom;
  REQUIRE(Domain::open(f.nics[0], &dom) == Status::kOk);
  CHECK(dom->fabric_name() == "efa-direct");
  CHECK_FALSE(dom->tagged());
  CHECK(dom->rx_cq_data());
  CHECK(dom->rma());
  // ep_attr->max_msg_size is the RDMA limit where FI_RMA was granted: not the send limit.
  CHECK(dom->info()->ep_attr->max_msg_size == (size_t{1} << 30));
  std::unique_ptr<Endpoint> ep;
  REQUIRE(Endpoint::open(dom, 64, &ep) == Status::kOk);
  CHECK(ep->features().max_msg == 8760);
  CHECK(ep->msg_limit() == 8760);
  CHECK(ep->rma_limit() == (size_t{1} << 30));
  ep.reset();

  // The efa fabric of the same mock: no limit below the provider's max_msg_size.
  Found e = discover(EfaFabric::kEfa, false);
  REQUIRE(e.status == Status::kOk);
  std::shared_ptr<Domain> edom;
  REQUIRE(Domain::open(e.nics[0], &edom) == Status::kOk);
  CHECK(edom->fabric_name() == "efa");
  CHECK(edom->tagged());
  REQUIRE(Endpoint::open(edom, 64, &ep) == Status::kOk);
  CHECK(ep->msg_limit() == edom->info()->ep_attr->max_msg_size);
  CHECK(ep->rma_limit() == edom->info()->ep_attr->max_msg_size);
}

#endif
