// The machine's PCI topology (hwloc) and how the NICs become NCCL devices: NICs that sit behind
// the same PCIe switch as the same GPUs are the rails of one device. Knows nothing of NCCL.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "fabric/fabric.h"
#include "util/params.h"
#include "util/status.h"

struct hwloc_topology;

namespace nf {

// What the topology says about one PCI function.
struct PciInfo {
  std::string bus_id;      // "0000:4f:00.0"
  std::string sysfs_path;  // "/sys/devices/pci0000:4e/0000:4e:00.0/0000:4f:00.0", from the tree
  int numa_node = -1;      // the NUMA node it hangs off, -1 when unknown
  // The GPUs behind the deepest PCI bridge (not a host bridge) above the function that has any,
  // as bus ids in topology order; empty when none shares a PCIe switch or root port with it.
  std::vector<std::string> nearest_gpus;
};

// One hwloc topology with its PCI devices and bridges, loaded once and read-only after.
class Topology {
 public:
  // This machine's topology; hwloc honours HWLOC_XMLFILE (tests point it at tests/topo/*.xml).
  static Status load(std::unique_ptr<Topology>* out, std::string* error);
  // A topology exported to XML by hwloc (lstopo foo.xml) or written by hand.
  static Status load_xml(const std::string& path, std::unique_ptr<Topology>* out,
                         std::string* error);
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  bool has_pci() const { return npci_ > 0; }
  size_t pci_count() const { return static_cast<size_t>(npci_); }
  // NVIDIA display/3D controllers (vendor 0x10de, class 0x03xx), as bus ids.
  const std::vector<std::string>& gpus() const { return gpus_; }
  // False when no PCI function has that bus id ("dddd:bb:dd.f", any case).
  bool lookup(const std::string& bus_id, PciInfo* out) const;

 private:
  Topology() = default;
  static Status load_impl(const char* xml_path, std::unique_ptr<Topology>* out, std::string* error);

  hwloc_topology* topo_ = nullptr;
  int npci_ = 0;
  std::vector<std::string> gpus_;
};

// "dddd:bb:dd.f" in lower case, or "" when `text` is not a PCI address.
std::string normalize_bus_id(const std::string& text);

// The NIC's PCI address: the provider's bus attributes where it gives them, else the last
// component of its sysfs path; "" for a NIC that is no PCI function (tcp on lo, shm).
std::string nic_bus_id(const Nic& nic);

// How NCCL_FABRIC_NIC_GROUPING and NCCL_FABRIC_RAILS combine (docs/configuration.md).
struct GroupingPolicy {
  enum class Mode { kAuto, kNone, kConsecutive };
  Mode mode = Mode::kAuto;
  size_t rails = 1;  // kConsecutive: rails per device (NICs repeat when there are fewer)
  std::string why;   // what decided, for the log
};

// NCCL_FABRIC_NIC_GROUPING is auto, none or 1..4 rails; an explicitly set NCCL_FABRIC_RAILS wins
// over auto (it is how grouping was asked for before auto existed). A bad value is reported by
// name and gives kInvalidUsage. `rails_set`: the user set NCCL_FABRIC_RAILS.
Status grouping_policy(const Params& p, bool rails_set, GroupingPolicy* out, std::string* error);

// One NCCL device.
struct DeviceGroup {
  std::vector<size_t> rails;  // index into the NIC list, one per rail (a NIC may repeat)
  std::string name;           // domain names joined by '+', "xK" appended when NICs repeat
  std::vector<std::string> nearest_gpus;  // bus ids; empty when no GPU shares its PCIe switch
};

constexpr size_t kMaxDeviceRails = 4;  // wire/wire.h kMaxRails: the wire carries 4 addresses

// Groups `nics` into devices as `policy` says; `topo` may be null (no topology). *log gets one
// line that says how the grouping was decided.
Status group_nics(const std::vector<Nic>& nics, const Topology* topo, const GroupingPolicy& policy,
                  std::vector<DeviceGroup>* out, std::string* log);

}  // namespace nf
