// Provider entry point (fi_prov_ini), fi_getinfo with EFA-like hints filtering, and the per-NIC
// fid_nic that every returned fi_info carries.
#include <arpa/inet.h>
#include <strings.h>
#include <cstdio>
#include <cstdlib>

#include "mock_internal.h"

namespace mockefa {
namespace {

// One allocation holds the fid_nic, its attribute structs and their strings, so FI_DUP is a
// copy plus re-pointing and close is a single delete.
struct NicBlock {
  fid_nic nic;
  fi_device_attr dev;
  fi_bus_attr bus;
  fi_link_attr link;
  mockefa_nic_attr prov;
  char name[32], device_id[16], device_version[8], vendor_id[16], driver[8], firmware[16];
  char address[64], network_type[16];
};
static_assert(offsetof(NicBlock, nic) == 0, "fid_nic must come first");

fi_ops g_nic_ops;

void nic_wire_up(NicBlock* b) {
  b->nic.fid.fclass = FI_CLASS_NIC;
  b->nic.fid.ops = &g_nic_ops;
  b->nic.device_attr = &b->dev;
  b->nic.bus_attr = &b->bus;
  b->nic.link_attr = &b->link;
  b->nic.prov_attr = &b->prov;
  b->dev.name = b->name;
  b->dev.device_id = b->device_id;
  b->dev.device_version = b->device_version;
  b->dev.vendor_id = b->vendor_id;
  b->dev.driver = b->driver;
  b->dev.firmware = b->firmware;
  b->link.address = b->address;
  b->link.network_type = b->network_type;
}

int nic_close(fid* f) {
  delete reinterpret_cast<NicBlock*>(f);
  return 0;
}

int nic_control(fid* f, int command, void* arg) {
  if (command != FI_DUP || !arg) return -FI_ENOSYS;
  auto* copy = new NicBlock(*reinterpret_cast<NicBlock*>(f));
  nic_wire_up(copy);
  *static_cast<fid_nic**>(arg) = &copy->nic;
  return 0;
}

int nic_tostr(const fid* f, char* buf, size_t len) {
  auto* b = reinterpret_cast<const NicBlock*>(f);
  // fi_tostr hands us its whole buffer and expects us to append, like strncat.
  size_t used = strnlen(buf, len);
  if (used + 1 >= len) return 0;
  std::snprintf(buf + used, len - used,
                "    nic:\n"
                "        fi_device_attr:\n"
                "            name: %s\n            device_id: %s\n            device_version: %s\n"
                "            vendor_id: %s\n            driver: %s\n            firmware: %s\n"
                "        fi_bus_attr:\n"
                "            bus_type: FI_BUS_PCI\n"
                "            fi_pci_attr:\n"
                "                domain_id: %u\n                bus_id: %u\n"
                "                device_id: %u\n                function_id: %u\n"
                "        fi_link_attr:\n"
                "            address: %s\n            mtu: %zu\n            speed: %zu\n"
                "            state: FI_LINK_UP\n            network_type: %s\n",
                b->name, b->device_id, b->device_version, b->vendor_id, b->driver, b->firmware,
                unsigned{b->bus.attr.pci.domain_id}, unsigned{b->bus.attr.pci.bus_id},
                unsigned{b->bus.attr.pci.device_id}, unsigned{b->bus.attr.pci.function_id},
                b->address, b->link.mtu, b->link.speed, b->network_type);
  return 0;
}

int nic_enosys_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int nic_enosys_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int nic_enosys_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

fid_nic* nic_alloc(int index, const Profile& p) {
  auto* b = new NicBlock();
  std::memset(b, 0, sizeof *b);
  nic_wire_up(b);
  mockefa_nic_info facts;
  nic_facts(index, &facts);
  std::snprintf(b->name, sizeof b->name, "%s", facts.device_name);
  // The PCI device id EFA's vendor_part_id is: 0xefa0 for a first-generation device.
  std::snprintf(b->device_id, sizeof b->device_id,
                p.device == DeviceGen::kOld ? "0xefa0" : "0xefa1");
  std::snprintf(b->device_version, sizeof b->device_version, "0");
  std::snprintf(b->vendor_id, sizeof b->vendor_id, "0x1d0f");
  std::snprintf(b->driver, sizeof b->driver, "efa");
  std::snprintf(b->firmware, sizeof b->firmware, "mock");
  uint8_t gid[16];
  domain_gid(index, gid);
  EfaAddr a{};
  std::memcpy(a.gid, gid, sizeof gid);
  std::string s = addr_str(a);  // fi_addr_efa://[gid]:0:0 -> EFA-<gid>
  size_t lb = s.find('['), rb = s.find(']');
  std::snprintf(b->address, sizeof b->address, "EFA-%s", s.substr(lb + 1, rb - lb - 1).c_str());
  std::snprintf(b->network_type, sizeof b->network_type, "Ethernet");
  b->bus.bus_type = FI_BUS_PCI;
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  std::sscanf(facts.pci_bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn);
  b->bus.attr.pci.domain_id = static_cast<uint16_t>(dom);
  b->bus.attr.pci.bus_id = static_cast<uint8_t>(bus);
  b->bus.attr.pci.device_id = static_cast<uint8_t>(dev);
  b->bus.attr.pci.function_id = static_cast<uint8_t>(fn);
  b->link.mtu = kLinkMtu;
  b->link.speed = facts.link_speed;
  b->link.state = FI_LINK_UP;
  b->prov.magic = MOCKEFA_NIC_ATTR_MAGIC;
  b->prov.info = facts;
  return &b->nic;
}

// ofi_cap_mr_mode's rule: an application that is not an RMA target needs none of the
// RMA-target bits, and nothing at all unless FI_MR_LOCAL/FI_MR_HMEM is involved.
bool rma_target_allowed(uint64_t caps) {
  if (!(caps & (FI_RMA | FI_ATOMIC))) return false;
  if (caps & (FI_REMOTE_READ | FI_REMOTE_WRITE)) return true;
  return !(caps & (FI_READ | FI_WRITE));
}

int reduce_mr_mode(uint64_t caps, int mode) {
  mode &= ~(kMrBasicLegacy | kMrScalableLegacy);
  if (!(caps & FI_HMEM)) mode &= ~FI_MR_HMEM;
  if (!rma_target_allowed(caps)) {
    if (!(mode & (FI_MR_LOCAL | FI_MR_HMEM))) return 0;
    mode &= ~kMrRmaTarget;
  }
  return mode;
}

// What the hints select, common to all mock NICs.
constexpr uint64_t kDomainCaps = FI_LOCAL_COMM | FI_REMOTE_COMM;

struct Chosen {
  uint64_t caps = 0;
  int mr_mode = 0;
  uint64_t tx_msg_order = kMsgOrder, rx_msg_order = kMsgOrder;
  uint64_t tx_op_flags = 0, rx_op_flags = 0;
  size_t inject_size = 0, tx_size = 0, rx_size = 0, tx_iov = kIovLimit, rx_iov = kIovLimit;
  size_t rma_iov = kRmaIovLimit;
  uint64_t tag_format = kTagFormat;
  fi_threading threading = FI_THREAD_SAFE;
  fi_resource_mgmt rm = FI_RM_ENABLED;
  const char* domain_filter = nullptr;
  const EfaAddr* src_filter = nullptr;
};

// The endpoint type, address format, fabric and provider names; null when the hints allow
// `fabric` ("efa" or "efa-direct").
const char* choose_names(const fi_info* h, const char* fabric) {
  if (h->ep_attr && h->ep_attr->type != FI_EP_UNSPEC && h->ep_attr->type != FI_EP_RDM)
    return "ep_attr->type is not FI_EP_RDM (the mock has no DGRAM/MSG endpoints)";
  if (h->addr_format != FI_FORMAT_UNSPEC && h->addr_format != FI_ADDR_EFA) return "addr_format";
  if (h->fabric_attr) {
    if (h->fabric_attr->name && std::strcmp(h->fabric_attr->name, fabric) != 0)
      return "fabric_attr->name is another fabric";
    if (h->fabric_attr->prov_name && strcasecmp(h->fabric_attr->prov_name, kProvName) != 0)
      return "fabric_attr->prov_name";
  }
  return nullptr;
}

// The domain limits and the source-address filter both fabrics share; null when they pass.
const char* choose_domain_and_src(const fi_info* h, Chosen* c) {
  if (const fi_domain_attr* d = h->domain_attr) {
    if (d->mr_key_size > kMrKeySize) return "domain_attr->mr_key_size";
    if (d->cq_data_size > kCqDataSize) return "domain_attr->cq_data_size > 4";
    if (d->cq_cnt > 512 || d->ep_cnt > 256 || d->tx_ctx_cnt > 256 || d->rx_ctx_cnt > 256)
      return "domain_attr counts";
    if (d->max_ep_tx_ctx > 1 || d->max_ep_rx_ctx > 1) return "domain_attr->max_ep_*_ctx";
    if (d->max_ep_stx_ctx || d->max_ep_srx_ctx) return "shared contexts";
    if (d->mr_iov_limit > kMrIovLimit) return "domain_attr->mr_iov_limit";
    // libfabric's ofi_check_domain_attr: a domain capability the provider lacks (EFA has no
    // FI_SHARED_AV) is no match (fabtests' getinfo_caps3 found the mock ignoring it).
    if (d->caps & ~kDomainCaps) return "domain_attr->caps (EFA: LOCAL_COMM and REMOTE_COMM only)";
    if (d->threading != FI_THREAD_UNSPEC) c->threading = d->threading;
    if (d->resource_mgmt != FI_RM_UNSPEC) c->rm = d->resource_mgmt;
    c->domain_filter = d->name;
  }
  if (h->src_addr && h->src_addrlen == kAddrLen)
    c->src_filter = static_cast<const EfaAddr*>(h->src_addr);
  return nullptr;
}

// Returns null when the hints select the mock, else the reason they do not.
const char* choose(const Profile& p, const fi_info* h, Chosen* c) {
  const uint64_t prov_caps =
      kPrimaryCaps | kSecondaryCaps | (p.gdr != GdrMode::kNoCuda ? FI_HMEM : 0);
  const uint64_t primary = kPrimaryCaps | FI_HMEM;
  c->inject_size = p.inject_size;
  c->tx_size = p.tx_size;
  c->rx_size = p.rx_size;
  if (!h) {
    c->caps = kPrimaryCaps | kSecondaryCaps;
    c->mr_mode = kMrRequired | (p.require_mr_local ? FI_MR_LOCAL : 0);
    return nullptr;
  }
  if (const char* why = choose_names(h, kFabricName)) return why;
  if (h->caps & ~prov_caps) return "caps the mock lacks";
  const bool hmem = (h->caps & FI_HMEM) != 0;
  const int full = kMrRequired | (hmem ? FI_MR_HMEM : 0);
  const int prov_mode = full | (p.require_mr_local ? FI_MR_LOCAL : 0);

  uint64_t caps = kPrimaryCaps | kSecondaryCaps;
  if (h->caps) {
    caps = (h->caps & primary) | (kSecondaryCaps & ~FI_SOURCE) | (h->caps & FI_SOURCE);
    if ((h->caps & FI_REMOTE_COMM) && !(h->caps & FI_LOCAL_COMM)) caps &= ~FI_LOCAL_COMM;
    if ((caps & (FI_MSG | FI_TAGGED)) && !(caps & (FI_SEND | FI_RECV))) caps |= FI_SEND | FI_RECV;
    if ((caps & FI_RMA) && !(caps & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)))
      caps |= FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  }

  int mr_mode = full;
  if (h->domain_attr) {
    const int user = h->domain_attr->mr_mode;
    if ((prov_mode & FI_MR_LOCAL) && !(user & FI_MR_LOCAL) && !(h->mode & kModeLocalMrLegacy))
      return "mr_mode lacks FI_MR_LOCAL (MOCKEFA_REQUIRE_MR_LOCAL=1)";
    if (user & kMrScalableLegacy) return "mr_mode FI_MR_SCALABLE";
    if (user & kMrBasicLegacy) {
      if (reduce_mr_mode(h->caps, prov_mode) & ~(kMrRequired | FI_MR_LOCAL))
        return "FI_MR_BASIC does not cover FI_MR_HMEM";
      mr_mode = kMrRequired;
    } else {
      const int need = reduce_mr_mode(h->caps, prov_mode);
      if ((user & need) != need) return "mr_mode lacks a bit the mock requires";
      mr_mode = ((user & full) == full) ? full : reduce_mr_mode(caps, user & full);
    }
    if ((user & FI_MR_LOCAL) || (prov_mode & FI_MR_LOCAL)) mr_mode |= FI_MR_LOCAL;
  } else if (p.require_mr_local) {
    mr_mode |= FI_MR_LOCAL;
  }
  if (full & kMrRmaTarget & ~mr_mode) caps &= ~(FI_REMOTE_READ | FI_REMOTE_WRITE);
  c->caps = caps;
  c->mr_mode = mr_mode;

  if (const fi_tx_attr* t = h->tx_attr) {
    if (t->caps & ~(kTxCaps & prov_caps)) return "tx_attr->caps";
    if (t->msg_order & ~kMsgOrder)
      return "tx_attr->msg_order beyond FI_ORDER_SAS (no RMA ordering)";
    if (t->comp_order) return "tx_attr->comp_order";
    if (t->inject_size > p.inject_size) return "tx_attr->inject_size";
    if (t->size > p.tx_size) return "tx_attr->size";
    if (t->iov_limit > kIovLimit) return "tx_attr->iov_limit";
    if (t->rma_iov_limit > kRmaIovLimit) return "tx_attr->rma_iov_limit";
    c->tx_msg_order = t->msg_order;
    c->tx_op_flags = t->op_flags;
    if (t->inject_size) c->inject_size = t->inject_size;
    if (t->size) c->tx_size = t->size;
    if (t->iov_limit) c->tx_iov = t->iov_limit;
    if (t->rma_iov_limit) c->rma_iov = t->rma_iov_limit;
  }
  if (const fi_rx_attr* r = h->rx_attr) {
    if (r->caps & ~(kRxCaps & prov_caps)) return "rx_attr->caps";
    if (r->msg_order & ~kMsgOrder) return "rx_attr->msg_order beyond FI_ORDER_SAS";
    if (r->comp_order) return "rx_attr->comp_order";
    if (r->size > p.rx_size) return "rx_attr->size";
    if (r->iov_limit > kIovLimit) return "rx_attr->iov_limit";
    c->rx_msg_order = r->msg_order;
    c->rx_op_flags = r->op_flags;
    if (r->size) c->rx_size = r->size;
    if (r->iov_limit) c->rx_iov = r->iov_limit;
  }
  if (const fi_ep_attr* e = h->ep_attr) {
    if (e->protocol != FI_PROTO_UNSPEC && e->protocol != FI_PROTO_EFA) return "ep_attr->protocol";
    if (e->max_msg_size > p.max_msg_size) return "ep_attr->max_msg_size";
    if (e->tx_ctx_cnt > 1 && e->tx_ctx_cnt != FI_SHARED_CONTEXT) return "ep_attr->tx_ctx_cnt";
    if (e->rx_ctx_cnt > 1 && e->rx_ctx_cnt != FI_SHARED_CONTEXT) return "ep_attr->rx_ctx_cnt";
    if (e->mem_tag_format) c->tag_format = e->mem_tag_format;
  }
  if (const fi_domain_attr* d = h->domain_attr) {
    if (d->control_progress == FI_PROGRESS_AUTO || d->data_progress == FI_PROGRESS_AUTO)
      return "FI_PROGRESS_AUTO (efa RDM is manual progress)";
  }
  return choose_domain_and_src(h, c);
}

fi_info* build_info(const Profile& p, const Chosen& c, int index, uint32_t version) {
  fi_info* fi = fi_allocinfo();
  if (!fi) return nullptr;
  fi->caps = c.caps;
  fi->mode = 0;
  fi->addr_format = FI_ADDR_EFA;
  auto* src = static_cast<EfaAddr*>(std::calloc(1, sizeof(EfaAddr)));
  domain_gid(index, src->gid);
  fi->src_addr = src;
  fi->src_addrlen = kAddrLen;

  fi_tx_attr* tx = fi->tx_attr;
  tx->caps = c.caps & kTxCaps;
  tx->op_flags = c.tx_op_flags;
  tx->msg_order = c.tx_msg_order;
  tx->inject_size = c.inject_size;
  tx->size = c.tx_size;
  tx->iov_limit = c.tx_iov;
  tx->rma_iov_limit = c.rma_iov;
  fi_rx_attr* rx = fi->rx_attr;
  rx->caps = c.caps & kRxCaps;
  rx->op_flags = c.rx_op_flags;
  rx->msg_order = c.rx_msg_order;
  rx->size = c.rx_size;
  rx->iov_limit = c.rx_iov;

  fi_ep_attr* ep = fi->ep_attr;
  ep->type = FI_EP_RDM;
  ep->protocol = FI_PROTO_EFA;
  ep->protocol_version = kProtoVersion;
  ep->max_msg_size = p.max_msg_size;
  ep->mem_tag_format = c.tag_format;
  ep->tx_ctx_cnt = 1;
  ep->rx_ctx_cnt = 1;

  fi_domain_attr* d = fi->domain_attr;
  d->name = strdup(domain_name(index).c_str());
  d->threading = c.threading;
  d->control_progress = FI_PROGRESS_MANUAL;
  d->data_progress = FI_PROGRESS_MANUAL;
  d->resource_mgmt = c.rm;
  d->av_type = FI_AV_TABLE;
  d->mr_mode = c.mr_mode;
  d->mr_key_size = kMrKeySize;
  d->cq_data_size = kCqDataSize;
  d->cq_cnt = 512;
  d->ep_cnt = 256;
  d->tx_ctx_cnt = 256;
  d->rx_ctx_cnt = 256;
  d->max_ep_tx_ctx = 1;
  d->max_ep_rx_ctx = 1;
  d->mr_iov_limit = kMrIovLimit;
  d->caps = kDomainCaps;
  d->mr_cnt = 262144;

  fi_fabric_attr* f = fi->fabric_attr;
  f->name = strdup(kFabricName);
  f->prov_version = kProvVersion;
  f->api_version = version;
  fi->nic = nic_alloc(index, p);
  return fi;
}

#if MOCKEFA_HAVE_DIRECT
// What an `efa-direct` entry adds to Chosen (efa-semantics §1.4).
struct DirectExtra {
  uint64_t mode = FI_CONTEXT2 | FI_RX_CQ_DATA;
  size_t max_msg_size = kDirectMtu;
  fi_progress control_progress = FI_PROGRESS_AUTO, data_progress = FI_PROGRESS_AUTO;
};

// The `efa-direct` entry's filter; null when the hints select it, else why not. Stricter than
// libfabric's generic rules where §1.4 leaves room: every mr_mode bit it needs must be offered.
const char* choose_direct(const Profile& p, const fi_info* h, Chosen* c, DirectExtra* x) {
  const bool rdma = p.nic_rdma_read && p.nic_rdma_write;       // RMA caps need both (§1.4)
  const uint64_t hmem = p.gdr == GdrMode::kP2p ? FI_HMEM : 0;  // HMEM needs P2P
  const uint64_t prov_caps = kDirectBaseCaps | (rdma ? kDirectRmaCaps : 0) | hmem;
  const uint64_t tx_caps = FI_MSG | FI_SEND | (rdma ? FI_RMA | FI_READ | FI_WRITE : 0) | hmem;
  const uint64_t rx_caps =
      FI_MSG | FI_RECV | FI_SOURCE | (rdma ? FI_RMA | FI_REMOTE_READ | FI_REMOTE_WRITE : 0) | hmem;
  c->tx_msg_order = c->rx_msg_order = 0;
  c->inject_size = kDirectInjectSize;
  c->tx_size = p.tx_size;
  c->rx_size = p.rx_size;
  c->tx_iov = c->rx_iov = kDirectIovLimit;
  c->tag_format = 0;
  if (!h) {
    c->caps = prov_caps & ~FI_HMEM;
    c->mr_mode = FI_MR_LOCAL | kMrRequired;
    x->max_msg_size = rdma ? std::max(kDirectMtu, kDirectMaxRdma) : kDirectMtu;
    return nullptr;
  }
  if (const char* why = choose_names(h, kDirectFabricName)) return why;
  if (h->caps & ~prov_caps)
    return "caps efa-direct lacks (TAGGED, ATOMIC, DIRECTED_RECV, MULTI_RECV, RMA without device "
           "RDMA read+write, HMEM without P2P, ...)";
  if (!(h->mode & FI_CONTEXT2)) return "mode lacks FI_CONTEXT2 (efa-direct requires it)";
  x->mode = FI_CONTEXT2 | (h->mode & FI_RX_CQ_DATA);

  uint64_t caps = prov_caps & ~FI_HMEM;
  if (h->caps) {
    caps = (h->caps & (prov_caps & ~(FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM))) | FI_LOCAL_COMM |
           FI_REMOTE_COMM | (h->caps & FI_SOURCE);
    if ((h->caps & FI_REMOTE_COMM) && !(h->caps & FI_LOCAL_COMM)) caps &= ~FI_LOCAL_COMM;
    if ((caps & FI_MSG) && !(caps & (FI_SEND | FI_RECV))) caps |= FI_SEND | FI_RECV;
    if ((caps & FI_RMA) && !(caps & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)))
      caps |= FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  }
  // A NIC without unsolicited write recv: write-with-immediate needs a posted receive, which
  // only an application that accepted FI_RX_CQ_DATA posts.
  if (p.no_unsolicited_write_recv && (caps & FI_RMA) && !(h->mode & FI_RX_CQ_DATA))
    return "FI_RMA without FI_RX_CQ_DATA in mode on a NIC without unsolicited write recv";
  const int need = FI_MR_LOCAL | kMrRequired | ((caps & FI_HMEM) ? FI_MR_HMEM : 0);
  if (h->domain_attr) {
    int user = h->domain_attr->mr_mode;
    if (user & kMrScalableLegacy) return "mr_mode FI_MR_SCALABLE";
    if (user & kMrBasicLegacy) user |= kMrRequired;
    // The FI_LOCAL_MR mode bit stands for FI_MR_LOCAL only in a hint that names no mr_mode bits
    // (libfabric's ofi_check_mr_mode; such a hint lacks the others here anyway): fabtests'
    // getinfo_mr_mode1 found the mock granting mr_mode bits the hint did not offer.
    if (user == 0 && (h->mode & kModeLocalMrLegacy)) user |= FI_MR_LOCAL;
    if ((user & need) != need)
      return "mr_mode lacks LOCAL, ALLOCATED, PROV_KEY, VIRT_ADDR (or HMEM with FI_HMEM)";
  }
  c->caps = caps;
  c->mr_mode = need;
  const size_t max_msg = (caps & FI_RMA) ? std::max(kDirectMtu, kDirectMaxRdma) : kDirectMtu;
  x->max_msg_size = max_msg;

  if (const fi_tx_attr* t = h->tx_attr) {
    if (t->caps & ~tx_caps) return "tx_attr->caps";
    if (t->msg_order) return "tx_attr->msg_order (efa-direct offers no ordering)";
    if (t->comp_order) return "tx_attr->comp_order";
    if (t->inject_size > kDirectInjectSize) return "tx_attr->inject_size > 32";
    if (t->size > p.tx_size) return "tx_attr->size";
    if (t->iov_limit > kDirectIovLimit) return "tx_attr->iov_limit > 2";
    if (t->rma_iov_limit > kRmaIovLimit) return "tx_attr->rma_iov_limit";
    c->tx_op_flags = t->op_flags;
    if (t->inject_size) c->inject_size = t->inject_size;
    if (t->size) c->tx_size = t->size;
    if (t->iov_limit) c->tx_iov = t->iov_limit;
    if (t->rma_iov_limit) c->rma_iov = t->rma_iov_limit;
  }
  if (const fi_rx_attr* r = h->rx_attr) {
    if (r->caps & ~rx_caps) return "rx_attr->caps";
    if (r->msg_order) return "rx_attr->msg_order (efa-direct offers no ordering)";
    if (r->comp_order) return "rx_attr->comp_order";
    if (r->size > p.rx_size) return "rx_attr->size";
    if (r->iov_limit > kDirectIovLimit) return "rx_attr->iov_limit > 2";
    c->rx_op_flags = r->op_flags;
    if (r->size) c->rx_size = r->size;
    if (r->iov_limit) c->rx_iov = r->iov_limit;
  }
  if (const fi_ep_attr* e = h->ep_attr) {
    if (e->protocol != FI_PROTO_UNSPEC && e->protocol != FI_PROTO_EFA) return "ep_attr->protocol";
    if (e->max_msg_size > max_msg)
      return "ep_attr->max_msg_size above the MTU (without FI_RMA) or max_rdma_size";
    if (e->tx_ctx_cnt > 1 && e->tx_ctx_cnt != FI_SHARED_CONTEXT) return "ep_attr->tx_ctx_cnt";
    if (e->rx_ctx_cnt > 1 && e->rx_ctx_cnt != FI_SHARED_CONTEXT) return "ep_attr->rx_ctx_cnt";
  }
  if (const fi_domain_attr* d = h->domain_attr) {
    // AUTO is the provider's level, the strictest there is: every progress hint passes
    // libfabric's check, and the hint's value is what comes back.
    if (d->control_progress != FI_PROGRESS_UNSPEC) x->control_progress = d->control_progress;
    if (d->data_progress != FI_PROGRESS_UNSPEC) x->data_progress = d->data_progress;
  }
  return choose_domain_and_src(h, c);
}

fi_info* build_direct_info(const Profile& p, const Chosen& c, const DirectExtra& x, int index,
                           uint32_t version) {
  fi_info* fi = build_info(p, c, index, version);
  if (!fi) return nullptr;
  fi->mode = x.mode;
  fi->tx_attr->caps = c.caps & (FI_MSG | FI_SEND | FI_RMA | FI_READ | FI_WRITE | FI_HMEM);
  fi->rx_attr->caps =
      c.caps & (FI_MSG | FI_RECV | FI_SOURCE | FI_RMA | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_HMEM);
  fi->ep_attr->max_msg_size = x.max_msg_size;
  fi->domain_attr->control_progress = x.control_progress;
  fi->domain_attr->data_progress = x.data_progress;
  std::free(fi->fabric_attr->name);
  fi->fabric_attr->name = strdup(kDirectFabricName);
  return fi;
}
#endif

int mock_getinfo_locked(uint32_t version, const fi_info* hints, fi_info** info) {
  *info = nullptr;
  const Profile p = read_profile();
  Chosen c;
  const char* why = choose(p, hints, &c);
#if MOCKEFA_HAVE_DIRECT
  Chosen dc;
  DirectExtra dx;
  const char* dwhy = choose_direct(p, hints, &dc, &dx);
  if (why && dwhy) {
    if (p.verbose)
      std::fprintf(stderr, "mockefa: fi_getinfo: no match: efa: %s; efa-direct: %s\n", why, dwhy);
    return -FI_ENODATA;
  }
  const Chosen& filter = why ? dc : c;  // both derive the NIC filters from the same hints
#else
  if (why) {
    if (p.verbose) std::fprintf(stderr, "mockefa: fi_getinfo: no match: %s\n", why);
    return -FI_ENODATA;
  }
  const Chosen& filter = c;
#endif
  fi_info* tail = nullptr;
  auto append = [&](fi_info* fi) {
    if (!fi) return false;
    if (tail)
      tail->next = fi;
    else
      *info = fi;
    tail = fi;
    return true;
  };
  auto selected = [&](int i) {
    if (filter.domain_filter && domain_name(i) != filter.domain_filter) return false;
    if (filter.src_filter) {
      uint8_t gid[16];
      domain_gid(i, gid);
      if (std::memcmp(gid, filter.src_filter->gid, sizeof gid) != 0) return false;
    }
    return true;
  };
  bool ok = true;
#if MOCKEFA_HAVE_DIRECT
  // libfabric >= 2.1 lists one efa-direct entry per NIC first, then the efa entries.
  for (int i = 0; ok && !dwhy && i < p.ndomains; ++i)
    if (selected(i)) ok = append(build_direct_info(p, dc, dx, i, version));
#endif
  for (int i = 0; ok && !why && i < p.ndomains; ++i)
    if (selected(i)) ok = append(build_info(p, c, i, version));
  if (!ok) {
    fi_freeinfo(*info);
    *info = nullptr;
    return -FI_ENOMEM;
  }
  if (!*info) {
    if (p.verbose) std::fprintf(stderr, "mockefa: fi_getinfo: no domain matches the hints\n");
    return -FI_ENODATA;
  }
  return 0;
}

void mock_cleanup() { destroy_global(); }

fi_provider g_provider;

}  // namespace

void domain_gid(int index, uint8_t gid[16]) {
  // Link-local style like real EFA GIDs; the last two bytes make each mock NIC distinct.
  static const uint8_t kPrefix[14] = {0xfe, 0x80, 0,    0,    0,    0,    0,
                                      0,    0x04, 0xa1, 0xb5, 0xff, 0xfe, 0x7e};
  std::memcpy(gid, kPrefix, sizeof kPrefix);
  gid[14] = 0x10;
  gid[15] = static_cast<uint8_t>(index);
}

// EFA reads fi_getinfo's node as an IPv6 GID and its service as a QPN (efa_str_to_ep_addr): with
// FI_SOURCE the node selects the NICs whose GID it is; without, node and service are the
// destination every entry carries (a node that is not an IPv6 address: -FI_EINVAL, as EFA
// answers). fabtests' getinfo_no_hints5 and src_dest1 found the mock ignoring them.
int mock_getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
                 const fi_info* hints, fi_info** info) {
  Lock lk(g().mu);
  EfaAddr addr{};
  const bool have_addr = node && inet_pton(AF_INET6, node, addr.gid) == 1;
  if (!(flags & FI_SOURCE) && (node || service)) {
    if (!have_addr) return -FI_EINVAL;
    if (service) addr.qpn = static_cast<uint16_t>(std::atoi(service));
  }
  int rc = mock_getinfo_locked(version, hints, info);
  if (rc != 0) return rc;
  if ((flags & FI_SOURCE) && node) {
    // Only the NICs with that GID (none when the node is not an IPv6 address).
    fi_info** link = info;
    while (*link) {
      fi_info* cur = *link;
      const auto* src = static_cast<const EfaAddr*>(cur->src_addr);
      if (have_addr && src && std::memcmp(src->gid, addr.gid, sizeof addr.gid) == 0) {
        link = &cur->next;
        continue;
      }
      *link = cur->next;
      cur->next = nullptr;
      fi_freeinfo(cur);
    }
    if (!*info) return -FI_ENODATA;
    return 0;
  }
  const void* dest = nullptr;
  if (!(flags & FI_SOURCE) && (node || service))
    dest = &addr;
  else if (hints && hints->dest_addr && hints->dest_addrlen == kAddrLen)
    dest = hints->dest_addr;
  if (!dest) return 0;
  for (fi_info* cur = *info; cur; cur = cur->next) {
    void* d = std::malloc(kAddrLen);
    if (!d) {
      fi_freeinfo(*info);
      *info = nullptr;
      return -FI_ENOMEM;
    }
    std::memcpy(d, dest, kAddrLen);
    std::free(cur->dest_addr);
    cur->dest_addr = d;
    cur->dest_addrlen = kAddrLen;
  }
  return 0;
}

}  // namespace mockefa

using namespace mockefa;

MOCKEFA_EXPORT struct fi_provider* fi_prov_ini(void) {
  g();  // create the global state while libfabric still runs single-threaded
  g_nic_ops.size = sizeof(fi_ops);
  g_nic_ops.close = nic_close;
  g_nic_ops.bind = nic_enosys_bind;
  g_nic_ops.control = nic_control;
  g_nic_ops.ops_open = nic_enosys_ops_open;
  g_nic_ops.tostr = nic_tostr;
  g_nic_ops.ops_set = nic_enosys_ops_set;
  init_fabric_ops();
  init_cq_ops();
  init_eq_ops();
  init_mr_ops();
  init_ep_ops();
  init_msg_ops();
  init_rma_ops();
  init_stub_ops();
  g_provider.version = kProvVersion;
  g_provider.fi_version = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  g_provider.name = kProvName;
  g_provider.getinfo = mock_getinfo;
  g_provider.fabric = mock_fabric_open;
  g_provider.cleanup = mock_cleanup;
  return &g_provider;
}
