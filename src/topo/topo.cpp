#include "topo/topo.h"

#include <hwloc.h>
#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace nf {
namespace {

constexpr unsigned kNvidiaVendor = 0x10de;
constexpr unsigned kDisplayClass = 0x03;  // base class: VGA 0x0300, 3D 0x0302

std::string format_bus_id(unsigned domain, unsigned bus, unsigned dev, unsigned fn) {
  char b[32];
  snprintf(b, sizeof(b), "%04x:%02x:%02x.%x", domain, bus, dev, fn);
  return b;
}

std::string bus_id_of(const hwloc_obj* o) {
  const hwloc_obj_attr_u::hwloc_pcidev_attr_s& a =
      o->type == HWLOC_OBJ_BRIDGE ? o->attr->bridge.upstream.pci : o->attr->pcidev;
  return format_bus_id(a.domain, a.bus, a.dev, a.func);
}

bool is_gpu(const hwloc_obj* o) {
  return o->type == HWLOC_OBJ_PCI_DEVICE && o->attr->pcidev.vendor_id == kNvidiaVendor &&
         (o->attr->pcidev.class_id >> 8) == kDisplayClass;
}

bool is_host_bridge(const hwloc_obj* o) {
  return o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

// A PCI function of the tree: a device, or a PCI-to-PCI bridge (switch port, root port).
bool is_pci_function(const hwloc_obj* o) {
  return o->type == HWLOC_OBJ_PCI_DEVICE ||
         (o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI);
}

bool below(const hwloc_obj* o, const hwloc_obj* ancestor) {
  for (const hwloc_obj* p = o->parent; p != nullptr; p = p->parent)
    if (p == ancestor) return true;
  return false;
}

hwloc_obj* find_pci(hwloc_topology_t t, const std::string& bus_id) {
  for (hwloc_obj* o = hwloc_get_next_pcidev(t, nullptr); o != nullptr;
       o = hwloc_get_next_pcidev(t, o))
    if (bus_id_of(o) == bus_id) return o;
  return nullptr;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// Consecutive NICs, `rails` per device; a device with fewer NICs than rails repeats them (several
// endpoints on one NIC): what NCCL_FABRIC_RAILS has always done.
void group_consecutive(const std::vector<Nic>& nics, size_t rails, std::vector<DeviceGroup>* out) {
  for (size_t first = 0; first < nics.size(); first += rails) {
    const size_t count = std::min(rails, nics.size() - first);
    DeviceGroup g;
    for (size_t r = 0; r < rails; ++r) g.rails.push_back(first + r % count);
    for (size_t k = 0; k < count; ++k) g.name += (k ? "+" : "") + nics[first + k].domain;
    if (rails > count) g.name += "x" + std::to_string(rails);
    out->push_back(std::move(g));
  }
}

}  // namespace

std::string normalize_bus_id(const std::string& text) {
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  int used = 0;
  if (sscanf(text.c_str(), "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &used) != 4 ||
      static_cast<size_t>(used) != text.size() || dom > 0xffff || bus > 0xff || dev > 0x1f ||
      fn > 7)
    return "";
  return format_bus_id(dom, bus, dev, fn);
}

std::string nic_bus_id(const Nic& nic) {
  if (nic.info && nic.info->nic != nullptr && nic.info->nic->bus_attr != nullptr &&
      nic.info->nic->bus_attr->bus_type == FI_BUS_PCI) {
    const fi_pci_attr& a = nic.info->nic->bus_attr->attr.pci;
    return format_bus_id(a.domain_id, a.bus_id, a.device_id, a.function_id);
  }
  const size_t slash = nic.pci_path.rfind('/');
  return normalize_bus_id(slash == std::string::npos ? nic.pci_path
                                                     : nic.pci_path.substr(slash + 1));
}

Status Topology::load(std::unique_ptr<Topology>* out, std::string* error) {
  return load_impl(nullptr, out, error);
}

Status Topology::load_xml(const std::string& path, std::unique_ptr<Topology>* out,
                          std::string* error) {
  return load_impl(path.c_str(), out, error);
}

Status Topology::load_impl(const char* xml_path, std::unique_ptr<Topology>* out,
                           std::string* error) {
  std::unique_ptr<Topology> t(new Topology());
  if (hwloc_topology_init(&t->topo_) != 0) {
    *error = std::string("hwloc_topology_init: ") + strerror(errno);
    t->topo_ = nullptr;
    return Status::kSystemError;
  }
  // Only the PCI tree matters here: keep every device and bridge (a filter would drop the
  // switches that tell which GPU a NIC is near), skip caches and OS devices (faster load).
  hwloc_topology_set_type_filter(t->topo_, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
  hwloc_topology_set_type_filter(t->topo_, HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_ALL);
  hwloc_topology_set_type_filter(t->topo_, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_type_filter(t->topo_, HWLOC_OBJ_MISC, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_cache_types_filter(t->topo_, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_icache_types_filter(t->topo_, HWLOC_TYPE_FILTER_KEEP_NONE);
  // Linux's own sysfs discovery finds the same PCI tree; the libpciaccess-based "pci" component
  // (a plugin hwloc dlopens) leaks what libpciaccess allocates, at every load.
  hwloc_topology_set_components(t->topo_, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  if (xml_path != nullptr && hwloc_topology_set_xml(t->topo_, xml_path) != 0) {
    *error = std::string("hwloc cannot read ") + xml_path + ": " + strerror(errno);
    return Status::kSystemError;
  }
  if (hwloc_topology_load(t->topo_) != 0) {
    *error = std::string("hwloc_topology_load: ") + strerror(errno);
    return Status::kSystemError;
  }
  for (hwloc_obj* o = hwloc_get_next_pcidev(t->topo_, nullptr); o != nullptr;
       o = hwloc_get_next_pcidev(t->topo_, o)) {
    ++t->npci_;
    if (is_gpu(o)) t->gpus_.push_back(bus_id_of(o));
  }
  *out = std::move(t);
  return Status::kOk;
}

Topology::~Topology() {
  if (topo_ != nullptr) hwloc_topology_destroy(topo_);
}

bool Topology::lookup(const std::string& bus_id, PciInfo* out) const {
  const std::string id = normalize_bus_id(bus_id);
  hwloc_obj* o = id.empty() ? nullptr : find_pci(topo_, id);
  if (o == nullptr) return false;
  *out = PciInfo();
  out->bus_id = id;
  // The sysfs path: each PCI function on the way down from the host bridge, as Linux names them.
  std::string path = "/" + id;
  for (const hwloc_obj* p = o->parent; p != nullptr; p = p->parent) {
    if (is_pci_function(p)) {
      path = "/" + bus_id_of(p) + path;
    } else if (is_host_bridge(p)) {
      char b[32];
      snprintf(b, sizeof(b), "/pci%04x:%02x", p->attr->bridge.downstream.pci.domain,
               p->attr->bridge.downstream.pci.secondary_bus);
      path = b + path;
      break;
    }
  }
  out->sysfs_path = "/sys/devices" + path;
  const hwloc_obj* cpu_side = hwloc_get_non_io_ancestor_obj(topo_, o);
  if (cpu_side != nullptr && cpu_side->nodeset != nullptr &&
      !hwloc_bitmap_iszero(cpu_side->nodeset))
    out->numa_node = hwloc_bitmap_first(cpu_side->nodeset);
  // Up through switch and root ports, never past the host bridge: a GPU reached only through the
  // CPU is not near (NCCL's PHB, where GPUDirect RDMA is off by default).
  for (const hwloc_obj* a = o->parent; a != nullptr && is_pci_function(a); a = a->parent) {
    for (hwloc_obj* g = hwloc_get_next_pcidev(topo_, nullptr); g != nullptr;
         g = hwloc_get_next_pcidev(topo_, g))
      if (is_gpu(g) && below(g, a)) out->nearest_gpus.push_back(bus_id_of(g));
    if (!out->nearest_gpus.empty()) break;
  }
  return true;
}

Status grouping_policy(const Params& p, bool rails_set, GroupingPolicy* out, std::string* error) {
  const ParamDef& gdef = param_def(ParamId::kNicGrouping);
  const std::string& g = p.get_str(ParamId::kNicGrouping);
  const size_t rails = static_cast<size_t>(p.get_int(ParamId::kRails));
  *out = GroupingPolicy();
  if (strcasecmp(g.c_str(), "auto") == 0) {
    if (rails_set) {
      out->mode = GroupingPolicy::Mode::kConsecutive;
      out->rails = rails;
      out->why = "NCCL_FABRIC_RAILS=" + std::to_string(rails) +
                 " is set: " + std::to_string(rails) +
                 " consecutive NIC(s) per device, topology not used";
    } else {
      out->mode = GroupingPolicy::Mode::kAuto;
      out->why = std::string(gdef.name) + "=auto";
    }
    return Status::kOk;
  }
  if (strcasecmp(g.c_str(), "none") == 0) {
    out->mode = GroupingPolicy::Mode::kNone;
    out->why = std::string(gdef.name) + "=none: one device per NIC";
  } else {
    char* end = nullptr;
    errno = 0;
    const long n = strtol(g.c_str(), &end, 10);
    if (g.empty() || errno != 0 || *end != '\0' || n < 1 ||
        n > static_cast<long>(kMaxDeviceRails)) {
      *error = std::string(gdef.name) + "='" + g + "' is not auto, none or a number of rails per " +
               "device from 1 to " + std::to_string(kMaxDeviceRails);
      return Status::kInvalidUsage;
    }
    out->mode = GroupingPolicy::Mode::kConsecutive;
    out->rails = static_cast<size_t>(n);
    out->why = std::string(gdef.name) + "=" + g + ": " + g + " consecutive NIC(s) per device";
  }
  if (rails_set) {
    const size_t mine = out->mode == GroupingPolicy::Mode::kNone ? 1 : out->rails;
    if (mine != rails)
      out->why += "; NCCL_FABRIC_RAILS=" + std::to_string(rails) + " is ignored (" + gdef.name +
                  " is set and decides)";
  }
  return Status::kOk;
}

Status group_nics(const std::vector<Nic>& nics, const Topology* topo, const GroupingPolicy& policy,
                  std::vector<DeviceGroup>* out, std::string* log) {
  out->clear();
  if (policy.mode == GroupingPolicy::Mode::kConsecutive) {
    group_consecutive(nics, policy.rails, out);
    *log = "topology: " + policy.why;
    return Status::kOk;
  }
  if (policy.mode == GroupingPolicy::Mode::kNone) {
    group_consecutive(nics, 1, out);
    *log = "topology: " + policy.why;
    return Status::kOk;
  }
  if (topo == nullptr || !topo->has_pci()) {
    group_consecutive(nics, 1, out);
    *log = "topology: hwloc sees no PCI devices: one NCCL device per NIC";
    return Status::kOk;
  }
  if (topo->gpus().empty()) {
    group_consecutive(nics, 1, out);
    *log = "topology: hwloc sees " + std::to_string(topo->pci_count()) +
           " PCI devices but no GPU: one NCCL device per NIC";
    return Status::kOk;
  }
  // NICs serving the same GPUs, in NIC order; a NIC with no GPU near it is alone.
  std::vector<std::vector<size_t>> sets;
  std::vector<std::vector<std::string>> set_gpus;
  std::map<std::string, size_t> by_gpus;
  size_t unplaced = 0;
  for (size_t i = 0; i < nics.size(); ++i) {
    PciInfo info;
    const std::string id = nic_bus_id(nics[i]);
    const bool found = !id.empty() && topo->lookup(id, &info);
    if (!found) ++unplaced;
    const std::string key = join(info.nearest_gpus);
    if (key.empty()) {
      sets.push_back({i});
      set_gpus.push_back({});
      continue;
    }
    auto it = by_gpus.find(key);
    if (it == by_gpus.end()) {
      by_gpus[key] = sets.size();
      sets.push_back({i});
      set_gpus.push_back(info.nearest_gpus);
    } else {
      sets[it->second].push_back(i);
    }
  }
  for (size_t s = 0; s < sets.size(); ++s) {
    // More NICs than a device can carry: split them evenly (6 NICs: 3 + 3, not 4 + 2).
    const size_t n = sets[s].size();
    const size_t parts = (n + kMaxDeviceRails - 1) / kMaxDeviceRails;
    size_t k = 0;
    for (size_t part = 0; part < parts; ++part) {
      const size_t size = n / parts + (part < n % parts ? 1 : 0);
      DeviceGroup g;
      for (size_t r = 0; r < size; ++r, ++k) {
        g.rails.push_back(sets[s][k]);
        g.name += (r ? "+" : "") + nics[sets[s][k]].domain;
      }
      g.nearest_gpus = set_gpus[s];
      out->push_back(std::move(g));
    }
  }
  *log = "topology: " + policy.why + ": " + std::to_string(nics.size()) + " NIC(s) near " +
         std::to_string(topo->gpus().size()) + " GPU(s) make " + std::to_string(out->size()) +
         " device(s)";
  if (unplaced > 0)
    *log += "; " + std::to_string(unplaced) + " NIC(s) not found in the PCI topology stay alone";
  return Status::kOk;
}

}  // namespace nf
