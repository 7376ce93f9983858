// Command line, --help, and the plan rank 0 sends to rank 1.
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "perf/channel_mpi.h"
#include "perf/perf.h"

#ifndef NF_DEFAULT_PLUGIN
#define NF_DEFAULT_PLUGIN ""
#endif

namespace nfp {

const char* test_name(Test t) {
  switch (t) {
    case Test::kLat: return "lat";
    case Test::kBw: return "bw";
    case Test::kBibw: return "bibw";
  }
  return "?";
}

[[noreturn]] void fail(const std::string& m) { throw Failure(m, false); }
[[noreturn]] void peer_fail(const std::string& m) { throw Failure(m, true); }

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::vector<size_t> Options::sizes_for(Test t) const {
  if (sweep) return sizes;
  if (t == Test::kLat) return {8};
  return {64 * KiB, 1 * MiB, 4 * MiB};
}

std::vector<std::string> Options::plugin_modes() const {
  if (!run_plugin) return {};
  if (protocols.empty()) return {"plugin"};
  std::vector<std::string> m;
  for (const std::string& p : protocols) m.push_back("plugin:" + p);
  return m;
}

bool valid_protocol(const std::string& p) { return p == "auto" || p == "sendrecv" || p == "rdma"; }

size_t Options::max_size() const {
  size_t m = 8;
  for (Test t : tests)
    for (size_t s : sizes_for(t)) m = std::max(m, s);
  return m;
}

size_t Options::iters_for(Test t, size_t size) const {
  if (iters > 0) return static_cast<size_t>(iters);
  const size_t op_bytes = size * static_cast<size_t>(group);
  if (t == Test::kLat) {
    const long by_bytes = static_cast<long>(kLatBytes / op_bytes);
    return static_cast<size_t>(std::min(kLatIters, std::max(kLatMinIters, by_bytes)));
  }
  const long by_bytes = static_cast<long>(kBwBytes / op_bytes);
  return static_cast<size_t>(std::min(kBwMaxIters, std::max(kBwMinIters, by_bytes)));
}

size_t Options::warmup_for(Test t, size_t iters_n) const {
  // min(WARMUP, iters/4): a sweep's large sizes do not warm up longer than they run. Latency
  // warms up at least once; bandwidth, in a run of its own, with at least a window per comm.
  if (warmup == 0) return 0;
  const size_t w = std::min(static_cast<size_t>(warmup), iters_n / 4);
  if (t == Test::kLat) return std::max<size_t>(1, w);
  const size_t window_all = static_cast<size_t>(window) * static_cast<size_t>(comms);
  return std::max(window_all, w);
}

void usage(FILE* f) {
  fprintf(
      f,
      "usage: %s [options]\n"
      "       %s --listen PORT [options]       (rank 0 of a run between two hosts)\n"
      "       %s --peer HOST:PORT [--plugin PATH] [--provider NAME]   (rank 1)\n"
      "       mpirun -np 2 %s [options]        (two ranks of an MPI job; MPI builds)\n"
      "       %s --plot OUT.png RESULT.csv|RESULT.json...\n"
      "\n"
      "Point-to-point tests of an NCCL net plugin, loaded through its ABI (v6 to v12) and driven "
      "the\n"
      "way NCCL drives it, next to raw libfabric doing the same transfers on the same provider, "
      "with\n"
      "the ratio plugin/raw. By default it forks two processes on this host and runs 8-byte "
      "latency\n"
      "and one-way bandwidth at 64 KiB, 1 MiB and 4 MiB.\n"
      "\n"
      "What to load\n"
      "  --plugin PATH      net plugin library (default: the one built next to this binary,\n"
      "                     else %s)\n"
      "  --abi N            use ncclNetPlugin_vN (6..12) instead of the newest the library "
      "exports\n"
      "  --device N         plugin device to use (default 0)\n"
      "  --provider NAME    libfabric provider for the raw transport, and NCCL_FABRIC_PROVIDER "
      "for\n"
      "                     the plugin (default: NCCL_FABRIC_PROVIDER if set, else '%s'); with\n"
      "                     another plugin, name the provider it uses so that raw compares\n"
      "  --protocol LIST    comma-separated NCCL_FABRIC_PROTOCOL values: sendrecv, rdma, auto. "
      "Each\n"
      "                     gets a plugin context of its own (the variable set before its init)\n"
      "                     and its own rows/columns, plugin:PROTO, measured alternately with the\n"
      "                     others and raw; more than one needs ncclNet v11 (default: the "
      "plugin's\n"
      "                     own choice, one context)\n"
      "  --no-raw           plugin only\n"
      "  --raw-only, --raw  raw libfabric only (no plugin needed)\n"
      "\n"
      "What to run\n"
      "  -t, --tests LIST   comma-separated: lat (ping-pong latency), bw (one-way bandwidth), "
      "bibw\n"
      "                     (bidirectional bandwidth), or all (default lat,bw)\n"
      "  -b, --minbytes SIZE  smallest size of a sweep (default 8 when only -e is given)\n"
      "  -e, --maxbytes SIZE  largest size of a sweep (default: -b)\n"
      "  -f, --stepfactor F   multiply the size by F (integer >= 2) at each step (default 2)\n"
      "  -i, --stepbytes SIZE add SIZE at each step instead\n"
      "                     Any of -b/-e/-f/-i runs every test at every size of the sweep; "
      "without\n"
      "                     them lat runs at 8 B and bw/bibw at 64 KiB, 1 MiB and 4 MiB. SIZE "
      "takes\n"
      "                     K, M or G (powers of 1024), e.g. 64K; 1 B to 1 GiB.\n"
      "  -n, --iters N      timed iterations of every test (default: latency %ld, fewer for large\n"
      "                     sizes: %zu MiB / size, at least 20; bandwidth %zu MiB / size per "
      "round,\n"
      "                     within %ld..%ld operations)\n"
      "  -w, --warmup N     untimed operations first, at most a quarter of the iterations\n"
      "                     (default 200); bandwidth warms up in a run of its own, at least a\n"
      "                     window per comm; 0: none\n"
      "  --window W         operations in flight per comm and direction, 1..%d (default 16)\n"
      "  --comms N          N send/recv comm pairs, as NCCL's channels use them: operations go\n"
      "                     round-robin over them, each comm with its own window (1..%d, default "
      "1)\n"
      "  --group N          grouped receives: every operation is one irecv of N buffers with N\n"
      "                     distinct tags, matched by N isends; needs the plugin's maxRecvs >= N\n"
      "                     (raw: N tagged receives). 1..%d, default 1\n"
      "  -r, --rounds R     each row alternates plugin and raw R times and keeps each one's best\n"
      "                     round (default 3)\n"
      "  -c, --check [0|1]  fill every message with its own pattern and verify every byte "
      "received\n"
      "  --optional-completion\n"
      "                     plugin receives of one buffer carry NCCL's optional-completion hint\n"
      "                     (LL, LL128); one reported done early is waited for by reading its\n"
      "                     data, as NCCL's LL does (implies --check)\n"
      "                     (timings then include the fill and the check)\n"
      "  --timeout SEC      longest any wait may go without progress, and how long --listen waits\n"
      "                     for its peer (default 150: after the plugin's own 120 s connect "
      "timeout)\n"
      "  --stop-self-after N  for fault tests: this rank stops itself (SIGSTOP) right after it\n"
      "                     posted its Nth send (warm-up included) and goes on at SIGCONT, so a\n"
      "                     peer stops while requests toward it are pending (rank-local)\n"
      "\n"
      "Between two hosts (the handles travel over a plain TCP socket, or over MPI)\n"
      "  --listen PORT      be rank 0: wait for the peer on PORT, run the tests, print the "
      "results\n"
      "  --peer HOST:PORT   be rank 1: connect to rank 0 and run its plan (tests, sizes, "
      "iterations,\n"
      "                     window, comms, group, modes, provider); only --plugin, --abi, "
      "--device,\n"
      "                     --provider, --timeout and --stop-self-after are its own\n"
      "  --mpi              run as one of the two ranks of an MPI job (mpirun -np 2 ...): the\n"
      "                     handles travel over MPI; implied when an MPI launcher started it\n"
      "                     (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK set). %s\n"
      "\n"
      "Output (rank 0)\n"
      "  default            a table: per test and size, for plugin and raw, time per operation\n"
      "                     (us), GB/s, CPU seconds per GB of each rank, and plugin/raw\n"
      "  --csv[=FILE]       CSV, one row per test, size and mode, to FILE or instead of the table\n"
      "  --json[=FILE]      the same rows as one JSON document, to FILE or instead of the table\n"
      "  --plot OUT.png [FILE...]  draw GB/s and latency against size with gnuplot, one line per\n"
      "                     test and mode of each result file (CSV or JSON from the options "
      "above),\n"
      "                     side by side; without files it runs the tests and plots this run\n"
      "  -h, --help         this text\n"
      "\n"
      "Environment: FI_TCP_IFACE=lo pins tcp;ofi_rxm to loopback; NCCL_FABRIC_INJECT=0 turns\n"
      "fi_tinject off in our plugin and in the raw transport alike; NCCL_DEBUG=INFO shows the\n"
      "plugin's log.\n"
      "Exit status: 0 on success; 1 on any failure (plugin, peer, timeout, data check, gnuplot), "
      "with\n"
      "a line on stderr saying which; 2 on bad usage.\n",
      kProg, kProg, kProg, kProg, kProg,
      NF_DEFAULT_PLUGIN[0] ? NF_DEFAULT_PLUGIN : "(none built in)", kDefaultProvider,
      Options::kLatIters, Options::kLatBytes / MiB, Options::kBwBytes / MiB, Options::kBwMinIters,
      Options::kBwMaxIters, kMaxWindow, kMaxComms, kMaxGroup,
      mpi_built() ? "This build has MPI."
                  : "Not supported in this build\n                     (configure --with-mpi).");
}

namespace {

bool parse_long(const std::string& s, long lo, long hi, long* out) {
  errno = 0;
  char* end = nullptr;
  const long v = strtol(s.c_str(), &end, 10);
  if (s.empty() || errno != 0 || end == s.c_str() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool file_readable(const std::string& p) { return !p.empty() && access(p.c_str(), R_OK) == 0; }

std::string real_path(const std::string& p) {
  char real[PATH_MAX];
  return realpath(p.c_str(), real) != nullptr ? std::string(real) : p;
}

const char* const kBenchOpts[] = {"-t",          "--tests",      "-b",
                                  "--minbytes",  "-e",           "--maxbytes",
                                  "-f",          "--stepfactor", "-i",
                                  "--stepbytes", "-n",           "--iters",
                                  "-w",          "--warmup",     "--window",
                                  "--comms",     "--group",      "-r",
                                  "--rounds",    "-c",           "--check",
                                  "--no-raw",    "--raw-only",   "--raw",
                                  "--protocol",  "--protocols",  "--optional-completion"};

}  // namespace

bool parse_size(const std::string& s, size_t* out) {
  if (s.empty() || !(s[0] >= '0' && s[0] <= '9')) return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = strtoull(s.c_str(), &end, 10);
  if (errno != 0) return false;
  std::string suffix(end);
  suffix.erase(std::remove(suffix.begin(), suffix.end(), ' '), suffix.end());
  for (char& c : suffix) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  unsigned long long mult = 1;
  if (suffix.empty() || suffix == "B")
    mult = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB")
    mult = KiB;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB")
    mult = MiB;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB")
    mult = GiB;
  else
    return false;
  if (v == 0 || v > kMaxSize / mult) return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

std::string size_text(size_t n) {
  char b[32];
  if (n >= GiB && n % GiB == 0)
    snprintf(b, sizeof(b), "%zu GiB", n / GiB);
  else if (n >= MiB && n % MiB == 0)
    snprintf(b, sizeof(b), "%zu MiB", n / MiB);
  else if (n >= KiB && n % KiB == 0)
    snprintf(b, sizeof(b), "%zu KiB", n / KiB);
  else
    snprintf(b, sizeof(b), "%zu B", n);
  return b;
}

std::string fmt_g(double v) {
  if (v < 0) return "-";
  char b[32];
  snprintf(b, sizeof(b), "%.3g", v);
  return b;
}

int parse_args(int argc, char** argv, Options* o) {
  auto bad = [](const std::string& m) {
    fprintf(stderr, "%s: %s (see --help)\n", kProg, m.c_str());
    return kExitUsage;
  };
  bool size_opt = false, have_min = false, have_max = false, have_factor = false, have_step = false;
  size_t min_b = 0, max_b = 0, step_b = 0;
  long factor = 2;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string val;
    bool has_val = false;
    if (a.rfind("--", 0) == 0) {
      const size_t eq = a.find('=');
      if (eq != std::string::npos) {
        val = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_val = true;
      }
    } else if (a.size() > 2 && a[0] == '-' && a[1] != '-' && strchr("tbefinwr", a[1]) != nullptr) {
      val = a.substr(2);  // -b8, -n200
      a = a.substr(0, 2);
      has_val = true;
    }
    auto value = [&](std::string* out) {
      if (has_val) {
        *out = val;
        return true;
      }
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    auto flag = [&]() { return !has_val; };
    for (const char* b : kBenchOpts)
      if (a == b) o->bench_opts_given.push_back(a);
    std::string v;
    long n = 0;
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return kExitOk;
    } else if (a == "--plugin") {
      if (!value(&v) || v.empty()) return bad("--plugin needs a path");
      o->plugin = v;
    } else if (a == "--abi") {
      if (!value(&v) || !parse_long(v, 6, 12, &n))
        return bad("--abi needs an ncclNet version, 6..12");
      o->abi = static_cast<int>(n);
    } else if (a == "--device") {
      if (!value(&v) || !parse_long(v, 0, 1023, &n)) return bad("--device needs an index >= 0");
      o->device = static_cast<int>(n);
    } else if (a == "--provider") {
      if (!value(&v) || v.empty()) return bad("--provider needs a provider name");
      o->provider = v;
      o->provider_given = true;
    } else if (a == "--protocol" || a == "--protocols") {
      if (!value(&v) || v.empty())
        return bad("--protocol needs a list of sendrecv, rdma, auto (e.g. sendrecv,rdma)");
      o->protocols.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (item.empty())
          return bad("--protocol '" + v + "' has an empty item (e.g. sendrecv,rdma)");
        if (!valid_protocol(item))
          return bad("unknown protocol '" + item + "' for --protocol (sendrecv, rdma or auto)");
        if (std::find(o->protocols.begin(), o->protocols.end(), item) == o->protocols.end())
          o->protocols.push_back(item);
      }
      if (o->protocols.empty() || v.back() == ',')
        return bad("--protocol needs a list of sendrecv, rdma, auto (e.g. sendrecv,rdma)");
    } else if (a == "--optional-completion") {
      if (!flag()) return bad(a + " takes no value");
      o->optional_completion = true;
      o->check = true;  // the data itself says when it has landed
    } else if (a == "--no-raw") {
      if (!flag()) return bad(a + " takes no value");
      o->run_raw = false;
    } else if (a == "--raw-only" || a == "--raw") {
      if (!flag()) return bad(a + " takes no value");
      o->run_plugin = false;
    } else if (a == "-t" || a == "--tests") {
      if (!value(&v) || v.empty()) return bad("--tests needs a list: lat,bw,bibw or all");
      o->tests.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        std::vector<Test> add;
        if (item == "lat")
          add = {Test::kLat};
        else if (item == "bw")
          add = {Test::kBw};
        else if (item == "bibw")
          add = {Test::kBibw};
        else if (item == "all")
          add = {Test::kLat, Test::kBw, Test::kBibw};
        else
          return bad("unknown test '" + item + "' (lat, bw, bibw or all)");
        for (Test t : add)
          if (std::find(o->tests.begin(), o->tests.end(), t) == o->tests.end())
            o->tests.push_back(t);
      }
      if (o->tests.empty()) return bad("--tests needs a list: lat,bw,bibw or all");
    } else if (a == "-b" || a == "--minbytes") {
      if (!value(&v) || !parse_size(v, &min_b))
        return bad("bad size '" + v + "' for -b (1 B to 1 GiB, e.g. 8, 64K, 4M)");
      have_min = size_opt = true;
    } else if (a == "-e" || a == "--maxbytes") {
      if (!value(&v) || !parse_size(v, &max_b))
        return bad("bad size '" + v + "' for -e (1 B to 1 GiB, e.g. 8, 64K, 4M)");
      have_max = size_opt = true;
    } else if (a == "-f" || a == "--stepfactor") {
      if (!value(&v) || !parse_long(v, 2, 1024, &factor))
        return bad("-f needs an integer factor, 2..1024");
      have_factor = size_opt = true;
    } else if (a == "-i" || a == "--stepbytes") {
      if (!value(&v) || !parse_size(v, &step_b))
        return bad("bad size '" + v + "' for -i (1 B to 1 GiB)");
      have_step = size_opt = true;
    } else if (a == "-n" || a == "--iters") {
      if (!value(&v) || !parse_long(v, 1, 100000000, &n))
        return bad("-n needs an iteration count >= 1");
      o->iters = n;
    } else if (a == "-w" || a == "--warmup") {
      if (!value(&v) || !parse_long(v, 0, 100000000, &n))
        return bad("-w needs a warm-up count >= 0");
      o->warmup = n;
    } else if (a == "--window") {
      if (!value(&v) || !parse_long(v, 1, kMaxWindow, &n))
        return bad("--window must be 1.." + std::to_string(kMaxWindow) +
                   " (NCCL_NET_MAX_REQUESTS)");
      o->window = static_cast<int>(n);
    } else if (a == "--comms") {
      if (!value(&v) || !parse_long(v, 1, kMaxComms, &n))
        return bad("--comms must be 1.." + std::to_string(kMaxComms));
      o->comms = static_cast<int>(n);
    } else if (a == "--group") {
      if (!value(&v) || !parse_long(v, 1, kMaxGroup, &n))
        return bad("--group must be 1.." + std::to_string(kMaxGroup));
      o->group = static_cast<int>(n);
    } else if (a == "-r" || a == "--rounds") {
      if (!value(&v) || !parse_long(v, 1, 1000, &n)) return bad("--rounds needs a count, 1..1000");
      o->rounds = static_cast<int>(n);
    } else if (a == "-c" || a == "--check") {
      // nccl-tests spells it -c 1: a 0 or 1 after it is taken as its value.
      if (!has_val && i + 1 < argc &&
          (strcmp(argv[i + 1], "0") == 0 || strcmp(argv[i + 1], "1") == 0)) {
        val = argv[++i];
        has_val = true;
      }
      if (has_val && val != "0" && val != "1") return bad(a + " takes no value, or 0 or 1");
      o->check = !has_val || val == "1";
    } else if (a == "--timeout") {
      if (!value(&v) || !parse_long(v, 1, 86400, &n))
        return bad("--timeout needs seconds, 1..86400");
      o->timeout_s = static_cast<int>(n);
    } else if (a == "--stop-self-after") {
      if (!value(&v) || !parse_long(v, 1, 1000000000, &n))
        return bad("--stop-self-after needs a count of sends, 1..1000000000");
      o->stop_self_after = n;
    } else if (a == "--listen") {
      if (!value(&v) || !parse_long(v, 1, 65535, &n)) return bad("--listen needs a port, 1..65535");
      o->listen_port = static_cast<int>(n);
    } else if (a == "--peer") {
      if (!value(&v)) return bad("--peer needs HOST:PORT");
      const size_t colon = v.rfind(':');
      std::string host = colon == std::string::npos ? "" : v.substr(0, colon);
      if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);  // [::1]:5000
      if (host.empty() || !parse_long(v.substr(colon + 1), 1, 65535, &n))
        return bad("--peer needs HOST:PORT, e.g. node1:5000 or [fe80::1%eth0]:5000");
      o->peer_host = host;
      o->peer_port = static_cast<int>(n);
    } else if (a == "--csv") {
      o->csv = true;
      o->csv_path = has_val ? val : "";
      if (has_val && val.empty()) return bad("--csv= needs a file name");
    } else if (a == "--json") {
      o->json = true;
      o->json_path = has_val ? val : "";
      if (has_val && val.empty()) return bad("--json= needs a file name");
    } else if (a == "--plot") {
      if (!value(&v) || v.empty()) return bad("--plot needs an output file, e.g. out.png");
      o->plot_path = v;
    } else if (a == "--mpi" || a == "--mpirun" || a == "--use-mpi") {
      if (!flag()) return bad(a + " takes no value");
      if (!mpi_built()) {
        fprintf(stderr,
                "%s: %s: MPI is not supported in this build (it was built without MPI: "
                "configure --with-mpi); run it between two hosts with --listen PORT on one and "
                "--peer HOST:PORT on the other\n",
                kProg, a.c_str());
        return kExitUsage;
      }
      o->mpi = true;
      o->mpi_launcher = a;
    } else if (a.size() > 1 && a[0] == '-') {
      return bad("unknown option '" + std::string(argv[i]) + "'");
    } else {
      positional.push_back(a);
    }
  }

  // Started by mpirun/srun: with MPI in the build, the launcher's two ranks are the pair;
  // without it, each rank would fork a pair of its own.
  const std::string launcher = mpi_launcher();
  if (!launcher.empty() && mpi_built()) {
    o->mpi = true;
    if (o->mpi_launcher.empty()) o->mpi_launcher = launcher;
  } else if (!launcher.empty()) {
    const char* e = strchr(launcher.c_str(), '=') + 1;
    if (launcher.rfind("PMIX_RANK=", 0) != 0 && atoi(e) > 1) {
      fprintf(stderr,
              "%s: started by an MPI launcher (%s), but MPI is not supported in this build "
              "(configure --with-mpi); start one process per host with --listen PORT / --peer "
              "HOST:PORT instead\n",
              kProg, launcher.c_str());
      return kExitUsage;
    }
  }

  if (!positional.empty() && o->plot_path.empty())
    return bad("unexpected argument '" + positional[0] +
               "' (result files go after --plot OUT.png)");
  o->plot_inputs = positional;
  if (!o->plot_inputs.empty()) return -1;  // only a plot: the rest does not matter

  if (!o->run_plugin && !o->run_raw) return bad("--no-raw and --raw-only exclude each other");
  if (!o->run_plugin && !o->protocols.empty())
    return bad("--protocol and --raw-only exclude each other (the protocol is the plugin's)");
  if (o->abi != 0 && o->abi < 11 && o->protocols.size() > 1)
    return bad(
        "--protocol with more than one value needs ncclNet v11 (a context per init); "
        "--abi " +
        std::to_string(o->abi) +
        " has one process-wide context: run once "
        "per protocol");
  if (o->listen_port > 0 && !o->peer_host.empty())
    return bad("--listen and --peer exclude each other (one host listens, the other peers)");
  if (o->mpi && o->two_host())
    return bad(std::string("--listen/--peer and MPI (") + o->mpi_launcher +
               ") exclude each other: under mpirun the ranks talk over MPI");
  if (o->csv && o->json && o->csv_path.empty() && o->json_path.empty())
    return bad("--csv and --json cannot both go to stdout; give one a file: --json=FILE");
  if (have_factor && have_step) return bad("-f and -i exclude each other");
  if (size_opt) {
    if (!have_min) min_b = have_max ? std::min<size_t>(8, max_b) : min_b;
    if (!have_max) max_b = min_b;
    if (min_b > max_b)
      return bad("-b " + size_text(min_b) + " is larger than -e " + size_text(max_b));
    o->sweep = true;
    o->sizes.clear();
    for (size_t s = min_b; s <= max_b;) {
      if (o->sizes.size() >= kMaxSweepSizes)
        return bad("the sweep has more than " + std::to_string(kMaxSweepSizes) +
                   " sizes; use a larger -f or -i");
      o->sizes.push_back(s);
      const size_t next = have_step ? s + step_b : s * static_cast<size_t>(factor);
      if (next <= s) break;
      s = next;
    }
  }
  const size_t need = static_cast<size_t>(o->window) * static_cast<size_t>(o->comms) *
                      static_cast<size_t>(o->group) * o->max_size();
  if (need > kMaxBuffer)
    return bad("window x comms x group x largest size needs " + size_text(need) +
               " of buffers per direction (more than " + size_text(kMaxBuffer) +
               "); lower one of them");
  if (o->provider.empty()) {
    const char* env = getenv("NCCL_FABRIC_PROVIDER");
    o->provider_given = env != nullptr && env[0] != '\0';
    o->provider = o->provider_given ? env : kDefaultProvider;
  }
  return -1;
}

bool resolve_plugin(Options* o, std::string* err) {
  if (!o->plugin.empty()) {
    if (!file_readable(o->plugin)) {
      *err = "plugin " + o->plugin + ": " + strerror(errno);
      return false;
    }
    o->plugin = real_path(o->plugin);
    return true;
  }
  // The build tree first, so that a build directory tests its own plugin rather than an older
  // installed one: tools/nccl-fabric-perf -> .libs/ of the top build dir (a libtool wrapper runs
  // the real binary from tools/.libs/, one level further down).
  std::vector<std::string> candidates;
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string dir(exe);
    dir = dir.substr(0, dir.rfind('/'));
    candidates.push_back(dir + "/../.libs/libnccl-net-fabric.so");
    candidates.push_back(dir + "/../../.libs/libnccl-net-fabric.so");
  }
  if (NF_DEFAULT_PLUGIN[0] != '\0') candidates.push_back(NF_DEFAULT_PLUGIN);
  std::string tried;
  for (const std::string& c : candidates) {
    if (file_readable(c)) {
      o->plugin = real_path(c);
      return true;
    }
    tried += (tried.empty() ? "" : ", ") + c;
  }
  *err = "no plugin found (tried " + tried +
         "); build it with make, or pass --plugin PATH or "
         "--raw-only";
  return false;
}

// ------------------------------------------------------------------------------------------------
// The plan: rank 0 sends it, rank 1 runs it. Text, one key=value a line.
// ------------------------------------------------------------------------------------------------

// Plan 2 is plan 1 with protocols=: rank 0 sends it only with --protocol, so that a rank 1 of an
// older version still runs the plans it understands and refuses the others.
static const char kPlanMagic[] = "nccl-fabric-perf plan 1";
static const char kPlanMagic2[] = "nccl-fabric-perf plan 2";

std::string plan_text(const Options& o) {
  std::string t = std::string(o.protocols.empty() ? kPlanMagic : kPlanMagic2) + "\n";
  auto kv = [&](const char* k, const std::string& v) { t += std::string(k) + "=" + v + "\n"; };
  kv("provider", o.provider);
  kv("plugin", o.run_plugin ? "1" : "0");
  kv("raw", o.run_raw ? "1" : "0");
  std::string tests;
  for (Test x : o.tests) tests += (tests.empty() ? "" : ",") + std::string(test_name(x));
  kv("tests", tests);
  kv("sweep", o.sweep ? "1" : "0");
  std::string sizes;
  for (size_t s : o.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  kv("sizes", sizes);
  kv("iters", std::to_string(o.iters));
  kv("warmup", std::to_string(o.warmup));
  kv("window", std::to_string(o.window));
  kv("comms", std::to_string(o.comms));
  kv("group", std::to_string(o.group));
  kv("rounds", std::to_string(o.rounds));
  kv("check", o.check ? "1" : "0");
  if (!o.protocols.empty()) {
    std::string protos;
    for (const std::string& p : o.protocols) protos += (protos.empty() ? "" : ",") + p;
    kv("protocols", protos);
  }
  return t;
}

bool adopt_plan(const std::string& text, Options* o, std::string* err) {
  std::stringstream ss(text);
  std::string line;
  if (!std::getline(ss, line) || (line != kPlanMagic && line != kPlanMagic2)) {
    *err =
        "rank 0 sent a plan this version does not understand (both sides must run the same "
        "version of " +
        std::string(kProg) + ")";
    return false;
  }
  const bool with_protocols = line == kPlanMagic2;
  Options p = *o;
  p.sizes.clear();
  p.protocols.clear();
  while (std::getline(ss, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    long n = 0;
    auto num = [&](long lo, long hi) {
      if (!parse_long(v, lo, hi, &n)) {
        *err = "rank 0 sent a bad plan line '" + line + "'";
        return false;
      }
      return true;
    };
    if (k == "provider") {
      if (o->provider_given && v != o->provider) {
        *err = "rank 0 runs provider '" + v + "' but this side was given '" + o->provider +
               "': both sides must use the same provider";
        return false;
      }
      p.provider = v;
    } else if (k == "plugin") {
      if (!num(0, 1)) return false;
      p.run_plugin = n != 0;
    } else if (k == "raw") {
      if (!num(0, 1)) return false;
      p.run_raw = n != 0;
    } else if (k == "sweep") {
      if (!num(0, 1)) return false;
      p.sweep = n != 0;
    } else if (k == "check") {
      if (!num(0, 1)) return false;
      p.check = n != 0;
    } else if (k == "iters") {
      if (!num(0, 100000000)) return false;
      p.iters = n;
    } else if (k == "warmup") {
      if (!num(0, 100000000)) return false;
      p.warmup = n;
    } else if (k == "window") {
      if (!num(1, kMaxWindow)) return false;
      p.window = static_cast<int>(n);
    } else if (k == "comms") {
      if (!num(1, kMaxComms)) return false;
      p.comms = static_cast<int>(n);
    } else if (k == "group") {
      if (!num(1, kMaxGroup)) return false;
      p.group = static_cast<int>(n);
    } else if (k == "rounds") {
      if (!num(1, 1000)) return false;
      p.rounds = static_cast<int>(n);
    } else if (k == "tests") {
      p.tests.clear();
      std::stringstream ts(v);
      std::string item;
      while (std::getline(ts, item, ',')) {
        if (item == "lat")
          p.tests.push_back(Test::kLat);
        else if (item == "bw")
          p.tests.push_back(Test::kBw);
        else if (item == "bibw")
          p.tests.push_back(Test::kBibw);
      }
    } else if (k == "protocols") {
      std::stringstream ts(v);
      std::string item;
      while (std::getline(ts, item, ',')) {
        if (!valid_protocol(item)) {
          *err = "rank 0 sent an unknown protocol '" + item + "'";
          return false;
        }
        p.protocols.push_back(item);
      }
    } else if (k == "sizes") {
      std::stringstream ts(v);
      std::string item;
      while (std::getline(ts, item, ',')) {
        if (!parse_long(item, 1, static_cast<long>(kMaxSize), &n)) {
          *err = "rank 0 sent a bad size '" + item + "'";
          return false;
        }
        p.sizes.push_back(static_cast<size_t>(n));
      }
    }
  }
  if (p.tests.empty() || (p.sweep && p.sizes.empty()) || with_protocols == p.protocols.empty()) {
    *err = "rank 0 sent an incomplete plan";
    return false;
  }
  *o = p;
  return true;
}

}  // namespace nfp
