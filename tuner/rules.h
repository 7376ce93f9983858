// The tuner's rules file (NCCL_FABRIC_TUNER_RULES): one rule per line, first match wins.
// docs/tuning.md#rules has the grammar; in short, nine whitespace-separated columns:
//
//   # coll      size       nodes  ranks  rpn  algo  proto   channels  chunk
//   allreduce   [0,64K)    *      *      *    tree  ll      *         *
//   allreduce   [64K,4M)   2      16     8    ring  ll128   8         *
//   *           [4M,*)     2-16   *      8    ring  simple  *         512K
//
// coll: broadcast reduce allgather reducescatter allreduce or *. size: a half-open interval
// [lo,hi) of bytes with K/M/G (powers of 1024) suffixes, hi may be * (no upper bound); * alone is
// any size. nodes, ranks, rpn (ranks per node): * or N or A-B (inclusive). algo: tree ring
// collnet_direct collnet_chain nvls nvls_tree pat or * (leave it to the model/NCCL). proto: ll
// ll128 simple or *. channels: * or 1..64. chunk: * or a size (v6 getChunkSize).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace nf {
namespace tuner {

constexpr int kNumColls = 5;               // ncclFuncBroadcast..ncclFuncAllReduce
constexpr int kNumAlgos = 7;               // NCCL_NUM_ALGORITHMS
constexpr int kNumProtos = 3;              // NCCL_NUM_PROTOCOLS
constexpr int kAny = -1;                   // "*" for coll, algo, proto, channels
constexpr uint64_t kNoLimit = UINT64_MAX;  // "*" as an upper bound
constexpr int kMaxChannels = 64;

struct IntRange {  // inclusive; * is [0, INT32_MAX]
  int64_t lo = 0;
  int64_t hi = INT32_MAX;
  bool any() const { return lo == 0 && hi == INT32_MAX; }
  bool contains(int64_t v) const { return v >= lo && v <= hi; }
};

struct Rule {
  int coll = kAny;              // ncclFunc_t value 0..4, or kAny
  uint64_t size_lo = 0;         // bytes, inclusive
  uint64_t size_hi = kNoLimit;  // bytes, exclusive; kNoLimit for *
  IntRange nodes, ranks, rpn;
  int algo = kAny;      // NCCL_ALGO_* value, or kAny
  int proto = kAny;     // NCCL_PROTO_* value, or kAny
  int channels = kAny;  // 1..64, or kAny
  uint64_t chunk = 0;   // bytes; 0 for *
  int line = 0;         // where it came from (0: made by a program)
  std::string comment;  // written after the rule by format_rules; never parsed back
};

// Names as the rules file and NCCL's logs spell them.
const char* coll_name(int coll);    // "allreduce", ... "*" for kAny
const char* algo_name(int algo);    // "tree", ... "*"
const char* proto_name(int proto);  // "ll", "ll128", "simple", "*"
// "ring/ll128"; "-" when algo < 0 (no pair).
std::string pair_name(int algo, int proto);
int coll_from_name(const std::string& s);   // -2 when unknown; NCCL spellings also accepted
int algo_from_name(const std::string& s);   // -2 when unknown (case-insensitive)
int proto_from_name(const std::string& s);  // -2 when unknown (case-insensitive)

// "64K", "4M", "1G", "123" -> bytes; false on anything else (overflow included).
bool parse_size(const std::string& s, uint64_t* out);
// The shortest exact spelling: 65536 -> "64K", 1000 -> "1000".
std::string format_size(uint64_t bytes);

// Parses a whole file's text. On the first bad line: kInvalidArgument and *error =
// "<origin>:<line>: <problem>". Empty and '#' lines are skipped.
Status parse_rules(const std::string& text, const std::string& origin, std::vector<Rule>* out,
                   std::string* error);
Status load_rules_file(const std::string& path, std::vector<Rule>* out, std::string* error);
// Text parse_rules reads back to the same rules (a header comment first).
std::string format_rules(const std::vector<Rule>& rules, const std::string& header);

}  // namespace tuner
}  // namespace nf
