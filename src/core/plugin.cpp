#include "core/plugin.h"

#include <cstdint>

#include "proto/wire.h"
#include "util/log.h"

namespace nf {
namespace {

constexpr uint64_t kMaxNetSize = 1ull << 40;  // NCCL_MAX_NET_SIZE_BYTES: NCCL refuses more

// Process-wide: NCCL asks devices() once per process, so the table lives as long as the library.
// Never destroyed: comms may outlive any context, and static destruction order at exit is not ours.
struct Devices {
  std::mutex mu;
  bool found = false;
  std::string provider;
  std::vector<Nic> nics;
  std::vector<std::shared_ptr<Domain>> domains;
  int live_contexts = 0;
  int max_recvs = 1;
  PluginCtx* default_ctx = nullptr;
};

Devices& devices() {
  static Devices* d = new Devices();
  return *d;
}

Status discover_locked(Devices& d, const Params& p) {
  if (d.found) return Status::kOk;
  std::string report;
  const std::string& wanted = p.get_str(ParamId::kProvider);
  Status s = discover_nics(wanted, p.get_str(ParamId::kDomain), &d.nics, &report);
  if (!ok(s)) {
    NF_WARN("no usable libfabric device: tried %s. The plugin needs an RDM endpoint with tagged "
            "messages; check fi_info -t FI_EP_RDM and NCCL_FABRIC_PROVIDER%s", report.c_str(),
            wanted.empty() ? "" : " (set here)");
    return Status::kSystemError;
  }
  d.provider = d.nics.front().provider;
  d.domains.assign(d.nics.size(), nullptr);
  d.max_recvs = static_cast<int>(p.get_int(ParamId::kMaxRecvs));
  d.found = true;
  NF_INFO(kSubsysInit | kSubsysNet, "using libfabric %u.%u provider '%s' with %zu device(s) (%s)",
          FI_MAJOR(fi_version()), FI_MINOR(fi_version()), d.provider.c_str(), d.nics.size(),
          report.c_str());
  for (size_t i = 0; i < d.nics.size(); ++i) {
    const Nic& n = d.nics[i];
    NF_INFO(kSubsysInit | kSubsysNet, "device %zu: %s pci=%s speed=%d Mb/s mr_mode=0x%llx inject=%zu",
            i, n.domain.c_str(), n.pci_path.empty() ? "none" : n.pci_path.c_str(), n.speed_mbps,
            static_cast<unsigned long long>(n.info->domain_attr->mr_mode),
            n.info->tx_attr->inject_size);
  }
  return Status::kOk;
}

}  // namespace

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
  return d.found ? static_cast<int>(d.nics.size()) : 0;
}

Status device_props(int dev, DeviceProps* out) {
  Devices& d = devices();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.found || dev < 0 || dev >= static_cast<int>(d.nics.size())) {
    NF_WARN("getProperties: no device %d (there are %zu)", dev, d.found ? d.nics.size() : 0);
    return Status::kInternalError;
  }
  const Nic& n = d.nics[static_cast<size_t>(dev)];
  *out = DeviceProps();
  out->name = n.domain.c_str();
  out->pci_path = n.pci_path.empty() ? nullptr : n.pci_path.c_str();
  out->guid = n.guid;
  out->ptr_support = kPtrHost;
  out->reg_is_global = 0;
  out->force_flush = 0;
  out->speed_mbps = n.speed_mbps;
  out->port = 1;
  out->latency_us = 0.0f;  // unknown: NCCL's default
  // Comms share one endpoint per context and device, so the provider's endpoint count is no bound.
  out->max_comms = 65536;
  out->max_recvs = d.max_recvs;
  const uint64_t m = n.info->ep_attr->max_msg_size;
  out->max_p2p_bytes = static_cast<size_t>(m == 0 || m > kMaxNetSize ? kMaxNetSize : m);
  out->max_coll_bytes = out->max_p2p_bytes;
  return Status::kOk;
}

Status device_env(PluginCtx& ctx, int dev, ConnectEnv* out) {
  std::shared_ptr<Domain> dom;
  size_t ndev = 0;
  {
    Devices& d = devices();
    std::lock_guard<std::mutex> lock(d.mu);
    if (!d.found || dev < 0 || dev >= static_cast<int>(d.nics.size())) {
      NF_WARN("no device %d (there are %zu)", dev, d.found ? d.nics.size() : 0);
      return Status::kInternalError;
    }
    auto& slot = d.domains[static_cast<size_t>(dev)];
    if (!slot) NF_CHECK(Domain::open(d.nics[static_cast<size_t>(dev)], &slot));
    dom = slot;
    ndev = d.nics.size();
    out->provider = d.provider;
    out->prov_hash = provider_hash(d.provider);
  }
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (ctx.eps.size() < ndev) ctx.eps.resize(ndev);
  auto& sep = ctx.eps[static_cast<size_t>(dev)];
  if (!sep) NF_CHECK(shared_ep_open(std::move(dom), &sep));
  out->sep = sep;
  out->params = &ctx.params;
  return Status::kOk;
}

}  // namespace nf
