// The one internal tuner every exported ncclTunerPlugin_vX forwards to (src/api/tuner_exports.cpp).
// A context per communicator, immutable after init: getCollInfo and getChunkSize take no lock,
// allocate nothing and log nothing, and may run on several threads for different communicators.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nccl/tuner.h"
#include "tuner/model.h"
#include "tuner/rules.h"

namespace nf {
namespace tuner {

enum class Mode { kAuto, kModel, kRules, kOff };

// What init is given, whichever ABI version called.
struct InitArgs {
  size_t n_ranks = 1;
  size_t n_nodes = 1;
  int ranks_per_node = 0;                        // 0: unknown (v2-v4), taken as ranks / nodes
  ncclTunerConstants_v5_t* constants = nullptr;  // v5+: NCCL's, edited in place
  uint64_t comm_id = 0;
};

// A rule that applies to this communicator's shape (the shape columns are settled at init).
struct ActiveRule {
  uint64_t size_lo, size_hi;
  int8_t algo, proto;
  int channels;
  uint64_t chunk;
  int index;  // into the rule counters and rule_lines_
};

class Tuner {
 public:
  // Never fails: a bad parameter or rules file gives a context that leaves everything to NCCL,
  // with a WARN that says why (NCCL would otherwise fail communicator creation).
  static Tuner* create(const InitArgs& args);

  // table: NCCL's contiguous float[num_algo][num_proto]. Sets the chosen cell to 0.0 and, when a
  // rule says so, *n_channels; never touches an ignored cell or anything outside the table.
  void get_coll_info(int coll, size_t n_bytes, float* table, int num_algo, int num_proto,
                     int* n_channels) const;
  // v2: the same decision without a table; -1 when the tuner has no opinion.
  void pick_v2(int coll, size_t n_bytes, int collnet_support, int nvls_support, int* algo,
               int* proto, int* n_channels) const;
  // v6: the chunk size for the pair NCCL settled on: a matching rule's; else, from the model,
  // NCCL's Simple chunk lowered for Ring and Tree across nodes so each step pipelines (never
  // below chunk_floor(), never above NCCL's); else *chunk untouched.
  void get_chunk_size(int coll, size_t n_bytes, int algo, int proto, int n_channels,
                      size_t* chunk) const;

  ~Tuner();  // logs usage_lines()

 private:
  Tuner() = default;
  // The INFO table at init (one line per collective) and the NCCL_FABRIC_TUNER_DUMP CSV.
  std::vector<std::string> summary_lines() const;
  std::string dump_csv() const;
  // What decided the calls so far, per rule line and per model pair.
  std::vector<std::string> usage_lines() const;
  // The first rule for (coll, size) whose pair is available in table (stride num_proto, within
  // num_algo x num_proto); NULL when none. *algo/*proto: the pair it picks, -1 if it picks none.
  const ActiveRule* match_rule(int coll, uint64_t n_bytes, const float* table, int num_algo,
                               int num_proto, int* algo, int* proto) const;

  Mode mode_ = Mode::kOff;
  bool use_model_ = false;
  bool ll128_off_ = false;        // LL128 is never usable: nodes > 1 and the provider cannot order
                                  // 128-byte lines (kLl128OffEnv)
  bool user_algo_proto_ = false;  // NCCL_ALGO or NCCL_PROTO set: those are NCCL's
  uint64_t chunk_floor_ = 0;      // bytes one network step's latency is worth; 0: no model chunks
  Facts facts_;
  CommShape shape_;
  NcclModel model_{};
  Decisions decisions_;
  std::vector<ActiveRule> rules_[kNumColls];
  std::string rules_path_;
  // Relaxed counters: one add per call, no lock; read at finalize.
  std::vector<int> rule_lines_;                         // index -> line in the file
  std::unique_ptr<std::atomic<uint64_t>[]> rule_hits_;  // per rule index
  mutable std::atomic<uint64_t> model_hits_[kNumAlgos * kNumProtos] = {};
  mutable std::atomic<uint64_t> nccl_calls_{0};  // calls the tuner left to NCCL
};

// "auto", "model", "rules", "off".
const char* mode_name(Mode m);

}  // namespace tuner
}  // namespace nf
