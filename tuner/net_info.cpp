#include "tuner/net_info.h"

#include <cstdlib>
#include <vector>

namespace nf {
namespace {

// Constant-initialised: safe to set from another file's static initialiser.
NetSummaryFn g_source = nullptr;

std::vector<std::string> split_bars(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t bar = s.find('|', start);
    out.push_back(s.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (bar == std::string::npos) return out;
    start = bar + 1;
  }
}

bool parse_int(const std::string& s, int lo, int hi, int* out) {
  if (s.empty() || s.size() > 9) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

void set_net_summary_source(NetSummaryFn fn) { g_source = fn; }

std::string format_net_summary(const NetSummary& s) {
  return s.provider + "|" + std::to_string(s.devices) + "|" + std::to_string(s.rails) + "|" +
         std::to_string(s.speed_mbps) + "|" + (s.gdr ? "1" : "0") + "|" + s.platform;
}

bool parse_net_summary(const std::string& text, NetSummary* out) {
  const std::vector<std::string> f = split_bars(text);
  NetSummary s;
  int gdr = 0;
  if (f.size() != 6 || f[0].empty() || !parse_int(f[1], 1, 65536, &s.devices) ||
      !parse_int(f[2], 1, 64, &s.rails) || !parse_int(f[3], 0, 100000000, &s.speed_mbps) ||
      !parse_int(f[4], 0, 1, &gdr))
    return false;
  s.found = true;
  s.provider = f[0];
  s.gdr = gdr == 1;
  s.platform = f[5];
  *out = s;
  return true;
}

NetSummary tuner_net_summary() {
  if (g_source != nullptr) return g_source();
  NetSummary s;
  const char* v = std::getenv(kNetSummaryEnv);
  if (v != nullptr && !parse_net_summary(v, &s)) s = NetSummary();
  return s;
}

}  // namespace nf
