// What NCCL sees of the library: exactly the ncclNetPlugin_v* and ncclTunerPlugin_v* symbols, and
// tables NCCL can use.
#include <catch2/catch.hpp>

#include <cstdio>
#include <set>
#include <string>

#include "harness.h"

using namespace nft;

namespace {
std::set<std::string> exported(const std::string& lib) {
  const std::string cmd = "nm -D --defined-only '" + lib + "' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  std::set<std::string> symbols;
  char line[512];
  while (fgets(line, sizeof(line), f) != nullptr) {
    char addr[64], type[8], name[400];
    if (sscanf(line, "%63s %7s %399s", addr, type, name) == 3) symbols.insert(name);
  }
  REQUIRE(pclose(f) == 0);
  return symbols;
}
}  // namespace

TEST_CASE("the net library exports only ncclNetPlugin_v6..v11 and ncclTunerPlugin_v2..v6",
          "[plugin][symbols]") {
  const std::set<std::string> expected = {
      "ncclNetPlugin_v6",   "ncclNetPlugin_v7",   "ncclNetPlugin_v8",   "ncclNetPlugin_v9",
      "ncclNetPlugin_v10",  "ncclNetPlugin_v11",  "ncclTunerPlugin_v2", "ncclTunerPlugin_v3",
      "ncclTunerPlugin_v4", "ncclTunerPlugin_v5", "ncclTunerPlugin_v6"};
  CHECK(exported(plugin_path()) == expected);
}

TEST_CASE("the tuner library exports only ncclTunerPlugin_v2..v6", "[plugin][symbols]") {
  std::string lib = plugin_path();
  lib.replace(lib.rfind("libnccl-net-fabric.so"), std::string("libnccl-net-fabric.so").size(),
              "libnccl-tuner-fabric.so");
  const std::set<std::string> expected = {"ncclTunerPlugin_v2", "ncclTunerPlugin_v3",
                                          "ncclTunerPlugin_v4", "ncclTunerPlugin_v5",
                                          "ncclTunerPlugin_v6"};
  CHECK(exported(lib) == expected);
}

TEST_CASE("each version's table is complete where NCCL calls it and NULL where it must be", "[plugin][symbols]") {
  for (int v = 6; v <= 11; ++v) {
    INFO("v" << v);
    nfc::NetPlugin p;
    std::string err;
    REQUIRE(p.load(plugin_path(), v, &err));
    CHECK(p.version() == v);
    CHECK(std::string(p.name()) == "fabric");
    const auto* t = static_cast<const ncclNet_v6_t*>(p.table());
    // The v6 prefix is shared by every version.
    CHECK(t->init != nullptr);
    CHECK(t->devices != nullptr);
    CHECK(t->getProperties != nullptr);
    CHECK(t->listen != nullptr);
    CHECK(t->connect != nullptr);
    CHECK(t->accept != nullptr);
    CHECK(t->regMr != nullptr);
    CHECK(t->deregMr != nullptr);
    CHECK(t->isend != nullptr);
    CHECK(t->irecv != nullptr);
    CHECK(t->iflush != nullptr);
    CHECK(t->test != nullptr);
    CHECK(t->closeSend != nullptr);
    CHECK(t->closeRecv != nullptr);
    CHECK(t->closeListen != nullptr);
    if (v == 11) {
      const auto* t11 = static_cast<const ncclNet_v11_t*>(p.table());
      CHECK(t11->finalize != nullptr);
      CHECK(t11->getDeviceMr == nullptr);   // host plugin: no device offload
      CHECK(t11->irecvConsumed == nullptr);
      CHECK(t11->makeVDevice == nullptr);   // no NIC fusion yet
      CHECK(t11->setNetAttr == nullptr);
    }
  }
}

TEST_CASE("getProperties reports honest, NCCL-valid values", "[plugin][props]") {
  PairOptions opt;
  opt.provider = "tcp;ofi_rxm";
  std::string log;
  CHECK(run_single(opt, [](nfc::NetPlugin& p) {
    int n = 0;
    CHILD_CHECK(p.devices(&n) == ncclSuccess && n >= 1, "devices");
    for (int d = 0; d < n; ++d) {
      nfc::NetProps props;
      CHILD_CHECK(p.properties(d, &props) == ncclSuccess, "getProperties(%d)", d);
      CHILD_CHECK(!props.name.empty(), "device %d has no name", d);
      CHILD_CHECK(props.ptr_support == NCCL_PTR_HOST, "ptrSupport %d: host only in this build", props.ptr_support);
      CHILD_CHECK(props.max_recvs >= 1 && props.max_recvs <= 8, "maxRecvs %d", props.max_recvs);
      CHILD_CHECK(props.max_comms >= 1, "maxComms %d", props.max_comms);
      CHILD_CHECK(props.max_p2p_bytes > 0 && props.max_p2p_bytes <= (1ull << 40), "maxP2pBytes %zu", props.max_p2p_bytes);
    }
    nfc::NetProps none;
    CHILD_CHECK(p.properties(n, &none) != ncclSuccess, "getProperties past the last device must fail");
    return 0;
  }, &log));
}

TEST_CASE("with no provider named, init picks one from the preference list and skips loopback", "[plugin][props]") {
  PairOptions opt;  // provider left empty: NCCL_FABRIC_PROVIDER unset
  opt.env = {{"FI_TCP_IFACE", ""}};
  std::string log;
  CHECK(run_single(opt, [](nfc::NetPlugin& p) {
    int n = 0;
    CHILD_CHECK(p.devices(&n) == ncclSuccess && n >= 1, "devices");
    for (int d = 0; d < n; ++d) {
      nfc::NetProps props;
      CHILD_CHECK(p.properties(d, &props) == ncclSuccess, "getProperties");
      CHILD_CHECK(props.name != "lo" || n == 1, "loopback listed beside %d other device(s)", n - 1);
      if (!props.pci_path.empty()) {
        const std::string last = props.pci_path.substr(props.pci_path.rfind('/') + 1);
        CHILD_CHECK(last.size() == 12 && last[4] == ':' && last[7] == ':' && last[10] == '.',
                    "pciPath %s does not end at a PCI function", props.pci_path.c_str());
      }
    }
    return 0;
  }, &log));
}
