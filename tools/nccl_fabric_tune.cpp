// nccl-fabric-tune: what the tuner decides and why (show), rules from measurements (calibrate),
// the model against measurements (compare), and what a decision costs (bench).
// docs/tuning.md describes every subcommand.
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "client/tuner_loader.h"
#include "platform/platform.h"
#include "tune/nccltests.h"
#include "tuner/model.h"
#include "tuner/nccl_model.h"
#include "tuner/rules.h"
#include "util/params.h"

using namespace nf;
using namespace nf::tuner;

namespace {

bool g_verbose = false;

void print_logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (!g_verbose && level != NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s ", level == NCCL_LOG_WARN ? "WARN" : "INFO");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void usage() {
  printf(
      "usage: nccl-fabric-tune show --platform NAME --nodes N --ranks-per-node R [--coll C]\n"
      "                             [--rules FILE] [--lib PATH] [--abi 2-6] [--verbose]\n"
      "       nccl-fabric-tune calibrate [--label ALGO/PROTO] LOG [[--label A/P] LOG...]\n"
      "                             [--in-place] [--tolerance F] [--any-shape] [-o FILE]\n"
      "       nccl-fabric-tune compare [--platform NAME] LOG...\n"
      "       nccl-fabric-tune bench [--lib PATH] [--platform NAME] [--nodes N]\n"
      "                             [--ranks-per-node R] [--calls N] [--repeat N]\n"
      "\n"
      "show       loads the tuner through its ABI as NCCL does, with NCCL 2.28.9's default\n"
      "           constants and cost tables for the shape, and prints per size (8 B to 16 GiB)\n"
      "           what NCCL alone would pick and what it picks with the tuner\n"
      "calibrate  reads nccl-tests logs, one per forced NCCL_ALGO/NCCL_PROTO pair (from the log's\n"
      "           NCCL INFO lines, or --label before the log), and writes a rules file for\n"
      "           NCCL_FABRIC_TUNER_RULES (stdout, or -o FILE)\n"
      "compare    measured bus bandwidth per size beside what the model predicts for the shape\n"
      "bench      the cost of one getCollInfo call, median of --repeat runs of --calls calls\n"
      "\n"
      "Collectives: allreduce allgather reducescatter broadcast reduce. See docs/tuning.md.\n");
}

std::string exe_dir() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return ".";
  exe[n] = '\0';
  std::string d(exe);
  return d.substr(0, d.rfind('/'));
}

std::string find_tuner_lib(const std::string& given) {
  if (!given.empty()) return given;
  const std::string d = exe_dir();
  for (const std::string& c :
       {d + "/../.libs/libnccl-tuner-fabric.so", d + "/../lib/libnccl-tuner-fabric.so",
        std::string(NF_DEFAULT_TUNER)})
    if (access(c.c_str(), R_OK) == 0) return c;
  return "libnccl-tuner-fabric.so";  // the loader's search path
}

bool parse_int(const char* s, int lo, int hi, int* out) {
  char* end = nullptr;
  const long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

std::string human(uint64_t b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB"};
  int i = 0;
  double v = static_cast<double>(b);
  while (v >= 1024 && i < 3) {
    v /= 1024;
    ++i;
  }
  char buf[32];
  snprintf(buf, sizeof buf, v == std::floor(v) ? "%.0f %s" : "%.1f %s", v, u[i]);
  return buf;
}

// The platform row by name, as NCCL_FABRIC_PLATFORM would pick it.
const Platform* find_platform(const std::string& name, std::string* error) {
  Params p;
  if (!ok(p.set(ParamId::kPlatform, name.c_str()))) {
    *error = "bad platform name";
    return nullptr;
  }
  PlatformChoice c;
  if (!ok(choose_platform(p, &c, error))) return nullptr;
  return c.row;
}

struct Shape {
  const Platform* row = nullptr;
  int nodes = 1, rpn = 1;
  Facts facts;
  CommShape comm;
};

bool make_shape(const std::string& platform, int nodes, int rpn, Shape* s) {
  std::string error;
  s->row = find_platform(platform.empty() ? "none" : platform, &error);
  if (s->row == nullptr) {
    fprintf(stderr, "nccl-fabric-tune: --platform %s: %s\n", platform.c_str(), error.c_str());
    return false;
  }
  s->nodes = nodes;
  s->rpn = rpn;
  s->facts.n_ranks = nodes * rpn;
  s->facts.n_nodes = nodes;
  s->facts.ranks_per_node = rpn;
  facts_from_platform(*s->row, &s->facts);
  s->comm = shape_from_facts(s->facts);
  return true;
}

// ---------------------------------------------------------------------------------------------
// show

int cmd_show(int argc, char** argv) {
  std::string platform, lib_path, rules;
  int nodes = 0, rpn = 0, abi = 6, coll = 4;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--platform" && has)
      platform = argv[++i];
    else if (a == "--nodes" && has && parse_int(argv[i + 1], 1, 1 << 20, &nodes))
      ++i;
    else if (a == "--ranks-per-node" && has && parse_int(argv[i + 1], 1, 1024, &rpn))
      ++i;
    else if (a == "--abi" && has && parse_int(argv[i + 1], 2, 6, &abi))
      ++i;
    else if (a == "--lib" && has)
      lib_path = argv[++i];
    else if (a == "--rules" && has)
      rules = argv[++i];
    else if (a == "--coll" && has) {
      coll = coll_from_name(argv[++i]);
      if (coll < 0) {
        fprintf(stderr, "nccl-fabric-tune: unknown collective '%s'\n", argv[i]);
        return 2;
      }
    } else if (a == "--verbose" || a == "-v")
      g_verbose = true;
    else {
      fprintf(stderr, "nccl-fabric-tune show: bad or incomplete option '%s' (see --help)\n",
              a.c_str());
      return 2;
    }
  }
  if (platform.empty() || nodes == 0 || rpn == 0) {
    fprintf(stderr, "nccl-fabric-tune show: --platform, --nodes and --ranks-per-node are needed\n");
    return 2;
  }
  Shape s;
  if (!make_shape(platform, nodes, rpn, &s)) return 2;
  // The tuner reads these at init, as it would in a job.
  setenv("NCCL_FABRIC_PLATFORM", platform.c_str(), 1);
  if (!rules.empty()) setenv("NCCL_FABRIC_TUNER_RULES", rules.c_str(), 1);

  nfc::TunerLib lib;
  std::string err;
  const std::string path = find_tuner_lib(lib_path);
  if (!lib.load(path, abi, &err)) {
    fprintf(stderr, "nccl-fabric-tune: cannot load the tuner: %s\n", err.c_str());
    return 2;
  }
  ncclTunerConstants_v5_t nccl_c, tuned_c;
  nccl_default_constants(&nccl_c);
  tuned_c = nccl_c;
  void* ctx = nullptr;
  if (lib.init(&ctx, static_cast<size_t>(nodes) * rpn, nodes, rpn, abi >= 5 ? &tuned_c : nullptr,
               print_logger) != ncclSuccess) {
    fprintf(stderr, "nccl-fabric-tune: the tuner's init failed\n");
    return 1;
  }
  NcclModel alone, tuned, truth;
  nccl_build_model(nccl_c, s.comm, &alone);
  nccl_build_model(tuned_c, s.comm, &tuned);
  // The estimate of both choices under the corrected constants (the tuner's view of the network).
  ncclTunerConstants_v5_t corrected = nccl_c;
  correct_constants(s.facts, s.comm, &corrected);
  nccl_build_model(corrected, s.comm, &truth);

  printf("%s, %d node%s x %d rank%s per node (%d ranks), %s; tuner %s (ABI v%d)\n",
         s.row->name.empty() ? "generic" : s.row->name.c_str(), nodes, nodes == 1 ? "" : "s", rpn,
         rpn == 1 ? "" : "s", nodes * rpn, coll_name(coll), path.c_str(), abi);
  printf(
      "network: %s, %.0f Gb/s per node over %d NIC(s), %.1f us per hop; NCCL's model: %d "
      "channels, %.2f GB/s per channel over the network, %s inside a node\n",
      s.facts.net_known ? s.facts.provider.c_str() : "unknown", s.facts.node_net_gbps,
      s.facts.node_nics, s.facts.net_latency_us, s.comm.n_channels, s.comm.inter_bw_gbs,
      s.comm.intra_link == NCCL_HW_NVLINK ? "NVLink" : "PCIe");
  int changed = 0;
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) {
      const double b = nccl_c.hwLatencies[NCCL_HW_NET][a][p],
                   t = tuned_c.hwLatencies[NCCL_HW_NET][a][p];
      if (b != t) {
        if (changed++ == 0) printf("constants the tuner changed:\n");
        printf("  hwLatencies[NET][%s][%s] %.2f -> %.2f\n", algo_name(a), proto_name(p), b, t);
      }
    }
  const double* before = &nccl_c.llMaxBws[0][0];
  const double* after = &tuned_c.llMaxBws[0][0];
  const char* names[] = {"llMaxBws", "perChMaxRingLL128Bws", "perChMaxTreeLL128Bws",
                         "perChMaxTreeBws", "perChMaxNVLSTreeBws"};
  for (int k = 0; k < 5 * 12; ++k)
    if (before[k] != after[k]) {
      if (changed++ == 0) printf("constants the tuner changed:\n");
      printf("  %s[%d][%d] %.2f -> %.2f\n", names[k / 12], (k % 12) / 3, k % 3, before[k],
             after[k]);
    }
  if (changed == 0)
    printf("constants the tuner changed: none%s\n", abi < 5 ? " (ABI < v5 has none)" : "");
  printf("\n%10s  %-16s %10s   %-16s %4s %6s %10s  %7s\n", "size", "NCCL alone", "est. us",
         "with the tuner", "ch", "chunk", "est. us", "gain");
  for (uint64_t b = 8; b <= (16ull << 30); b *= 2) {
    float t_alone[7][3], t_tuned[7][3], t_truth[7][3];
    nccl_cost_table(alone, s.comm, coll, b, 1, t_alone);
    nccl_cost_table(tuned, s.comm, coll, b, 1, t_tuned);
    nccl_cost_table(truth, s.comm, coll, b, 1, t_truth);
    int a0 = -1, p0 = -1, a1 = -1, p1 = -1, nch = 0;
    nccl_pick(t_alone, &a0, &p0);
    lib.coll_info(ctx, coll, b, &t_tuned[0][0], 7, 3, &nch);
    nccl_pick(t_tuned, &a1, &p1);
    const double e0 = a0 >= 0 ? t_truth[a0][p0] : -1, e1 = a1 >= 0 ? t_truth[a1][p1] : -1;
    char ch[16] = "-";
    if (nch > 0) snprintf(ch, sizeof ch, "%d", nch);
    // v6: the chunk the tuner asks for, against NCCL's Simple default (4 MiB buffer / 8 steps).
    std::string chunk = "-";
    size_t ck = 512 << 10;
    if (p1 == NCCL_PROTO_SIMPLE &&
        lib.chunk_size(ctx, coll, b, a1, p1, &ck, nch > 0 ? nch : s.comm.n_channels))
      chunk = ck == (512u << 10) ? "=" : format_size(ck);
    printf("%10s  %-16s %10.1f   %-16s %4s %6s %10.1f  %6.2fx\n", human(b).c_str(),
           pair_name(a0, p0).c_str(), e0, pair_name(a1, p1).c_str(), ch, chunk.c_str(), e1,
           e1 > 0 && e0 > 0 ? e0 / e1 : 1.0);
  }
  printf(
      "\nest. us: NCCL's cost formula with the network constants corrected (docs/tuning.md#model)"
      "; gain: NCCL alone's estimate over the tuner's.\nch: channels the tuner sets (-: "
      "NCCL's); chunk (v6, Simple): what getChunkSize returns for NCCL's 512K (=: unchanged).\n");
  lib.finalize(ctx);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// calibrate

int cmd_calibrate(int argc, char** argv) {
  std::vector<tune::NcclTestsLog> logs;
  tune::CalibrateOptions opt;
  std::string out_path, label;
  std::vector<std::string> paths;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--label" && has) {
      label = argv[++i];
      continue;
    }
    if (a == "--in-place") {
      opt.use_in_place = true;
      continue;
    }
    if (a == "--any-shape") {
      opt.exact_shape = false;
      continue;
    }
    if (a == "--tolerance" && has) {
      char* end = nullptr;
      opt.tolerance = strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0' || opt.tolerance < 0 || opt.tolerance > 1) {
        fprintf(stderr, "nccl-fabric-tune calibrate: --tolerance takes 0..1 (0.03 = 3 %%)\n");
        return 2;
      }
      continue;
    }
    if ((a == "-o" || a == "--output") && has) {
      out_path = argv[++i];
      continue;
    }
    if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "nccl-fabric-tune calibrate: bad or incomplete option '%s'\n", a.c_str());
      return 2;
    }
    tune::NcclTestsLog log;
    std::string error;
    if (!ok(tune::load_nccl_tests(a, &log, &error))) {
      fprintf(stderr, "nccl-fabric-tune: %s\n", error.c_str());
      return 1;
    }
    if (!label.empty()) {
      const size_t slash = label.find('/');
      const int al = slash == std::string::npos ? -2 : algo_from_name(label.substr(0, slash));
      const int pr = slash == std::string::npos ? -2 : proto_from_name(label.substr(slash + 1));
      if (al < 0 || pr < 0) {
        fprintf(stderr, "nccl-fabric-tune: --label '%s' is not ALGO/PROTO (e.g. ring/ll128)\n",
                label.c_str());
        return 2;
      }
      log.algo = al;
      log.proto = pr;
      label.clear();
    }
    logs.push_back(log);
    paths.push_back(a);
  }
  if (logs.empty()) {
    fprintf(stderr, "nccl-fabric-tune calibrate: no logs given\n");
    return 2;
  }
  std::vector<Rule> rules;
  std::string error;
  if (!ok(tune::calibrate(logs, opt, &rules, &error))) {
    fprintf(stderr, "nccl-fabric-tune calibrate: %s\n", error.c_str());
    return 1;
  }
  std::string header = "Written by nccl-fabric-tune calibrate from:";
  for (size_t i = 0; i < logs.size(); ++i)
    header += "\n  " + paths[i] + " (" + pair_name(logs[i].algo, logs[i].proto) + ", " +
              std::to_string(logs[i].rows.size()) + " sizes)";
  header += "\nUse with NCCL_FABRIC_TUNER_RULES=<this file> (docs/tuning.md#rules).";
  const std::string text = format_rules(rules, header);
  // The output must read back; anything else is a bug here, better said than shipped.
  std::vector<Rule> check;
  if (!ok(parse_rules(text, "generated", &check, &error)) || check.size() != rules.size()) {
    fprintf(stderr, "nccl-fabric-tune calibrate: internal error, the rules do not read back: %s\n",
            error.c_str());
    return 1;
  }
  if (out_path.empty()) {
    fputs(text.c_str(), stdout);
  } else {
    std::ofstream f(out_path, std::ios::trunc);
    f << text;
    f.close();
    if (!f) {
      fprintf(stderr, "nccl-fabric-tune calibrate: cannot write %s\n", out_path.c_str());
      return 1;
    }
    fprintf(stderr, "%zu rules written to %s\n", rules.size(), out_path.c_str());
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// compare

int cmd_compare(int argc, char** argv) {
  std::string platform;
  std::vector<std::string> paths;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--platform" && i + 1 < argc)
      platform = argv[++i];
    else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "nccl-fabric-tune compare: bad or incomplete option '%s'\n", a.c_str());
      return 2;
    } else
      paths.push_back(a);
  }
  if (paths.empty()) {
    fprintf(stderr, "nccl-fabric-tune compare: no logs given\n");
    return 2;
  }
  for (const std::string& path : paths) {
    tune::NcclTestsLog log;
    std::string error;
    if (!ok(tune::load_nccl_tests(path, &log, &error))) {
      fprintf(stderr, "nccl-fabric-tune: %s\n", error.c_str());
      return 1;
    }
    if (log.coll < 0) {
      fprintf(stderr,
              "nccl-fabric-tune compare: %s: which collective is it? (the log and its "
              "name do not say)\n",
              path.c_str());
      return 1;
    }
    const int nodes = std::max(1, log.n_nodes), rpn = std::max(1, log.ranks_per_node);
    Shape s;
    if (!make_shape(platform, nodes, rpn, &s)) return 2;
    ncclTunerConstants_v5_t c;
    nccl_default_constants(&c);
    correct_constants(s.facts, s.comm, &c);
    NcclModel m;
    nccl_build_model(c, s.comm, &m);
    printf("%s: %s, %d ranks on %d nodes, NCCL %s; model: %s, %s\n", path.c_str(),
           coll_name(log.coll), log.n_ranks, nodes,
           log.nccl_version.empty() ? "?" : log.nccl_version.c_str(),
           s.row->name.empty() ? "generic platform" : s.row->name.c_str(),
           log.algo >= 0 ? ("the log's pair " + pair_name(log.algo, log.proto)).c_str()
                         : "the model's pick per size");
    printf("%10s  %10s %9s   %-16s %10s %9s  %9s\n", "size", "measured", "busbw", "model pair",
           "model us", "busbw", "meas/model");
    double log_sum = 0;
    int n = 0;
    for (const tune::NcclTestsRow& r : log.rows) {
      float t[7][3];
      nccl_cost_table(m, s.comm, log.coll, r.bytes, 1, t);
      int a = log.algo, p = log.proto;
      if (a < 0 || p < 0 || t[a][p] < 0) nccl_pick(t, &a, &p);
      if (a < 0) continue;
      const double model_us = t[a][p];
      const double model_bw = bus_bandwidth(log.coll, log.n_ranks, r.bytes, model_us);
      const double ratio = model_us > 0 ? model_us / r.time_us : 0;  // = measured bw / model bw
      printf("%10s  %10.1f %9.2f   %-16s %10.1f %9.2f  %9.2f\n", human(r.bytes).c_str(), r.time_us,
             r.busbw, pair_name(a, p).c_str(), model_us, model_bw, ratio);
      if (ratio > 0) {
        log_sum += std::log(ratio);
        ++n;
      }
    }
    if (n > 0)
      printf(
          "geometric mean of measured/model bandwidth: %.2f (1.00: the model is right; below: "
          "the machine is slower than modelled)\n\n",
          std::exp(log_sum / n));
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// bench

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int cmd_bench(int argc, char** argv) {
  std::string lib_path, platform = "p5.48xlarge";
  int nodes = 16, rpn = 8, calls = 200000, repeat = 15;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--lib" && has)
      lib_path = argv[++i];
    else if (a == "--platform" && has)
      platform = argv[++i];
    else if (a == "--nodes" && has && parse_int(argv[i + 1], 1, 1 << 20, &nodes))
      ++i;
    else if (a == "--ranks-per-node" && has && parse_int(argv[i + 1], 1, 1024, &rpn))
      ++i;
    else if (a == "--calls" && has && parse_int(argv[i + 1], 1000, 100000000, &calls))
      ++i;
    else if (a == "--repeat" && has && parse_int(argv[i + 1], 1, 1000, &repeat))
      ++i;
    else {
      fprintf(stderr, "nccl-fabric-tune bench: bad or incomplete option '%s'\n", a.c_str());
      return 2;
    }
  }
  Shape s;
  if (!make_shape(platform, nodes, rpn, &s)) return 2;
  setenv("NCCL_FABRIC_PLATFORM", platform.c_str(), 1);
  nfc::TunerLib lib;
  std::string err;
  const std::string path = find_tuner_lib(lib_path);
  if (!lib.load(path, 5, &err)) {
    fprintf(stderr, "nccl-fabric-tune: cannot load the tuner: %s\n", err.c_str());
    return 2;
  }
  ncclTunerConstants_v5_t c;
  nccl_default_constants(&c);
  void* ctx = nullptr;
  lib.init(&ctx, static_cast<size_t>(nodes) * rpn, nodes, rpn, &c, print_logger);
  NcclModel m;
  nccl_build_model(c, s.comm, &m);
  // 64 realistic tables: every collective at sizes spread over 8 B .. 16 GiB.
  struct Case {
    int coll;
    size_t bytes;
    float t[7][3];
  };
  std::vector<Case> cases;
  for (int k = 0; k < 64; ++k) {
    Case cs;
    cs.coll = k % 5;
    cs.bytes = static_cast<size_t>(8) << ((k * 7) % 31);
    nccl_cost_table(m, s.comm, cs.coll, cs.bytes, 1, cs.t);
    cases.push_back(cs);
  }
  const auto* v5 = static_cast<const ncclTuner_v5_t*>(lib.sym);
  std::vector<double> per_call, baseline;
  float work[7][3];
  volatile int sink = 0;
  for (int r = 0; r < repeat; ++r) {
    // The same loop without the call: copying the table is NCCL's cost, not the tuner's.
    double t0 = now_ns();
    for (int i = 0; i < calls; ++i) {
      const Case& cs = cases[static_cast<size_t>(i) & 63];
      std::memcpy(work, cs.t, sizeof work);
      sink = sink + static_cast<int>(work[1][2]);
    }
    const double base = (now_ns() - t0) / calls;
    t0 = now_ns();
    for (int i = 0; i < calls; ++i) {
      const Case& cs = cases[static_cast<size_t>(i) & 63];
      std::memcpy(work, cs.t, sizeof work);
      int nch = 0;
      v5->getCollInfo(ctx, static_cast<ncclFunc_t>(cs.coll), cs.bytes, 1,
                      reinterpret_cast<float**>(work), 7, 3, 0, &nch);
      sink = sink + static_cast<int>(work[1][2]) + nch;
    }
    per_call.push_back((now_ns() - t0) / calls - base);
    baseline.push_back(base);
  }
  lib.finalize(ctx);
  std::sort(per_call.begin(), per_call.end());
  std::sort(baseline.begin(), baseline.end());
  printf(
      "getCollInfo (v5, %s, %d nodes x %d): median %.1f ns per call (min %.1f, max %.1f) over "
      "%d runs of %d calls; the table copy around it, %.1f ns, is not counted\n",
      platform.c_str(), nodes, rpn, per_call[per_call.size() / 2], per_call.front(),
      per_call.back(), repeat, calls, baseline[baseline.size() / 2]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "show") return cmd_show(argc - 2, argv + 2);
  if (cmd == "calibrate") return cmd_calibrate(argc - 2, argv + 2);
  if (cmd == "compare") return cmd_compare(argc - 2, argv + 2);
  if (cmd == "bench") return cmd_bench(argc - 2, argv + 2);
  fprintf(stderr, "nccl-fabric-tune: unknown command '%s' (show, calibrate, compare, bench)\n",
          cmd.c_str());
  return 2;
}
