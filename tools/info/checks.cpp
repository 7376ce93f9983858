#include "info/checks.h"

#include "platform/platform.h"

#include <dlfcn.h>
#include <limits.h>
#include <strings.h>

#include <cstdlib>
#include <cstring>

namespace nfi {
namespace {

std::string real(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) != nullptr ? buf : p;
}

void add(Report* r, int sev, const char* id, const std::string& msg, const std::string& fix) {
  r->findings.push_back(Finding{sev, id, msg, fix});
}

std::string human_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    snprintf(buf, sizeof(buf), "%.1f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20))
    snprintf(buf, sizeof(buf), "%.1f MiB", b / double(1ull << 20));
  else
    snprintf(buf, sizeof(buf), "%llu KiB", static_cast<unsigned long long>(b >> 10));
  return buf;
}

std::string ptr_text(int p) {
  std::string s;
  if (p & 1) s += "HOST";
  if (p & 2) s += s.empty() ? "CUDA" : "|CUDA";
  if (p & 4) s += s.empty() ? "DMABUF" : "|DMABUF";
  return s;
}

void check_nccl_net_plugin(const std::string& ours, Report* r) {
  const char* v = getenv("NCCL_NET_PLUGIN");
  if (v == nullptr || v[0] == '\0') {
    add(r, 1, "net-plugin-unset",
        "NCCL_NET_PLUGIN is not set: NCCL then loads libnccl-net.so, "
        "not this plugin",
        "export NCCL_NET_PLUGIN=fabric (with libnccl-net-fabric.so on "
        "LD_LIBRARY_PATH) or the plugin's full path");
    return;
  }
  if (strcasecmp(v, "none") == 0) {
    add(r, 2, "net-plugin-none", "NCCL_NET_PLUGIN=none: NCCL loads no network plugin",
        "unset it or set NCCL_NET_PLUGIN=fabric");
    return;
  }
  std::string lib = v;
  if (lib.find('/') == std::string::npos && lib.find(".so") == std::string::npos)
    lib = "libnccl-net-" + lib + ".so";  // how NCCL turns a name into a library
  void* h = dlopen(lib.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) {
    add(r, 2, "net-plugin-unresolved",
        std::string("NCCL_NET_PLUGIN=") + v + " does not resolve: dlopen(" + lib + ") failed",
        "put the folder holding libnccl-net-fabric.so on LD_LIBRARY_PATH, or give the full path");
    return;
  }
  const void* sym = dlsym(h, "ncclNetPlugin_v11");
  Dl_info info{};
  std::string path = lib;
  if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) path = info.dli_fname;
  if (!ours.empty() && real(path) != real(ours))
    add(r, 1, "net-plugin-other",
        std::string("NCCL_NET_PLUGIN=") + v + " resolves to " + real(path) +
            ", not the plugin inspected here (" + real(ours) + ")",
        "check LD_LIBRARY_PATH order; rerun with --plugin to inspect that one");
}

void json_str(FILE* out, const std::string& s) {
  fputc('"', out);
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      fprintf(out, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", out);
    else if (c < 0x20)
      fprintf(out, "\\u%04x", c);
    else
      fputc(c, out);
  }
  fputc('"', out);
}

}  // namespace

int Report::exit_code() const {
  int worst = 0;
  for (const Finding& f : findings) worst = f.severity > worst ? f.severity : worst;
  return worst;
}

void run_checks(const std::string& plugin_path, Report* r) {
  for (const std::string& b : r->bad_params)
    add(r, 2, "bad-parameter", b, "see docs/configuration.md for the valid values");
  if (!r->plugin_error.empty())
    add(r, 2, "plugin-failed", "the plugin did not start: " + r->plugin_error,
        "see the plugin's messages below and docs/troubleshooting.md");
  else if (r->devices.empty())
    add(r, 2, "no-devices", "the plugin exposes no device", "check fi_info -t FI_EP_RDM");
  const char* net = getenv("NCCL_NET");
  if (net != nullptr && (strcasecmp(net, "Socket") == 0 || strcasecmp(net, "IB") == 0))
    add(r, 2, "nccl-net",
        std::string("NCCL_NET=") + net + " makes NCCL use its own " + net +
            " transport, never this plugin",
        "unset NCCL_NET or set NCCL_NET=fabric");
  check_nccl_net_plugin(plugin_path, r);
  const bool tcp = r->provider.find("tcp") != std::string::npos ||
                   r->provider.find("sockets") != std::string::npos;
  if (r->efa_expected && r->provider != "efa") {
    add(r, 1, "efa-expected",
        "provider '" + (r->provider.empty() ? std::string("none") : r->provider) + "' on " +
            r->platform + ": EFA was expected" +
            (tcp ? "; expect 20-30x lower bandwidth than EFA" : ""),
        "check that the EFA device is attached (fi_info -p efa), the EFA device plugin on "
        "Kubernetes, FI_PROVIDER / NCCL_FABRIC_PROVIDER, and the EFA driver");
  }
  if ((r->api_below_library_118 && r->provider == "efa") ||
      (r->api_below_library_120 && r->nic_hmem))
    add(r, 1, "libfabric-api",
        "libfabric " + r->libfabric_version + " is loaded but API " + r->api_version +
            " was obtained (the plugin was built against " + r->libfabric_built + " headers): " +
            (r->api_below_library_118
                 ? "below 1.18 EFA leaves device RDMA off on first-generation devices"
                 : "below 1.20 there is no DMA-BUF registration"),
        "rebuild the plugin against the installed libfabric (--with-libfabric=/opt/amazon/efa); "
        "docs/compatibility.md");
  const char* use_rdma = getenv("FI_EFA_USE_DEVICE_RDMA");
  if (r->gdr_expected && use_rdma != nullptr &&
      (strcmp(use_rdma, "0") == 0 || strcasecmp(use_rdma, "false") == 0))
    add(r, 1, "efa-device-rdma-off",
        "FI_EFA_USE_DEVICE_RDMA=0 on " + r->platform +
            ", which has RDMA-capable EFA: GPUDirect and RDMA writes are off",
        "unset it");
  bool any_cuda = false;
  for (const DeviceInfo& d : r->devices) any_cuda = any_cuda || (d.ptr_support & 2) != 0;
  if (r->gdr_expected && r->cuda_available && !r->devices.empty() && !any_cuda)
    add(r, 1, "gdr-expected",
        "GPUDirect RDMA is off on " + r->platform +
            ", where it is expected: NCCL stages every transfer through host memory (" +
            (r->gdr_reason.empty() ? std::string("no reason logged") : r->gdr_reason) + ")",
        "see the reason; on EFA: nvidia-peermem loaded or a DMA-BUF capable kernel/driver, "
        "libfabric 1.18+");
  if (!r->memlock_unlimited && (r->provider == "efa" || r->memlock_bytes < (64ull << 20)))
    add(r, 1, "memlock",
        "locked-memory limit is " + human_bytes(r->memlock_bytes) +
            ": registering NCCL's buffers (pinned by the NIC) may fail",
        "ulimit -l unlimited (Docker: --ulimit memlock=-1; Slurm: PropagateResourceLimits; "
        "Kubernetes: the container runtime's default)");
  for (const std::string& w : r->plugin_warnings) {
    // What the platform expected is reported above, under its own id.
    if (w.find(" was expected") != std::string::npos && (r->efa_expected || r->gdr_expected))
      continue;
    add(r, 1, "plugin-warning", "the plugin warns: " + w, "see docs/troubleshooting.md");
  }
  if (r->peer_ran && !r->peer_ok) {
    const std::string& o = r->peer_output;
    const bool unreachable =
        o.find("timed out") != std::string::npos || o.find("timeout") != std::string::npos ||
        o.find("unreach") != std::string::npos || o.find("refused") != std::string::npos;
    add(r, 2, "peer",
        "the transfer with the other machine failed" +
            std::string(unreachable ? " (the peer did not answer)" : ""),
        unreachable ? "on EFA the security group must allow all traffic to and from itself; "
                      "check that both sides run the same plugin and provider"
                    : "see the output of nccl-fabric-perf below");
  }
}

void print_text(const Report& r, FILE* out) {
  fprintf(out, "nccl-fabric-info\n\n== platform\n  %s (%s)\n", r.platform.c_str(),
          r.platform_source.c_str());
  for (const std::string& l : r.platform_lines) fprintf(out, "  %s\n", l.c_str());
  fprintf(out,
          "\n== libfabric %s (loaded; built against %s headers; API %s)\n  provider: %s\n"
          "  fabric: %s (NCCL_FABRIC_EFA_FABRIC=%s)\n  tried: %s\n",
          r.libfabric_version.c_str(), r.libfabric_built.c_str(),
          r.api_version.empty() ? "none obtained" : r.api_version.c_str(),
          r.provider.empty() ? "(none)" : r.provider.c_str(),
          r.fabric.empty() ? "(none)" : r.fabric.c_str(),
          r.efa_fabric.empty() ? "auto" : r.efa_fabric.c_str(), r.providers_tried.c_str());
  fprintf(out, "  CUDA: %s; context: %s\n", r.cuda.c_str(), r.cuda_context.c_str());
  fprintf(out, "\n== NICs (topology: %s)\n", r.topology.c_str());
  for (const NicInfo& n : r.nics) {
    fprintf(out, "  %-20s pci=%s numa=%d speed=%d Mb/s rma=%s hmem=%s fabric=%s tagged=%s%s%s\n",
            n.domain.c_str(), n.pci_path.empty() ? "none" : n.pci_path.c_str(), n.numa,
            n.speed_mbps, n.rma ? "yes" : "no", n.hmem ? "yes" : "no",
            n.fabric.empty() ? "?" : n.fabric.c_str(), n.tagged ? "yes" : "no",
            n.nearest_gpus.empty() ? "" : " gpus=", n.nearest_gpus.c_str());
    if (!n.speed_source.empty())
      fprintf(out, "  %-20s speed from: %s\n", "", n.speed_source.c_str());
    if (!n.fabric_why.empty())
      fprintf(out, "  %-20s fabric: %s%s\n", "", n.fabric_why.c_str(),
              n.rx_cq_data ? " (writes with CQ data consume posted receives: FI_RX_CQ_DATA)" : "");
  }
  fprintf(out, "\n== NCCL devices (plugin %s, ABI v%d)\n", r.plugin.c_str(), r.plugin_abi);
  if (!r.plugin_error.empty()) fprintf(out, "  plugin error: %s\n", r.plugin_error.c_str());
  for (const DeviceInfo& d : r.devices)
    fprintf(out,
            "  %d: %-28s rails=%d speed=%d Mb/s ptrSupport=%s maxRecvs=%d railId=%d planeId=%d "
            "pci=%s\n",
            d.index, d.name.c_str(), d.rails, d.speed_mbps, ptr_text(d.ptr_support).c_str(),
            d.max_recvs, d.rail_id, d.plane_id, d.pci_path.empty() ? "none" : d.pci_path.c_str());
  if (!r.gdr_reason.empty()) fprintf(out, "  %s\n", r.gdr_reason.c_str());
  if (!r.dmabuf_reason.empty()) fprintf(out, "  %s\n", r.dmabuf_reason.c_str());
  fprintf(out, "\n== limits\n  memlock: %s\n  huge pages: %lu total, %lu free, %lu kB each\n",
          r.memlock_unlimited ? "unlimited" : human_bytes(r.memlock_bytes).c_str(),
          r.hugepages_total, r.hugepages_free, r.hugepage_kb);
  fprintf(out, "\n== environment (NCCL_*, FI_*)\n");
  if (r.env.empty()) fprintf(out, "  (none set)\n");
  for (const EnvVar& e : r.env)
    fprintf(out, "  %s=%s  [%s]\n", e.name.c_str(), e.value.c_str(), e.source.c_str());
  if (r.peer_ran) {
    fprintf(out, "\n== transfer with the peer: %s\n  %s\n", r.peer_ok ? "ok" : "FAILED",
            r.peer_command.c_str());
    fprintf(out, "%s", r.peer_output.c_str());
  }
  fprintf(out, "\n== checks\n");
  if (r.findings.empty()) fprintf(out, "  all good\n");
  for (const Finding& f : r.findings)
    fprintf(out, "  %s [%s] %s\n      -> %s\n", f.severity >= 2 ? "ERROR  " : "WARNING",
            f.id.c_str(), f.message.c_str(), f.fix.c_str());
}

void print_json(const Report& r, FILE* out) {
  auto kv = [&](const char* k, const std::string& v, bool comma = true) {
    fprintf(out, "\"%s\": ", k);
    json_str(out, v);
    if (comma) fputs(", ", out);
  };
  fputs("{\"schema\": 1, ", out);
  fputs("\"platform\": {", out);
  kv("name", r.platform);
  kv("source", r.platform_source);
  fprintf(out, "\"efa_expected\": %s, \"gdr_expected\": %s}, ", r.efa_expected ? "true" : "false",
          r.gdr_expected ? "true" : "false");
  fputs("\"libfabric\": {", out);
  kv("version", r.libfabric_version);
  kv("built", r.libfabric_built);
  kv("api", r.api_version);
  kv("provider", r.provider);
  kv("fabric", r.fabric);
  kv("efa_fabric", r.efa_fabric.empty() ? "auto" : r.efa_fabric);
  kv("tried", r.providers_tried, false);
  fputs("}, \"cuda\": {", out);
  kv("driver", r.cuda);
  kv("context", r.cuda_context);
  fprintf(out, "\"available\": %s}, \"nics\": [", r.cuda_available ? "true" : "false");
  for (size_t i = 0; i < r.nics.size(); ++i) {
    const NicInfo& n = r.nics[i];
    fputs(i ? ", {" : "{", out);
    kv("domain", n.domain);
    kv("pci_path", n.pci_path);
    kv("nearest_gpus", n.nearest_gpus);
    kv("speed_source", n.speed_source);
    kv("fabric", n.fabric);
    kv("fabric_why", n.fabric_why);
    fprintf(out,
            "\"numa\": %d, \"speed_mbps\": %d, \"rma\": %s, \"hmem\": %s, \"tagged\": %s, "
            "\"rx_cq_data\": %s}",
            n.numa, n.speed_mbps, n.rma ? "true" : "false", n.hmem ? "true" : "false",
            n.tagged ? "true" : "false", n.rx_cq_data ? "true" : "false");
  }
  fputs("], ", out);
  kv("topology", r.topology);
  fputs("\"plugin\": {", out);
  kv("path", r.plugin);
  kv("name", r.plugin_name);
  kv("error", r.plugin_error);
  kv("gdr", r.gdr_reason);
  kv("dmabuf", r.dmabuf_reason);
  fprintf(out, "\"abi\": %d, \"devices\": [", r.plugin_abi);
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const DeviceInfo& d = r.devices[i];
    fputs(i ? ", {" : "{", out);
    kv("name", d.name);
    kv("pci_path", d.pci_path);
    kv("ptr_support", ptr_text(d.ptr_support));
    fprintf(out,
            "\"index\": %d, \"rails\": %d, \"speed_mbps\": %d, \"max_recvs\": %d, \"rail_id\": %d, "
            "\"plane_id\": %d}",
            d.index, d.rails, d.speed_mbps, d.max_recvs, d.rail_id, d.plane_id);
  }
  fputs("]}, \"limits\": {", out);
  fprintf(out,
          "\"memlock_unlimited\": %s, \"memlock_bytes\": %llu, \"hugepages_total\": %lu, "
          "\"hugepages_free\": %lu, \"hugepage_kb\": %lu}, \"env\": [",
          r.memlock_unlimited ? "true" : "false", static_cast<unsigned long long>(r.memlock_bytes),
          r.hugepages_total, r.hugepages_free, r.hugepage_kb);
  for (size_t i = 0; i < r.env.size(); ++i) {
    fputs(i ? ", {" : "{", out);
    kv("name", r.env[i].name);
    kv("value", r.env[i].value);
    kv("source", r.env[i].source, false);
    fputs("}", out);
  }
  fputs("], ", out);
  if (r.peer_ran) {
    fprintf(out, "\"peer\": {\"ok\": %s, ", r.peer_ok ? "true" : "false");
    kv("command", r.peer_command);
    kv("output", r.peer_output, false);
    fputs("}, ", out);
  }
  fputs("\"checks\": [", out);
  for (size_t i = 0; i < r.findings.size(); ++i) {
    const Finding& f = r.findings[i];
    fputs(i ? ", {" : "{", out);
    kv("severity", f.severity >= 2 ? "error" : "warning");
    kv("id", f.id);
    kv("message", f.message);
    kv("fix", f.fix, false);
    fputs("}", out);
  }
  fprintf(out, "], \"exit_code\": %d}\n", r.exit_code());
}

void platform_section(const nf::Params& params, Report* r) {
  nf::PlatformChoice c;
  std::string err;
  if (!nf::ok(nf::choose_platform(params, &c, &err))) {
    r->platform = "(none)";
    r->platform_source = err;
    add(r, 2, "platform", err,
        "NCCL_FABRIC_PLATFORM must be auto, none or a row of "
        "docs/platforms.md");
    return;
  }
  r->platform = c.row->name;
  r->platform_source = c.source;
  r->efa_expected = c.row->efa_expected;
  r->gdr_expected = c.row->gdr_expected == nf::GdrExpect::kYes;
  r->platform_lines.push_back(nf::describe_platform(*c.row));
  for (const auto& kv : c.row->nccl_env)
    r->platform_lines.push_back("default " + kv.first + "=" + kv.second);
}

}  // namespace nfi
