// Known machines and what to expect of them: a table (platforms.txt, embedded by the build) keyed
// by the DMI product name, the choice of a row for this machine, the NCCL environment defaults a
// row carries, and the one WARN that says when the machine is not what its row expects.
// docs/platforms.md describes the table, its sources and how to add a row.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "util/params.h"
#include "util/status.h"

namespace nf {

// The protocol a row prefers when NCCL_FABRIC_PROTOCOL=auto; kAuto leaves it to the plugin.
enum class PlatformProtocol { kAuto, kSendrecv, kRdma };
// Whether GPUDirect RDMA is expected; kNotApplicable where the accelerators are not CUDA GPUs.
enum class GdrExpect { kNo, kYes, kNotApplicable };

// One row. Numbers are -1 where the table says '-' (unknown, e.g. a wildcard over several sizes).
struct Platform {
  std::string name;  // exact DMI product name, or a prefix ending in '*' ("g5.*")
  bool wildcard = false;
  int efa_count = -1;             // EFA devices
  int efa_gbps = -1;              // link speed of each EFA, Gb/s
  int accelerators = -1;          // GPUs or other accelerators
  std::string accelerator_model;  // "H100"; empty when unknown
  double nics_per_gpu = -1;
  bool efa_expected = false;
  GdrExpect gdr_expected = GdrExpect::kNo;
  double latency_us = -1;
  PlatformProtocol protocol = PlatformProtocol::kAuto;
  // EFA grants FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES here (NCCL's LL128 across nodes is then
  // safe): 1 yes, 0 no, -1 unknown.
  int ll128_expected = -1;
  // The network is rail-aligned: NIC i of every node hangs off the same switch (rail), so the
  // device's index is its rail for NCCL >= 2.30 (railId): 1 yes, 0 no, -1 unknown.
  int rail_aligned = -1;
  std::vector<std::string> sources;                           // keys of docs/platforms.md#sources
  std::vector<std::pair<std::string, std::string>> nccl_env;  // in table order
  int line = 0;  // where the row is in the table; 0 for the built-in generic row
};

// Parses the table format of platforms.txt. Strict: an unknown or missing column, a bad value, a
// duplicate row or variable fails with kInvalidArgument and "line N: ..." in *error.
Status parse_platform_table(const std::string& text, std::vector<Platform>* out,
                            std::string* error);

// The text the build embedded (generated from src/platform/platforms.txt).
const char* platform_table_text();
// The embedded table, parsed on first use (thread-safe). Empty, with a WARN, should the embedded
// text not parse; the unit tests make sure it does.
const std::vector<Platform>& platform_table();
// The row for machines the table does not know: no expectations, no defaults.
const Platform& generic_platform();

// The row for a product name: the exact row, else the first wildcard row that matches, else NULL.
const Platform* match_platform(const std::vector<Platform>& table, const std::string& product);

struct PlatformChoice {
  const Platform* row = nullptr;  // never NULL after choose_platform succeeds (generic if unknown)
  std::string source;             // how it was chosen, for logs and nccl-fabric-info
  bool forced = false;            // NCCL_FABRIC_PLATFORM named a row or "none"
};

// Picks this machine's row from NCCL_FABRIC_PLATFORM (auto | none | a row or product name) and, for
// auto, the DMI product name read from NCCL_FABRIC_TEST_DMI_FILE. An unreadable file or an unknown
// product gives the generic row and says why in source. A forced name that matches no row fails
// with kInvalidUsage, a WARN and *error (when given) naming the valid rows.
Status choose_platform(const Params& p, PlatformChoice* out, std::string* error = nullptr);

// One NCCL variable of a row's defaults, and who decided its value.
struct AppliedDefault {
  enum class Origin { kPlatform, kUser };
  std::string name;
  std::string value;           // the value in effect
  std::string platform_value;  // what the row suggests
  std::string row;             // the row's name
  Origin origin = Origin::kPlatform;
};

// Sets each of the row's NCCL defaults the user has not set (setenv, not overwriting), logging each
// once per process at INFO. A variable this function set earlier in the process still counts as
// the platform's. Call it before NCCL reads its parameters (in the plugin's init).
std::vector<AppliedDefault> apply_platform_defaults(const PlatformChoice& choice);

// "" when the provider and GPUDirect state are what the row expects; else one message that says
// what is missing, what it costs and what to check. provider is libfabric's name ("efa",
// "tcp;ofi_rxm"); gdr_on says whether the plugin offers GPU memory to NCCL.
std::string platform_expectation_warning(const Platform& row, const std::string& provider,
                                         bool gdr_on);

// The rail and plane NCCL >= 2.30 is told for each device (net ABI v12's railId and planeId; -1 is
// NCCL_NET_ID_UNDEF, which leaves NCCL's rail-aware search and NIC merging as they were), and where
// each came from, for the INFO line and nccl-fabric-info.
struct RailPlane {
  int rail = -1;
  int plane = -1;
  std::string rail_source;
  std::string plane_source;
};
// From NCCL_FABRIC_RAIL_ID / NCCL_FABRIC_PLANE_ID (auto | none | one id per device,
// comma-separated) and, for an automatic rail, the row's rail_aligned. A malformed list, or one
// whose length is not ndev, fails with kInvalidUsage and the reason in *error.
Status choose_rail_plane(const Params& p, const Platform& row, int ndev,
                         std::vector<RailPlane>* out, std::string* error);

// True for libfabric's EFA providers ("efa", "efa-direct", and layered names that end in them).
bool provider_is_efa(const std::string& provider);

const char* platform_protocol_name(PlatformProtocol p);  // "auto", "sendrecv", "rdma"
const char* gdr_expect_name(GdrExpect g);                // "yes", "no", "n/a"
// One line for logs and tools: "p5.48xlarge: 32 EFA x 100 Gb/s, 8 H100, GPUDirect expected, ...".
std::string describe_platform(const Platform& row);

}  // namespace nf
