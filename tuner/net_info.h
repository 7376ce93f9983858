// What the tuner knows of the network, and where it learns it. The tuner includes nothing of the
// net plugin (core/, fabric/): libnccl-tuner-fabric.so stands alone, without libfabric or hwloc.
// In libnccl-net-fabric.so the net plugin registers a source (set_net_summary_source); elsewhere
// the tuner reads what a net plugin of ours in the same process published at its init
// (kNetSummaryEnv), or knows nothing of the network.
#pragma once
#include <string>

namespace nf {

struct NetSummary {
  bool found = false;
  std::string provider;
  int devices = 0;       // NCCL devices
  int speed_mbps = 0;    // of the first device (all its rails)
  int rails = 1;         // NICs (rails) of the first device
  bool gdr = false;      // GPU memory offered to NCCL
  std::string platform;  // the platform row's name
};

using NetSummaryFn = NetSummary (*)();
void set_net_summary_source(NetSummaryFn fn);

// Set by the net plugin at init for the rest of the process (not a user setting):
// "provider|devices|rails|speed_mbps|gdr|platform".
constexpr const char* kNetSummaryEnv = "NCCL_FABRIC_INTERNAL_NET";
std::string format_net_summary(const NetSummary& s);
bool parse_net_summary(const std::string& text, NetSummary* out);

// The registered source's answer; else the published one; else found = false.
NetSummary tuner_net_summary();

}  // namespace nf
