// nccl-fabric-perf: declarations shared by its parts.
//
//   options.cpp       command line, --help, the test plan rank 0 sends to rank 1
//   channel.cpp       the framed out-of-band channel, the progress watch and the watchdog
//   channel_mpi.cpp   the channel's bytes over MPI, under mpirun (configure --with-mpi)
//   xport_plugin.cpp  the transport over any NCCL net plugin (ABI v6..v11)
//   xport_raw.cpp     the same transfers over raw libfabric
//   bench.cpp         the test loops and the per-rank driver
//   report.cpp        the table, CSV and JSON, and reading result files back
//   plot.cpp          --plot: gnuplot charts of result files
//   ../nccl_fabric_perf.cpp  main: fork a pair, one side of a two-host run, or one MPI rank
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace nfp {

using Clock = std::chrono::steady_clock;
constexpr const char* kProg = "nccl-fabric-perf";
constexpr const char* kDefaultProvider = "tcp;ofi_rxm";
constexpr size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

constexpr int kExitOk = 0, kExitFail = 1, kExitUsage = 2;

// Limits of the options (NCCL's own: 32 requests per comm, 64 channels, sizes[64] in test()).
constexpr int kMaxWindow = 32;
constexpr int kMaxComms = 64;
constexpr int kMaxGroup = 64;
constexpr size_t kMaxSize = GiB;        // NCCL never sends more in one message
constexpr size_t kMaxBuffer = 8 * GiB;  // send (and receive) buffer of one rank
constexpr size_t kMaxSweepSizes = 256;

enum class Test { kLat, kBw, kBibw };
const char* test_name(Test t);

struct Options {
  // Local to each rank.
  std::string plugin;  // resolved path when the plugin runs
  int abi = 0;         // 0: the newest the plugin exports
  int device = 0;
  std::string provider;
  bool provider_given = false;  // --provider (or NCCL_FABRIC_PROVIDER) chose it
  int timeout_s = 150;          // above the plugin's connect timeout (120 s): its error comes first
  long stop_self_after = 0;     // --stop-self-after: SIGSTOP itself after posting that many sends
  int listen_port = 0;          // > 0: rank 0 of a two-host run
  std::string peer_host;        // non-empty: rank 1 of a two-host run
  int peer_port = 0;
  bool mpi = false;          // both ranks started by an MPI launcher (or --mpi): the channel is MPI
  std::string mpi_launcher;  // what said so: "--mpi" or "OMPI_COMM_WORLD_SIZE=2"
  bool csv = false, json = false;
  std::string csv_path, json_path;  // "" = stdout
  std::string plot_path;
  std::vector<std::string> plot_inputs;       // result files to plot; none: plot this run
  std::vector<std::string> bench_opts_given;  // names, for the note on rank 1

  // The plan: in a two-host run rank 1 takes rank 0's.
  bool run_plugin = true, run_raw = true;
  // --protocol: NCCL_FABRIC_PROTOCOL for each plugin context, one context (and one set of comms)
  // per value, measured side by side. Empty: the plugin's default, one context, mode "plugin".
  std::vector<std::string> protocols;
  std::vector<Test> tests = {Test::kLat, Test::kBw};
  bool sweep = false;  // -b/-e/-f/-i given: every test at every size of `sizes`
  std::vector<size_t> sizes;
  long iters = 0;  // 0: by size (below)
  long warmup = 200;
  int window = 16, comms = 1, group = 1, rounds = 3;
  bool check = false;
  // Single-buffer plugin receives carry NCCL's NCCL_NET_OPTIONAL_RECV_COMPLETION hint, and a
  // receive reported done before its data is waited for by reading the data (as LL does).
  bool optional_completion = false;

  static constexpr long kLatIters = 2000, kLatMinIters = 20;
  static constexpr size_t kLatBytes = 32 * MiB;  // latency: at most this many bytes each way
  static constexpr size_t kBwBytes = 128 * MiB;  // bandwidth: bytes per size and round...
  static constexpr long kBwMinIters = 20, kBwMaxIters = 5000;  // ...within these iterations

  bool two_host() const { return listen_port > 0 || !peer_host.empty(); }
  // The plugin's transports as rows and columns name them: "plugin", or "plugin:PROTO" each.
  std::vector<std::string> plugin_modes() const;
  int timeout_ms() const { return timeout_s * 1000; }
  std::vector<size_t> sizes_for(Test t) const;
  size_t max_size() const;
  size_t iters_for(Test t, size_t size) const;
  size_t warmup_for(Test t, size_t iters_n) const;
};

// Parses argv into *o. Returns -1 to go on, else the exit status (--help: 0). Prints the error.
int parse_args(int argc, char** argv, Options* o);
void usage(FILE* f);

// Finds the plugin when it runs (--plugin, else next to this binary, else the installed one).
// False with *err when there is none or it cannot be read.
bool resolve_plugin(Options* o, std::string* err);

// The plan rank 0 runs, as text; rank 1 adopts it (false with *err when it cannot).
std::string plan_text(const Options& o);
bool adopt_plan(const std::string& text, Options* o, std::string* err);

// "64K", "1M", "8", "4 MiB": bytes (powers of 1024). False on junk, 0 or above kMaxSize.
bool parse_size(const std::string& s, size_t* out);
// NCCL_FABRIC_PROTOCOL's values: auto, sendrecv, rdma.
bool valid_protocol(const std::string& p);
// A plugin row's mode: "plugin" or "plugin:PROTO".
inline bool is_plugin_mode(const std::string& m) { return m.rfind("plugin", 0) == 0; }
std::string size_text(size_t n);  // "64 KiB"
std::string fmt_g(double v);      // %.3g, or "-" for a negative value

// Every failure is thrown as one of these and printed as one line. `peer`: caused by the other
// rank going away or failing; `remote`: the other rank's own message, when it sent one.
struct Failure : std::runtime_error {
  bool peer;
  std::string remote;
  Failure(const std::string& m, bool p, std::string r = std::string())
      : std::runtime_error(m), peer(p), remote(std::move(r)) {}
};
[[noreturn]] void fail(const std::string& m);
[[noreturn]] void peer_fail(const std::string& m);

double cpu_seconds();  // CLOCK_PROCESS_CPUTIME_ID: every thread of this process

// One measured row: a test at a size on one transport.
struct Result {
  std::string test;  // lat, bw, bibw
  std::string mode;  // plugin (or plugin:PROTO with --protocol), raw
  size_t size = 0;   // bytes of one message
  size_t iters = 0;
  int group = 1, comms = 1, window = 1;
  double time_us = 0;        // lat: one way (half the round trip, median); bw/bibw: per operation
  double gbps = 0;           // 1e9 bytes/s; bibw counts both directions
  double cpu_s[2] = {0, 0};  // CPU seconds of each rank over the timed part
  double cpu_per_gb[2] = {0, 0};  // those per 1e9 bytes moved
  double vs_raw = -1;             // plugin rows when raw ran too: plugin GB/s / raw GB/s (same row)
  std::string label;              // where it came from (plots)
};

// gnuplot's path from PATH, "" when it is not there.
std::string find_gnuplot();

// Runs the plot: charts of `files` (or of `own` results when no file is given) into o.plot_path.
int run_plot(const std::string& png, const std::vector<std::string>& files,
             const std::vector<Result>* own, int timeout_s);

}  // namespace nfp
