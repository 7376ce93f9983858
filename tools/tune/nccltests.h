// Reading nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf,
// broadcast_perf, reduce_perf, ...) as printed, including mpirun --tag-output prefixes such as
// "[1,0]<stdout>:", and turning logs of forced NCCL_ALGO/NCCL_PROTO pairs into tuner rules.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tuner/rules.h"
#include "util/status.h"

namespace nf {
namespace tune {

struct NcclTestsRow {
  uint64_t bytes = 0;
  uint64_t count = 0;
  std::string type;        // "float"
  std::string redop;       // "sum", or "none"
  double time_us = 0;      // out-of-place
  double algbw = 0;        // GB/s, out-of-place
  double busbw = 0;        // GB/s, out-of-place
  double ip_time_us = -1;  // in-place, -1 when the log has no in-place columns
  double ip_busbw = -1;
  long wrong = 0;     // #wrong out-of-place; -1 when the log printed N/A
  long ip_wrong = 0;  // #wrong in-place; -1 when N/A or the log has no in-place columns
};

struct NcclTestsLog {
  std::string path;
  int coll = -1;             // ncclFunc_t 0..4 when known (from the program name in the log or
                             // the file name: all_reduce_perf -> allreduce), else -1
  int n_ranks = 0;           // "#  Rank  N Group ..." lines
  int n_nodes = 0;           // distinct hosts among them
  int ranks_per_node = 0;    // most ranks on one host
  std::string nccl_version;  // "2.26.2+cuda12.2"
  int algo = -1;             // from "NCCL_ALGO set by environment to ..." lines, else -1
  int proto = -1;            // likewise NCCL_PROTO
  std::vector<NcclTestsRow> rows;
  double avg_busbw = -1;  // "# Avg bus bandwidth" when present
};

// Parses one log's text. Lines that are not part of the results table are skipped; a log with no
// result rows, or a malformed row inside the table, fails with kInvalidArgument and *error naming
// the path and line.
Status parse_nccl_tests(const std::string& text, const std::string& path, NcclTestsLog* out,
                        std::string* error);
Status load_nccl_tests(const std::string& path, NcclTestsLog* out, std::string* error);

struct CalibrateOptions {
  bool use_in_place = false;  // rank by in-place time instead of out-of-place
  double tolerance = 0.03;    // pairs within 3 % of the best count as ties (keep the previous
                              // interval's pair to merge more)
  bool exact_shape = true;    // rules match the logs' nodes/ranks/rpn (false: *)
};

// One log per forced pair (algo and proto set on each log, from the log or the caller's
// --label). All logs must agree on collective and shape. Picks the fastest pair per size and
// merges neighbouring sizes with the same pair into one [lo,hi) rule; the first interval starts
// at 0 and the last is open (hi = *). Each rule's comment says the measured figures behind it.
Status calibrate(const std::vector<NcclTestsLog>& logs, const CalibrateOptions& opt,
                 std::vector<tuner::Rule>* rules, std::string* error);

}  // namespace tune
}  // namespace nf
