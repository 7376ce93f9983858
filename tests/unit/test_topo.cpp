// topo/: NIC grouping on the synthetic hwloc topologies of tests/topo/ (make_xml.py writes them).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "topo/topo.h"
#include "wire/wire.h"

using namespace nf;

static_assert(kMaxDeviceRails == static_cast<size_t>(kMaxRails),
              "a device cannot have more rails than the wire carries addresses");

namespace {

std::unique_ptr<Topology> load(const char* name) {
  std::unique_ptr<Topology> t;
  std::string err;
  const std::string path = std::string(NF_TOPO_DIR) + "/" + name + ".xml";
  INFO(path);
  REQUIRE(Topology::load_xml(path, &t, &err) == Status::kOk);
  REQUIRE(t != nullptr);
  return t;
}

std::string bus_id(unsigned bus, unsigned dev = 0) {
  char b[32];
  snprintf(b, sizeof(b), "0000:%02x:%02x.0", bus, dev);
  return b;
}

// A NIC as discover_nics makes it, with no fi_info: the bus id then comes from the sysfs path.
Nic nic_at(const std::string& id) {
  Nic n;
  unsigned bus = 0, dev = 0;
  sscanf(id.c_str(), "0000:%x:%x", &bus, &dev);
  n.domain = "rdmap" + std::to_string(bus) + "s" + std::to_string(dev) + "-rdm";
  n.pci_path = "/sys/devices/pci0000:00/" + id;
  n.provider = "efa";
  return n;
}

// p5-style: the NICs of GPU bus G are on G-n .. G-1.
const unsigned kP5Gpus[8] = {0x53, 0x64, 0x75, 0x86, 0x97, 0xa8, 0xb9, 0xca};

std::vector<Nic> p5_nics(unsigned per_gpu) {
  std::vector<Nic> v;
  for (unsigned g : kP5Gpus)
    for (unsigned k = 0; k < per_gpu; ++k) v.push_back(nic_at(bus_id(g - per_gpu + k)));
  return v;
}

GroupingPolicy policy_of(const char* grouping, const char* rails = nullptr) {
  Params p;
  REQUIRE(p.set(ParamId::kNicGrouping, grouping) == Status::kOk);
  if (rails != nullptr) REQUIRE(p.set(ParamId::kRails, rails) == Status::kOk);
  GroupingPolicy g;
  std::string err;
  REQUIRE(grouping_policy(p, rails != nullptr, &g, &err) == Status::kOk);
  return g;
}

std::vector<DeviceGroup> group(const std::vector<Nic>& nics, const Topology* t,
                               const GroupingPolicy& pol, std::string* log = nullptr) {
  std::vector<DeviceGroup> out;
  std::string l;
  REQUIRE(group_nics(nics, t, pol, &out, &l) == Status::kOk);
  if (log != nullptr) *log = l;
  return out;
}

size_t pluses(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '+'));
}

}  // namespace

TEST_CASE("bus ids: normalized, from the provider or the sysfs path", "[topo]") {
  CHECK(normalize_bus_id("0000:4F:00.0") == "0000:4f:00.0");
  CHECK(normalize_bus_id("0000:4f:00.0 ") == "");
  CHECK(normalize_bus_id("virtio2") == "");
  CHECK(normalize_bus_id("0000:4f:20.0") == "");  // device numbers stop at 0x1f
  Nic n = nic_at("0000:10:1b.0");
  CHECK(nic_bus_id(n) == "0000:10:1b.0");
  n.pci_path = "";
  CHECK(nic_bus_id(n) == "");
  InfoPtr info(fi_allocinfo());
  REQUIRE(info != nullptr);
  fi_bus_attr bus{};
  fid_nic fnic{};
  bus.bus_type = FI_BUS_PCI;
  bus.attr.pci.domain_id = 1;
  bus.attr.pci.bus_id = 0x4f;
  bus.attr.pci.device_id = 2;
  bus.attr.pci.function_id = 1;
  fnic.bus_attr = &bus;
  info->nic = &fnic;
  n.info = std::move(info);
  CHECK(nic_bus_id(n) == "0001:4f:02.1");  // the provider's word wins over the path
  n.info->nic = nullptr;                   // not ours to free
}

TEST_CASE("lookup: sysfs-style path, NUMA node and the GPUs behind the same switch", "[topo]") {
  auto t = load("p5.48xlarge");
  CHECK(t->has_pci());
  CHECK(t->gpus().size() == 8);  // the NVSwitches (class 0x0680) are not GPUs
  PciInfo info;
  REQUIRE(t->lookup("0000:4F:00.0", &info));
  CHECK(info.bus_id == "0000:4f:00.0");
  CHECK(info.sysfs_path == "/sys/devices/pci0000:4d/0000:4d:00.0/0000:4e:00.0/0000:4f:00.0");
  CHECK(info.numa_node == 0);
  CHECK(info.nearest_gpus == std::vector<std::string>{"0000:53:00.0"});
  REQUIRE(t->lookup("0000:c9:00.0", &info));
  CHECK(info.numa_node == 1);
  CHECK(info.nearest_gpus == std::vector<std::string>{"0000:ca:00.0"});
  CHECK_FALSE(t->lookup("0000:10:1b.0", &info));
  CHECK_FALSE(t->lookup("nonsense", &info));

  auto p4d = load("p4d.24xlarge");
  REQUIRE(p4d->lookup("0000:90:1b.0", &info));
  CHECK(info.sysfs_path == "/sys/devices/pci0000:8f/0000:8f:00.0/0000:90:1b.0");
  CHECK(info.nearest_gpus == std::vector<std::string>{"0000:90:1c.0", "0000:90:1d.0"});
}

TEST_CASE("p5.48xlarge: 32 EFA for 8 GPUs make 8 devices of 4 rails", "[topo]") {
  auto t = load("p5.48xlarge");
  std::vector<Nic> nics = p5_nics(4);
  std::string log;
  auto d = group(nics, t.get(), policy_of("auto"), &log);
  INFO(log);
  REQUIRE(d.size() == 8);
  for (size_t i = 0; i < d.size(); ++i) {
    CHECK(d[i].rails == std::vector<size_t>{4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3});
    CHECK(pluses(d[i].name) == 3);
    CHECK(d[i].nearest_gpus == std::vector<std::string>{bus_id(kP5Gpus[i])});
  }
  CHECK(d[0].name == "rdmap79s0-rdm+rdmap80s0-rdm+rdmap81s0-rdm+rdmap82s0-rdm");
  CHECK(log.find("make 8 device(s)") != std::string::npos);

  SECTION("the NICs' order does not matter: they are grouped by switch, in order of first NIC") {
    std::vector<Nic> mixed;
    for (size_t k = 0; k < 4; ++k)
      for (size_t g = 0; g < 8; ++g) mixed.push_back(nic_at(nic_bus_id(nics[4 * g + k])));
    auto m = group(mixed, t.get(), policy_of("auto"));
    REQUIRE(m.size() == 8);
    for (size_t g = 0; g < 8; ++g) {
      CHECK(m[g].rails == std::vector<size_t>{g, g + 8, g + 16, g + 24});
      CHECK(m[g].nearest_gpus == std::vector<std::string>{bus_id(kP5Gpus[g])});
    }
  }
}

TEST_CASE("p5en.48xlarge: 16 EFA for 8 GPUs make 8 devices of 2 rails", "[topo]") {
  auto t = load("p5en.48xlarge");
  auto d = group(p5_nics(2), t.get(), policy_of("auto"));
  REQUIRE(d.size() == 8);
  for (size_t i = 0; i < d.size(); ++i) {
    CHECK(d[i].rails.size() == 2);
    CHECK(pluses(d[i].name) == 1);
    CHECK(d[i].nearest_gpus.size() == 1);
  }
}

TEST_CASE("p4d.24xlarge: 4 EFA for 8 GPUs make 4 devices of 1 rail, 2 GPUs each", "[topo]") {
  auto t = load("p4d.24xlarge");
  std::vector<Nic> nics;
  for (unsigned b : {0x10u, 0x20u, 0x90u, 0xa0u}) nics.push_back(nic_at(bus_id(b, 0x1b)));
  auto d = group(nics, t.get(), policy_of("auto"));
  REQUIRE(d.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(d[i].rails == std::vector<size_t>{i});
    CHECK(d[i].name == nics[i].domain);
    CHECK(d[i].nearest_gpus.size() == 2);
  }
}

TEST_CASE("g5: one EFA is one device, the GPUs across the host bridge are not near", "[topo]") {
  for (const char* name : {"g5.8xlarge", "g5.48xlarge"}) {
    INFO(name);
    auto t = load(name);
    CHECK(t->gpus().size() == (std::string(name) == "g5.8xlarge" ? 1u : 8u));
    std::vector<Nic> nics;
    nics.push_back(nic_at("0000:00:06.0"));
    auto d = group(nics, t.get(), policy_of("auto"));
    REQUIRE(d.size() == 1);
    CHECK(d[0].rails == std::vector<size_t>{0});
    CHECK(d[0].nearest_gpus.empty());
  }
}

TEST_CASE("no PCI data, or no GPU: one device per NIC, and the log says why", "[topo]") {
  std::vector<Nic> nics;
  for (unsigned b : {0x10u, 0x20u, 0x90u, 0xa0u}) nics.push_back(nic_at(bus_id(b, 0x1b)));
  std::string log;
  auto nopci = load("nopci");
  CHECK_FALSE(nopci->has_pci());
  auto d = group(nics, nopci.get(), policy_of("auto"), &log);
  CHECK(d.size() == 4);
  CHECK(log == "topology: hwloc sees no PCI devices: one NCCL device per NIC");
  d = group(nics, nullptr, policy_of("auto"), &log);
  CHECK(d.size() == 4);
  CHECK(log == "topology: hwloc sees no PCI devices: one NCCL device per NIC");
  auto nogpu = load("nogpu");
  CHECK(nogpu->has_pci());
  CHECK(nogpu->gpus().empty());
  d = group(nics, nogpu.get(), policy_of("auto"), &log);
  REQUIRE(d.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(d[i].rails == std::vector<size_t>{i});
  CHECK(log.find("no GPU: one NCCL device per NIC") != std::string::npos);
}

TEST_CASE("more than 4 NICs per GPU split evenly; lone and unknown NICs stay alone", "[topo]") {
  auto t = load("mixed");
  std::vector<Nic> nics;
  for (unsigned k = 0; k < 6; ++k) nics.push_back(nic_at(bus_id(0x22 + k)));
  nics.push_back(nic_at("0000:41:00.0"));  // no GPU anywhere near
  nics.push_back(nic_at("0000:51:00.0"));  // a GPU only across the host bridge
  nics.push_back(nic_at("0000:77:00.0"));  // not in the topology
  Nic lo;
  lo.domain = "lo";
  lo.provider = "tcp;ofi_rxm";
  nics.push_back(std::move(lo));  // no PCI function at all
  std::string log;
  auto d = group(nics, t.get(), policy_of("auto"), &log);
  INFO(log);
  REQUIRE(d.size() == 6);
  CHECK(d[0].rails == std::vector<size_t>{0, 1, 2});
  CHECK(d[1].rails == std::vector<size_t>{3, 4, 5});
  CHECK(d[0].nearest_gpus == std::vector<std::string>{"0000:28:00.0"});
  CHECK(d[1].nearest_gpus == d[0].nearest_gpus);
  for (size_t i = 2; i < 6; ++i) {
    CHECK(d[i].rails == std::vector<size_t>{i + 4});
    CHECK(d[i].nearest_gpus.empty());
  }
  CHECK(d[5].name == "lo");
  CHECK(log.find("2 NIC(s) not found in the PCI topology") != std::string::npos);
}

TEST_CASE("NCCL_FABRIC_NIC_GROUPING and NCCL_FABRIC_RAILS override the topology", "[topo]") {
  auto t = load("p5.48xlarge");
  const std::vector<Nic> nics = p5_nics(4);
  std::string log;
  SECTION("none: one device per NIC") {
    auto d = group(nics, t.get(), policy_of("NONE"), &log);
    CHECK(d.size() == 32);
    CHECK(log.find("none") != std::string::npos);
  }
  SECTION("a number: that many consecutive NICs per device") {
    auto d = group(nics, t.get(), policy_of("2"), &log);
    REQUIRE(d.size() == 16);
    CHECK(d[1].rails == std::vector<size_t>{2, 3});
  }
  SECTION("RAILS set explicitly wins over auto, with today's repeat-when-short naming") {
    std::vector<Nic> three;
    for (size_t i = 0; i < 3; ++i) three.push_back(nic_at(nic_bus_id(nics[i])));
    auto d = group(three, t.get(), policy_of("auto", "2"), &log);
    REQUIRE(d.size() == 2);
    CHECK(d[0].rails == std::vector<size_t>{0, 1});
    CHECK(d[1].rails == std::vector<size_t>{2, 2});
    CHECK(d[1].name == nics[2].domain + "x2");
    CHECK(log.find("NCCL_FABRIC_RAILS=2 is set") != std::string::npos);
    // Even RAILS=1 set by hand means "one device per NIC".
    CHECK(group(nics, t.get(), policy_of("auto", "1")).size() == 32);
  }
  SECTION("NIC_GROUPING set explicitly wins over RAILS, and says so") {
    GroupingPolicy pol = policy_of("none", "4");
    CHECK(pol.why.find("NCCL_FABRIC_RAILS=4 is ignored") != std::string::npos);
    CHECK(group(nics, t.get(), pol).size() == 32);
  }
}

TEST_CASE("a bad NCCL_FABRIC_NIC_GROUPING is refused by name", "[topo]") {
  for (const char* bad : {"0", "5", "two", "", "2x", "-1"}) {
    INFO(bad);
    Params p;
    REQUIRE(p.set(ParamId::kNicGrouping, bad) == Status::kOk);  // a free string to the registry
    GroupingPolicy g;
    std::string err;
    CHECK(grouping_policy(p, false, &g, &err) == Status::kInvalidUsage);
    CHECK(err.find("NCCL_FABRIC_NIC_GROUPING='") == 0);
    CHECK(err.find("1 to 4") != std::string::npos);
  }
}
