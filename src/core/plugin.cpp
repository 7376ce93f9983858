#include "core/plugin.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "mem/gdr.h"
#include "mem/mr_cache.h"
#include "platform/platform.h"
#include "proto/wire.h"
#include "topo/topo.h"
#include "util/log.h"

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
  std::vector<bool> rma;  // every NIC of the device can carry the RDMA protocol
  std::vector<std::string> near_gpus;  // the GPUs behind the device's PCIe switch, for the log
  GdrReport gdr;  // probed on the first NIC, applies to every device
  PlatformChoice platform;  // the platform-table row (docs/platforms.md)
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

Status discover_locked(Devices& d, const Params& p) {
  if (d.found) return Status::kOk;
  NF_CHECK(choose_platform(p, &d.platform));
  apply_platform_defaults(d.platform);
  std::string report;
  const std::string& wanted = p.get_str(ParamId::kProvider);
  // FI_HMEM is asked for only where GPU memory can exist: it narrows what providers offer.
  const bool want_hmem = p.get_str(ParamId::kGdr) != "off" &&
                         Cuda::get(p.get_str(ParamId::kCudaLibrary)).available();
  Status s = discover_nics(wanted, p.get_str(ParamId::kDomain), want_hmem, &d.nics, &report);
  if (!ok(s)) {
    NF_WARN("no usable libfabric device: tried %s. The plugin needs an RDM endpoint with tagged "
            "messages; check fi_info -t FI_EP_RDM and NCCL_FABRIC_PROVIDER%s", report.c_str(),
            wanted.empty() ? "" : " (set here)");
    return Status::kSystemError;
  }
  d.provider = d.nics.front().provider;
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
    NF_INFO(kSubsysInit | kSubsysNet, "topology: hwloc could not load it (%s): one NCCL device "
            "per NIC", topo_error.c_str());
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
  d.max_recvs = static_cast<int>(p.get_int(ParamId::kMaxRecvs));
  d.found = true;
  NF_INFO(kSubsysInit | kSubsysNet, "using libfabric %u.%u provider '%s' with %zu device(s) (%s)",
          FI_MAJOR(fi_version()), FI_MINOR(fi_version()), d.provider.c_str(), d.nics.size(),
          report.c_str());
  for (size_t i = 0; i < d.nics.size(); ++i) {
    const Nic& n = d.nics[i];
    NF_INFO(kSubsysInit | kSubsysNet, "NIC %zu: %s pci=%s speed=%d Mb/s (%s) mr_mode=0x%llx "
            "inject=%zu rma=%s", i, n.domain.c_str(),
            n.pci_path.empty() ? "none" : n.pci_path.c_str(), n.speed_mbps,
            n.speed_source.c_str(), static_cast<unsigned long long>(n.info->domain_attr->mr_mode),
            n.info->tx_attr->inject_size,
            n.rma ? "yes" : "no (no FI_RMA or remote CQ data under 4 bytes)");
  }
  for (size_t i = 0; i < d.groups.size(); ++i)
    NF_INFO(kSubsysInit | kSubsysNet, "device %zu: %s, %zu rail(s), speed=%d Mb/s, nearest "
            "GPUs: %s", i, d.names[i].c_str(), d.groups[i].size(),
            group_speed_mbps(d, d.groups[i]), d.near_gpus[i].c_str());
  NF_CHECK(Domain::open(d.nics[0], &d.domains[0]));
  d.domains[0]->mr_cache().set_limit(static_cast<size_t>(p.get_int(ParamId::kMrCacheEntries)));
  d.gdr = probe_gdr(d.nics[0], *d.domains[0], p);
  d.domains[0]->set_gdr(d.gdr.cuda, d.gdr.dmabuf);
  NF_INFO(kSubsysInit | kSubsysNet, "GPUDirect RDMA %s: %s", d.gdr.cuda ? "on (NCCL_PTR_CUDA)" : "off",
          d.gdr.cuda_reason.c_str());
  NF_INFO(kSubsysInit | kSubsysNet, "DMA-BUF %s: %s", d.gdr.dmabuf ? "on (NCCL_PTR_DMABUF)" : "off",
          d.gdr.dmabuf_reason.c_str());
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
  const std::string warn = platform_expectation_warning(*d.platform.row, d.provider,
                                                        d.gdr.cuda || !gdr_known);
  if (!warn.empty()) {
    NF_WARN("%s%s%s", warn.c_str(),
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
      n.speed_source = n.speed_mbps > 0 ? "NCCL_FABRIC_SPEED, in place of " +
                                              std::to_string(n.speed_mbps) + " Mb/s (" +
                                              n.speed_source + ")"
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
  std::lock_guard<std::mutex> lock(d.mu);
  if (--d.live_contexts == 0) {
    // Open comms hold their own reference; the domains close with the last of them.
    for (auto& dom : d.domains) dom.reset();
  }
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
  if (d.default_ctx == nullptr) d.default_ctx = ctx;
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
  return Status::kOk;
}

Status device_env(PluginCtx& ctx, int dev, ConnectEnv* out) {
  std::vector<std::shared_ptr<Domain>> doms;
  size_t ndev = 0;
  bool rma = false;
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
        slot->set_gdr(d.gdr.cuda, d.gdr.dmabuf);
        slot->mr_cache().set_limit(
            static_cast<size_t>(ctx.params.get_int(ParamId::kMrCacheEntries)));
      }
      doms.push_back(slot);
    }
    ndev = d.groups.size();
    rma = d.rma[static_cast<size_t>(dev)];
    platform_row = d.platform.row;
    name = d.names[static_cast<size_t>(dev)];
    out->provider = d.provider;
    out->prov_hash = provider_hash(d.provider);
  }
  const std::string& want = ctx.params.get_str(ParamId::kProtocol);
  if (want == "sendrecv") {
    out->offered = kProtoSendRecv;
  } else if (want == "rdma") {
    if (!rma) {
      NF_WARN("NCCL_FABRIC_PROTOCOL=rdma, but provider '%s' on %s offers no RMA writes with "
              "remote CQ data; use sendrecv or auto", out->provider.c_str(), name.c_str());
      return Status::kInvalidUsage;
    }
    out->offered = kProtoRdma;
  } else {
    out->offered = rma ? (kProtoSendRecv | kProtoRdma) : kProtoSendRecv;
    // The platform row may know better (p4d's EFA has no RDMA write: writes would be emulated).
    if (rma && platform_row->protocol == PlatformProtocol::kSendrecv) {
      out->offered = kProtoSendRecv;
      rma_note = std::string("the platform row ") + platform_row->name + " prefers SENDRECV";
    }
  }
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (ctx.eps.size() < ndev) ctx.eps.resize(ndev);
  auto& sep = ctx.eps[static_cast<size_t>(dev)];
  if (!sep) {
    NF_CHECK(shared_ep_open(doms, ctx.params, &sep));
    // libfabric 1.x's shm cannot fail a tagged receive that is too small: it spins inside
    // fi_cq_read (CMA) or drops the message. SENDRECV leaves that check to the provider.
    if (out->offered == kProtoSendRecv && out->provider == "shm" && FI_MAJOR(fi_version()) < 2)
      NF_WARN("device %d (%s): SENDRECV on libfabric %u.%u's shm: a message larger than the "
              "receive NCCL posted for it hangs inside the provider instead of failing; the RDMA "
              "protocol (NCCL_FABRIC_PROTOCOL=auto) checks sizes itself", dev, name.c_str(),
              FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
    NF_INFO(kSubsysNet, "device %d (%s): protocol %s (NCCL_FABRIC_PROTOCOL=%s; %s), %d rail(s)",
            dev, name.c_str(), out->offered & kProtoRdma ? "RDMA" : "SENDRECV", want.c_str(),
            !rma_note.empty() ? rma_note.c_str()
            : rma ? "the provider offers RMA writes with remote CQ data"
                  : "the provider offers no RMA writes with remote CQ data",
            sep->nrails);
  }
  out->sep = sep;
  out->params = &ctx.params;
  return Status::kOk;
}

}  // namespace nf
