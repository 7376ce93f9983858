// What NCCL sees of the library: exactly the ncclNetPlugin_v* and ncclTunerPlugin_v* symbols, and
// tables NCCL can use.
#include <catch2/catch.hpp>

#include <climits>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

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

// The plugin's log in a child (set_log_sink in before_init): the NIC lines say where each speed
// came from, a bad parameter's WARN names it.
std::vector<std::string> g_child_log;
void keep_log(bool warn, const char* text) {
  g_child_log.push_back(std::string(warn ? "WARN " : "INFO ") + text);
}
int capture_log() {
  g_child_log.clear();
  nfc::set_log_sink(keep_log);
  return 0;
}
const std::string* logged(const std::string& needle) {
  for (const std::string& l : g_child_log)
    if (l.find(needle) != std::string::npos) return &l;
  return nullptr;
}

// NCCL's view of one provider's speed: PairOptions for it, with NCCL_FABRIC_SPEED unset unless
// `speed` is given, and the TCP provider on loopback.
PairOptions speed_options(const std::string& provider, const char* speed = "",
                          std::vector<std::pair<std::string, std::string>> env = {}) {
  PairOptions opt = provider == "mockefa" ? mock_options() : PairOptions();
  opt.provider = provider;
  if (provider == "tcp;ofi_rxm") opt.env.push_back({"FI_TCP_IFACE", "lo"});
  opt.env.push_back({"NCCL_FABRIC_SPEED", speed});
  for (auto& kv : env) opt.env.push_back(kv);
  opt.before_init = capture_log;
  return opt;
}
}  // namespace

TEST_CASE("the net library exports only ncclNetPlugin_v6..v12 and ncclTunerPlugin_v2..v6",
          "[plugin][symbols]") {
  const std::set<std::string> expected = {
      "ncclNetPlugin_v6",   "ncclNetPlugin_v7",   "ncclNetPlugin_v8",   "ncclNetPlugin_v9",
      "ncclNetPlugin_v10",  "ncclNetPlugin_v11",  "ncclNetPlugin_v12",  "ncclTunerPlugin_v2",
      "ncclTunerPlugin_v3", "ncclTunerPlugin_v4", "ncclTunerPlugin_v5", "ncclTunerPlugin_v6"};
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

TEST_CASE("each version's table is complete where NCCL calls it and NULL where it must be",
          "[plugin][symbols]") {
  for (int v = 6; v <= 12; ++v) {
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
      CHECK(t11->getDeviceMr == nullptr);  // host plugin: no device offload
      CHECK(t11->irecvConsumed == nullptr);
      CHECK(t11->makeVDevice == nullptr);  // no NIC fusion yet
      CHECK(t11->setNetAttr != nullptr);   // NCCL's hints (docs/nccl-abi.md)
    }
    if (v == 12) {
      const auto* t12 = static_cast<const ncclNet_v12_t*>(p.table());
      CHECK(t12->finalize != nullptr);
      CHECK(t12->getDeviceMr == nullptr);
      CHECK(t12->irecvConsumed == nullptr);
      CHECK(t12->makeVDevice == nullptr);
      CHECK(t12->setNetAttr != nullptr);
    }
  }
}

TEST_CASE("v12 getProperties: eight vProps slots, maxP2pBytes at its new offset, ids undefined",
          "[plugin][props][v12]") {
  // In a child, as every test that initializes the plugin: the parent must not find devices.
  PairOptions opt;
  opt.provider = "tcp;ofi_rxm";
  opt.abi_version = 12;
  std::string log;
  CHECK(run_single(
      opt,
      [&](nfc::NetPlugin& p) {
        CHILD_CHECK(p.version() == 12, "loaded v%d", p.version());
        ncclNetProperties_v12_t props;
        memset(&props, 0x5a, sizeof(props));  // every byte the plugin leaves is visible
        const auto* t12 = static_cast<const ncclNet_v12_t*>(p.table());
        CHILD_CHECK(t12->getProperties(0, &props) == ncclSuccess, "getProperties");
        CHILD_CHECK(props.vProps.ndevs == 1, "ndevs %d", props.vProps.ndevs);
        for (int i = 0; i < NCCL_NET_MAX_DEVS_PER_NIC_V12; ++i)
          CHILD_CHECK(props.vProps.devs[i] == 0, "devs[%d] = %d", i, props.vProps.devs[i]);
        CHILD_CHECK(props.maxP2pBytes > 0 && props.maxP2pBytes <= (1ull << 40), "maxP2pBytes %zu",
                    props.maxP2pBytes);
        CHILD_CHECK(props.maxCollBytes > 0, "maxCollBytes %zu", props.maxCollBytes);
        CHILD_CHECK(props.maxMultiRequestSize == 1, "maxMultiRequestSize %d",
                    props.maxMultiRequestSize);
        CHILD_CHECK(props.railId == NCCL_NET_ID_UNDEF, "railId %d", props.railId);
        CHILD_CHECK(props.planeId == NCCL_NET_ID_UNDEF, "planeId %d", props.planeId);
        nfc::NetProps via_loader;
        CHILD_CHECK(p.properties(0, &via_loader) == ncclSuccess, "properties");
        CHILD_CHECK(via_loader.max_p2p_bytes == props.maxP2pBytes, "loader read %zu",
                    via_loader.max_p2p_bytes);
        return 0;
      },
      &log));
}

TEST_CASE("getProperties reports honest, NCCL-valid values", "[plugin][props]") {
  PairOptions opt;
  opt.provider = "tcp;ofi_rxm";
  std::string log;
  CHECK(run_single(
      opt,
      [](nfc::NetPlugin& p) {
        int n = 0;
        CHILD_CHECK(p.devices(&n) == ncclSuccess && n >= 1, "devices");
        for (int d = 0; d < n; ++d) {
          nfc::NetProps props;
          CHILD_CHECK(p.properties(d, &props) == ncclSuccess, "getProperties(%d)", d);
          CHILD_CHECK(!props.name.empty(), "device %d has no name", d);
          CHILD_CHECK(props.ptr_support == NCCL_PTR_HOST, "ptrSupport %d: host only in this build",
                      props.ptr_support);
          CHILD_CHECK(props.max_recvs >= 1 && props.max_recvs <= 8, "maxRecvs %d", props.max_recvs);
          CHILD_CHECK(props.max_comms >= 1, "maxComms %d", props.max_comms);
          CHILD_CHECK(props.max_p2p_bytes > 0 && props.max_p2p_bytes <= (1ull << 40),
                      "maxP2pBytes %zu", props.max_p2p_bytes);
          // NCCL plans bandwidth from speed (Mb/s): 0 would be a device it cannot plan with.
          CHILD_CHECK(props.speed > 0, "device %d (%s): speed %d Mb/s", d, props.name.c_str(),
                      props.speed);
        }
        nfc::NetProps none;
        CHILD_CHECK(p.properties(n, &none) != ncclSuccess,
                    "getProperties past the last device must fail");
        return 0;
      },
      &log));
}

// docs/configuration.md#speed: NCCL_FABRIC_SPEED, else the link's speed, else the platform row's
// (EFA), else the provider's default; each NIC's INFO line says which.
TEST_CASE("getProperties reports a non-zero speed on every provider, and where it came from",
          "[plugin][props][speed]") {
  struct Case {
    const char* what;
    PairOptions opt;
    int speed;           // device 0's, Mb/s
    const char* source;  // in device 0's first NIC line
    const char* name;    // device 0's name, "" for any
  };
  const std::vector<Case> cases = {
      // lo and shm report no link speed (no fi_nic, nothing in sysfs): the provider defaults.
      {"tcp on lo", speed_options("tcp;ofi_rxm"), 10000, "(default for provider 'tcp;ofi_rxm'",
       "lo"},
      {"shm", speed_options("shm"), 100000, "(default for provider 'shm'", ""},
      {"mock EFA", speed_options("mockefa"), 100000, "(provider link attribute)", ""},
      {"mock EFA without a link speed", speed_options("mockefa", "", {{"MOCKEFA_LINK_SPEED", "0"}}),
       10000, "(default for provider 'mockefa'", ""},
      // NCCL_FABRIC_SPEED is per NIC, and wins.
      {"tcp on lo, NCCL_FABRIC_SPEED", speed_options("tcp;ofi_rxm", "12345"), 12345,
       "(NCCL_FABRIC_SPEED)", "lo"},
      {"shm, NCCL_FABRIC_SPEED", speed_options("shm", "12345"), 12345, "(NCCL_FABRIC_SPEED)", ""},
      {"mock EFA, NCCL_FABRIC_SPEED", speed_options("mockefa", "12345"), 12345,
       "(NCCL_FABRIC_SPEED, in place of 100000 Mb/s (provider link attribute))", ""},
      // A device of two NICs reports their sum; two endpoints on one NIC (lox2) count it once.
      {"mock EFA, 2 NICs as 2 rails, NCCL_FABRIC_SPEED",
       speed_options("mockefa", "12345", {{"MOCKEFA_NDOMAINS", "2"}, {"NCCL_FABRIC_RAILS", "2"}}),
       24690, "(NCCL_FABRIC_SPEED", "rdmap16s27-rdm+rdmap32s27-rdm"},
      {"tcp on lo, 2 rails on one NIC, NCCL_FABRIC_SPEED",
       speed_options("tcp;ofi_rxm", "12345", {{"NCCL_FABRIC_RAILS", "2"}}), 12345,
       "(NCCL_FABRIC_SPEED)", "lox2"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const int want = c.speed;
    const std::string source = c.source;
    const std::string what = c.what;
    const std::string name = c.name;
    std::string log;
    CHECK(run_single(
        c.opt,
        [&](nfc::NetPlugin& p) {
          int n = 0;
          CHILD_CHECK(p.devices(&n) == ncclSuccess && n >= 1, "%s: devices", what.c_str());
          for (int d = 0; d < n; ++d) {
            nfc::NetProps props;
            CHILD_CHECK(p.properties(d, &props) == ncclSuccess, "%s: getProperties(%d)",
                        what.c_str(), d);
            CHILD_CHECK(props.speed > 0, "%s: device %d (%s) speed %d Mb/s", what.c_str(), d,
                        props.name.c_str(), props.speed);
            if (d != 0) continue;
            CHILD_CHECK(props.speed == want, "%s: device 0 (%s) speed %d Mb/s, expected %d",
                        what.c_str(), props.name.c_str(), props.speed, want);
            CHILD_CHECK(name.empty() || props.name == name, "%s: device 0 is %s, expected %s",
                        what.c_str(), props.name.c_str(), name.c_str());
          }
          // Once per NIC at INFO: "NIC 0: lo pci=none speed=10000 Mb/s (default for provider ...".
          const std::string* line = logged("NIC 0: ");
          CHILD_CHECK(line != nullptr, "%s: no NIC line in the log", what.c_str());
          CHILD_CHECK(line->find(" Mb/s " + source) != std::string::npos,
                      "%s: NIC line '%s' does not give the source '%s'", what.c_str(),
                      line->c_str(), source.c_str());
          const std::string* dev = logged("device 0: ");
          CHILD_CHECK(dev != nullptr &&
                          dev->find("speed=" + std::to_string(want) + " Mb/s") != std::string::npos,
                      "%s: device line '%s'", what.c_str(), dev ? dev->c_str() : "(none)");
          return 0;
        },
        &log));
  }
}

TEST_CASE("a bad NCCL_FABRIC_SPEED fails init with a WARN that names it",
          "[plugin][props][speed]") {
  for (const char* bad : {"-5", "abc", "10000001", "12.5"}) {
    INFO("NCCL_FABRIC_SPEED=" << bad);
    fflush(nullptr);
    const int pid = fork();
    if (pid == 0) {
      setenv("NCCL_FABRIC_PROVIDER", "tcp;ofi_rxm", 1);
      setenv("FI_TCP_IFACE", "lo", 1);
      setenv("NCCL_FABRIC_SPEED", bad, 1);
      capture_log();
      nfc::NetPlugin p;
      std::string err;
      if (!p.load(plugin_path(), 0, &err)) _exit(2);
      const ncclResult_t r = p.init();
      p.finalize();  // after a failed init, as NCCL 2.28.9 does
      if (r == ncclSuccess) _exit(3);
      const std::string* warn = logged("bad parameter: NCCL_FABRIC_SPEED");
      if (warn == nullptr || warn->rfind("WARN ", 0) != 0) {
        for (const std::string& l : g_child_log) fprintf(stderr, "  %s\n", l.c_str());
        _exit(4);
      }
      if (warn->find("0..10000000") == std::string::npos) {
        fprintf(stderr, "WARN without the range: %s\n", warn->c_str());
        _exit(5);
      }
      _exit(0);
    }
    CHECK(nfc::wait_child(pid, kTimeoutMs) == 0);
  }
}

TEST_CASE("with no provider named, init picks one from the preference list and skips loopback",
          "[plugin][props]") {
  PairOptions opt;  // provider left empty: NCCL_FABRIC_PROVIDER unset
  opt.env = {{"FI_TCP_IFACE", ""}};
  std::string log;
  CHECK(run_single(
      opt,
      [](nfc::NetPlugin& p) {
        int n = 0;
        CHILD_CHECK(p.devices(&n) == ncclSuccess && n >= 1, "devices");
        for (int d = 0; d < n; ++d) {
          nfc::NetProps props;
          CHILD_CHECK(p.properties(d, &props) == ncclSuccess, "getProperties");
          CHILD_CHECK(props.name != "lo" || n == 1, "loopback listed beside %d other device(s)",
                      n - 1);
          if (!props.pci_path.empty()) {
            const std::string last = props.pci_path.substr(props.pci_path.rfind('/') + 1);
            CHILD_CHECK(last.size() == 12 && last[4] == ':' && last[7] == ':' && last[10] == '.',
                        "pciPath %s does not end at a PCI function", props.pci_path.c_str());
          }
        }
        return 0;
      },
      &log));
}
