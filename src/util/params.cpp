#include "util/params.h"

#include <strings.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "util/log.h"

namespace nf {
namespace {

constexpr int kParamCount = static_cast<int>(ParamId::kCount);

const ParamDef kDefs[kParamCount] = {
    {ParamId::kProvider, "NCCL_FABRIC_PROVIDER", ParamType::kString, "", 0, 0,
     "libfabric provider to use (e.g. efa, 'tcp;ofi_rxm', shm); empty tries efa, "
     "'verbs;ofi_rxm', 'tcp;ofi_rxm', tcp in that order"},
    {ParamId::kDomain, "NCCL_FABRIC_DOMAIN", ParamType::kString, "", 0, 0,
     "comma-separated libfabric domain (NIC) names to use; empty uses every domain, loopback "
     "ones only when nothing else exists"},
    {ParamId::kConnectTimeout, "NCCL_FABRIC_CONNECT_TIMEOUT", ParamType::kInt, "120", 1, 86400,
     "seconds connect and accept wait for the peer's handshake before failing"},
    {ParamId::kMaxRecvs, "NCCL_FABRIC_MAX_RECVS", ParamType::kInt, "8", 1, 8,
     "largest grouped receive offered to NCCL (maxRecvs); 1 disables grouping"},
    {ParamId::kInject, "NCCL_FABRIC_INJECT", ParamType::kBool, "1", 0, 1,
     "send messages up to the provider's inject size with fi_tinject (no completion to reap)"},
    {ParamId::kCqBatch, "NCCL_FABRIC_CQ_BATCH", ParamType::kInt, "16", 1, 128,
     "completions read from the completion queue per progress call"},
    {ParamId::kTestDropDesc, "NCCL_FABRIC_TEST_DROP_DESC", ParamType::kBool, "0", 0, 1,
     "testing only: hand the provider no memory descriptors, breaking FI_MR_LOCAL on purpose so "
     "tests can show the mock provider's checker catches it"},
    {ParamId::kProtocol, "NCCL_FABRIC_PROTOCOL", ParamType::kString, "auto", 0, 0,
     "wire protocol: auto (RDMA where the provider offers RMA with remote CQ data, else "
     "SENDRECV), sendrecv (tagged messages) or rdma (receiver-driven RDMA writes)"},
    {ParamId::kEagerMax, "NCCL_FABRIC_EAGER_MAX", ParamType::kInt, "8192", 0, 65536,
     "RDMA protocol: largest message sent at once into the receiver's control buffers, without "
     "waiting for the receiver's clear-to-send; 0 disables eager sends"},
    {ParamId::kMinChunk, "NCCL_FABRIC_MIN_CHUNK", ParamType::kInt, "65536", 128, 1073741824,
     "RDMA protocol: smallest piece a message is split into to spread it over rails"},
    {ParamId::kRails, "NCCL_FABRIC_RAILS", ParamType::kInt, "1", 1, 4,
     "NICs (or endpoints) one NCCL device stands for; the RDMA protocol stripes large messages "
     "over them"},
    {ParamId::kTestCtsFault, "NCCL_FABRIC_TEST_CTS_FAULT", ParamType::kString, "none", 0, 0,
     "testing only: the receiver corrupts every clear-to-send it sends (none, size, count, addr, "
     "key) so tests can show the sender refuses it"},
    {ParamId::kGdr, "NCCL_FABRIC_GDR", ParamType::kString, "auto", 0, 0,
     "GPUDirect RDMA: auto (offer NCCL_PTR_CUDA where the provider registers GPU memory without "
     "CUDA calls of its own), off (host memory only), require (fail init without it)"},
    {ParamId::kDmabuf, "NCCL_FABRIC_DMABUF", ParamType::kString, "auto", 0, 0,
     "DMA-BUF registration of GPU memory: auto (where libfabric >= 1.20, the driver and the "
     "provider support it) or off"},
    {ParamId::kFlush, "NCCL_FABRIC_FLUSH", ParamType::kBool, "1", 0, 1,
     "GPUDirect flush: when NCCL asks (iflush), read a few bytes of the received GPU buffer "
     "through the NIC so its PCIe writes are visible to the GPU; 0 answers every iflush at once"},
    {ParamId::kMrCacheEntries, "NCCL_FABRIC_MR_CACHE_ENTRIES", ParamType::kInt, "1024", 0, 1048576,
     "registrations listed per NIC for sharing while held; 0 registers every regMr afresh"},
    {ParamId::kCudaLibrary, "NCCL_FABRIC_CUDA_LIBRARY", ParamType::kString, "libcuda.so.1", 0, 0,
     "the CUDA driver library the plugin loads at run time (name or path)"},
    {ParamId::kTestAssumeDmabuf, "NCCL_FABRIC_TEST_ASSUME_DMABUF", ParamType::kBool, "0", 0, 1,
     "testing only: treat the loaded libfabric as one with FI_MR_DMABUF (1.20+) and open the "
     "fabric at API 1.20, so tests can exercise DMA-BUF registration on the mock provider built "
     "against older headers"},
    {ParamId::kPlatform, "NCCL_FABRIC_PLATFORM", ParamType::kString, "auto", 0, 0,
     "platform row to use: auto (from the DMI product name), a row's name (e.g. p5.48xlarge), or "
     "none (generic defaults, no expectations)"},
    {ParamId::kNicGrouping, "NCCL_FABRIC_NIC_GROUPING", ParamType::kString, "auto", 0, 0,
     "how NICs become NCCL devices: auto (NICs serving the same GPUs become the rails of one "
     "device), none (one device per NIC), or a number of rails per device"},
    {ParamId::kTestDmiFile, "NCCL_FABRIC_TEST_DMI_FILE", ParamType::kString,
     "/sys/class/dmi/id/product_name", 0, 0,
     "testing only: the file the platform's DMI product name is read from"},
    {ParamId::kWriteChunk, "NCCL_FABRIC_WRITE_CHUNK", ParamType::kInt, "524288", 0, 1073741824,
     "RDMA protocol: a message larger than this goes as several writes in flight (at most 8), "
     "also on one rail; 0 writes it in one piece per rail"},
    {ParamId::kTuner, "NCCL_FABRIC_TUNER", ParamType::kString, "auto", 0, 0,
     "the tuner: auto (rules file first, then the cost model), model (the model only), rules "
     "(the rules file only; NCCL decides elsewhere) or off (NCCL decides everything)"},
    {ParamId::kTunerRules, "NCCL_FABRIC_TUNER_RULES", ParamType::kString, "", 0, 0,
     "path of a tuner rules file (docs/tuning.md#rules); empty for none"},
    {ParamId::kTunerDump, "NCCL_FABRIC_TUNER_DUMP", ParamType::kString, "", 0, 0,
     "path the tuner writes its full decision table to, as CSV, at each communicator's init "
     "(%h: host name, %p: process id); empty for none"},
    {ParamId::kTunerNetLatency, "NCCL_FABRIC_TUNER_NET_LATENCY", ParamType::kInt, "0", 0, 100000,
     "the tuner model's latency of one network step, microseconds; 0 picks it from the provider "
     "(EFA 20, or 25 without GPUDirect; TCP 40)"},
    {ParamId::kSpeed, "NCCL_FABRIC_SPEED", ParamType::kInt, "0", 0, 10000000,
     "link speed of each NIC in Mb/s, reported to NCCL (a device of several NICs reports their "
     "sum); 0 takes the provider's or the OS's figure, else the platform row's (EFA), else a "
     "per-provider default (EFA and verbs 100000, shm 100000, others 10000)"},
    {ParamId::kTestEagerFault, "NCCL_FABRIC_TEST_EAGER_FAULT", ParamType::kString, "none", 0, 0,
     "testing only: ahead makes the sender number every eager message 2^20 further than it is, "
     "so tests can show the receiver refuses a message far ahead of its receives"},
    {ParamId::kPeerTimeout, "NCCL_FABRIC_PEER_TIMEOUT", ParamType::kInt, "10", 0, 3600,
     "seconds a peer with requests pending toward it may leave a liveness probe unanswered before "
     "every request with it fails; a close waits at most half of it for the provider; 0 turns "
     "probing off"},
    {ParamId::kApiVersion, "NCCL_FABRIC_API_VERSION", ParamType::kString, "auto", 0, 0,
     "libfabric API version asked of fi_getinfo: auto (the newest both the plugin's headers and "
     "the loaded library know, then older ones where the provider refuses) or MAJOR.MINOR, the "
     "newest to ask for (>= 1.17)"},
    {ParamId::kStats, "NCCL_FABRIC_STATS", ParamType::kString, "", 0, 0,
     "path of a JSON statistics file per process (%h: host name, %p: pid), written at finalize "
     "and every NCCL_FABRIC_STATS_INTERVAL seconds; empty: none"},
    {ParamId::kStatsInterval, "NCCL_FABRIC_STATS_INTERVAL", ParamType::kInt, "30", 0, 86400,
     "seconds between two writes of the statistics file while the process runs; 0: only at "
     "finalize"},
    {ParamId::kStallWarn, "NCCL_FABRIC_STALL_WARN", ParamType::kInt, "60", 0, 86400,
     "seconds a comm may have requests pending without completing anything before one WARN "
     "names the peer, the oldest request's state, size and age, and the comm's counters; 0: off"},
    {ParamId::kRailId, "NCCL_FABRIC_RAIL_ID", ParamType::kString, "auto", 0, 0,
     "railId reported to NCCL >= 2.30 (net ABI v12): auto (the device's index where the platform "
     "row says the fabric is rail-aligned, else undefined), none (undefined), or a "
     "comma-separated list of ids, one per device"},
    {ParamId::kPlaneId, "NCCL_FABRIC_PLANE_ID", ParamType::kString, "auto", 0, 0,
     "planeId reported to NCCL >= 2.30 (net ABI v12): auto or none (undefined: no NIC of ours "
     "has planes), or a comma-separated list of ids, one per device"},
    {ParamId::kNetAttr, "NCCL_FABRIC_NET_ATTR", ParamType::kBool, "1", 0, 1,
     "act on NCCL's per-communicator hints (setNetAttr, NCCL >= 2.28): with as many concurrent "
     "peers as rails, a large RDMA message stays on one rail instead of being cut over all"},
    {ParamId::kEarlyCompletion, "NCCL_FABRIC_EARLY_COMPLETION", ParamType::kString, "auto", 0, 0,
     "RDMA receives NCCL marks NCCL_NET_OPTIONAL_RECV_COMPLETION (LL, LL128) are reported done "
     "once their clear-to-send has left, where no eager message can come: auto (where writes "
     "land without the receiver's progress: EFA with device RDMA writes), on, off"},
    {ParamId::kEfaFabric, "NCCL_FABRIC_EFA_FABRIC", ParamType::kString, "auto", 0, 0,
     "which fabric of a provider that lists libfabric 2.1's efa-direct: auto (efa-direct where it "
     "grants RMA writes with remote CQ data and the protocol needs no tagged messages, else efa), "
     "efa, or efa-direct (fail without it)"},
    {ParamId::kCompactEager, "NCCL_FABRIC_COMPACT_EAGER", ParamType::kBool, "1", 0, 1,
     "RDMA protocol: a receiver grants compact eager messages (NCCL's payload alone, one piece, "
     "its header in 8 bytes of remote CQ data) where the provider carries 8 bytes (tcp;ofi_rxm, "
     "shm; not EFA's 4); 0: every eager message carries its 16-byte header"},
};

// String parameters that take one of a fixed set of values.
const char* const* choices_of(ParamId id) {
  static const char* const kProtocols[] = {"auto", "sendrecv", "rdma", nullptr};
  static const char* const kCtsFaults[] = {"none", "size", "count", "addr", "key", nullptr};
  static const char* const kEagerFaults[] = {"none", "ahead", nullptr};
  static const char* const kGdrModes[] = {"auto", "off", "require", nullptr};
  static const char* const kDmabufModes[] = {"auto", "off", nullptr};
  static const char* const kTunerModes[] = {"auto", "model", "rules", "off", nullptr};
  static const char* const kOnOffAuto[] = {"auto", "on", "off", nullptr};
  static const char* const kEfaFabrics[] = {"auto", "efa", "efa-direct", nullptr};
  switch (id) {
    case ParamId::kEfaFabric: return kEfaFabrics;
    case ParamId::kEarlyCompletion: return kOnOffAuto;
    case ParamId::kTuner: return kTunerModes;
    case ParamId::kGdr: return kGdrModes;
    case ParamId::kDmabuf: return kDmabufModes;
    case ParamId::kProtocol: return kProtocols;
    case ParamId::kTestCtsFault: return kCtsFaults;
    case ParamId::kTestEagerFault: return kEagerFaults;
    default: return nullptr;
  }
}

bool parse_bool(const char* s, int64_t* out) {
  static const char* const kTrue[] = {"1", "true", "yes", "on"};
  static const char* const kFalse[] = {"0", "false", "no", "off"};
  for (const char* t : kTrue)
    if (strcasecmp(s, t) == 0) {
      *out = 1;
      return true;
    }
  for (const char* f : kFalse)
    if (strcasecmp(s, f) == 0) {
      *out = 0;
      return true;
    }
  return false;
}

}  // namespace

const ParamDef* param_defs(int* count) {
  *count = kParamCount;
  return kDefs;
}

const ParamDef& param_def(ParamId id) { return kDefs[static_cast<int>(id)]; }

bool parse_param(const ParamDef& def, const char* text, int64_t* int_out, std::string* str_out,
                 std::string* error) {
  char buf[512];
  switch (def.type) {
    case ParamType::kString: {
      const char* const* choices = choices_of(def.id);
      if (choices == nullptr) {
        *str_out = text;
        return true;
      }
      std::string list;
      for (const char* const* c = choices; *c != nullptr; ++c) {
        if (strcasecmp(text, *c) == 0) {
          *str_out = *c;
          return true;
        }
        list += list.empty() ? "" : ", ";
        list += *c;
      }
      snprintf(buf, sizeof(buf), "%s='%s' is not one of: %s", def.name, text, list.c_str());
      *error = buf;
      return false;
    }
    case ParamType::kBool:
      if (parse_bool(text, int_out)) return true;
      snprintf(buf, sizeof(buf), "%s='%s' is not a boolean (use 0/1, true/false, yes/no, on/off)",
               def.name, text);
      *error = buf;
      return false;
    case ParamType::kInt: {
      errno = 0;
      char* end = nullptr;
      long long v = strtoll(text, &end, 0);
      if (errno != 0 || end == text || *end != '\0') {
        snprintf(buf, sizeof(buf), "%s='%s' is not an integer (expected %lld..%lld)", def.name,
                 text, static_cast<long long>(def.min), static_cast<long long>(def.max));
        *error = buf;
        return false;
      }
      if (v < def.min || v > def.max) {
        snprintf(buf, sizeof(buf), "%s=%lld is out of range (expected %lld..%lld)", def.name, v,
                 static_cast<long long>(def.min), static_cast<long long>(def.max));
        *error = buf;
        return false;
      }
      *int_out = v;
      return true;
    }
  }
  *error = "unknown parameter type";
  return false;
}

Params::Params() {
  for (int i = 0; i < kParamCount; ++i) {
    std::string unused;
    ints_[i] = 0;
    // Defaults are part of the table and a unit test parses every one of them.
    parse_param(kDefs[i], kDefs[i].default_value, &ints_[i], &strs_[i], &unused);
  }
}

Status Params::set(ParamId id, const char* text) {
  const int i = static_cast<int>(id);
  std::string error;
  int64_t iv = ints_[i];
  std::string sv = strs_[i];
  if (!parse_param(kDefs[i], text, &iv, &sv, &error)) {
    NF_WARN("bad parameter: %s", error.c_str());
    return Status::kInvalidUsage;
  }
  ints_[i] = iv;
  strs_[i] = sv;
  return Status::kOk;
}

Status Params::load_from_env() {
  Status result = Status::kOk;
  for (int i = 0; i < kParamCount; ++i) {
    const char* v = getenv(kDefs[i].name);
    if (v == nullptr) continue;
    // Report every bad value, not only the first, so one run shows the user all of them.
    if (set(kDefs[i].id, v) != Status::kOk)
      result = Status::kInvalidUsage;
    else
      NF_INFO(kSubsysEnv, "%s set by environment to %s", kDefs[i].name, v);
  }
  return result;
}

}  // namespace nf
