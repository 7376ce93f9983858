// The NCCL_FABRIC_* parameter registry: every parameter's name, type, default, range and a
// one-line doc live in one table (params.cpp). docs/configuration.md is checked against it.
#pragma once
#include <cstdint>
#include <string>

#include "util/status.h"

namespace nf {

enum class ParamType { kInt, kBool, kString };

// Set by the net plugin at init, read by the tuner (which may be another library in the same
// process): "set-proto" when the plugin set NCCL_PROTO=^LL128 because the provider cannot order
// 128-byte lines, "user-proto" when the user's NCCL_PROTO stood. Not a user setting.
constexpr const char* kLl128OffEnv = "NCCL_FABRIC_INTERNAL_LL128_OFF";

enum class ParamId : int {
  kProvider,
  kDomain,
  kConnectTimeout,
  kMaxRecvs,
  kInject,
  kCqBatch,
  kTestDropDesc,
  kProtocol,
  kEagerMax,
  kMinChunk,
  kRails,
  kTestCtsFault,
  kGdr,
  kDmabuf,
  kFlush,
  kMrCacheEntries,
  kCudaLibrary,
  kTestAssumeDmabuf,
  kPlatform,
  kNicGrouping,
  kTestDmiFile,
  kWriteChunk,
  kTuner,
  kTunerRules,
  kTunerDump,
  kTunerNetLatency,
  kSpeed,
  kTestEagerFault,
  kPeerTimeout,
  kApiVersion,
  kStats,
  kStatsInterval,
  kStallWarn,
  kRailId,
  kPlaneId,
  kNetAttr,
  kEarlyCompletion,
  kEfaFabric,
  kCompactEager,
  kCount
};

struct ParamDef {
  ParamId id;
  const char* name;
  ParamType type;
  const char* default_value;
  int64_t min;  // kInt only
  int64_t max;  // kInt only
  const char* doc;
};

// The registry, in ParamId order.
const ParamDef* param_defs(int* count);
const ParamDef& param_def(ParamId id);

// Parses one value as the definition says. On failure, writes a message that names the parameter,
// the value and what was expected into *error.
bool parse_param(const ParamDef& def, const char* text, int64_t* int_out, std::string* str_out,
                 std::string* error);

// A snapshot of every parameter, read from the environment once per plugin init.
class Params {
 public:
  Params();  // defaults
  // Reads the environment; a bad value is logged by name and fails with kInvalidUsage.
  Status load_from_env();
  // Sets one value from text, as if it came from the environment (tests, tools).
  Status set(ParamId id, const char* text);

  int64_t get_int(ParamId id) const { return ints_[static_cast<int>(id)]; }
  bool get_bool(ParamId id) const { return ints_[static_cast<int>(id)] != 0; }
  const std::string& get_str(ParamId id) const { return strs_[static_cast<int>(id)]; }

 private:
  int64_t ints_[static_cast<int>(ParamId::kCount)];
  std::string strs_[static_cast<int>(ParamId::kCount)];
};

}  // namespace nf
