// Configuration from the environment, the violation/fault counters, EFA error tables and the
// exported C API for tests.
#include <arpa/inet.h>

#include <strings.h>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "mock_internal.h"

namespace mockefa {

namespace {
// Created by fi_prov_ini (single-threaded inside libfabric's init) and freed by the provider's
// cleanup, which fi_fini calls just before it unloads us: a function-local static would be
// destroyed at dlclose/exit in an order nobody controls, and a never-freed pointer would show
// up as a leak once the library is unmapped.
Global* g_global = nullptr;
}  // namespace

Global& g() {
  if (!g_global) g_global = new Global();
  return *g_global;
}

void destroy_global() {
  delete g_global;
  g_global = nullptr;
}

namespace {

const char* const kViolationNames[] = {
    "no_desc",        "bad_desc",     "desc_range",  "rma_key",         "rma_bounds",
    "rma_access",     "cq_data",      "msg_size",    "inject_size",     "iov_limit",
    "ctx_reuse",      "bad_addr",     "not_enabled", "missing_cap",     "mr_in_use",
    "writedata_size", "unsupported",  "opt_state",   "busy_close",      "dmabuf_fd",
    "dmabuf_range",   "no_eq",        "api_version", "device_rdma_env", "no_context",
    "ctx_clobbered",  "unknown_peer", "write_recv",  "fabric_mismatch",
};
const char* const kFaultNames[] = {
    "eagain",     "error",        "unreachable", "cq_delay", "cq_reorder",
    "wire_delay", "wire_reorder", "chunked",     "eq_error",
};
static_assert(sizeof kViolationNames / sizeof kViolationNames[0] == MOCKEFA_V_COUNT,
              "one name per violation kind");
static_assert(sizeof kFaultNames / sizeof kFaultNames[0] == MOCKEFA_F_COUNT,
              "one name per fault kind");
static_assert(MOCKEFA_V_COUNT <= MOCKEFA_MAX_KINDS && MOCKEFA_F_COUNT <= MOCKEFA_MAX_KINDS,
              "counter arrays");

bool env_flag(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  return !(std::strcmp(v, "0") == 0 || strcasecmp(v, "no") == 0 || strcasecmp(v, "false") == 0);
}

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 0);
  if (errno || !end || *end || *v == '-') {
    // A silently ignored knob would make a fault test pass for the wrong reason.
    std::fprintf(stderr, "mockefa: ignoring %s=%s (not a non-negative integer)\n", name, v);
    return dflt;
  }
  return x;
}

const char* env_str(const char* name, const char* dflt) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : dflt;
}

// One of `choices` (case-insensitive), as its index; anything else is reported and gives 0.
int env_choice(const char* name, std::initializer_list<const char*> choices) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  int i = 0;
  for (const char* c : choices) {
    if (strcasecmp(v, c) == 0) return i;
    ++i;
  }
  std::fprintf(stderr, "mockefa: ignoring %s=%s (not one of the known values)\n", name, v);
  return 0;
}

// libfabric's boolean parameter syntax (fi_param_get_bool): -1 unset, 0, 1, or 2 = not a boolean.
int env_fi_bool(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return -1;
  for (const char* t : {"1", "true", "yes", "on"})
    if (strcasecmp(v, t) == 0) return 1;
  for (const char* f : {"0", "false", "no", "off"})
    if (strcasecmp(v, f) == 0) return 0;
  return 2;
}

// p4d's four NICs sit on these PCI buses; more NICs get made-up buses above them.
struct PciAddr {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
};

// Mock NIC `index`'s PCI address: the index-th entry of MOCKEFA_PCI_ADDRS (a comma-separated list
// of dddd:bb:dd.f, for tests that pair the mock with an hwloc topology), else p4d's four EFA
// addresses (bus 0x10, 0x20, 0x90, 0xa0, slot 0x1b), then buses 0xb0, 0xb2, ...
PciAddr nic_addr(int index) {
  PciAddr a;
  const char* list = std::getenv("MOCKEFA_PCI_ADDRS");
  for (int i = 0; list != nullptr && *list != '\0'; ++i) {
    const char* comma = std::strchr(list, ',');
    if (i == index) {
      PciAddr x;
      int used = 0;
      const std::string item(list, comma ? static_cast<size_t>(comma - list) : std::strlen(list));
      if (std::sscanf(item.c_str(), "%x:%x:%x.%x%n", &x.domain, &x.bus, &x.dev, &x.fn, &used) ==
              4 &&
          static_cast<size_t>(used) == item.size() && x.domain <= 0xffff && x.bus <= 0xff &&
          x.dev <= 0x1f && x.fn <= 7)
        return x;
      break;  // a bad entry: the default address
    }
    list = comma ? comma + 1 : nullptr;
  }
  static const uint8_t kP4dBuses[4] = {0x10, 0x20, 0x90, 0xa0};
  a.bus = index < 4 ? kP4dBuses[index] : static_cast<unsigned>(0xb0 + (index - 4) * 2) & 0xff;
  a.dev = 0x1b;
  return a;
}

// EFA's device name: rdmap<bus>s<slot>, in decimal (f<function> when not 0).
std::string device_name(int index) {
  const PciAddr a = nic_addr(index);
  char buf[32];
  std::snprintf(buf, sizeof buf, "rdmap%us%u", a.bus, a.dev);
  std::string s = buf;
  if (a.fn != 0) s += "f" + std::to_string(a.fn);
  return s;
}

}  // namespace

Profile read_profile() {
  Profile p;
  p.ndomains = static_cast<int>(env_u64("MOCKEFA_NDOMAINS", 1));
  if (p.ndomains < 1) p.ndomains = 1;
  if (p.ndomains > kMaxDomains) p.ndomains = kMaxDomains;
  const char* gdr = env_str("MOCKEFA_GDR", "p2p");
  if (strcasecmp(gdr, "nop2p") == 0)
    p.gdr = GdrMode::kNoP2p;
  else if (strcasecmp(gdr, "nocuda") == 0)
    p.gdr = GdrMode::kNoCuda;
  else
    p.gdr = GdrMode::kP2p;
  p.device = env_choice("MOCKEFA_DEVICE", {"new", "old"}) == 1 ? DeviceGen::kOld : DeviceGen::kNew;
  if (p.device == DeviceGen::kOld) {
    // First-generation device: RDMA read, no RDMA write (MOCKEFA_RMA does not apply).
    p.nic_rdma_read = true;
    p.nic_rdma_write = false;
  } else {
    p.nic_rdma_read = p.nic_rdma_write = env_choice("MOCKEFA_RMA", {"emulated", "device"}) == 1;
  }
  p.inorder128 =
      env_choice("MOCKEFA_INORDER128", {"auto", "no"}) == 1 ? InOrder128::kNo : InOrder128::kAuto;
  p.use_device_rdma_env = env_fi_bool("FI_EFA_USE_DEVICE_RDMA");
  if (p.use_device_rdma_env >= 0)
    p.use_device_rdma_env_text = std::getenv("FI_EFA_USE_DEVICE_RDMA");
  const char* hs = env_str("MOCKEFA_HANDSHAKE", "eagain");
  if (strcasecmp(hs, "queue") == 0)
    p.handshake = HandshakeMode::kQueue;
  else if (strcasecmp(hs, "none") == 0)
    p.handshake = HandshakeMode::kNone;
  else
    p.handshake = HandshakeMode::kEagain;
  p.require_mr_local = env_flag("MOCKEFA_REQUIRE_MR_LOCAL", false);
  p.legacy_opts = env_flag("MOCKEFA_LEGACY_OPTS", false);
  p.dmabuf = env_flag("MOCKEFA_DMABUF", true);
  p.max_msg_size = env_u64("MOCKEFA_MAX_MSG_SIZE", SIZE_MAX);
  p.inject_size = env_u64("MOCKEFA_INJECT_SIZE", 4096);
  p.eager_size = env_u64("MOCKEFA_EAGER_SIZE", 8192);
  p.tx_size = env_u64("MOCKEFA_TX_SIZE", 4096);
  p.rx_size = env_u64("MOCKEFA_RX_SIZE", 8192);
  if (p.tx_size == 0) p.tx_size = 1;
  if (p.rx_size == 0) p.rx_size = 1;
  p.max_writedata = env_u64("MOCKEFA_MAX_WRITEDATA", size_t{1} << 30);
  p.unreach_polls = env_u64("MOCKEFA_UNREACH_POLLS", 64);
  if (p.unreach_polls == 0) p.unreach_polls = 1;
  p.rnr_delay_us = env_u64("MOCKEFA_RNR_DELAY_US", 1000);
  p.ctx_reuse = env_flag("MOCKEFA_CTX_REUSE", false);
  p.net = strcasecmp(env_str("MOCKEFA_NET", ""), "udp") == 0;
  {
    in_addr a{};
    const char* ip = env_str("MOCKEFA_NET_IP", "127.0.0.1");
    if (inet_pton(AF_INET, ip, &a) == 1) p.net_ip = ntohl(a.s_addr);
  }
  p.net_give_up_ms = env_u64("MOCKEFA_NET_GIVE_UP_MS", 5000);
  p.net_reasm_kib = env_u64("MOCKEFA_NET_REASM_KIB", 262144);
  p.net_loss = static_cast<double>(std::min<uint64_t>(env_u64("MOCKEFA_NET_LOSS", 0), 90)) / 100.0;
  p.net_dup = static_cast<double>(std::min<uint64_t>(env_u64("MOCKEFA_NET_DUP", 0), 90)) / 100.0;
  p.unexpected_limit = env_u64("MOCKEFA_UNEXPECTED_LIMIT", 8192);
  p.write_event_context = env_u64("MOCKEFA_WRITE_EVENT_CONTEXT", 0) != 0;
  p.write_len_bits = static_cast<unsigned>(env_u64("MOCKEFA_WRITE_LEN_BITS", 0));
  if (p.write_len_bits >= 64) p.write_len_bits = 0;
  p.verbose = env_flag("MOCKEFA_VERBOSE", false);
  p.abort_on_violation = env_flag("MOCKEFA_ABORT_ON_VIOLATION", false);
  p.no_unsolicited_write_recv = env_flag("MOCKEFA_NO_UNSOLICITED_WRITE_RECV", false);
  p.direct_reorder = env_flag("MOCKEFA_DIRECT_REORDER", true);
  return p;
}

mockefa_faults faults_from_env() {
  mockefa_faults f{};
  f.eagain_every = env_u64("MOCKEFA_EAGAIN_EVERY", 0);
  f.error_every = env_u64("MOCKEFA_ERROR_EVERY", 0);
  f.error_prov_errno = static_cast<int32_t>(env_u64("MOCKEFA_ERROR_PROV_ERRNO", kEfaBadStatus));
  f.cq_delay = static_cast<uint32_t>(env_u64("MOCKEFA_CQ_DELAY", 0));
  f.cq_reorder = env_flag("MOCKEFA_CQ_REORDER", false) ? 1 : 0;
  f.wire_delay = static_cast<uint32_t>(env_u64("MOCKEFA_WIRE_DELAY", 0));
  f.wire_reorder = env_flag("MOCKEFA_WIRE_REORDER", false) ? 1 : 0;
  f.eagain_needs_poll = env_flag("MOCKEFA_EAGAIN_NEEDS_POLL", true) ? 1 : 0;
  f.unreachable_after = env_u64("MOCKEFA_UNREACHABLE_AFTER", MOCKEFA_NEVER);
  f.land_chunk = env_u64("MOCKEFA_LAND_CHUNK", 0);
  f.hold_send_completions = env_flag("MOCKEFA_HOLD_SEND_COMPLETIONS", false) ? 1 : 0;
  f.seed = env_u64("MOCKEFA_SEED", 1);
  f.eq_error_after = env_u64("MOCKEFA_EQ_ERROR_AFTER", MOCKEFA_NEVER);
  return f;
}

mockefa_faults faults_for_new_endpoint() {
  return g().faults_override ? g().faults_override_value : faults_from_env();
}

std::string domain_name(int index) { return device_name(index) + "-rdm"; }

int domain_index(const char* name, int ndomains) {
  if (!name) return -1;
  for (int i = 0; i < ndomains; ++i)
    if (domain_name(i) == name) return i;
  return -1;
}

void nic_facts(int index, mockefa_nic_info* out) {
  std::memset(out, 0, sizeof *out);
  const PciAddr a = nic_addr(index);
  std::snprintf(out->domain_name, sizeof out->domain_name, "%s", domain_name(index).c_str());
  std::snprintf(out->device_name, sizeof out->device_name, "%s", device_name(index).c_str());
  std::snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "%04x:%02x:%02x.%x", a.domain, a.bus,
                a.dev, a.fn);
  std::snprintf(out->pci_path, sizeof out->pci_path, "%s/pci%04x:%02x/%s",
                env_str("MOCKEFA_SYSFS_ROOT", "/sys/devices"), a.domain, a.bus, out->pci_bus_id);
  out->link_speed = env_u64("MOCKEFA_LINK_SPEED", kLinkSpeed);  // 0: a NIC that reports none
}

bool net_peer_of(const EfaAddr& a, net::Peer* out) {
  if (a.unused[6] != 'N' || a.unused[7] != 'T') return false;
  std::memcpy(&out->ip, a.unused, 4);
  std::memcpy(&out->port, a.unused + 4, 2);
  return true;
}

uint64_t steady_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

std::string addr_str(const EfaAddr& a) {
  char gid[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, a.gid, gid, sizeof gid);
  char buf[128];
  std::snprintf(buf, sizeof buf, "fi_addr_efa://[%s]:%u:%u", gid, unsigned{a.qpn},
                unsigned{a.qkey});
  return buf;
}

std::string err_text(const char* why, const EfaAddr& mine, const EfaAddr* peer) {
  // Shape of EFA's err_data: reason, then both addresses and host ids.
  std::string s = why;
  s += " My EFA addr: " + addr_str(mine) + " My host id: i-0000000000m0ckefa";
  s += " Peer EFA addr: " + (peer ? addr_str(*peer) : std::string("N/A")) + " Peer host id: N/A";
  if (s.size() > kErrDataMax - 1) s.resize(kErrDataMax - 1);
  return s;
}

int efa_errno_to_err(int prov_errno) {
  if (prov_errno < 0) return -prov_errno;
  switch (prov_errno) {
    case 1: return FI_ECANCELED;
    case 2:
    case 3:
    case 4:
    case 5:
    case 7:
    case 18: return FI_EINVAL;
    case 6:
    case 11: return FI_EMSGSIZE;
    case 8:
    case 13: return FI_ECONNABORTED;
    case 9:
    case 14: return FI_ENOTCONN;
    case 10: return FI_ENORX;
    case 12: return FI_EREMOTEIO;
    case 15: return FI_EHOSTUNREACH;
    default: return prov_errno >= 4096 ? FI_EOTHER : FI_EIO;
  }
}

const char* efa_strerror(int prov_errno) {
  switch (prov_errno) {
    case 1: return "Work request flushed while the queue pair was destroyed";
    case 2: return "Local queue pair operation error";
    case 3: return "Unsupported operation";
    case 4: return "Invalid address handle";
    case 5: return "Local memory protection error (invalid lkey)";
    case 6: return "Local message too long";
    case 7: return "Remote memory access error (invalid address, key or access rights)";
    case 8: return "Operation aborted by the remote peer";
    case 9: return "Destination queue pair is gone (peer endpoint closed)";
    case 10: return "Receiver not ready";
    case 11: return "Remote scatter-gather list too short";
    case 12: return "Unexpected status returned by the responder";
    case 13: return "Remote peer stopped responding";
    case 14: return "Remote peer has no address handle for this endpoint";
    case 15: return "Destination unreachable: no response was ever received";
    case kEfaErrPeerHandshake: return "Failure posting handshake to peer";
    default: break;
  }
  if (prov_errno < 0) return fi_strerror(-prov_errno);
  return "Unknown EFA error";
}

void violation(int kind, const char* fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  Global& gl = g();
  if (kind >= 0 && kind < MOCKEFA_V_COUNT) gl.counters.violations[kind]++;
  gl.counters.violations_total++;
  const char* name = (kind >= 0 && kind < MOCKEFA_V_COUNT) ? kViolationNames[kind] : "?";
  gl.last_violation = std::string(name) + ": " + text;
  if (env_flag("MOCKEFA_VERBOSE", false))
    std::fprintf(stderr, "mockefa: violation %s\n", gl.last_violation.c_str());
  if (env_flag("MOCKEFA_ABORT_ON_VIOLATION", false)) {
    std::fprintf(stderr, "mockefa: violation %s (MOCKEFA_ABORT_ON_VIOLATION)\n",
                 gl.last_violation.c_str());
    std::abort();
  }
}

void count_fault(int kind) {
  if (kind >= 0 && kind < MOCKEFA_F_COUNT) g().counters.faults[kind]++;
  g().counters.faults_total++;
}

Ep* ep_by_serial(uint64_t serial) {
  auto it = g().eps_by_serial.find(serial);
  return it == g().eps_by_serial.end() ? nullptr : it->second;
}

Ep* enabled_ep(const EfaAddr& a) {
  auto it = g().eps_by_addr.find(a);
  return it == g().eps_by_addr.end() ? nullptr : it->second;
}

void apply_faults(Ep* ep, const mockefa_faults& f) {
  ep->faults = f;
  ep->rng.seed(f.seed ^ (ep->serial * 0x9E3779B97F4A7C15ull));
  ep->post_attempts = ep->accepted_ops = ep->tx_ops = 0;
  ep->eagain_latched = false;
  ep->unreachable = false;
  ep->eq_error_fired = false;
}

}  // namespace mockefa

using namespace mockefa;

MOCKEFA_EXPORT void mockefa_get_counters(struct mockefa_counters* out) {
  if (!out) return;
  Lock lk(g().mu);
  *out = g().counters;
}

MOCKEFA_EXPORT void mockefa_reset_counters(void) {
  Lock lk(g().mu);
  mockefa_counters& c = g().counters;
  mockefa_counters kept = c;
  c = mockefa_counters{};
  c.open_fabrics = kept.open_fabrics;
  c.open_domains = kept.open_domains;
  c.open_avs = kept.open_avs;
  c.open_cqs = kept.open_cqs;
  c.open_eps = kept.open_eps;
  c.open_mrs = kept.open_mrs;
  c.open_eqs = kept.open_eqs;
  c.gpu_unflushed_mrs = kept.gpu_unflushed_mrs;
  g().last_violation.clear();
}

MOCKEFA_EXPORT const char* mockefa_violation_name(int kind) {
  return (kind >= 0 && kind < MOCKEFA_V_COUNT) ? kViolationNames[kind] : nullptr;
}

MOCKEFA_EXPORT const char* mockefa_fault_name(int kind) {
  return (kind >= 0 && kind < MOCKEFA_F_COUNT) ? kFaultNames[kind] : nullptr;
}

MOCKEFA_EXPORT size_t mockefa_last_violation(char* buf, size_t len) {
  Lock lk(g().mu);
  const std::string& s = g().last_violation;
  if (buf && len) std::snprintf(buf, len, "%s", s.c_str());
  return s.size();
}

MOCKEFA_EXPORT void mockefa_set_faults(const struct mockefa_faults* faults) {
  Lock lk(g().mu);
  g().faults_override = faults != nullptr;
  if (faults) g().faults_override_value = *faults;
}

MOCKEFA_EXPORT int mockefa_set_faults_all(const struct mockefa_faults* faults) {
  Lock lk(g().mu);
  mockefa_set_faults(faults);
  mockefa_faults f = faults_for_new_endpoint();
  int n = 0;
  for (auto& kv : g().eps_by_serial) {
    apply_faults(kv.second, f);
    if (!f.hold_send_completions) {
      for (Cq* cq : {kv.second->tx_cq, kv.second->rx_cq})
        if (cq != nullptr)
          for (CqEntry& e : cq->entries) e.held = false;
    }
    ++n;
  }
  return n;
}

MOCKEFA_EXPORT void mockefa_get_faults(struct mockefa_faults* out) {
  if (!out) return;
  Lock lk(g().mu);
  *out = faults_for_new_endpoint();
}

MOCKEFA_EXPORT uint32_t mockefa_last_api_version(void) {
  Lock lk(g().mu);
  return g().last_api_version;
}

MOCKEFA_EXPORT int mockefa_num_nics(void) { return read_profile().ndomains; }

MOCKEFA_EXPORT int mockefa_get_nic_info(int index, struct mockefa_nic_info* out) {
  if (!out || index < 0 || index >= read_profile().ndomains) return -1;
  nic_facts(index, out);
  return 0;
}

// An error completion that belongs to no operation (op_context NULL), as EFA reports some peer
// failures: one into the receive CQ of every enabled endpoint. Returns how many were written.
MOCKEFA_EXPORT int mockefa_inject_stray_error(int err, uint64_t flags, uint64_t data,
                                              uint64_t tag) {
  Lock lk(g().mu);
  int n = 0;
  for (auto& kv : g().eps_by_serial) {
    Ep* ep = kv.second;
    if (ep->rx_cq == nullptr) continue;
    CqEntry e;
    e.is_error = true;
    e.err = err;
    e.prov_errno = err;
    e.flags = flags;
    e.data = data;
    e.tag = tag;
    e.err_data = "injected error completion without an operation (mockefa_inject_stray_error)";
    complete_entry(ep, ep->rx_cq, std::move(e), true);
    ++n;
  }
  return n;
}
