// Provider selection: which provider, which of its fabrics (efa vs efa-direct), which domains,
// at which libfabric API version. The objects opened from the result live in fabric.cpp.
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

// Every mr_mode we can honour; the provider keeps what it needs and we obey what it returns.
int mr_mode_offer(bool hmem) {
  return FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT |
         (hmem ? FI_MR_HMEM : 0);
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
  hints->domain_attr->mr_mode = mr_mode_offer(hmem);
  // Sends with the same tag must match receives in posting order: NCCL's FIFO rule.
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

// What an efa-direct endpoint can serve (efa-semantics 1.4): untagged messages and, with `rma`,
// writes with remote CQ data. No FI_TAGGED and no ordering (asking either makes efa-direct drop
// out). FI_CONTEXT2 is required; FI_RX_CQ_DATA is offered because the RDMA protocol can post a
// receive for each write with CQ data (a NIC without unsolicited write recv needs that).
InfoPtr make_direct_hints(const std::string& provider, bool rma, bool hmem) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) return hints;
  hints->caps = FI_MSG | (rma ? FI_RMA | FI_WRITE | FI_REMOTE_WRITE : 0);
  if (hmem) hints->caps |= FI_HMEM | FI_READ | FI_REMOTE_READ;
  hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->domain_attr->mr_mode = mr_mode_offer(hmem);
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  hints->fabric_attr->name = strdup(kEfaDirectFabric);
  return hints;
}

bool is_direct(const fi_info* i) {
  return i->fabric_attr != nullptr && i->fabric_attr->name != nullptr &&
         strcmp(i->fabric_attr->name, kEfaDirectFabric) == 0;
}

bool of_provider(const fi_info* i, const std::string& prov) {
  return i->fabric_attr != nullptr && i->fabric_attr->prov_name != nullptr &&
         prov == i->fabric_attr->prov_name;
}

// FI_RMA writes a peer can target, with remote CQ data of >= 4 bytes: the RDMA protocol works.
bool grants_rma_writes(const fi_info* i) {
  return (i->caps & FI_RMA) != 0 && (i->caps & FI_REMOTE_WRITE) != 0 &&
         i->domain_attr->cq_data_size >= 4;
}

// What a provider answered about its efa-direct fabric.
struct DirectOffer {
  bool offered = false;  // it lists efa-direct entries at all
  uint32_t version = 0;  // the API version they were listed at
  InfoPtr rma;           // the entries that grant RMA writes, when asked and granted
};

// Asks at each of `versions` (newest first) whether `prov` lists an efa-direct fabric, and, with
// `want_rma`, for efa-direct entries that grant RMA writes (FI_HMEM too first, with `want_hmem`).
DirectOffer find_direct(const std::string& prov, const std::vector<uint32_t>& versions,
                        bool want_rma, bool want_hmem) {
  DirectOffer out;
  for (uint32_t v : versions) {
    InfoPtr hints = make_direct_hints(prov, false, false);
    fi_info* list = nullptr;
    if (!hints || fi_getinfo(v, nullptr, nullptr, 0, hints.get(), &list) != 0) continue;
    InfoPtr probe(list);
    bool any = false;
    for (const fi_info* i = list; i != nullptr && !any; i = i->next)
      any = of_provider(i, prov) && is_direct(i);
    if (!any) continue;
    out.offered = true;
    out.version = v;
    if (!want_rma) return out;
    for (bool hmem : {true, false}) {
      if (hmem && !want_hmem) continue;
      hints = make_direct_hints(prov, true, hmem);
      list = nullptr;
      if (!hints || fi_getinfo(v, nullptr, nullptr, 0, hints.get(), &list) != 0) continue;
      InfoPtr rma(list);
      for (const fi_info* i = list; i != nullptr; i = i->next)
        if (of_provider(i, prov) && is_direct(i) && grants_rma_writes(i)) {
          out.rma = std::move(rma);
          return out;
        }
    }
    return out;
  }
  return out;
}

// Why an EFA provider's `efa` fabric stands where efa-direct is not listed at all.
std::string direct_not_offered(uint32_t api) {
  const uint32_t lib = fi_version();
  if (lib < kFiApi21)
    return "efa-direct not offered (libfabric " + api_version_str(lib) + ", before 2.1)";
  if (kFiBuiltVersion < kFiApi21)
    return "efa-direct not offered (the plugin was built against libfabric " +
           api_version_str(kFiBuiltVersion) + " headers, before 2.1)";
  return "efa-direct not offered (the provider lists none at API " + api_version_str(api) + ")";
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

bool parse_efa_fabric(const std::string& text, EfaFabric* out, std::string* error) {
  if (text == "auto" || text.empty()) {
    *out = EfaFabric::kAuto;
  } else if (text == "efa") {
    *out = EfaFabric::kEfa;
  } else if (text == kEfaDirectFabric) {
    *out = EfaFabric::kDirect;
  } else {
    *error = "NCCL_FABRIC_EFA_FABRIC='" + text + "' is not one of: auto, efa, efa-direct";
    return false;
  }
  return true;
}

const char* efa_fabric_str(EfaFabric f) {
  switch (f) {
    case EfaFabric::kEfa: return "efa";
    case EfaFabric::kDirect: return kEfaDirectFabric;
    case EfaFabric::kAuto: break;
  }
  return "auto";
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
                     std::vector<Nic>* out, std::string* report, uint32_t api_cap,
                     EfaFabric efa_fabric, bool need_tagged) {
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
    const bool present = rc == 0;
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
    // Its efa-direct fabric, if it lists one: asked at the version the standard query was
    // answered at (else down the ladder). RMA writes are asked for only where efa-direct could
    // be chosen.
    const bool direct_wanted =
        efa_fabric == EfaFabric::kDirect || (efa_fabric == EfaFabric::kAuto && !need_tagged);
    DirectOffer direct;
    if (present)
      direct = find_direct(prov, got != 0 ? std::vector<uint32_t>{got} : ladder, direct_wanted,
                           want_hmem);
    // Which fabric, and why (a clause after the fabric's name; "" where there was no choice).
    bool use_direct = false;
    std::string why, fail;
    const std::string not_offered = direct_not_offered(got != 0 ? got : ladder.front());
    switch (efa_fabric) {
      case EfaFabric::kDirect:
        if (need_tagged)
          fail =
              "NCCL_FABRIC_EFA_FABRIC=efa-direct, but NCCL_FABRIC_PROTOCOL=sendrecv needs "
              "tagged messages, which efa-direct lacks";
        else if (!direct.offered)
          fail = "NCCL_FABRIC_EFA_FABRIC=efa-direct, but " + not_offered;
        else if (!direct.rma)
          fail =
              "NCCL_FABRIC_EFA_FABRIC=efa-direct, but efa-direct is offered without RMA writes "
              "with remote CQ data (the NIC lacks device RDMA read or write, e.g. p4d, g5)";
        else
          use_direct = true;
        why = "NCCL_FABRIC_EFA_FABRIC=efa-direct";
        break;
      case EfaFabric::kEfa:
        why = direct.offered ? "NCCL_FABRIC_EFA_FABRIC=efa" : not_offered;
        break;
      case EfaFabric::kAuto:
        if (!direct.offered)
          why = not_offered;
        else if (need_tagged)
          why = "NCCL_FABRIC_PROTOCOL=sendrecv needs tagged messages, which efa-direct lacks";
        else if (!direct.rma)
          why = "efa-direct offered without RMA writes";
        else
          use_direct = true;
        if (use_direct) why = "offered with device RMA writes (auto)";
        break;
    }
    if (!fail.empty()) {
      *report += "'" + prov + "': " + fail;
      continue;
    }
    // The NICs of one fabric's entries: the first entry of each domain (the provider's best),
    // loopback ones only when nothing else exists.
    auto collect = [&](const fi_info* entries, bool direct_entries, uint32_t version,
                       std::vector<Nic>* nics) -> Status {
      std::vector<Nic> loop;
      std::set<std::string> seen;
      for (const fi_info* i = entries; i != nullptr; i = i->next) {
        if (!of_provider(i, prov) || is_direct(i) != direct_entries) continue;
        if (direct_entries && !grants_rma_writes(i)) continue;
        const char* dn = i->domain_attr->name ? i->domain_attr->name : "";
        if (!domains.empty() && domains.count(dn) == 0) continue;
        if (!seen.insert(dn).second) continue;
        Nic nic;
        nic.info.reset(fi_dupinfo(i));
        if (!nic.info) return Status::kSystemError;
        nic.provider = prov;
        nic.domain = dn;
        nic.api_version = version;
        nic.api_refused = refused;
        nic.pci_path = find_pci_path(i);
        nic.speed_mbps = find_speed_mbps(i, &nic.speed_source);
        nic.loopback = is_loopback_domain(i);
        nic.rma = grants_rma_writes(i);
        nic.rma_read = nic.rma && (i->caps & FI_READ) != 0 && (i->caps & FI_REMOTE_READ) != 0;
        nic.hmem = (i->caps & FI_HMEM) != 0;
        nic.tagged = (i->caps & FI_TAGGED) != 0;
        nic.rx_cq_data = (i->mode & FI_RX_CQ_DATA) != 0;
        nic.fabric = i->fabric_attr->name != nullptr ? i->fabric_attr->name : "";
        nic.guid = fnv1a64(nic.pci_path.empty() ? prov + "/" + nic.domain : nic.pci_path);
        (nic.loopback ? loop : *nics).push_back(std::move(nic));
      }
      if (nics->empty()) *nics = std::move(loop);
      return Status::kOk;
    };
    std::vector<Nic> found, direct_nics;
    if (rc == 0) NF_CHECK(collect(list, false, got, &found));
    if (use_direct) {
      NF_CHECK(collect(direct.rma.get(), true, direct.version, &direct_nics));
      // Auto takes efa-direct only where it serves every NIC the other fabric has: NICs of two
      // fabrics cannot be the rails of one device.
      std::set<std::string> covered;
      for (const Nic& n : direct_nics) covered.insert(n.domain);
      size_t missing = 0;
      for (const Nic& n : found) missing += covered.count(n.domain) == 0;
      if (efa_fabric == EfaFabric::kAuto && !found.empty() &&
          (missing > 0 || direct_nics.empty())) {
        use_direct = false;
        why = "efa-direct grants RMA writes on " + std::to_string(found.size() - missing) + " of " +
              std::to_string(found.size()) + " NICs only";
      } else {
        found = std::move(direct_nics);
      }
    }
    if (rc != 0 && !use_direct) {
      *report += "'" + prov + "': " + fi_strerror(-rc) + " (-" + fi_errno_name(rc) + ")";
      if (!refused.empty()) *report += " at API " + refused;
      continue;
    }
    // A provider with no efa-direct fabric made no choice: its only fabric needs no reason, except
    // on EFA's `efa` fabric, where the reason is that efa-direct was not there.
    for (Nic& n : found)
      if (direct.offered || n.fabric == "efa") n.fabric_why = n.fabric + ": " + why;
    if (found.empty()) {
      *report +=
          "'" + prov + "': no domain" +
          (domains.empty() ? std::string() : " matching NCCL_FABRIC_DOMAIN=" + domain_filter);
      continue;
    }
    const uint32_t at = found.front().api_version;
    *report += "'" + prov + "': " + std::to_string(found.size()) + " domain(s), API " +
               api_version_str(at) + (refused.empty() ? "" : " (refused at " + refused + ")");
    if (!found.front().fabric_why.empty()) *report += ", " + found.front().fabric_why;
    *out = std::move(found);
    return Status::kOk;
  }
  return Status::kSystemError;
}

}  // namespace nf
