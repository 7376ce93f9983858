// Rank 0's output: the table, CSV and JSON; and reading result files back for --plot.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "perf/perf.h"

namespace nfp {

// What the header says about the run.
struct RunInfo {
  std::string provider;
  // Plugin (when it runs).
  std::string plugin_path, plugin_name, device;
  int abi = 0, dev_index = 0, ndev = 0, max_recvs = 0, max_comms = 0, speed = 0;
  // Raw (when it runs).
  std::string raw_domain, raw_note;
  size_t raw_inject = 0;
  bool raw_inject_on = true;
  uint64_t raw_mr_mode = 0;
  // Where the ranks ran.
  bool two_host = false;
  std::string host[2];
  int pid[2] = {0, 0};
};

class Report {
 public:
  explicit Report(const Options& o) : o_(o) {}
  ~Report();
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;

  // Opens the output files; false with *err when one cannot be written.
  bool open(std::string* err);
  void header(const RunInfo& info);
  // One test at one size: the plugin's and/or raw's result (vs_raw is filled here).
  void add(std::vector<Result> rs);
  // Closes the table, writes the JSON; false with *err on a write error.
  bool finish(double seconds, std::string* err);
  const std::vector<Result>& results() const { return all_; }

 private:
  bool table() const {
    return !(o_.csv && o_.csv_path.empty()) && !(o_.json && o_.json_path.empty());
  }
  void csv_row(const Result& r);

  const Options& o_;
  RunInfo info_;
  FILE* csv_ = nullptr;  // stdout or a file
  FILE* json_ = nullptr;
  std::vector<Result> all_;
};

// Reads a result file written by --csv or --json. False with *err when it is neither.
bool read_results(const std::string& path, std::vector<Result>* out, std::string* err);

}  // namespace nfp
