// nccl-fabric-info's report: what it found, the traps it checks, text and JSON output.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "util/params.h"

namespace nfi {

struct Finding {
  int severity = 1;  // 1 warning, 2 error
  std::string id;    // stable, for scripts: "efa-expected", "memlock", ...
  std::string message;
  std::string fix;
};

struct NicInfo {
  std::string domain, pci_path;
  int numa = -1;
  int speed_mbps = 0;
  std::string speed_source;  // where the speed came from (NCCL_FABRIC_SPEED, sysfs, a default...)
  bool rma = false, hmem = false;
  std::string nearest_gpus;  // from the plugin's topology log, "" when unknown
  std::string fabric;       // the provider's fabric the plugin would use ("efa-direct", "efa", ...)
  std::string fabric_why;   // why that fabric ("" where the provider has only one)
  bool tagged = false;      // FI_TAGGED granted: SENDRECV possible
  bool rx_cq_data = false;  // FI_RX_CQ_DATA mode: writes with CQ data consume posted receives
};

struct DeviceInfo {
  int index = 0;
  std::string name, pci_path;
  int rails = 1;
  int speed_mbps = 0;
  int ptr_support = 0;
  int max_recvs = 1;
  int rail_id = -1;  // NCCL >= 2.30 (ABI v12): -1 undefined
  int plane_id = -1;
};

struct EnvVar {
  std::string name, value, source;
};

struct Report {
  // Platform.
  std::string platform, platform_source;
  bool efa_expected = false, gdr_expected = false;
  std::vector<std::string> platform_lines;  // the row, as text
  // libfabric and CUDA.
  std::string libfabric_version, provider, providers_tried;
  std::string fabric;           // the fabric of the first NIC ("" without a provider)
  std::string efa_fabric;       // NCCL_FABRIC_EFA_FABRIC as applied: auto, efa, efa-direct
  std::string libfabric_built;  // the headers the plugin and this tool were built against
  std::string api_version;      // the API version fi_getinfo answered at ("" without a provider)
  bool api_below_library_118 = false;  // API < 1.18 although the library has 1.18
  bool api_below_library_120 = false;  // API < 1.20 although the library has 1.20
  bool nic_hmem = false;
  std::string cuda, cuda_context;
  bool cuda_available = false;
  std::vector<NicInfo> nics;
  std::string topology;  // what hwloc sees
  // The plugin, as NCCL sees it.
  std::string plugin, plugin_name, plugin_error;
  int plugin_abi = 0;
  std::vector<DeviceInfo> devices;
  std::string gdr_reason, dmabuf_reason;
  std::vector<std::string> plugin_warnings;
  // Limits and environment.
  bool memlock_unlimited = false;
  uint64_t memlock_bytes = 0;
  unsigned long hugepages_total = 0, hugepages_free = 0, hugepage_kb = 0;
  std::vector<EnvVar> env;
  std::vector<std::string> bad_params;
  // The two-machine check.
  bool peer_ran = false, peer_ok = false;
  std::string peer_command, peer_output;

  std::vector<Finding> findings;
  int exit_code() const;
};

// The platform row (src/platform): detection, the row, what it expects.
void platform_section(const nf::Params& params, Report* r);
// Every trap; fills r->findings.
void run_checks(const std::string& plugin_path, Report* r);
void print_text(const Report& r, FILE* out);
void print_json(const Report& r, FILE* out);

}  // namespace nfi
