// NIC grouping through the C ABI: the mock EFA provider at the PCI addresses of a synthetic hwloc
// topology (tests/topo/, loaded through HWLOC_XMLFILE), and what NCCL then sees.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"

using namespace nft;

namespace {

const unsigned kP5Gpus[8] = {0x53, 0x64, 0x75, 0x86, 0x97, 0xa8, 0xb9, 0xca};

// The p5 NICs: 4 per GPU, on the 4 buses below the GPU's.
std::string p5_addrs() {
  std::string s;
  for (unsigned g : kP5Gpus)
    for (unsigned k = 0; k < 4; ++k) {
      char b[32];
      snprintf(b, sizeof(b), "%s0000:%02x:00.0", s.empty() ? "" : ",", g - 4 + k);
      s += b;
    }
  return s;
}

PairOptions topo_options(const char* xml, int nics) {
  PairOptions opt = mock_options();
  opt.env.push_back({"MOCKEFA_NDOMAINS", std::to_string(nics)});
  opt.env.push_back({"HWLOC_XMLFILE", std::string(NF_TOPO_DIR) + "/" + xml + ".xml"});
  opt.env.push_back({"NCCL_FABRIC_RAILS", ""});
  opt.env.push_back({"NCCL_FABRIC_NIC_GROUPING", ""});
  return opt;
}

size_t pluses(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '+'));
}

// Every device: `rails` NICs (name with rails-1 '+'), `rails` x 100 Gb/s, names unique.
int check_devices(nfc::NetPlugin& p, int want, size_t rails) {
  int n = 0;
  CHILD_CHECK(p.devices(&n) == ncclSuccess && n == want, "%d devices, want %d", n, want);
  std::vector<std::string> names;
  for (int d = 0; d < n; ++d) {
    nfc::NetProps props;
    CHILD_CHECK(p.properties(d, &props) == ncclSuccess, "getProperties(%d)", d);
    CHILD_CHECK(pluses(props.name) == rails - 1, "device %d is %s, want %zu rails", d,
                props.name.c_str(), rails);
    CHILD_CHECK(props.speed == static_cast<int>(rails) * 100000, "device %d (%s): %d Mb/s", d,
                props.name.c_str(), props.speed);
    for (const std::string& other : names)
      CHILD_CHECK(other != props.name, "device name %s repeats", props.name.c_str());
    names.push_back(props.name);
  }
  return 0;
}

// One 4 MiB message over device `dev`, checked byte for byte.
int send_one(nfc::NetPlugin& p, int dev) {
  void* sc = nullptr;
  void* rc = nullptr;
  std::string err;
  CHILD_CHECK(nfc::connect_pair(p, dev, &sc, &rc, kTimeoutMs, &err), "device %d: %s", dev,
              err.c_str());
  const size_t size = 4 << 20;
  std::vector<unsigned char> sbuf(size), rbuf(size);
  void* smh = nullptr;
  void* rmh = nullptr;
  CHILD_CHECK(p.reg_mr(sc, sbuf.data(), size, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
  CHILD_CHECK(p.reg_mr(rc, rbuf.data(), size, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
  fill(sbuf.data(), size, 0, 1);
  std::vector<void*> reqs(2, nullptr);
  void* data[1] = {rbuf.data()};
  size_t sizes[1] = {size};
  int tags[1] = {7};
  void* mhs[1] = {rmh};
  while (reqs[1] == nullptr)
    CHILD_CHECK(p.irecv(rc, 1, data, sizes, tags, mhs, &reqs[1]) == ncclSuccess, "irecv");
  while (reqs[0] == nullptr)
    CHILD_CHECK(p.isend(sc, sbuf.data(), size, 7, smh, &reqs[0]) == ncclSuccess, "isend");
  std::vector<int> got;
  std::vector<bool> failed;
  CHILD_CHECK(settle(p, reqs, &got, &failed) == 0, "the transfer failed or hung");
  CHILD_CHECK(got[1] == static_cast<int>(size), "received %d bytes", got[1]);
  CHILD_CHECK(verify(rbuf.data(), size, 0, 1) == SIZE_MAX, "bytes differ");
  CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess, "deregMr");
  CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
  return 0;
}

}  // namespace

TEST_CASE("p5.48xlarge: 32 EFA become 8 devices of 4 rails at 400 Gb/s", "[plugin][topo]") {
  PairOptions opt = topo_options("p5.48xlarge", 32);
  opt.env.push_back({"MOCKEFA_PCI_ADDRS", p5_addrs()});
  std::string log;
  CHECK(run_single(
      opt,
      [](nfc::NetPlugin& p) {
        if (check_devices(p, 8, 4) != 0) return 1;
        nfc::NetProps props;
        CHILD_CHECK(p.properties(0, &props) == ncclSuccess, "getProperties(0)");
        CHILD_CHECK(props.name == "rdmap79s0-rdm+rdmap80s0-rdm+rdmap81s0-rdm+rdmap82s0-rdm",
                    "device 0 is %s", props.name.c_str());
        return send_one(p, 7);
      },
      &log));
}

TEST_CASE("p5.48xlarge with NCCL_FABRIC_RAILS or NCCL_FABRIC_NIC_GROUPING set", "[plugin][topo]") {
  PairOptions opt = topo_options("p5.48xlarge", 32);
  opt.env.push_back({"MOCKEFA_PCI_ADDRS", p5_addrs()});
  std::string log;
  PairOptions rails = opt;
  rails.env.push_back({"NCCL_FABRIC_RAILS", "2"});
  CHECK(run_single(
      rails, [](nfc::NetPlugin& p) { return check_devices(p, 16, 2); }, &log));
  PairOptions none = opt;
  none.env.push_back({"NCCL_FABRIC_NIC_GROUPING", "none"});
  CHECK(run_single(
      none, [](nfc::NetPlugin& p) { return check_devices(p, 32, 1); }, &log));
}

TEST_CASE("p4d.24xlarge: 4 EFA for 8 GPUs stay 4 devices of 1 rail", "[plugin][topo]") {
  std::string log;
  CHECK(run_single(
      topo_options("p4d.24xlarge", 4), [](nfc::NetPlugin& p) { return check_devices(p, 4, 1); },
      &log));
}

TEST_CASE("no PCI data in the topology: one device per NIC", "[plugin][topo]") {
  std::string log;
  CHECK(run_single(
      topo_options("nopci", 4), [](nfc::NetPlugin& p) { return check_devices(p, 4, 1); }, &log));
}

TEST_CASE("a bad NCCL_FABRIC_NIC_GROUPING fails init", "[plugin][topo]") {
  PairOptions opt = topo_options("p5.48xlarge", 4);
  opt.env.push_back({"NCCL_FABRIC_NIC_GROUPING", "8"});
  fflush(nullptr);
  const int pid = fork();
  if (pid == 0) {
    for (const auto& kv : opt.env) {
      if (kv.second.empty())
        unsetenv(kv.first.c_str());
      else
        setenv(kv.first.c_str(), kv.second.c_str(), 1);
    }
    setenv("NCCL_FABRIC_PROVIDER", opt.provider.c_str(), 1);
    nfc::NetPlugin p;
    std::string err;
    int rc = p.load(plugin_path(), 0, &err) && p.init() == ncclInvalidUsage ? 0 : 1;
    fflush(nullptr);
    _exit(rc);
  }
  REQUIRE(pid > 0);
  CHECK(nfc::wait_child(pid, kTimeoutMs) == 0);
}
