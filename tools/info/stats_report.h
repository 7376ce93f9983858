// nccl-fabric-info --stats: reads the plugin's statistics files (docs/stats.md, one per process)
// and prints a per-node table with a verdict that names the stuck, failing or slow node.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace nfi {

struct StatsOldest {
  bool present = false;
  std::string kind, state;
  int64_t bytes = 0;
  double age_s = 0;
};

struct StatsComm {
  int64_t dev = 0, id = 0;
  std::string role, peer, protocol;
  int64_t msgs = 0, bytes = 0, eagain = 0, cts_waits = 0, eager = 0, errors = 0, pending = 0;
  std::vector<int64_t> writes;  // per rail
  double stalled_s = 0;
  StatsOldest oldest;
  std::string failed;
};

struct StatsDevice {
  int64_t dev = 0;
  std::string name, provider;
  int64_t send_msgs = 0, send_bytes = 0, recv_msgs = 0, recv_bytes = 0;
  int64_t eagain = 0, cts_waits = 0, eager = 0, errors = 0, comms_open = 0, comms_closed = 0;
  std::vector<int64_t> writes;  // per rail
};

// One file: one process.
struct StatsFile {
  std::string path;
  std::string host;
  int64_t pid = 0, written_unix_ms = 0;
  double uptime_s = 0;
  bool final = false;
  std::vector<StatsDevice> devices;
  std::vector<StatsComm> comms;
};

// Reads and checks one file. On failure returns false with *err = what is wrong (without the
// path), e.g. "line 3: expected ':'" or "format is not nccl-fabric-stats".
bool read_stats_file(const std::string& path, StatsFile* f, std::string* err);
// The same from text already read.
bool parse_stats(const std::string& text, StatsFile* f, std::string* err);

// The report over `files`; `stall_s` is the least stall that makes a comm stuck. Returns the exit
// code: 0 nothing flagged, 1 something flagged, 2 a file could not be read or parsed (each one is
// named on `err`; the others are still reported).
int stats_report(const std::vector<std::string>& files, double stall_s, FILE* out, FILE* err,
                 bool json = false);

}  // namespace nfi
