#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "core/plugin.h"
#include "fabric/fabric.h"
#include "platform/platform.h"
#include "util/params.h"

using namespace nf;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A file holding the given text that is removed at scope exit.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    const char* dir = getenv("TMPDIR");
    path_ = std::string(dir != nullptr ? dir : "/tmp") + "/nf-dmi-XXXXXX";
    const int fd = mkstemp(&path_[0]);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    close(fd);
  }
  ~TempFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sets or unsets one variable and puts the old state back at scope exit.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~EnvGuard() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

Params params_with(const char* platform, const std::string& dmi_file) {
  Params p;
  REQUIRE(p.set(ParamId::kPlatform, platform) == Status::kOk);
  REQUIRE(p.set(ParamId::kTestDmiFile, dmi_file.c_str()) == Status::kOk);
  return p;
}

const char kHeader[] =
    "name efa efa_gbps accel accel_model nics_per_gpu efa_expected gdr latency_us protocol "
    "ll128 rail_aligned sources nccl_env\n";

// Parses a one-row table and returns the error ("" when it parsed).
std::string parse_error_of(const std::string& row) {
  std::vector<Platform> rows;
  std::string error;
  const Status s = parse_platform_table(std::string("# comment\n") + kHeader + row, &rows, &error);
  if (s == Status::kOk) return "";
  CHECK(s == Status::kInvalidArgument);
  CHECK_FALSE(error.empty());
  return error;
}

}  // namespace

TEST_CASE("the embedded table is platforms.txt, and every row parses with sane values",
          "[platform]") {
  CHECK(std::string(platform_table_text()) ==
        read_file(std::string(NF_SRCDIR) + "/src/platform/platforms.txt"));
  std::vector<Platform> rows;
  std::string error;
  REQUIRE(parse_platform_table(platform_table_text(), &rows, &error) == Status::kOk);
  INFO(error);
  const std::vector<Platform>& table = platform_table();
  REQUIRE(table.size() == rows.size());

  const std::string docs = read_file(std::string(NF_SRCDIR) + "/docs/platforms.md");
  REQUIRE_FALSE(docs.empty());
  for (const char* name :
       {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
        "p6-b200.48xlarge", "g5.8xlarge", "g5.48xlarge", "g5.*", "g6e.*", "trn1.32xlarge"}) {
    INFO(name);
    const Platform* r = match_platform(table, name);
    REQUIRE(r != nullptr);
    CHECK(r->name == name);
  }
  for (const Platform& r : table) {
    INFO(r.name);
    CHECK(r.line > 0);
    if (!r.wildcard) {
      CHECK(r.efa_count >= 0);
      CHECK(r.accelerators > 0);
      CHECK(r.nics_per_gpu > 0);
      CHECK_FALSE(r.accelerator_model.empty());
    }
    if (r.efa_count > 0) CHECK(r.efa_gbps >= 10);
    if (r.efa_expected) CHECK(r.efa_count >= 1);
    if (r.gdr_expected == GdrExpect::kYes) CHECK(r.efa_expected);
    if (r.latency_us >= 0) CHECK((r.latency_us >= 1 && r.latency_us <= 1000));
    CHECK_FALSE(r.sources.empty());
    for (const std::string& key : r.sources) {
      INFO(key);
      CHECK(docs.find("[" + key + "]:") != std::string::npos);  // defined in docs/platforms.md
    }
    for (const auto& kv : r.nccl_env) {
      CHECK(kv.first.rfind("NCCL_", 0) == 0);
      CHECK_FALSE(kv.second.empty());
    }
    CHECK(docs.find("`" + r.name + "`") != std::string::npos);  // each row is documented
  }
  // The public facts the table exists for.
  const Platform* p5 = match_platform(table, "p5.48xlarge");
  CHECK(p5->efa_count * p5->efa_gbps == 3200);
  CHECK(p5->accelerators == 8);
  CHECK(p5->gdr_expected == GdrExpect::kYes);
  CHECK(p5->protocol == PlatformProtocol::kRdma);
  for (const char* n : {"p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"}) {
    const Platform* r = match_platform(table, n);
    CHECK(r->efa_count * r->efa_gbps == 3200);
  }
  CHECK(match_platform(table, "p5en.48xlarge")->efa_count == 16);
  CHECK(match_platform(table, "p6-b200.48xlarge")->efa_gbps == 400);
  const Platform* p4d = match_platform(table, "p4d.24xlarge");
  CHECK(p4d->efa_count == 4);
  CHECK(p4d->efa_gbps == 100);
  CHECK(match_platform(table, "g5.48xlarge")->gdr_expected == GdrExpect::kNo);
  CHECK(match_platform(table, "trn1.32xlarge")->gdr_expected == GdrExpect::kNotApplicable);
  CHECK(match_platform(table, "trn1.32xlarge")->accelerators == 16);
  CHECK(match_platform(table, "trn1.32xlarge")->ll128_expected == -1);
  CHECK(p5->ll128_expected == 1);
  CHECK(match_platform(table, "p4d.24xlarge")->ll128_expected == 0);
  CHECK(describe_platform(*p5).find("3200 Gb/s") != std::string::npos);
  CHECK(describe_platform(generic_platform()).find("no expectations") != std::string::npos);
}

TEST_CASE("malformed tables are refused with the line and the problem", "[platform]") {
  const std::string good =
      "m9.big 2 100 4 X1 0.5 yes yes 40 rdma yes - src-a NCCL_BUFFSIZE=1,NCCL_FOO=bar\n";
  CHECK(parse_error_of(good).empty());
  CHECK(parse_error_of("m9.* - - - - - no no - auto - - src-a -\n").empty());

  struct Case {
    const char* row;
    const char* expect;
  } cases[] = {
      {"m9.big 2 100 4 X1 0.5 yes yes 40 rdma yes - src-a\n", "13 columns, the header has 14"},
      {"m9.big x 100 4 X1 0.5 yes yes 40 rdma yes - src-a -\n", "efa 'x'"},
      {"m9.big 2 0 4 X1 0.5 yes yes 40 rdma yes - src-a -\n", "efa_gbps '0'"},
      {"m9.big 2 100 4 X1 1 yes yes 40 rdma yes - src-a -\n",
       "nics_per_gpu 1 is not efa/accel = 2/4"},
      {"m9.big 2 100 4 X1 0.5 maybe yes 40 rdma yes - src-a -\n", "efa_expected 'maybe'"},
      {"m9.big 0 - 4 X1 - yes no 40 rdma yes - src-a -\n", "efa_expected is yes but efa is 0"},
      {"m9.big 2 100 4 X1 0.5 yes sometimes 40 rdma yes - src-a -\n", "gdr 'sometimes'"},
      {"m9.big 2 100 4 X1 0.5 no yes 40 rdma yes - src-a -\n", "gdr is yes but efa_expected is no"},
      {"m9.big 2 100 4 X1 0.5 yes yes 0 rdma yes - src-a -\n", "latency_us '0'"},
      {"m9.big 2 100 4 X1 0.5 yes yes 40 fast yes - src-a -\n", "protocol 'fast'"},
      {"m9.big 2 100 4 X1 0.5 yes yes 40 rdma maybe - src-a -\n", "ll128 'maybe'"},
      {"m9.big 2 100 4 X1 0.5 no no 40 rdma yes - src-a -\n",
       "ll128 is yes but efa_expected is no"},
      {"m9.big 2 100 4 X1 0.5 yes yes 40 rdma yes - - -\n", "every row cites"},
      {"m9.big 2 100 4 X1 0.5 yes yes 40 rdma yes - Src -\n", "'Src' is not a key"},
      {"m9.big 2 100 4 X1 0.5 yes yes 40 rdma yes - src-a NCCL_BUFFSIZE\n", "is not NAME=VALUE"},
      {"m9.big 2 100 4 X1 0.5 yes yes 40 rdma yes - src-a FI_EFA_X=1\n", "not an NCCL_ variable"},
      {"m9.big 2 100 4 X1 0.5 yes yes 40 rdma yes - src-a NCCL_A=1,NCCL_A=2\n",
       "NCCL_A appears twice"},
      {"m9*big 2 100 4 X1 0.5 yes yes 40 rdma yes - src-a -\n", "name must be"},
      {"none 2 100 4 X1 0.5 yes yes 40 rdma yes - src-a -\n", "reserved"},
      {"m9.big 2 100 4 X1 0.5 yes yes 40 rdma yes - src-a -\n"
       "m9.big 2 100 4 X1 0.5 yes yes 40 rdma yes - src-a -\n",
       "already on line 3"},
  };
  for (const Case& c : cases) {
    INFO(c.row);
    const std::string error = parse_error_of(c.row);
    CHECK(error.find(c.expect) != std::string::npos);
    // The first data row is line 3 (a comment, then the header); the duplicate is line 4.
    CHECK((error.rfind("line 3", 0) == 0 || error.rfind("line 4", 0) == 0));
  }

  std::vector<Platform> rows;
  std::string error;
  CHECK(parse_platform_table("# only comments\n\n", &rows, &error) == Status::kInvalidArgument);
  CHECK(error.find("no header") != std::string::npos);
  CHECK(parse_platform_table("name efa\n", &rows, &error) == Status::kInvalidArgument);
  CHECK(error == "line 1: the header has no column 'efa_gbps'");
  CHECK(parse_platform_table(std::string("color ") + kHeader, &rows, &error) ==
        Status::kInvalidArgument);
  CHECK(error.find("unknown column 'color'") != std::string::npos);
}

TEST_CASE("the platform comes from the DMI product name, exact rows before wildcards",
          "[platform]") {
  PlatformChoice c;
  {
    TempFile dmi("p5.48xlarge\n");
    REQUIRE(choose_platform(params_with("auto", dmi.path()), &c) == Status::kOk);
    CHECK(c.row->name == "p5.48xlarge");
    CHECK_FALSE(c.forced);
    CHECK(c.source == "DMI product name 'p5.48xlarge' from " + dmi.path());
  }
  {
    TempFile dmi("g5.48xlarge");
    REQUIRE(choose_platform(params_with("auto", dmi.path()), &c) == Status::kOk);
    CHECK(c.row->name == "g5.48xlarge");
  }
  {
    TempFile dmi("g5.12xlarge");
    REQUIRE(choose_platform(params_with("auto", dmi.path()), &c) == Status::kOk);
    CHECK(c.row->name == "g5.*");
    CHECK(c.source.find("'g5.12xlarge'") != std::string::npos);
    CHECK(c.source.find("(row g5.*)") != std::string::npos);
  }
  {
    TempFile dmi("m5.large\n");
    REQUIRE(choose_platform(params_with("auto", dmi.path()), &c) == Status::kOk);
    CHECK(c.row == &generic_platform());
    CHECK(c.source.find("'m5.large'") != std::string::npos);
    CHECK(c.source.find("not in the platform table") != std::string::npos);
  }
  {
    TempFile dmi("\n");
    REQUIRE(choose_platform(params_with("auto", dmi.path()), &c) == Status::kOk);
    CHECK(c.row == &generic_platform());
    CHECK(c.source.find("empty") != std::string::npos);
  }
  const std::string missing = "/nonexistent/nf-test/product_name";
  REQUIRE(choose_platform(params_with("auto", missing), &c) == Status::kOk);
  CHECK(c.row == &generic_platform());
  CHECK(c.row->nccl_env.empty());
  CHECK_FALSE(c.row->efa_expected);
  CHECK(c.source.find(missing) != std::string::npos);
  CHECK(c.source.find("No such file") != std::string::npos);
}

TEST_CASE("NCCL_FABRIC_PLATFORM forces a row, none, or fails naming the rows", "[platform]") {
  TempFile dmi("p5.48xlarge\n");
  PlatformChoice c;
  REQUIRE(choose_platform(params_with("p4d.24xlarge", dmi.path()), &c) == Status::kOk);
  CHECK(c.row->name == "p4d.24xlarge");
  CHECK(c.forced);
  CHECK(c.source == "NCCL_FABRIC_PLATFORM=p4d.24xlarge");

  REQUIRE(choose_platform(params_with("g5.2xlarge", dmi.path()), &c) == Status::kOk);
  CHECK(c.row->name == "g5.*");

  REQUIRE(choose_platform(params_with("none", dmi.path()), &c) == Status::kOk);
  CHECK(c.row == &generic_platform());
  CHECK(c.forced);
  CHECK(c.source == "NCCL_FABRIC_PLATFORM=none");

  // Also when set through the environment, as users do.
  {
    EnvGuard g("NCCL_FABRIC_PLATFORM", "trn1.32xlarge");
    Params p;
    REQUIRE(p.load_from_env() == Status::kOk);
    REQUIRE(p.set(ParamId::kTestDmiFile, dmi.path().c_str()) == Status::kOk);
    REQUIRE(choose_platform(p, &c) == Status::kOk);
    CHECK(c.row->name == "trn1.32xlarge");
    CHECK(c.forced);
  }

  std::string error;
  CHECK(choose_platform(params_with("p9.mega", dmi.path()), &c, &error) == Status::kInvalidUsage);
  CHECK(error.find("NCCL_FABRIC_PLATFORM='p9.mega'") != std::string::npos);
  CHECK(error.find("p5.48xlarge") != std::string::npos);
  CHECK(error.find("g6e.*") != std::string::npos);
  CHECK(error.find("none") != std::string::npos);
}

TEST_CASE("platform defaults are set only where the user has not set them", "[platform]") {
  TempFile dmi("p5.48xlarge\n");
  PlatformChoice c;
  REQUIRE(choose_platform(params_with("auto", dmi.path()), &c) == Status::kOk);
  REQUIRE(c.row->nccl_env.size() >= 2);
  const std::string first = c.row->nccl_env[0].first;   // NCCL_BUFFSIZE
  const std::string second = c.row->nccl_env[1].first;  // NCCL_P2P_NET_CHUNKSIZE
  std::vector<std::unique_ptr<EnvGuard>> guards;  // every variable unset now, restored at the end
  for (const auto& kv : c.row->nccl_env)
    guards.emplace_back(new EnvGuard(kv.first.c_str(), nullptr));
  {
    EnvGuard user(second.c_str(), "131072");
    std::vector<AppliedDefault> applied = apply_platform_defaults(c);
    REQUIRE(applied.size() == c.row->nccl_env.size());
    for (size_t i = 0; i < applied.size(); ++i) {
      INFO(applied[i].name);
      CHECK(applied[i].name == c.row->nccl_env[i].first);
      CHECK(applied[i].platform_value == c.row->nccl_env[i].second);
      CHECK(applied[i].row == "p5.48xlarge");
      const char* now = getenv(applied[i].name.c_str());
      REQUIRE(now != nullptr);
      CHECK(applied[i].value == now);
      if (applied[i].name == second) {
        CHECK(applied[i].origin == AppliedDefault::Origin::kUser);
        CHECK(std::string(now) == "131072");
      } else {
        CHECK(applied[i].origin == AppliedDefault::Origin::kPlatform);
        CHECK(std::string(now) == c.row->nccl_env[i].second);
      }
    }
    // A second init in the same process: what we set is still the platform's, not the user's.
    applied = apply_platform_defaults(c);
    CHECK(applied[0].origin == AppliedDefault::Origin::kPlatform);
    CHECK(applied[1].origin == AppliedDefault::Origin::kUser);
    // The user overriding our value later is the user's.
    EnvGuard later(first.c_str(), "4194304");
    applied = apply_platform_defaults(c);
    CHECK(applied[0].origin == AppliedDefault::Origin::kUser);
    CHECK(applied[0].value == "4194304");
  }

  // Generic and none apply nothing.
  PlatformChoice none;
  REQUIRE(choose_platform(params_with("none", dmi.path()), &none) == Status::kOk);
  CHECK(apply_platform_defaults(none).empty());
}

TEST_CASE("a platform that is not what its row expects gets one explained warning", "[platform]") {
  const std::vector<Platform>& t = platform_table();
  const Platform& p5 = *match_platform(t, "p5.48xlarge");
  const Platform& g5 = *match_platform(t, "g5.48xlarge");
  const Platform& trn1 = *match_platform(t, "trn1.32xlarge");

  CHECK(platform_expectation_warning(p5, "efa", true).empty());
  const std::string tcp = platform_expectation_warning(p5, "tcp;ofi_rxm", false);
  CHECK(tcp.find("provider 'tcp;ofi_rxm' on p5.48xlarge: EFA was expected") == 0);
  CHECK(tcp.find("20-30x lower bandwidth") != std::string::npos);
  CHECK(tcp.find("GPUDirect") == std::string::npos);  // one message: the EFA one
  const std::string nogdr = platform_expectation_warning(p5, "efa", false);
  CHECK(nogdr.find("GPUDirect RDMA was expected") != std::string::npos);
  CHECK(nogdr.find("host memory") != std::string::npos);
  CHECK(nogdr.find("nvidia-peermem") != std::string::npos);
  CHECK(nogdr.find("FI_EFA_USE_DEVICE_RDMA") != std::string::npos);

  CHECK(platform_expectation_warning(g5, "efa", false).empty());
  CHECK(platform_expectation_warning(g5, "tcp;ofi_rxm", false).empty());
  CHECK(platform_expectation_warning(trn1, "efa", false).empty());
  CHECK(platform_expectation_warning(generic_platform(), "tcp;ofi_rxm", false).empty());
  CHECK(platform_expectation_warning(generic_platform(), "shm", false).empty());

  CHECK(provider_is_efa("efa"));
  CHECK(provider_is_efa("efa-direct"));
  CHECK_FALSE(provider_is_efa("tcp;ofi_rxm"));
  CHECK_FALSE(provider_is_efa("mockefa"));
  CHECK_FALSE(provider_is_efa(""));
}

TEST_CASE(
    "every NIC gets a speed: the parameter, else the link's, else the platform row's (EFA), "
    "else the provider's default",
    "[platform][speed]") {
  const std::vector<Platform>& t = platform_table();
  const Platform& p5en = *match_platform(t, "p5en.48xlarge");
  auto nic = [](const char* provider, int measured) {
    Nic n;
    n.provider = provider;
    n.speed_mbps = measured;
    if (measured > 0) n.speed_source = "provider link attribute";
    return n;
  };
  std::vector<Nic> nics;
  nics.push_back(nic("efa", 0));
  nics.push_back(nic("efa", 0));
  nics.push_back(nic("efa", 400000));
  nics.push_back(nic("tcp;ofi_rxm", 0));
  nics.push_back(nic("tcp;ofi_rxm", 25000));
  nics.push_back(nic("shm", 0));
  nics.push_back(nic("verbs;ofi_rxm", 0));
  nics.push_back(nic("sockets", 0));
  nics.push_back(nic("mockefa", 0));

  SECTION("nothing set, generic platform: measured speeds stay, the rest get their defaults") {
    settle_nic_speeds(Params(), generic_platform(), &nics);
    CHECK(nics[0].speed_mbps == 100000);
    CHECK(nics[0].speed_source.find("default for provider 'efa'") == 0);
    CHECK(nics[2].speed_mbps == 400000);
    CHECK(nics[2].speed_source == "provider link attribute");
    CHECK(nics[3].speed_mbps == 10000);
    CHECK(nics[3].speed_source.find("default for provider 'tcp;ofi_rxm'") == 0);
    CHECK(nics[3].speed_source.find("NCCL_FABRIC_SPEED") != std::string::npos);  // the fix
    CHECK(nics[4].speed_mbps == 25000);
    CHECK(nics[5].speed_mbps == 100000);
    CHECK(nics[6].speed_mbps == 100000);
    CHECK(nics[7].speed_mbps == 10000);
    CHECK(nics[8].speed_mbps == 10000);  // the mock is not EFA by name: "anything else"
  }
  SECTION("on a known platform an EFA that reports no speed gets the row's, other providers not") {
    settle_nic_speeds(Params(), p5en, &nics);
    CHECK(nics[0].speed_mbps == 200000);
    CHECK(nics[0].speed_source.find("platform row p5en.48xlarge") == 0);
    CHECK(nics[2].speed_mbps == 400000);  // what the link says wins over the table
    CHECK(nics[3].speed_mbps == 10000);
    CHECK(nics[5].speed_mbps == 100000);
  }
  SECTION("NCCL_FABRIC_SPEED wins over everything, per NIC, and the log says what it replaced") {
    Params p;
    REQUIRE(p.set(ParamId::kSpeed, "12345") == Status::kOk);
    settle_nic_speeds(p, p5en, &nics);
    for (const Nic& n : nics) {
      INFO(n.provider);
      CHECK(n.speed_mbps == 12345);
      CHECK(n.speed_source.find("NCCL_FABRIC_SPEED") == 0);
    }
    CHECK(nics[2].speed_source ==
          "NCCL_FABRIC_SPEED, in place of 400000 Mb/s (provider link attribute)");
  }
  for (const Nic& n : nics) CHECK(n.speed_mbps > 0);
}

TEST_CASE("the per-provider default speeds, and NCCL_FABRIC_SPEED's bound", "[platform][speed]") {
  CHECK(param_def(ParamId::kSpeed).max == kMaxSpeedMbps);
  CHECK(default_speed_mbps("efa") == 100000);
  CHECK(default_speed_mbps("efa-direct") == 100000);
  CHECK(default_speed_mbps("verbs;ofi_rxm") == 100000);
  CHECK(default_speed_mbps("shm") == 100000);
  CHECK(default_speed_mbps("tcp;ofi_rxm") == 10000);
  CHECK(default_speed_mbps("tcp") == 10000);
  CHECK(default_speed_mbps("sockets") == 10000);
  CHECK(default_speed_mbps("udp;ofi_rxd") == 10000);
  CHECK(default_speed_mbps("") == 10000);
}

TEST_CASE("railId and planeId: a rail-aligned row, the parameters, and what is refused",
          "[platform][rail]") {
  std::vector<Platform> rows;
  std::string error;
  REQUIRE(parse_platform_table(std::string(kHeader) +
                                   "m9.rail 4 100 4 X1 1 yes yes 40 rdma yes yes src-a -\n"
                                   "m9.flat 4 100 4 X1 1 yes yes 40 rdma yes no src-a -\n"
                                   "m9.some 4 100 4 X1 1 yes yes 40 rdma yes - src-a -\n",
                               &rows, &error) == Status::kOk);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].rail_aligned == 1);
  CHECK(rows[1].rail_aligned == 0);
  CHECK(rows[2].rail_aligned == -1);
  CHECK(parse_error_of("m9.big 2 100 4 X1 0.5 yes yes 40 rdma yes maybe src-a -\n")
            .find("rail_aligned 'maybe'") != std::string::npos);
  // The embedded table claims rail alignment nowhere: no source says it (docs/platforms.md).
  for (const Platform& p : platform_table()) CHECK(p.rail_aligned == -1);
  std::vector<RailPlane> rp;
  Params p;
  SECTION("auto: the index on a rail-aligned row, -1 elsewhere") {
    REQUIRE(choose_rail_plane(p, rows[0], 4, &rp, &error) == Status::kOk);
    REQUIRE(rp.size() == 4);
    for (int i = 0; i < 4; ++i) {
      CHECK(rp[static_cast<size_t>(i)].rail == i);
      CHECK(rp[static_cast<size_t>(i)].plane == -1);
    }
    CHECK(rp[0].rail_source.find("rail-aligned") != std::string::npos);
    for (const Platform* row :
         std::vector<const Platform*>{&rows[1], &rows[2], &generic_platform()}) {
      REQUIRE(choose_rail_plane(p, *row, 4, &rp, &error) == Status::kOk);
      for (const RailPlane& x : rp) CHECK(x.rail == -1);
    }
  }
  SECTION("none and lists win over the row") {
    REQUIRE(p.set(ParamId::kRailId, "none") == Status::kOk);
    REQUIRE(choose_rail_plane(p, rows[0], 2, &rp, &error) == Status::kOk);
    CHECK(rp[0].rail == -1);
    CHECK(rp[1].rail == -1);
    REQUIRE(p.set(ParamId::kRailId, "3,-1") == Status::kOk);
    REQUIRE(p.set(ParamId::kPlaneId, "0,1") == Status::kOk);
    REQUIRE(choose_rail_plane(p, rows[1], 2, &rp, &error) == Status::kOk);
    CHECK(rp[0].rail == 3);
    CHECK(rp[1].rail == -1);
    CHECK(rp[0].plane == 0);
    CHECK(rp[1].plane == 1);
    CHECK(rp[0].rail_source == "NCCL_FABRIC_RAIL_ID");
  }
  SECTION("a list of the wrong length or a bad id fails with the reason") {
    for (const char* bad : {"1,2,3", "a,b", "1,,2", "-2,0", "32768,0", "1.5,2"}) {
      INFO(bad);
      REQUIRE(p.set(ParamId::kRailId, bad) == Status::kOk);
      error.clear();
      CHECK(choose_rail_plane(p, rows[0], 2, &rp, &error) == Status::kInvalidUsage);
      CHECK(error.find("NCCL_FABRIC_RAIL_ID") == 0);
    }
    REQUIRE(p.set(ParamId::kRailId, "auto") == Status::kOk);
    REQUIRE(p.set(ParamId::kPlaneId, "7") == Status::kOk);
    CHECK(choose_rail_plane(p, rows[0], 2, &rp, &error) == Status::kInvalidUsage);
    CHECK(error.find("NCCL_FABRIC_PLANE_ID='7' names 1 id(s), but there are 2") == 0);
  }
}
