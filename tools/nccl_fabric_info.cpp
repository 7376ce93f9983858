// nccl-fabric-info: what the plugin will do on this machine, and the traps that make NCCL quietly
// slow. Loads the plugin through its ABI as NCCL does and reads what it logs about itself.
// docs/nccl-fabric-info.md describes the output and the JSON schema.
#include <dlfcn.h>
#include <limits.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "client/plugin_loader.h"
#include "core/plugin.h"
#include "fabric/fabric.h"
#include "info/checks.h"
#include "info/stats_report.h"
#include "mem/cuda.h"
#include "platform/platform.h"
#include "topo/topo.h"
#include "util/params.h"

extern char** environ;

namespace {

using nfi::Report;

std::vector<std::string> g_log;  // what the plugin logged (WARN lines start with "WARN ")

void capture(bool warn, const char* text) {
  std::string t = text;
  if (t.compare(0, 11, "NET/FABRIC ") == 0) t.erase(0, 11);
  g_log.push_back((warn ? "WARN " : "") + t);
}

struct Args {
  std::string plugin;
  bool json = false;
  bool no_cuda = false;
  std::string peer;  // HOST:PORT
  int listen_port = 0;
  int timeout_s = 30;
  // --stats FILE...: read the plugin's statistics files instead (no plugin is loaded).
  bool stats = false;
  std::vector<std::string> stats_files;
  double stall_s = 10;
  bool stall_set = false;
};

void usage(const char* me) {
  printf(
      "usage: %s [--json] [--plugin PATH] [--no-cuda] [--listen PORT | --peer HOST:PORT]\n"
      "            [--timeout SEC]\n"
      "       %s --stats [--stall SEC] [--json] FILE...\n"
      "Prints the platform, libfabric, NICs, the NCCL devices the plugin exposes, limits and the\n"
      "NCCL_*/FI_* environment, then checks for known traps.\n"
      "  --json          one JSON document instead of text (docs/nccl-fabric-info.md)\n"
      "  --plugin PATH   the plugin to inspect (default: NCCL_NET_PLUGIN when it is a path,\n"
      "                  else the build tree's, else the installed one)\n"
      "  --no-cuda       do not make a CUDA context current (GPUDirect is then not probed)\n"
      "  --listen PORT / --peer HOST:PORT\n"
      "                  also run a short transfer between two machines through the plugin\n"
      "                  (nccl-fabric-perf, latency and bandwidth), or say why it failed\n"
      "Exit status: 0 all good, 1 warnings, 2 errors.\n"
      "\n"
      "With --stats, reads the statistics files the plugin wrote (NCCL_FABRIC_STATS, one per\n"
      "process; docs/stats.md) and prints a row per process and a verdict: stuck, errors, slow.\n"
      "No plugin is loaded. Every argument that is not an option is a file.\n"
      "  --stall SEC     a comm with pending requests and no progress for SEC seconds is stuck\n"
      "                  (default 10)\n"
      "  --json          one JSON document instead of text\n"
      "Exit status: 0 nothing flagged, 1 a node flagged, 2 a file could not be read.\n",
      me, me);
}

// "2.5" -> 2.5; false unless the whole text is a number above 0.
bool positive_seconds(const std::string& v, double* out) {
  char* end = nullptr;
  const double d = strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d > 0) || d > 1e9) return false;
  *out = d;
  return true;
}

bool parse_args(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&](std::string* v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string v;
    if (s == "--json")
      a->json = true;
    else if (s == "--no-cuda")
      a->no_cuda = true;
    else if (s == "--plugin" && next(&v))
      a->plugin = v;
    else if (s == "--peer" && next(&v) && v.find(':') != std::string::npos)
      a->peer = v;
    else if (s == "--listen" && next(&v) && atoi(v.c_str()) > 0 && atoi(v.c_str()) < 65536)
      a->listen_port = atoi(v.c_str());
    else if (s == "--timeout" && next(&v) && atoi(v.c_str()) > 0)
      a->timeout_s = atoi(v.c_str());
    else if (s == "--stats")
      a->stats = true;
    else if (s == "--stall" && next(&v) && positive_seconds(v, &a->stall_s))
      a->stall_set = true;
    else if (s == "--" && a->stats) {
      while (++i < argc) a->stats_files.push_back(argv[i]);
    } else if (a->stats && !s.empty() && s[0] != '-')
      a->stats_files.push_back(s);
    else if (s == "-h" || s == "--help") {
      usage(argv[0]);
      exit(0);
    } else {
      fprintf(stderr, "nccl-fabric-info: bad argument '%s' (--help)\n", s.c_str());
      return false;
    }
  }
  if (a->stats) {
    const char* other = a->no_cuda           ? "--no-cuda"
                        : !a->plugin.empty() ? "--plugin"
                        : !a->peer.empty()   ? "--peer"
                        : a->listen_port > 0 ? "--listen"
                        : a->timeout_s != 30 ? "--timeout"
                                             : nullptr;
    if (other != nullptr) {
      fprintf(stderr, "nccl-fabric-info: %s does not go with --stats\n", other);
      return false;
    }
    if (a->stats_files.empty()) {
      fprintf(stderr, "nccl-fabric-info: --stats needs at least one FILE\n");
      return false;
    }
  } else if (a->stall_set) {
    fprintf(stderr, "nccl-fabric-info: --stall goes with --stats\n");
    return false;
  }
  return true;
}

std::string exe_dir() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return ".";
  exe[n] = '\0';
  std::string d(exe);
  return d.substr(0, d.rfind('/'));
}

bool readable(const std::string& p) { return access(p.c_str(), R_OK) == 0; }

std::string find_plugin(const Args& a) {
  if (!a.plugin.empty()) return a.plugin;
  const char* env = getenv("NCCL_NET_PLUGIN");
  if (env != nullptr && strchr(env, '/') != nullptr && readable(env)) return env;
  const std::string d = exe_dir();
  for (const std::string& c :
       {d + "/../.libs/libnccl-net-fabric.so", d + "/../../.libs/libnccl-net-fabric.so",
        d + "/../lib/libnccl-net-fabric.so", std::string(NF_DEFAULT_PLUGIN)})
    if (!c.empty() && readable(c)) return c;
  return "";
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!f || !std::getline(f, s)) return "";
  return s;
}

// NCCL makes a CUDA context current before it initialises the plugin; a diagnosis must see what
// NCCL's plugin will see, so do the same where there is a GPU.
std::string make_cuda_current() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h == nullptr) return "no CUDA driver";
  using namespace nf;
  auto init = reinterpret_cast<cu::InitFn>(dlsym(h, "cuInit"));
  auto retain =
      reinterpret_cast<cu::DevicePrimaryCtxRetainFn>(dlsym(h, "cuDevicePrimaryCtxRetain"));
  auto set_current = reinterpret_cast<cu::CtxSetCurrentFn>(dlsym(h, "cuCtxSetCurrent"));
  cu::Context ctx = nullptr;
  if (!init || !retain || !set_current || init(0) != cu::kSuccess) return "no CUDA device";
  if (retain(&ctx, 0) != cu::kSuccess || set_current(ctx) != cu::kSuccess)
    return "no CUDA context on device 0";
  return "";
}

// The lines of the plugin's log that contain `key`.
std::vector<std::string> log_lines(const std::string& key) {
  std::vector<std::string> out;
  for (const std::string& l : g_log)
    if (l.find(key) != std::string::npos) out.push_back(l);
  return out;
}

void collect_env(const std::map<std::string, std::string>& before, Report* r) {
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    if (k.compare(0, 5, "NCCL_") != 0 && k.compare(0, 3, "FI_") != 0) continue;
    nfi::EnvVar v;
    v.name = k;
    v.value = kv.substr(eq + 1);
    auto it = before.find(k);
    v.source = it == before.end()      ? "platform default (set by the plugin)"
               : it->second != v.value ? "changed by the plugin"
                                       : "user";
    r->env.push_back(v);
  }
}

std::map<std::string, std::string> env_snapshot() {
  std::map<std::string, std::string> m;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

void collect_limits(Report* r) {
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    r->memlock_unlimited = rl.rlim_cur == RLIM_INFINITY;
    r->memlock_bytes = rl.rlim_cur == RLIM_INFINITY ? 0 : static_cast<uint64_t>(rl.rlim_cur);
  }
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    unsigned long v = 0;
    if (sscanf(line.c_str(), "HugePages_Total: %lu", &v) == 1)
      r->hugepages_total = v;
    else if (sscanf(line.c_str(), "HugePages_Free: %lu", &v) == 1)
      r->hugepages_free = v;
    else if (sscanf(line.c_str(), "Hugepagesize: %lu kB", &v) == 1)
      r->hugepage_kb = v;
  }
}

void collect_nics(const nf::Params& p, bool cuda, Report* r) {
  std::vector<nf::Nic> nics;
  std::string report;
  uint32_t api_cap = 0;
  std::string api_error;
  if (!nf::ok(nf::parse_api_version(p.get_str(nf::ParamId::kApiVersion), &api_cap, &api_error)))
    api_cap = 0;  // reported with the other bad parameters
  // The fabric the plugin would take, as it would choose it (a bad value is reported with the
  // other bad parameters, and auto stands in here).
  nf::EfaFabric efa_fabric = nf::EfaFabric::kAuto;
  std::string fabric_error;
  if (!nf::parse_efa_fabric(p.get_str(nf::ParamId::kEfaFabric), &efa_fabric, &fabric_error))
    efa_fabric = nf::EfaFabric::kAuto;
  r->efa_fabric = nf::efa_fabric_str(efa_fabric);
  const bool need_tagged = p.get_str(nf::ParamId::kProtocol) == "sendrecv";
  const nf::Status s =
      nf::discover_nics(p.get_str(nf::ParamId::kProvider), p.get_str(nf::ParamId::kDomain), cuda,
                        &nics, &report, api_cap, efa_fabric, need_tagged);
  r->providers_tried = report;
  if (!nf::ok(s)) return;
  r->provider = nics.front().provider;
  r->fabric = nics.front().fabric;
  const uint32_t api = nics.front().api_version;
  r->api_version = nf::api_version_str(api);
  r->api_below_library_118 = api < FI_VERSION(1, 18) && fi_version() >= FI_VERSION(1, 18);
  r->api_below_library_120 = api < FI_VERSION(1, 20) && fi_version() >= FI_VERSION(1, 20);
  for (const nf::Nic& n : nics) r->nic_hmem = r->nic_hmem || n.hmem;
  // The speeds the plugin will report, with their sources (a bad NCCL_FABRIC_PLATFORM is
  // reported by the platform section; the generic row stands in here).
  nf::PlatformChoice choice;
  const nf::Platform* row = &nf::generic_platform();
  if (nf::ok(nf::choose_platform(p, &choice)) && choice.row != nullptr) row = choice.row;
  nf::settle_nic_speeds(p, *row, &nics);
  std::unique_ptr<nf::Topology> topo;
  std::string terr;
  if (!nf::ok(nf::Topology::load(&topo, &terr))) topo.reset();
  r->topology = !topo              ? "hwloc failed: " + terr
                : !topo->has_pci() ? "hwloc sees no PCI devices"
                                   : std::to_string(topo->pci_count()) + " PCI devices, " +
                                         std::to_string(topo->gpus().size()) + " GPU(s)";
  for (const nf::Nic& n : nics) {
    nfi::NicInfo ni;
    ni.domain = n.domain;
    ni.pci_path = n.pci_path;
    ni.speed_mbps = n.speed_mbps;
    ni.speed_source = n.speed_source;
    ni.rma = n.rma;
    ni.hmem = n.hmem;
    ni.fabric = n.fabric;
    ni.fabric_why = n.fabric_why;
    ni.tagged = n.tagged;
    ni.rx_cq_data = n.rx_cq_data;
    if (!n.pci_path.empty()) {
      const std::string numa = read_line(n.pci_path + "/numa_node");
      ni.numa = numa.empty() ? -1 : atoi(numa.c_str());
    }
    nf::PciInfo pi;
    if (topo && topo->lookup(nf::nic_bus_id(n), &pi)) {
      if (ni.numa < 0) ni.numa = pi.numa_node;
      if (ni.pci_path.empty()) ni.pci_path = pi.sysfs_path;
      for (const std::string& g : pi.nearest_gpus)
        ni.nearest_gpus += (ni.nearest_gpus.empty() ? "" : ",") + g;
    }
    r->nics.push_back(ni);
  }
}

void collect_devices(const std::string& path, Report* r) {
  r->plugin = path;
  if (path.empty()) {
    r->plugin_error = "no plugin found (pass --plugin PATH)";
    return;
  }
  nfc::set_log_sink(capture);
  static nfc::NetPlugin plugin;  // never unloaded: its provider may keep threads
  std::string err;
  if (!plugin.load(path, 0, &err)) {
    r->plugin_error = err;
    return;
  }
  r->plugin_abi = plugin.version();
  r->plugin_name = plugin.name();
  if (plugin.init() != ncclSuccess) {
    r->plugin_error = "init failed";
    for (const std::string& l : g_log)
      if (l.compare(0, 5, "WARN ") == 0) r->plugin_error += "; " + l.substr(5);
    return;
  }
  int n = 0;
  if (plugin.devices(&n) != ncclSuccess) {
    r->plugin_error = "devices() failed";
    return;
  }
  for (int i = 0; i < n; ++i) {
    nfc::NetProps props;
    if (plugin.properties(i, &props) != ncclSuccess) continue;
    nfi::DeviceInfo d;
    d.index = i;
    d.name = props.name;
    d.pci_path = props.pci_path;
    d.speed_mbps = props.speed;
    d.ptr_support = props.ptr_support;
    d.max_recvs = props.max_recvs;
    d.rail_id = props.rail_id;
    d.plane_id = props.plane_id;
    d.rails = 1;
    for (char c : props.name) d.rails += c == '+';
    const size_t x = props.name.rfind('x');
    if (x != std::string::npos && x + 1 < props.name.size() &&
        props.name.find_first_not_of("0123456789", x + 1) == std::string::npos)
      d.rails = atoi(props.name.c_str() + x + 1);
    r->devices.push_back(d);
  }
  for (const std::string& l : log_lines("GPUDirect RDMA")) r->gdr_reason = l;
  for (const std::string& l : log_lines("DMA-BUF ")) r->dmabuf_reason = l;
  for (const std::string& l : g_log)
    if (l.compare(0, 5, "WARN ") == 0) r->plugin_warnings.push_back(l.substr(5));
}

// The two-machine check: nccl-fabric-perf, next to this program, with a short plan.
void run_peer(const Args& a, const std::string& plugin, Report* r) {
  const std::string perf = exe_dir() + "/nccl-fabric-perf";
  std::string cmd = "'" + perf + "' -t lat,bw -b 8 -e 4M -f 512 -n 20 -r 1 --timeout " +
                    std::to_string(a.timeout_s);
  if (!plugin.empty()) cmd += " --plugin '" + plugin + "'";
  cmd +=
      a.listen_port > 0 ? " --listen " + std::to_string(a.listen_port) : " --peer '" + a.peer + "'";
  cmd += " 2>&1";
  r->peer_ran = true;
  r->peer_command = cmd;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) {
    r->peer_ok = false;
    r->peer_output = "cannot run " + perf;
    return;
  }
  char buf[512];
  while (fgets(buf, sizeof(buf), f) != nullptr) r->peer_output += buf;
  const int st = pclose(f);
  r->peer_ok = st == 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse_args(argc, argv, &a)) return 2;
  if (a.stats) return nfi::stats_report(a.stats_files, a.stall_s, stdout, stderr, a.json);
  Report r;
  // Parameters: every bad NCCL_FABRIC_* value, by name.
  int ndefs = 0;
  const nf::ParamDef* defs = nf::param_defs(&ndefs);
  nf::Params params;
  for (int i = 0; i < ndefs; ++i) {
    const char* v = getenv(defs[i].name);
    if (v == nullptr) continue;
    int64_t iv = 0;
    std::string sv, err;
    if (!nf::parse_param(defs[i], v, &iv, &sv, &err))
      r.bad_params.push_back(err);
    else
      params.set(defs[i].id, v);
  }
  {
    uint32_t cap = 0;
    std::string err;
    if (!nf::ok(nf::parse_api_version(params.get_str(nf::ParamId::kApiVersion), &cap, &err)))
      r.bad_params.push_back(err);
  }
  const std::map<std::string, std::string> before = env_snapshot();
  r.cuda_context = a.no_cuda ? "not made (--no-cuda)" : make_cuda_current();
  if (r.cuda_context.empty()) r.cuda_context = "current on device 0";
  nf::Cuda& cuda = nf::Cuda::get(params.get_str(nf::ParamId::kCudaLibrary));
  r.cuda = cuda.why();
  r.cuda_available = cuda.available();
  r.libfabric_version = nf::api_version_str(fi_version());
  r.libfabric_built = nf::api_version_str(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION));
  collect_nics(params, cuda.available(), &r);
  const std::string plugin = find_plugin(a);
  collect_devices(plugin, &r);
  collect_env(before, &r);
  collect_limits(&r);
  nfi::platform_section(params, &r);
  if (a.listen_port > 0 || !a.peer.empty()) run_peer(a, plugin, &r);
  nfi::run_checks(plugin, &r);
  if (a.json)
    nfi::print_json(r, stdout);
  else
    nfi::print_text(r, stdout);
  return r.exit_code();
}
