// Plugin contexts (one per NCCL init, or the process default for v6-v10) and the process-wide
// device table they share.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/connect.h"
#include "fabric/fabric.h"
#include "tuner/net_info.h"
#include "util/params.h"

namespace nf {

constexpr uint32_t kCtxMagic = 0x58544346u;

struct PluginCtx {
  uint32_t magic = kCtxMagic;
  Params params;
  std::mutex mu;  // guards `pending` and `eps`: several service threads may call in
  // Connects in progress, keyed by the handle buffer NCCL polls them with.
  std::unordered_map<const void*, std::unique_ptr<Comm>> pending;
  // Per device, the endpoint every comm of this context shares (opened on first use); each comm
  // holds a reference, so it outlives the context when comms do.
  std::vector<std::shared_ptr<SharedEp>> eps;
  ProfHook prof;                    // NCCL's profiler callback (v10+)
  std::shared_ptr<NetHints> hints;  // NCCL's setNetAttr hints (v11+), shared with its comms
  int attr_calls = 0;               // setNetAttr calls logged so far (the first few are)
};

// What getProperties reports for one device; api/ copies it into NCCL's struct of each version.
struct DeviceProps {
  const char* name;
  const char* pci_path;  // NULL when the NIC has none
  uint64_t guid;
  int ptr_support;  // kPtrHost...
  int reg_is_global;
  int force_flush;
  int speed_mbps;
  int port;
  float latency_us;
  int max_comms;
  int max_recvs;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  int rail_id;   // NCCL >= 2.30 (v12): -1 unknown
  int plane_id;  // ... -1 unknown
};

constexpr int kPtrHost = 0x1;  // same bits as NCCL_PTR_*
constexpr int kPtrCuda = 0x2;
constexpr int kPtrDmabuf = 0x4;

// Creates a context: reads NCCL_FABRIC_*, finds the devices on first use.
Status ctx_create(PluginCtx** out);
void ctx_destroy(PluginCtx* ctx);
// The shared context of the versions whose NCCL does not pass one (v6-v10).
Status default_ctx(PluginCtx** out);
PluginCtx* default_ctx_if_any();

int device_count();
Status device_props(int dev, DeviceProps* out);

struct Platform;
// Gives every NIC a speed NCCL can plan with, and says where it came from: NCCL_FABRIC_SPEED when
// set; else what discovery found (the provider's link attribute, sysfs); else, on EFA, the
// platform row's efa_gbps; else default_speed_mbps(provider). Never leaves a speed at 0.
void settle_nic_speeds(const Params& p, const Platform& row, std::vector<Nic>* nics);

// What the tuner may know of the network this process uses: set once the net side of this
// library found its devices (found = false before, or in a library that only tunes).
// What the tuner is told of the network (tuner/net_info.h): this library registers it as the
// tuner's source, and publishes it for a standalone tuner in the same process.
NetSummary net_summary();
// The connect environment of a device: the context's shared endpoint on it (opened, with the
// domain, on first use) and the provider.
Status device_env(PluginCtx& ctx, int dev, ConnectEnv* out);
// Whether the devices offer RDMA only because LL128 relies on RDMA writes' 128-byte ordering,
// which sends lack (NCCL_FABRIC_PROTOCOL=auto; issue 35).
bool ll128_rdma_only();

}  // namespace nf
