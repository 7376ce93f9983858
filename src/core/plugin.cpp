#include "core/plugin.h"

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "fabric/fi_compat.h"
#include "mem/gdr.h"
#include "mem/mr_cache.h"
#include "platform/platform.h"
#include "topo/topo.h"
#include "util/log.h"
#include "wire/wire.h"

namespace nf {
namespace {

// Process-wide: NCCL asks devices() once per process, so the table lives as long as the library.
// Never destroyed: comms may outlive any context, and static destruction order at exit is not ours.
struct Devices {
  std::mutex mu;
  bool found = false;
  std::string provider;
  std::vector<Nic> nics;
  std::vector<std::shared_ptr<Domain>> domains;
  // NCCL device i = the NICs groups[i] (one per rail; a NIC repeats when the device has fewer
  // NICs than rails), named names[i].
  std::vector<std::vector<size_t>> groups;
  std::vector<std::string> names;
  std::vector<bool> rma;               // every NIC of the device can carry the RDMA protocol
  bool write_emulated = false;         // the provider emulates RMA writes (EFA without RDMA write)
  std::vector<std::string> near_gpus;  // the GPUs behind the device's PCIe switch, for the log
  GdrReport gdr;                       // probed on the first NIC, applies to every device
  EpFeatures features;                 // what an endpoint of the first NIC answered (EFA's options)
  PlatformChoice platform;             // the platform-table row (docs/platforms.md)
  // Why write lengths from completions cannot be trusted (write_len_probe), "" when they can: the
  // RDMA protocol is then off on every device (rma all false).
  std::string write_len_broken;
  // LL128 stays enabled on the strength of RDMA writes landing 128-byte lines in order, while
  // sends do not (FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES refused): a connection that fell
  // back to SENDRECV could tear LL128 lines, so under NCCL_FABRIC_PROTOCOL=auto the devices
  // offer RDMA only (ll128_policy, device_env; issue 35).
  std::atomic<bool> ll128_rdma_only{false};  // read without d.mu (accept, under an endpoint's lock)
  std::vector<RailPlane> rail_plane;         // per device: NCCL >= 2.30's railId and planeId
  int live_contexts = 0;
  int max_recvs = 1;
  PluginCtx* default_ctx = nullptr;
};

Devices& devices() {
  static Devices* d = new Devices();
  return *d;
}

// A device's speed: its NICs' speeds added up (a NIC with several endpoints counts once).
int group_speed_mbps(const Devices& d, const std::vector<size_t>& g) {
  int64_t speed = 0;
  for (size_t k = 0; k < g.size(); ++k) {
    bool seen = false;
    for (size_t j = 0; j < k; ++j) seen = seen || g[j] == g[k];
    if (!seen) speed += d.nics[g[k]].speed_mbps;
  }
  return static_cast<int>(speed < INT32_MAX ? speed : INT32_MAX);
}

// The library and the headers disagree in a way that costs features: the API version obtained is
// below a step (1.18, 1.20) that the loaded library has. A WARN where GPU memory or EFA is in
// play (EFA keys device RDMA on the API version; DMA-BUF needs 1.20), else INFO.
void warn_version_mismatch(const Nic& nic) {
  const uint32_t lib = fi_version();
  const uint32_t api = nic.api_version;
  std::string lost;
  if (api < kFiApi118 && lib >= kFiApi118)
    lost =
        "below 1.18, EFA leaves device RDMA off on first-generation devices (p4d: writes and the "
        "flush read emulated) and FI_OPT_CUDA_API_PERMITTED does not exist";
  else if (api < kFiApi120 && lib >= kFiApi120)
    lost =
        "below 1.20 there is no FI_MR_DMABUF (GPU memory registers only through the "
        "provider's own CUDA path)";
  const bool matters = nic.hmem || nic.provider.rfind("efa", 0) == 0;
  char why[160];
  if (lib < kFiBuiltVersion)
    snprintf(why, sizeof(why),
             "the loaded libfabric %u.%u is older than the %u.%u headers the "
             "plugin was built against",
             FI_MAJOR(lib), FI_MINOR(lib), FI_MAJOR_VERSION, FI_MINOR_VERSION);
  else if (api < lib && api == kFiBuiltVersion)
    snprintf(why, sizeof(why),
             "the plugin was built against libfabric %u.%u headers, so it asks "
             "for no newer API than that (rebuild with --with-libfabric=<the installed prefix>)",
             FI_MAJOR_VERSION, FI_MINOR_VERSION);
  else
    snprintf(why, sizeof(why), "the provider or NCCL_FABRIC_API_VERSION held it there");
  if (lost.empty()) {
    if (lib != kFiBuiltVersion)
      NF_INFO(kSubsysInit | kSubsysNet,
              "libfabric: loaded %u.%u, built against %u.%u, API %s: "
              "%s; nothing the plugin uses depends on the difference",
              FI_MAJOR(lib), FI_MINOR(lib), FI_MAJOR_VERSION, FI_MINOR_VERSION,
              api_version_str(api).c_str(), why);
    return;
  }
  if (matters)
    NF_WARN("libfabric API %s obtained from the loaded %u.%u: %s; %s (docs/compatibility.md)",
            api_version_str(api).c_str(), FI_MAJOR(lib), FI_MINOR(lib), why, lost.c_str());
  else
    NF_INFO(kSubsysInit | kSubsysNet,
            "libfabric API %s obtained from the loaded %u.%u: %s; %s "
            "(no GPU memory or EFA here, so it costs nothing)",
            api_version_str(api).c_str(), FI_MAJOR(lib), FI_MINOR(lib), why, lost.c_str());
}

// Whether NCCL_PROTO's value lets NCCL use LL128 ("^a,b" excludes, "a,b" includes).
bool nccl_proto_allows_ll128(const char* v) {
  std::string s = v;
  bool exclude = !s.empty() && s[0] == '^';
  if (exclude) s.erase(0, 1);
  bool listed = false;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(pos, comma - pos);
    if (strcasecmp(item.c_str(), "LL128") == 0) listed = true;
    pos = comma + 1;
  }
  return exclude ? !listed : listed;
}

// LL128 across the network needs each 128-byte line of a transfer to land in order and once
// (NCCL reads a flag inside every line). EFA promises it only where an endpoint is granted
// FI_OPT_EFA_{WRITE,SENDRECV}_IN_ORDER_ALIGNED_128_BYTES for the path the data takes: RDMA writes
// (the RDMA protocol; its eager messages are copied after they arrive whole) or receives
// (SENDRECV). Providers without EFA's options deliver a byte stream or copy with the CPU, as
// NCCL's socket transport does, and are not restricted.
void ll128_policy(Devices& d, const Params& p) {
  unsetenv(kLl128OffEnv);
  d.ll128_rdma_only.store(false);
  const EpFeatures& f = d.features;
  if (!f.efa_options) return;
  const std::string& want = p.get_str(ParamId::kProtocol);
  const bool rdma =
      want == "rdma" || (want == "auto" && !d.rma.empty() && d.rma[0] && !f.write_emulated &&
                         d.platform.row->protocol != PlatformProtocol::kSendrecv);
  const bool granted = rdma ? f.write_in_order_128 : f.sendrecv_in_order_128;
  const char* opt = rdma ? "FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES"
                         : "FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES";
  NF_INFO(kSubsysInit | kSubsysNet, "LL128: the %s protocol needs %s: %s (%s)",
          rdma ? "RDMA" : "SENDRECV", opt, granted ? "granted" : "refused",
          f.in_order_note.c_str());
  if (granted) {
    // The grant covers the RDMA protocol's writes. Under auto a connection may still fall back to
    // SENDRECV (a peer that offers only that); unless sends are ordered too, or the user keeps
    // LL128 out, such a connection is refused instead (device_env offers RDMA only).
    const char* user = getenv("NCCL_PROTO");
    const bool only = rdma && want == "auto" && !f.sendrecv_in_order_128 &&
                      (user == nullptr || nccl_proto_allows_ll128(user));
    d.ll128_rdma_only.store(only);
    if (only)
      NF_INFO(kSubsysInit | kSubsysNet,
              "LL128: FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES refused, so connections use "
              "the RDMA protocol only (a peer offering only SENDRECV is refused; NCCL_PROTO=^LL128 "
              "lets it in)");
    return;
  }
  const Platform& row = *d.platform.row;
  const std::string expected = row.ll128_expected == 1
                                   ? std::string("; the platform table expects ") + row.name +
                                         " to grant it: check that "
                                         "the EFA installer's libfabric (>= 1.18) is the one "
                                         "loaded and FI_EFA_USE_DEVICE_RDMA "
                                         "is not 0"
                                   : std::string();
  const char* user = getenv("NCCL_PROTO");
  if (user == nullptr) {
    setenv("NCCL_PROTO", "^LL128", 1);
    setenv(kLl128OffEnv, "set-proto", 1);
    NF_WARN(
        "provider '%s' cannot guarantee that each 128-byte line lands in order (%s refused; "
        "the provider answered: %s): NCCL's LL128 protocol could read torn lines across the "
        "network, so NCCL_PROTO "
        "is set to ^LL128 for this process%s (docs/troubleshooting.md#ll128)",
        d.provider.c_str(), opt, f.in_order_note.c_str(), expected.c_str());
  } else {
    setenv(kLl128OffEnv, "user-proto", 1);
    if (nccl_proto_allows_ll128(user))
      NF_WARN(
          "NCCL_PROTO=%s allows LL128, but provider '%s' cannot guarantee that each 128-byte "
          "line lands in order (%s refused): collectives that use LL128 across nodes risk "
          "silently corrupted results; exclude it (NCCL_PROTO=^LL128) unless you know this "
          "NIC orders them (docs/troubleshooting.md#ll128)",
          user, d.provider.c_str(), opt);
  }
}

Status discover_locked(Devices& d, const Params& p) {
  if (d.found) return Status::kOk;
  NF_CHECK(choose_platform(p, &d.platform));
  apply_platform_defaults(d.platform);
  std::string report;
  const std::string& wanted = p.get_str(ParamId::kProvider);
  // FI_HMEM is asked for only where GPU memory can exist: it narrows what providers offer.
  const bool want_hmem =
      p.get_str(ParamId::kGdr) != "off" && Cuda::get(p.get_str(ParamId::kCudaLibrary)).available();
  uint32_t api_cap = 0;
  std::string api_error;
  if (!ok(parse_api_version(p.get_str(ParamId::kApiVersion), &api_cap, &api_error))) {
    NF_WARN("bad parameter: %s", api_error.c_str());
    return Status::kInvalidUsage;
  }
  EfaFabric efa_fabric = EfaFabric::kAuto;
  std::string fabric_error;
  if (!parse_efa_fabric(p.get_str(ParamId::kEfaFabric), &efa_fabric, &fabric_error)) {
    NF_WARN("bad parameter: %s", fabric_error.c_str());
    return Status::kInvalidUsage;
  }
  // Only tagged messages carry SENDRECV: a fabric without them (efa-direct) is no use to it.
  const bool need_tagged = p.get_str(ParamId::kProtocol) == "sendrecv";
  Status s = discover_nics(wanted, p.get_str(ParamId::kDomain), want_hmem, &d.nics, &report,
                           api_cap, efa_fabric, need_tagged);
  if (!ok(s)) {
    if (efa_fabric == EfaFabric::kDirect)
      NF_WARN(
          "no usable libfabric device: tried %s. NCCL_FABRIC_EFA_FABRIC=efa-direct needs "
          "libfabric >= 2.1 and a NIC with device RDMA read and write (check fi_info --fabric "
          "efa-direct); auto falls back to the efa fabric",
          report.c_str());
    else
      NF_WARN(
          "no usable libfabric device: tried %s. The plugin needs an RDM endpoint with tagged "
          "messages; check fi_info -t FI_EP_RDM and NCCL_FABRIC_PROVIDER%s",
          report.c_str(), wanted.empty() ? "" : " (set here)");
    return Status::kSystemError;
  }
  d.provider = d.nics.front().provider;
  if (p.get_bool(ParamId::kTestAssumeDmabuf)) {
    // Testing only: the mock provider, built against older headers, is told the fabric is opened
    // at API 1.20 (it keys FI_MR_DMABUF on that, as EFA does).
    for (Nic& n : d.nics) {
      if (n.api_version >= kFiDmabufVersion) continue;
      n.api_version = kFiDmabufVersion;
      n.info->fabric_attr->api_version = kFiDmabufVersion;
    }
  }
  settle_nic_speeds(p, *d.platform.row, &d.nics);
  d.domains.assign(d.nics.size(), nullptr);
  // NICs become devices by the PCI topology (topo/): the NICs behind the same PCIe switch as the
  // same GPUs are the rails of one device, unless NCCL_FABRIC_NIC_GROUPING/RAILS say otherwise.
  GroupingPolicy policy;
  std::string topo_error;
  if (!ok(grouping_policy(p, getenv(param_def(ParamId::kRails).name) != nullptr, &policy,
                          &topo_error))) {
    NF_WARN("bad parameter: %s", topo_error.c_str());
    return Status::kInvalidUsage;
  }
  std::unique_ptr<Topology> topo;
  if (policy.mode == GroupingPolicy::Mode::kAuto && !ok(Topology::load(&topo, &topo_error)))
    NF_INFO(kSubsysInit | kSubsysNet,
            "topology: hwloc could not load it (%s): one NCCL device "
            "per NIC",
            topo_error.c_str());
  std::vector<DeviceGroup> groups;
  std::string topo_log;
  NF_CHECK(group_nics(d.nics, topo.get(), policy, &groups, &topo_log));
  NF_INFO(kSubsysInit | kSubsysNet, "%s", topo_log.c_str());
  d.groups.clear();
  d.names.clear();
  d.rma.clear();
  d.near_gpus.clear();
  for (DeviceGroup& g : groups) {
    bool rma = true;
    for (size_t nic : g.rails) rma = rma && d.nics[nic].rma;
    std::string gpus;
    for (const std::string& b : g.nearest_gpus) gpus += (gpus.empty() ? "" : ",") + b;
    d.groups.push_back(std::move(g.rails));
    d.names.push_back(std::move(g.name));
    d.rma.push_back(rma);
    d.near_gpus.push_back(gpus.empty() ? "none behind its PCIe switch" : gpus);
  }
  std::string rp_error;
  if (!ok(choose_rail_plane(p, *d.platform.row, static_cast<int>(d.groups.size()), &d.rail_plane,
                            &rp_error))) {
    NF_WARN("bad parameter: %s", rp_error.c_str());
    return Status::kInvalidUsage;
  }
  d.max_recvs = static_cast<int>(p.get_int(ParamId::kMaxRecvs));
  d.found = true;
  NF_INFO(kSubsysInit | kSubsysNet,
          "using libfabric %u.%u (built against %u.%u headers) "
          "provider '%s' at API %s with %zu device(s) (%s)",
          FI_MAJOR(fi_version()), FI_MINOR(fi_version()), FI_MAJOR_VERSION, FI_MINOR_VERSION,
          d.provider.c_str(), api_version_str(d.nics.front().api_version).c_str(), d.nics.size(),
          report.c_str());
  warn_version_mismatch(d.nics.front());
  for (size_t i = 0; i < d.nics.size(); ++i) {
    const Nic& n = d.nics[i];
    NF_INFO(kSubsysInit | kSubsysNet,
            "NIC %zu: %s pci=%s speed=%d Mb/s (%s) mr_mode=0x%llx "
            "inject=%zu rma=%s fabric=%s%s%s%s",
            i, n.domain.c_str(), n.pci_path.empty() ? "none" : n.pci_path.c_str(), n.speed_mbps,
            n.speed_source.c_str(), static_cast<unsigned long long>(n.info->domain_attr->mr_mode),
            n.info->tx_attr->inject_size,
            n.rma ? "yes" : "no (no FI_RMA or remote CQ data under 4 bytes)",
            n.fabric.empty() ? "?" : n.fabric.c_str(), n.fabric_why.empty() ? "" : " (",
            n.fabric_why.c_str(), n.fabric_why.empty() ? "" : ")");
  }
  for (size_t i = 0; i < d.groups.size(); ++i)
    NF_INFO(kSubsysInit | kSubsysNet,
            "device %zu: %s, %zu rail(s), speed=%d Mb/s, nearest GPUs: %s; for NCCL >= 2.30: "
            "railId=%d (%s), planeId=%d (%s)",
            i, d.names[i].c_str(), d.groups[i].size(), group_speed_mbps(d, d.groups[i]),
            d.near_gpus[i].c_str(), d.rail_plane[i].rail, d.rail_plane[i].rail_source.c_str(),
            d.rail_plane[i].plane, d.rail_plane[i].plane_source.c_str());
  NF_CHECK(Domain::open(d.nics[0], &d.domains[0]));
  attach_mr_cache(*d.domains[0]);
  mr_cache(*d.domains[0]).set_limit(static_cast<size_t>(p.get_int(ParamId::kMrCacheEntries)));
  d.gdr = probe_gdr(d.nics[0], *d.domains[0], p);
  d.domains[0]->set_gdr(d.gdr.cuda, d.gdr.dmabuf);
  NF_INFO(kSubsysInit | kSubsysNet, "GPUDirect RDMA %s: %s",
          d.gdr.cuda ? "on (NCCL_PTR_CUDA)" : "off", d.gdr.cuda_reason.c_str());
  NF_INFO(kSubsysInit | kSubsysNet, "DMA-BUF %s: %s", d.gdr.dmabuf ? "on (NCCL_PTR_DMABUF)" : "off",
          d.gdr.dmabuf_reason.c_str());
  {
    // One endpoint, opened and closed, says what the provider's endpoints offer.
    std::unique_ptr<Endpoint> probe;
    if (!ok(Endpoint::open(d.domains[0], 64, &probe))) {
      d.found = false;
      d.domains[0].reset();
      return Status::kSystemError;
    }
    d.features = probe->features();
    // Write lengths, where the RDMA protocol would read them from completions (issue 35).
    if (!d.rma.empty() && d.rma[0] && d.domains[0]->cq_data_size() < 8)
      d.write_len_broken =
          write_len_probe(*probe, (d.domains[0]->info()->mode & FI_RX_CQ_DATA) != 0);
  }
  if (!d.write_len_broken.empty()) {
    NF_WARN(
        "the RDMA protocol is off on every device, SENDRECV carries every message: %s; update "
        "rdma-core (the EFA installer's) to get it back (docs/troubleshooting.md#write-length)",
        d.write_len_broken.c_str());
    for (size_t k = 0; k < d.rma.size(); ++k) d.rma[k] = false;
  }
  const EpFeatures& f = d.features;
  if (f.efa_options)
    NF_INFO(kSubsysInit | kSubsysNet,
            "EFA endpoint options: device RDMA %s; RMA writes %s, reads "
            "%s (FI_OPT_EFA_EMULATED_WRITE/READ); 128-byte in-order: %s",
            f.device_rdma_set ? "asked for (FI_OPT_EFA_USE_DEVICE_RDMA=true)"
                              : ("left to the provider: " + f.device_rdma_note).c_str(),
            f.write_emulated ? "emulated" : "by the device",
            f.read_emulated ? "emulated" : "by the device", f.in_order_note.c_str());
  d.write_emulated = f.efa_options && f.write_emulated;
  ll128_policy(d, p);
  {
    // For a standalone tuner library in this process (NCCL_TUNER_PLUGIN=fabric): what this one's
    // tuner learns through net_summary().
    NetSummary ns;
    ns.found = true;
    ns.provider = d.provider;
    ns.devices = static_cast<int>(d.groups.size());
    ns.rails = d.groups.empty() ? 1 : static_cast<int>(d.groups[0].size());
    ns.speed_mbps = d.groups.empty() ? 0 : group_speed_mbps(d, d.groups[0]);
    ns.gdr = d.gdr.cuda;
    if (d.platform.row != nullptr) ns.platform = d.platform.row->name;
    if (ns.devices > 0) setenv(kNetSummaryEnv, format_net_summary(ns).c_str(), 1);
  }
  if (!d.gdr.cuda && p.get_str(ParamId::kGdr) == "require") {
    NF_WARN("NCCL_FABRIC_GDR=require, but GPUDirect RDMA is not available: %s",
            d.gdr.cuda_reason.c_str());
    d.found = false;
    d.domains[0].reset();
    return Status::kInvalidUsage;
  }
  // What the platform expects and did not get (EFA, GPUDirect): one WARN, with the cost. On an
  // unknown machine nothing is expected. GPUDirect is judged only where CUDA could be asked.
  const bool gdr_known = d.gdr.cuda || Cuda::get(p.get_str(ParamId::kCudaLibrary)).available();
  const std::string warn =
      platform_expectation_warning(*d.platform.row, d.provider, d.gdr.cuda || !gdr_known);
  if (!warn.empty()) {
    NF_WARN(
        "%s%s%s", warn.c_str(),
        !d.gdr.cuda && gdr_known && provider_is_efa(d.provider) ? "; GPUDirect: " : "",
        !d.gdr.cuda && gdr_known && provider_is_efa(d.provider) ? d.gdr.cuda_reason.c_str() : "");
  }
  return Status::kOk;
}

}  // namespace

void settle_nic_speeds(const Params& p, const Platform& row, std::vector<Nic>* nics) {
  const int64_t forced = p.get_int(ParamId::kSpeed);
  for (Nic& n : *nics) {
    if (forced > 0) {
      // Say what it replaces: a user who overrides a measured figure should see both.
      n.speed_source = n.speed_mbps > 0
                           ? "NCCL_FABRIC_SPEED, in place of " + std::to_string(n.speed_mbps) +
                                 " Mb/s (" + n.speed_source + ")"
                           : std::string("NCCL_FABRIC_SPEED");
      n.speed_mbps = static_cast<int>(forced);
    } else if (n.speed_mbps > 0) {
      // Measured: discover_nics named the source.
    } else if (provider_is_efa(n.provider) && row.efa_gbps > 0) {
      n.speed_mbps = std::min(row.efa_gbps, kMaxSpeedMbps / 1000) * 1000;
      n.speed_source = "platform row " + row.name + "; the provider reports no link speed";
    } else {
      n.speed_mbps = default_speed_mbps(n.provider);
      n.speed_source = "default for provider '" + n.provider +
                       "', which reports no link speed; NCCL_FABRIC_SPEED sets it";
    }
  }
}

Status ctx_create(PluginCtx** out) {
  *out = nullptr;
  std::unique_ptr<PluginCtx> ctx(new PluginCtx());
  NF_CHECK(ctx->params.load_from_env());
  Devices& d = devices();
  std::lock_guard<std::mutex> lock(d.mu);
  NF_CHECK(discover_locked(d, ctx->params));
  ++d.live_contexts;
  ctx->hints = std::make_shared<NetHints>();
  ctx->hints->enabled = ctx->params.get_bool(ParamId::kNetAttr);
  stats_configure(ctx->params);
  *out = ctx.release();
  return Status::kOk;
}

void ctx_destroy(PluginCtx* ctx) {
  if (ctx == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(ctx->mu);
    ctx->pending.clear();  // connects NCCL gave up on
    ctx->eps.clear();      // open comms keep theirs
  }
  ctx->magic = 0;
  delete ctx;
  Devices& d = devices();
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (--d.live_contexts == 0) {
      // Open comms hold their own reference; the domains close with the last of them.
      for (auto& dom : d.domains) dom.reset();
      last = true;
    }
  }
  if (last) stats_finish();
}

Status default_ctx(PluginCtx** out) {
  Devices& d = devices();
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (d.default_ctx != nullptr) {
      *out = d.default_ctx;
      return Status::kOk;
    }
  }
  PluginCtx* ctx = nullptr;
  NF_CHECK(ctx_create(&ctx));
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.default_ctx == nullptr)
    d.default_ctx = ctx;
  else {
    // Another thread won the race: keep its context.
    --d.live_contexts;
    delete ctx;
  }
  *out = d.default_ctx;
  return Status::kOk;
}

PluginCtx* default_ctx_if_any() {
  Devices& d = devices();
  std::lock_guard<std::mutex> lock(d.mu);
  return d.default_ctx;
}

int device_count() {
  Devices& d = devices();
  std::lock_guard<std::mutex> lock(d.mu);
  return d.found ? static_cast<int>(d.groups.size()) : 0;
}

namespace {
// The tuner in this library asks the net plugin in it (a function pointer: the tuner includes
// nothing of core).
[[maybe_unused]] const bool g_registered = (set_net_summary_source(&net_summary), true);
}  // namespace

NetSummary net_summary() {
  Devices& d = devices();
  std::lock_guard<std::mutex> lock(d.mu);
  NetSummary s;
  if (!d.found || d.groups.empty()) return s;
  s.found = true;
  s.provider = d.provider;
  s.devices = static_cast<int>(d.groups.size());
  const std::vector<size_t>& g = d.groups[0];
  s.rails = static_cast<int>(g.size());
  s.speed_mbps = group_speed_mbps(d, g);
  s.gdr = d.gdr.cuda;
  if (d.platform.row != nullptr) s.platform = d.platform.row->name;
  return s;
}

Status device_props(int dev, DeviceProps* out) {
  Devices& d = devices();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.found || dev < 0 || dev >= static_cast<int>(d.groups.size())) {
    NF_WARN("getProperties: no device %d (there are %zu)", dev, d.found ? d.groups.size() : 0);
    return Status::kInternalError;
  }
  const std::vector<size_t>& g = d.groups[static_cast<size_t>(dev)];
  const Nic& n = d.nics[g[0]];
  *out = DeviceProps();
  out->name = d.names[static_cast<size_t>(dev)].c_str();
  out->pci_path = n.pci_path.empty() ? nullptr : n.pci_path.c_str();
  out->guid = n.guid;
  out->ptr_support = kPtrHost | (d.gdr.cuda ? kPtrCuda : 0) | (d.gdr.dmabuf ? kPtrDmabuf : 0);
  out->reg_is_global = 0;
  out->force_flush = 0;
  out->speed_mbps = group_speed_mbps(d, g);  // never 0: settle_nic_speeds
  out->port = 1;
  out->latency_us = 0.0f;  // unknown: NCCL's default
  // Comms share one endpoint per context and device, so the provider's endpoint count is no bound.
  out->max_comms = 65536;
  out->max_recvs = d.max_recvs;
  // What one isend may carry: the provider's largest message, and at most 1 GiB, because test()
  // reports sizes as int and EFA writes at most 1 GiB at once (NCCL splits larger transfers).
  out->max_p2p_bytes = static_cast<size_t>(message_limit(n.info->ep_attr->max_msg_size));
  out->max_coll_bytes = out->max_p2p_bytes;
  out->rail_id = d.rail_plane[static_cast<size_t>(dev)].rail;
  out->plane_id = d.rail_plane[static_cast<size_t>(dev)].plane;
  return Status::kOk;
}

bool ll128_rdma_only() { return devices().ll128_rdma_only.load(std::memory_order_relaxed); }

Status device_env(PluginCtx& ctx, int dev, ConnectEnv* out) {
  std::vector<std::shared_ptr<Domain>> doms;
  size_t ndev = 0;
  bool rma = false;
  bool write_emulated = false;
  bool ll128_only = false;
  std::string len_broken;  // why the RDMA protocol is off although the NIC has RMA writes
  std::string name;
  const Platform* platform_row = &generic_platform();
  std::string rma_note;
  {
    Devices& d = devices();
    std::lock_guard<std::mutex> lock(d.mu);
    if (!d.found || dev < 0 || dev >= static_cast<int>(d.groups.size())) {
      NF_WARN("no device %d (there are %zu)", dev, d.found ? d.groups.size() : 0);
      return Status::kInternalError;
    }
    for (size_t nic : d.groups[static_cast<size_t>(dev)]) {
      auto& slot = d.domains[nic];
      if (!slot) {
        NF_CHECK(Domain::open(d.nics[nic], &slot));
        attach_mr_cache(*slot);
        slot->set_gdr(d.gdr.cuda, d.gdr.dmabuf);
        mr_cache(*slot).set_limit(
            static_cast<size_t>(ctx.params.get_int(ParamId::kMrCacheEntries)));
      }
      doms.push_back(slot);
    }
    ndev = d.groups.size();
    rma = d.rma[static_cast<size_t>(dev)];
    write_emulated = d.write_emulated;
    ll128_only = d.ll128_rdma_only.load();
    len_broken = d.write_len_broken;
    platform_row = d.platform.row;
    name = d.names[static_cast<size_t>(dev)];
    out->provider = d.provider;
    out->prov_hash = provider_hash(d.provider);
  }
  // SENDRECV needs tagged messages, which a fabric such as efa-direct lacks: there every
  // connection uses the RDMA protocol (whose control path is untagged).
  bool tagged = true;
  for (const auto& dm : doms) tagged = tagged && (dm->info()->caps & FI_TAGGED) != 0;
  const std::string& want = ctx.params.get_str(ParamId::kProtocol);
  if (!tagged) {
    if (!rma || want == "sendrecv") {
      NF_WARN(
          "device %d (%s): the fabric offers no tagged messages, so SENDRECV is impossible, %s; "
          "set NCCL_FABRIC_EFA_FABRIC=efa (docs/configuration.md)",
          dev, name.c_str(),
          rma                  ? "and NCCL_FABRIC_PROTOCOL=sendrecv asks for it"
          : len_broken.empty() ? "and it offers no RMA writes"
                               : ("and its RMA writes cannot be used: " + len_broken).c_str());
      return Status::kInvalidUsage;
    }
    out->offered = kProtoRdma;
    rma_note =
        "the fabric has no tagged messages (SENDRECV impossible); RMA writes with remote "
        "CQ data";
  } else if (want == "sendrecv") {
    out->offered = kProtoSendRecv;
  } else if (want == "rdma") {
    if (!rma) {
      NF_WARN("NCCL_FABRIC_PROTOCOL=rdma, but provider '%s' on %s %s; use sendrecv or auto",
              out->provider.c_str(), name.c_str(),
              len_broken.empty() ? "offers no RMA writes with remote CQ data"
                                 : ("cannot use its RMA writes: " + len_broken).c_str());
      return Status::kInvalidUsage;
    }
    out->offered = kProtoRdma;
  } else {
    out->offered = rma ? (kProtoSendRecv | kProtoRdma) : kProtoSendRecv;
    // The provider says its writes are emulated (EFA without RDMA write: p4d, or device RDMA
    // off): each write would become messages the target copies, SENDRECV without the benefit.
    if (rma && write_emulated) {
      out->offered = kProtoSendRecv;
      rma_note = "the provider emulates RMA writes (FI_OPT_EFA_EMULATED_WRITE)";
    } else if (rma && platform_row->protocol == PlatformProtocol::kSendrecv) {
      // The platform row may know better (p4d's EFA has no RDMA write: writes would be emulated).
      out->offered = kProtoSendRecv;
      rma_note = std::string("the platform row ") + platform_row->name + " prefers SENDRECV";
    } else if (rma && ll128_only) {
      out->offered = kProtoRdma;
      rma_note = "RDMA only: LL128 relies on the RDMA writes' 128-byte ordering, which sends lack";
    }
  }
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (ctx.eps.size() < ndev) ctx.eps.resize(ndev);
  auto& sep = ctx.eps[static_cast<size_t>(dev)];
  if (!sep) {
    NF_CHECK(shared_ep_open(doms, ctx.params, &sep));
    sep->dev = dev;
    sep->dev_name = name;
    sep->provider = out->provider;
    // shm cannot fail a tagged receive that is too small: libfabric 1.x spins inside fi_cq_read
    // (CMA sizes) or drops the message; 2.1 crashes inside fi_trecv when the larger message was
    // already waiting (smr_copy_saved has no SAR entry for an inject message that did not fit).
    // SENDRECV leaves that check to the provider; the RDMA protocol does it itself.
    if (out->offered == kProtoSendRecv && out->provider == "shm")
      NF_WARN(
          "device %d (%s): SENDRECV on libfabric %u.%u's shm: a message larger than the "
          "receive NCCL posted for it %s inside the provider instead of failing; the RDMA "
          "protocol (NCCL_FABRIC_PROTOCOL=auto) checks sizes itself",
          dev, name.c_str(), FI_MAJOR(fi_version()), FI_MINOR(fi_version()),
          FI_MAJOR(fi_version()) < 2 ? "hangs" : "can crash the process");
    NF_INFO(kSubsysNet, "device %d (%s): protocol %s (NCCL_FABRIC_PROTOCOL=%s; %s), %d rail(s)",
            dev, name.c_str(), out->offered & kProtoRdma ? "RDMA" : "SENDRECV", want.c_str(),
            !rma_note.empty() ? rma_note.c_str()
            : rma             ? "the provider offers RMA writes with remote CQ data"
                              : "the provider offers no RMA writes with remote CQ data",
            sep->nrails);
  }
  out->sep = sep;
  out->params = &ctx.params;
  out->prof = ctx.prof;
  out->hints = ctx.hints;
  // Early completion of receives NCCL does not need completed: where the writes land without
  // this process progressing (EFA's device RDMA writes), or where the user says so.
  const std::string& early = ctx.params.get_str(ParamId::kEarlyCompletion);
  out->early_ok = early == "on" || (early == "auto" && (out->offered & kProtoRdma) &&
                                    provider_is_efa(out->provider) && !write_emulated);
  return Status::kOk;
}

}  // namespace nf
