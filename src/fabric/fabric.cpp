#include "fabric/fabric.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include <rdma/fi_errno.h>

#include "fabric/errors.h"
#include "fabric/fi_compat.h"
#include "util/log.h"

namespace nf {
namespace {

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  if (realpath(p.c_str(), buf) == nullptr) return "";
  return buf;
}

// "0000:00:03.0": a PCI function's name in sysfs.
bool is_pci_function(const std::string& name) {
  unsigned d, b, s, f;
  char tail;
  return name.size() == 12 && sscanf(name.c_str(), "%4x:%2x:%2x.%1x%c", &d, &b, &s, &f, &tail) == 4;
}

// NCCL measures GPU-NIC distance from the PCI function's path; a virtio or auxiliary device
// below it (".../0000:00:03.0/virtio2") is cut back to it.
std::string pci_function_path(std::string p) {
  while (!p.empty()) {
    const size_t slash = p.rfind('/');
    if (slash == std::string::npos) return "";
    if (is_pci_function(p.substr(slash + 1))) return p;
    p.resize(slash);
  }
  return "";
}

// The NIC's PCI function in sysfs: from the provider's bus attributes where it gives them, else
// from the domain name (network interfaces, RDMA devices).
std::string find_pci_path(const fi_info* info) {
  if (info->nic != nullptr && info->nic->bus_attr != nullptr &&
      info->nic->bus_attr->bus_type == FI_BUS_PCI) {
    const fi_pci_attr& pci = info->nic->bus_attr->attr.pci;
    char p[128];
    snprintf(p, sizeof(p), "/sys/bus/pci/devices/%04x:%02x:%02x.%x", pci.domain_id, pci.bus_id,
             pci.device_id, pci.function_id);
    std::string r = pci_function_path(real_path(p));
    if (!r.empty()) return r;
  }
  const char* dn = info->domain_attr != nullptr ? info->domain_attr->name : nullptr;
  if (dn == nullptr) return "";
  std::string name = dn;
  std::string r = pci_function_path(real_path("/sys/class/net/" + name + "/device"));
  if (!r.empty()) return r;
  for (const char* suffix : {"-rdm", "-dgrm"}) {
    size_t n = strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0) {
      r = pci_function_path(
          real_path("/sys/class/infiniband/" + name.substr(0, name.size() - n) + "/device"));
      if (!r.empty()) return r;
    }
  }
  return "";
}

// The link speed the provider reports (fi_nic link_attr, bits/s), else the one the OS reports
// (/sys/class/net/<domain>/speed, Mb/s), else 0. Loopback, shm and many virtual NICs report none
// (no fi_nic; -1 or EINVAL in sysfs). *source says which one answered.
int find_speed_mbps(const fi_info* info, std::string* source) {
  source->clear();
  if (info->nic != nullptr && info->nic->link_attr != nullptr) {
    const uint64_t mbps = info->nic->link_attr->speed / 1000000ull;
    if (mbps >= 1 && mbps <= static_cast<uint64_t>(kMaxSpeedMbps)) {
      *source = "provider link attribute";
      return static_cast<int>(mbps);
    }
  }
  if (info->domain_attr == nullptr || info->domain_attr->name == nullptr) return 0;
  std::string p = std::string("/sys/class/net/") + info->domain_attr->name + "/speed";
  FILE* f = fopen(p.c_str(), "r");
  if (f == nullptr) return 0;
  int v = 0;
  if (fscanf(f, "%d", &v) != 1 || v < 1 || v > kMaxSpeedMbps) v = 0;
  fclose(f);
  if (v > 0) *source = "sysfs " + p;
  return v;
}

bool is_loopback_domain(const fi_info* info) {
  const char* dn = info->domain_attr->name;
  if (dn != nullptr && strcmp(dn, "lo") == 0) return true;
  if (info->src_addr != nullptr && info->addr_format == FI_SOCKADDR_IN && info->src_addrlen >= 8) {
    const uint8_t* a = static_cast<const uint8_t*>(info->src_addr);
    return a[4] == 127;  // sin_addr's first byte
  }
  return false;
}

std::set<std::string> split_list(const std::string& s) {
  std::set<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    if (comma > pos) out.insert(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

InfoPtr make_hints(const std::string& provider, bool rma, bool hmem) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) return hints;
  // RMA writes with remote CQ data carry the RDMA protocol; tagged messages alone carry SENDRECV.
  // Untagged messages (FI_MSG) carry the control path (handshake, CTS, eager, probes).
  hints->caps = FI_MSG | (rma ? (FI_TAGGED | FI_RMA | FI_WRITE | FI_REMOTE_WRITE) : FI_TAGGED);
  // GPU memory: FI_HMEM, and reads of our own GPU buffers (the GPUDirect flush).
  if (hmem) hints->caps |= FI_HMEM | FI_READ | FI_REMOTE_READ;
  // We hand the provider an fi_context2 with every operation, so it may ask for either.
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  // Every mode we can honour; the provider keeps what it needs and we obey what it returns.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                FI_MR_ENDPOINT | (hmem ? FI_MR_HMEM : 0);
  // Sends with the same tag must match receives in posting order: NCCL's FIFO rule.
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

}  // namespace

uint32_t fabric_api_version() {
  const uint32_t lib = fi_version();
  return lib < kFiBuiltVersion ? lib : kFiBuiltVersion;
}

std::string api_version_str(uint32_t v) {
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

Status parse_api_version(const std::string& text, uint32_t* out, std::string* error) {
  *out = 0;
  if (text.empty() || text == "auto") return Status::kOk;
  unsigned major = 0, minor = 0;
  char tail = 0;
  if (sscanf(text.c_str(), "%u.%u%c", &major, &minor, &tail) != 2 || major > 255 || minor > 255) {
    *error = "NCCL_FABRIC_API_VERSION='" + text + "': expected auto or MAJOR.MINOR (e.g. 1.18)";
    return Status::kInvalidUsage;
  }
  const uint32_t v = FI_VERSION(major, minor);
  if (v < kFiApi117) {
    *error = "NCCL_FABRIC_API_VERSION=" + text + ": below 1.17, the oldest API the plugin uses";
    return Status::kInvalidUsage;
  }
  *out = v;
  return Status::kOk;
}

std::vector<uint32_t> api_version_ladder(uint32_t cap) {
  uint32_t top = fabric_api_version();
  if (cap != 0 && cap < top) top = cap;
  std::vector<uint32_t> out;
  uint32_t v = top;
  while (v >= kFiApi117) {
    out.push_back(v);
    if (FI_MINOR(v) > 0)
      v = FI_VERSION(FI_MAJOR(v), FI_MINOR(v) - 1);
    else if (FI_MAJOR(v) == 2)
      v = kFiApi122;  // 1.22 was the last 1.x
    else
      break;
  }
  if (out.empty()) out.push_back(kFiApi117);
  return out;
}

int default_speed_mbps(const std::string& provider) {
  // The core provider names the hardware; a utility provider layered on it (";ofi_rxm") does not.
  const std::string core = provider.substr(0, provider.find(';'));
  if (core == "efa" || core.rfind("efa-", 0) == 0 || core.rfind("efa_", 0) == 0) return 100000;
  if (core == "verbs") return 100000;
  if (core == "shm" || core == "sm2") return 100000;
  return 10000;
}

const std::vector<std::string>& default_provider_order() {
  static const std::vector<std::string> order = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm", "tcp"};
  return order;
}

Status discover_nics(const std::string& wanted, const std::string& domain_filter, bool want_hmem,
                     std::vector<Nic>* out, std::string* report, uint32_t api_cap) {
  out->clear();
  report->clear();
  const std::vector<uint32_t> ladder = api_version_ladder(api_cap);
  std::vector<std::string> candidates;
  if (!wanted.empty())
    candidates.push_back(wanted);
  else
    candidates = default_provider_order();
  const std::set<std::string> domains = split_list(domain_filter);

  for (const std::string& prov : candidates) {
    // Is the provider there at all? Asked at the oldest API we use, with the least we need, so
    // that an absent provider costs one call rather than one per version.
    fi_info* list = nullptr;
    InfoPtr probe_hints = make_hints(prov, false, false);
    if (!probe_hints) return Status::kSystemError;
    int rc = fi_getinfo(kFiApi117, nullptr, nullptr, 0, probe_hints.get(), &list);
    if (rc == 0) fi_freeinfo(list);
    list = nullptr;
    // The newest API version both the headers and the library know, then older ones, version by
    // version, where the provider refuses (a provider built for an older API is skipped by the
    // core for newer requests). At each version: first with GPU memory where CUDA is present,
    // then with RMA (the RDMA protocol); a provider without RMA is still good for SENDRECV.
    uint32_t got = 0;
    std::string refused;
    if (rc == 0) {
      for (uint32_t v : ladder) {
        const struct { bool rma, hmem; } tries[] = {{true, true}, {true, false}, {false, false}};
        for (const auto& t : tries) {
          if (t.hmem && !want_hmem) continue;
          InfoPtr hints = make_hints(prov, t.rma, t.hmem);
          if (!hints) return Status::kSystemError;
          rc = fi_getinfo(v, nullptr, nullptr, 0, hints.get(), &list);
          if (rc == 0) break;
          list = nullptr;
        }
        if (rc == 0) {
          got = v;
          break;
        }
        refused += (refused.empty() ? "" : ", ") + api_version_str(v);
      }
    }
    InfoPtr owned(list);
    if (!report->empty()) *report += "; ";
    if (rc != 0) {
      *report += "'" + prov + "': " + fi_strerror(-rc) + " (-" + fi_errno_name(rc) + ")";
      if (!refused.empty()) *report += " at API " + refused;
      continue;
    }
    std::vector<Nic> found, loop;
    std::set<std::string> seen;
    for (fi_info* i = list; i != nullptr; i = i->next) {
      if (i->fabric_attr->prov_name == nullptr || prov != i->fabric_attr->prov_name) continue;
      const char* dn = i->domain_attr->name ? i->domain_attr->name : "";
      if (!domains.empty() && domains.count(dn) == 0) continue;
      if (!seen.insert(dn).second) continue;  // first entry of a domain is the provider's best
      Nic nic;
      nic.info.reset(fi_dupinfo(i));
      if (!nic.info) return Status::kSystemError;
      nic.provider = prov;
      nic.domain = dn;
      nic.api_version = got;
      nic.api_refused = refused;
      nic.pci_path = find_pci_path(i);
      nic.speed_mbps = find_speed_mbps(i, &nic.speed_source);
      nic.loopback = is_loopback_domain(i);
      nic.rma = (i->caps & FI_RMA) != 0 && (i->caps & FI_REMOTE_WRITE) != 0 &&
                i->domain_attr->cq_data_size >= 4;
      nic.rma_read = nic.rma && (i->caps & FI_READ) != 0 && (i->caps & FI_REMOTE_READ) != 0;
      nic.hmem = (i->caps & FI_HMEM) != 0;
      nic.guid = fnv1a64(nic.pci_path.empty() ? prov + "/" + nic.domain : nic.pci_path);
      (nic.loopback ? loop : found).push_back(std::move(nic));
    }
    // A loopback NIC is useless between hosts: use it only when it is all there is.
    if (found.empty()) found = std::move(loop);
    if (found.empty()) {
      *report +=
          "'" + prov + "': no domain" +
          (domains.empty() ? std::string() : " matching NCCL_FABRIC_DOMAIN=" + domain_filter);
      continue;
    }
    *report += "'" + prov + "': " + std::to_string(found.size()) + " domain(s), API " +
               api_version_str(got) + (refused.empty() ? "" : " (refused at " + refused + ")");
    *out = std::move(found);
    return Status::kOk;
  }
  return Status::kSystemError;
}

Status Domain::open(const Nic& nic, std::shared_ptr<Domain>* out) {
  std::shared_ptr<Domain> d(new Domain());
  d->info_.reset(fi_dupinfo(nic.info.get()));
  if (!d->info_) return Status::kSystemError;
  d->name_ = nic.domain;
  int rc = fi_fabric(d->info_->fabric_attr, &d->fabric_, nullptr);
  if (rc != 0) return fi_fail("fi_fabric", rc, nic.domain.c_str());
  rc = fi_domain(d->fabric_, d->info_.get(), &d->domain_, nullptr);
  if (rc != 0) return fi_fail("fi_domain", rc, nic.domain.c_str());
  *out = std::move(d);
  return Status::kOk;
}

Domain::~Domain() {
  attachment_.reset();  // its idle registrations first: a domain with MRs will not close
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
}

Status register_memory(Domain& dom, fid_ep* ep, void* buf, size_t len, MemReg* out, bool remote) {
  return register_memory_spec(dom, ep, buf, len, remote ? FI_REMOTE_WRITE : 0, MemSpec(), out);
}

Status register_memory_spec(Domain& dom, fid_ep* ep, void* buf, size_t len, uint64_t remote_access,
                            const MemSpec& spec, MemReg* out, std::string* quiet) {
  *out = MemReg();
  out->base = reinterpret_cast<uintptr_t>(buf);
  out->len = len;
  out->kind = spec.kind;
  const uint64_t mode = dom.mr_mode();
  const bool cuda = spec.kind != MemKind::kHost;
  // Without FI_MR_LOCAL the provider needs no descriptor for sends and receives of host memory;
  // memory a peer reaches always needs a registration (its key), and so does GPU memory (the
  // provider must learn what it is).
  if (((mode & FI_MR_LOCAL) == 0 && remote_access == 0 && !cuda) || len == 0) return Status::kOk;
  const uint64_t key = (mode & FI_MR_PROV_KEY) ? 0 : dom.next_requested_key();
  uint64_t access = FI_SEND | FI_RECV | remote_access;
  // The local end of RMA too (a flush reads into host memory) where the domain does RMA at all.
  if (dom.info()->caps & FI_RMA) access |= FI_READ | FI_WRITE;
  if (remote_access & FI_REMOTE_WRITE) access |= FI_WRITE;
  if (remote_access & FI_REMOTE_READ) access |= FI_READ;
  int rc;
  const char* what = "fi_mr_reg";
  if (!cuda && spec.dmabuf_fd < 0) {
    rc = fi_mr_reg(dom.domain(), buf, len, access, 0, key, 0, &out->mr, nullptr);
  } else {
    iovec iov = {buf, len};
    FiMrDmabuf dmabuf = {spec.dmabuf_fd, spec.dmabuf_offset, len,
                         static_cast<uint8_t*>(buf) - spec.dmabuf_offset};
    FiMrAttrDmabuf attr = {};
    uint64_t flags = 0;
    if (spec.dmabuf_fd >= 0) {
      attr.dmabuf = &dmabuf;
      flags = kFiMrDmabuf;
      what = "fi_mr_regattr(FI_MR_DMABUF)";
    } else {
      attr.mr_iov = &iov;
      what = "fi_mr_regattr(FI_HMEM_CUDA)";
    }
    attr.iov_count = 1;
    attr.access = access;
    attr.requested_key = key;
    attr.iface = cuda ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
    attr.device.cuda = cuda ? spec.device : 0;
    rc = fi_mr_regattr(dom.domain(), reinterpret_cast<const fi_mr_attr*>(&attr), flags, &out->mr);
  }
  if (rc != 0) {
    char ctx[200];
    snprintf(ctx, sizeof(ctx), "registering %zu bytes of %s memory at %p on %s", len,
             mem_kind_name(spec.kind), buf, dom.name().c_str());
    out->mr = nullptr;
    if (quiet != nullptr) {
      *quiet = std::string(ctx) + ": " + fi_error_text(what, rc);
      return Status::kSystemError;
    }
    return fi_fail(what, rc, ctx);
  }
  if (mode & FI_MR_ENDPOINT) {
    rc = fi_mr_bind(out->mr, &ep->fid, 0);
    if (rc == 0) rc = fi_mr_enable(out->mr);
    if (rc != 0) {
      fi_close(&out->mr->fid);
      out->mr = nullptr;
      if (quiet != nullptr) {
        *quiet = fi_error_text("fi_mr_bind/fi_mr_enable", rc);
        return Status::kSystemError;
      }
      return fi_fail("fi_mr_bind/fi_mr_enable", rc, dom.name().c_str());
    }
  }
  out->desc = (mode & (FI_MR_LOCAL | FI_MR_HMEM)) || cuda ? fi_mr_desc(out->mr) : nullptr;
  out->key = fi_mr_key(out->mr);
  out->remote_base = (mode & FI_MR_VIRT_ADDR) ? 0 : out->base;
  return Status::kOk;
}

void deregister_memory(MemReg* reg) {
  if (reg->cached != nullptr) {
    reg->cached->release();
  } else if (reg->mr != nullptr) {
    int rc = fi_close(&reg->mr->fid);
    if (rc != 0) fi_fail("fi_close(mr)", rc, nullptr);
  }
  *reg = MemReg();
}

namespace {

int getopt_bool(fid_ep* ep, int opt, bool* out) {
  size_t len = sizeof(*out);
  return fi_getopt(&ep->fid, FI_OPT_ENDPOINT, opt, out, &len);
}

int setopt_bool(fid_ep* ep, int opt, bool v) {
  return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, opt, &v, sizeof(v));
}

// The EFA endpoint options, before fi_enable. A provider that does not know them answers the
// first setopt with -FI_ENOPROTOOPT and is left alone. (Not detected with fi_getopt: libfabric
// 2.1's shm dereferences a NULL pointer in fi_getopt before fi_enable.) EFA itself may not know
// them either at API < 1.18: it counts as EFA-like by its name then, with nothing granted.
void efa_options(fid_ep* ep, const fi_info* info, EpFeatures* f) {
  const char* prov = info->fabric_attr != nullptr ? info->fabric_attr->prov_name : nullptr;
  const bool efa_name = prov != nullptr && strncmp(prov, "efa", 3) == 0;
  const uint32_t api = info->fabric_attr != nullptr ? info->fabric_attr->api_version : 0;
  auto answer = [](int rc) {
    return rc == 0 ? std::string("granted") : std::string("-") + fi_errno_name(rc);
  };
  bool known = false;
  if (getenv("FI_EFA_USE_DEVICE_RDMA") != nullptr) {
    f->device_rdma_note = "FI_EFA_USE_DEVICE_RDMA is set: the provider follows it";
  } else if (api < kFiApi118) {
    f->device_rdma_note = "API " + api_version_str(api) + " predates FI_OPT_EFA_USE_DEVICE_RDMA";
  } else {
    const int rc = setopt_bool(ep, kFiOptEfaUseDeviceRdma, true);
    if (rc == -FI_ENOPROTOOPT && !efa_name) return;
    known = rc != -FI_ENOPROTOOPT;
    f->device_rdma_set = rc == 0;
    if (rc != 0)
      f->device_rdma_note = fi_error_text("fi_setopt(FI_OPT_EFA_USE_DEVICE_RDMA=true)", rc);
  }
  int rc = setopt_bool(ep, kFiOptEfaWriteInOrder128, true);
  if (rc == -FI_ENOPROTOOPT && !known && !efa_name) return;
  f->efa_options = true;
  f->write_in_order_128 = rc == 0;
  f->in_order_note = "writes " + answer(rc);
  rc = setopt_bool(ep, kFiOptEfaSendrecvInOrder128, true);
  f->sendrecv_in_order_128 = rc == 0;
  f->in_order_note += ", send/recv " + answer(rc);
}

}  // namespace

Status Endpoint::open(std::shared_ptr<Domain> dom, size_t cq_size, std::unique_ptr<Endpoint>* out) {
  std::unique_ptr<Endpoint> e(new Endpoint());
  e->dom_ = std::move(dom);
  const fi_info* info = e->dom_->info();
  const char* where = e->dom_->name().c_str();

  fi_cq_attr cq_attr = {};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.size = cq_size;
  cq_attr.wait_obj = FI_WAIT_NONE;
  int rc = fi_cq_open(e->dom_->domain(), &cq_attr, &e->cq_, nullptr);
  if (rc != 0) return fi_fail("fi_cq_open", rc, where);

  // FI_AV_TABLE always: FI_AV_MAP is deprecated in libfabric 2.x, and every provider has tables.
  fi_av_attr av_attr = {};
  av_attr.type = FI_AV_TABLE;
  av_attr.count = 4;
  rc = fi_av_open(e->dom_->domain(), &av_attr, &e->av_, nullptr);
  if (rc != 0) return fi_fail("fi_av_open", rc, where);

  rc = fi_endpoint(e->dom_->domain(), const_cast<fi_info*>(info), &e->ep_, nullptr);
  if (rc != 0) return fi_fail("fi_endpoint", rc, where);
  rc = fi_ep_bind(e->ep_, &e->av_->fid, 0);
  if (rc != 0) return fi_fail("fi_ep_bind(av)", rc, where);
  rc = fi_ep_bind(e->ep_, &e->cq_->fid, FI_TRANSMIT | FI_RECV);
  if (rc != 0) return fi_fail("fi_ep_bind(cq)", rc, where);
  EpFeatures& f = e->features_;
  efa_options(e->ep_, info, &f);
  fi_eq_attr eq_attr = {};
  eq_attr.size = 64;
  eq_attr.wait_obj = FI_WAIT_NONE;
  rc = fi_eq_open(e->dom_->fabric(), &eq_attr, &e->eq_, nullptr);
  const char* eq_call = "fi_eq_open";
  if (rc == 0) {
    rc = fi_ep_bind(e->ep_, &e->eq_->fid, 0);
    eq_call = "fi_ep_bind(eq)";
  }
  f.eq = rc == 0;
  if (rc != 0) {
    if (e->eq_ != nullptr) fi_close(&e->eq_->fid);
    e->eq_ = nullptr;
    // EFA calls abort() when an error that belongs to no operation finds no event queue.
    if (f.efa_options) return fi_fail(eq_call, rc, where);
    static std::once_flag once;
    std::call_once(once, [&] {
      NF_INFO(kSubsysInit | kSubsysNet,
              "provider '%s' takes no event queue on its endpoints "
              "(%s): errors that belong to no operation are not seen",
              info->fabric_attr->prov_name, fi_error_text(eq_call, rc).c_str());
    });
  }
  if (e->dom_->forbid_cuda()) {
    bool permitted = false;
    rc = fi_setopt(&e->ep_->fid, FI_OPT_ENDPOINT, kFiOptCudaApiPermitted, &permitted,
                   sizeof(permitted));
    if (rc != 0) return fi_fail("fi_setopt(FI_OPT_CUDA_API_PERMITTED=false)", rc, where);
  }
  rc = fi_enable(e->ep_);
  if (rc != 0) return fi_fail("fi_enable", rc, where);
  if (f.efa_options) {
    getopt_bool(e->ep_, kFiOptEfaEmulatedWrite, &f.write_emulated);
    getopt_bool(e->ep_, kFiOptEfaEmulatedRead, &f.read_emulated);
  }
  *out = std::move(e);
  return Status::kOk;
}

Endpoint::~Endpoint() {
  // The endpoint first: closing it cancels what is still in flight; then what was bound to it.
  if (ep_ != nullptr) fi_close(&ep_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (eq_ != nullptr) fi_close(&eq_->fid);
}

int Endpoint::read_eq(EqError* err) {
  if (eq_ == nullptr) return 0;
  for (;;) {
    uint32_t event = 0;
    uint8_t buf[256];
    ssize_t rc = fi_eq_read(eq_, &event, buf, sizeof(buf), 0);
    if (rc >= 0) continue;  // an event that is not an error: nothing of ours waits for one
    if (rc == -FI_EAGAIN) return 0;
    if (rc == -FI_EAVAIL) {
      fi_eq_err_entry e = {};
      rc = fi_eq_readerr(eq_, &e, 0);
      if (rc == -FI_EAGAIN) return 0;
      if (rc >= 0) {
        err->err = e.err != 0 ? e.err : FI_EOTHER;
        err->prov_errno = e.prov_errno;
        char text[512];
        const char* t = fi_eq_strerror(eq_, e.prov_errno, e.err_data, text, sizeof(text));
        err->text = std::string(fi_strerror(err->err)) + " (" + fi_errno_name(-err->err) + ")";
        if (t != nullptr && t[0] != '\0')
          err->text += ", provider error " + std::to_string(e.prov_errno) + ": " + t;
        return 1;
      }
    }
    err->err = static_cast<int>(-rc);
    err->prov_errno = 0;
    err->text = fi_error_text("fi_eq_read", static_cast<int>(rc));
    return -1;
  }
}

Status Endpoint::name(uint8_t* buf, size_t* len) const {
  int rc = fi_getname(&ep_->fid, buf, len);
  if (rc != 0) return fi_fail("fi_getname", rc, dom_->name().c_str());
  return Status::kOk;
}

Status Endpoint::insert_peer(const uint8_t* addr, size_t len, fi_addr_t* out) {
  (void)len;  // the provider knows its address length; we checked it against ours
  int rc = fi_av_insert(av_, addr, 1, out, 0, nullptr);
  if (rc != 1) return fi_fail("fi_av_insert", rc < 0 ? rc : -FI_EINVAL, dom_->name().c_str());
  return Status::kOk;
}

std::string Endpoint::address_text(const uint8_t* addr, size_t len) const {
  char buf[256];
  size_t n = sizeof(buf);
  const char* t = fi_av_straddr(av_, addr, buf, &n);
  if (t != nullptr && buf[0] != '\0') return std::string(buf, strnlen(buf, sizeof(buf)));
  std::string hex;
  char two[3];
  for (size_t i = 0; i < len; ++i) {
    snprintf(two, sizeof(two), "%02x", addr[i]);
    hex += two;
  }
  return hex;
}

int Endpoint::read(fi_cq_tagged_entry* entries, int max, CqError* err) {
  ssize_t rc = fi_cq_read(cq_, entries, static_cast<size_t>(max));
  if (rc > 0) return static_cast<int>(rc);
  if (rc == -FI_EAGAIN) return 0;
  if (rc == -FI_EAVAIL) {
    fi_cq_err_entry e = {};
    ssize_t r2 = fi_cq_readerr(cq_, &e, 0);
    if (r2 == 1) {
      err->err = e.err != 0 ? e.err : FI_EOTHER;
      err->prov_errno = e.prov_errno;
      err->op_context = e.op_context;
      err->text = cq_error_text(cq_, e);
      err->entry = true;
      err->flags = e.flags;
      err->data = e.data;
      err->tag = e.tag;
      return -1;
    }
    if (r2 == -FI_EAGAIN) return 0;
    rc = r2;
  }
  err->err = static_cast<int>(rc < 0 ? -rc : rc);
  err->op_context = nullptr;
  err->entry = false;
  err->text = fi_error_text("fi_cq_read", static_cast<int>(rc));
  return -1;
}

}  // namespace nf
