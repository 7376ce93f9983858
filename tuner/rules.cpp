// The rules file: strict parsing (every problem names its line), and the writer calibrate uses.
#include "tuner/rules.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace nf {
namespace tuner {
namespace {

const char* const kCollNames[kNumColls] = {"broadcast", "reduce", "allgather", "reducescatter",
                                           "allreduce"};
const char* const kAlgoNames[kNumAlgos] = {
    "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
const char* const kProtoNames[kNumProtos] = {"ll", "ll128", "simple"};

std::string lower(const std::string& s) {
  std::string r = s;
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Drops '_' and '-' so that NCCL's spellings ("AllReduce", "CollNetDirect", "NVLSTree",
// "all_reduce") map to ours.
std::string squash(const std::string& s) {
  std::string r;
  for (char c : lower(s))
    if (c != '_' && c != '-') r += c;
  return r;
}

int lookup(const std::string& s, const char* const* names, int n) {
  if (s == "*") return kAny;
  const std::string q = squash(s);
  for (int i = 0; i < n; ++i)
    if (q == squash(names[i])) return i;
  return -2;
}

bool parse_uint(const std::string& s, int64_t max, int64_t* out) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  int64_t v = std::strtoll(s.c_str(), nullptr, 10);
  if (v > max) return false;
  *out = v;
  return true;
}

// "*", "N" or "A-B".
bool parse_range(const std::string& s, IntRange* r, std::string* why) {
  if (s == "*") {
    *r = IntRange();
    return true;
  }
  const size_t dash = s.find('-');
  int64_t lo = 0, hi = 0;
  if (dash == std::string::npos) {
    if (!parse_uint(s, INT32_MAX, &lo)) {
      *why = "expected *, N or A-B, got \"" + s + "\"";
      return false;
    }
    hi = lo;
  } else if (!parse_uint(s.substr(0, dash), INT32_MAX, &lo) ||
             !parse_uint(s.substr(dash + 1), INT32_MAX, &hi)) {
    *why = "expected *, N or A-B, got \"" + s + "\"";
    return false;
  }
  if (lo > hi) {
    *why = "empty range \"" + s + "\" (" + std::to_string(lo) + " > " + std::to_string(hi) + ")";
    return false;
  }
  if (lo < 1) {
    *why = "counts start at 1, got \"" + s + "\"";
    return false;
  }
  r->lo = lo;
  r->hi = hi;
  return true;
}

// "*" or "[lo,hi)" with hi possibly "*".
bool parse_interval(const std::string& s, uint64_t* lo, uint64_t* hi, std::string* why) {
  if (s == "*") {
    *lo = 0;
    *hi = kNoLimit;
    return true;
  }
  const size_t comma = s.find(',');
  if (s.size() < 5 || s.front() != '[' || s.back() != ')' || comma == std::string::npos) {
    *why = "size must be * or [lo,hi) (half-open, e.g. [64K,4M) or [4M,*)), got \"" + s + "\"";
    return false;
  }
  const std::string a = s.substr(1, comma - 1), b = s.substr(comma + 1, s.size() - comma - 2);
  if (!parse_size(a, lo)) {
    *why = "bad lower size bound \"" + a + "\" (bytes, with an optional K, M or G suffix)";
    return false;
  }
  if (b == "*") {
    *hi = kNoLimit;
  } else if (!parse_size(b, hi)) {
    *why = "bad upper size bound \"" + b + "\" (bytes with K/M/G, or *)";
    return false;
  }
  if (*hi <= *lo) {
    *why = "empty size interval \"" + s +
           "\": the upper bound is excluded and must be above the lower";
    return false;
  }
  return true;
}

std::string range_text(const IntRange& r) {
  if (r.any()) return "*";
  if (r.lo == r.hi) return std::to_string(r.lo);
  return std::to_string(r.lo) + "-" + std::to_string(r.hi);
}

}  // namespace

const char* coll_name(int coll) { return coll >= 0 && coll < kNumColls ? kCollNames[coll] : "*"; }
const char* algo_name(int algo) { return algo >= 0 && algo < kNumAlgos ? kAlgoNames[algo] : "*"; }
const char* proto_name(int proto) {
  return proto >= 0 && proto < kNumProtos ? kProtoNames[proto] : "*";
}
std::string pair_name(int algo, int proto) {
  if (algo < 0) return "-";
  return std::string(algo_name(algo)) + "/" + proto_name(proto);
}
int coll_from_name(const std::string& s) { return lookup(s, kCollNames, kNumColls); }
int algo_from_name(const std::string& s) { return lookup(s, kAlgoNames, kNumAlgos); }
int proto_from_name(const std::string& s) { return lookup(s, kProtoNames, kNumProtos); }

bool parse_size(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 24) return false;
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  if (digits == 0) return false;
  uint64_t mult = 1;
  const std::string suffix = lower(s.substr(digits));
  if (suffix == "k" || suffix == "kb" || suffix == "kib")
    mult = 1ull << 10;
  else if (suffix == "m" || suffix == "mb" || suffix == "mib")
    mult = 1ull << 20;
  else if (suffix == "g" || suffix == "gb" || suffix == "gib")
    mult = 1ull << 30;
  else if (!suffix.empty() && suffix != "b")
    return false;
  errno = 0;
  const unsigned long long v = std::strtoull(s.substr(0, digits).c_str(), nullptr, 10);
  if (errno == ERANGE || v > UINT64_MAX / mult) return false;
  *out = static_cast<uint64_t>(v) * mult;
  return true;
}

std::string format_size(uint64_t bytes) {
  if (bytes == kNoLimit) return "*";
  if (bytes != 0 && bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + "G";
  if (bytes != 0 && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes != 0 && bytes % (1ull << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

Status parse_rules(const std::string& text, const std::string& origin, std::vector<Rule>* out,
                   std::string* error) {
  std::vector<Rule> rules;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  auto fail = [&](const std::string& why) {
    *error = origin + ":" + std::to_string(lineno) + ": " + why;
    return Status::kInvalidArgument;
  };
  while (std::getline(in, line)) {
    ++lineno;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::vector<std::string> f;
    std::string w;
    while (fields >> w) f.push_back(w);
    if (f.empty()) continue;
    if (f.size() != 9)
      return fail("expected 9 columns (coll size nodes ranks rpn algo proto channels chunk), got " +
                  std::to_string(f.size()));
    Rule r;
    r.line = lineno;
    std::string why;
    r.coll = coll_from_name(f[0]);
    if (r.coll == -2)
      return fail("unknown collective \"" + f[0] +
                  "\" (broadcast, reduce, allgather, reducescatter, allreduce or *)");
    if (!parse_interval(f[1], &r.size_lo, &r.size_hi, &why)) return fail(why);
    if (!parse_range(f[2], &r.nodes, &why)) return fail("nodes: " + why);
    if (!parse_range(f[3], &r.ranks, &why)) return fail("ranks: " + why);
    if (!parse_range(f[4], &r.rpn, &why)) return fail("rpn: " + why);
    r.algo = algo_from_name(f[5]);
    if (r.algo == -2)
      return fail("unknown algorithm \"" + f[5] +
                  "\" (tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat or *)");
    r.proto = proto_from_name(f[6]);
    if (r.proto == -2) return fail("unknown protocol \"" + f[6] + "\" (ll, ll128, simple or *)");
    if (f[7] != "*") {
      int64_t ch = 0;
      if (!parse_uint(f[7], INT32_MAX, &ch) || ch < 1 || ch > kMaxChannels)
        return fail("channels must be * or 1.." + std::to_string(kMaxChannels) + ", got \"" + f[7] +
                    "\"");
      r.channels = static_cast<int>(ch);
    }
    if (f[8] != "*") {
      if (!parse_size(f[8], &r.chunk) || r.chunk == 0 || r.chunk > (1ull << 30))
        return fail("chunk must be * or a size from 1 byte to 1G, got \"" + f[8] + "\"");
    }
    if (r.algo == kAny && r.proto == kAny && r.channels == kAny && r.chunk == 0)
      return fail("the rule decides nothing: algo, proto, channels and chunk are all *");
    rules.push_back(r);
  }
  *out = std::move(rules);
  return Status::kOk;
}

Status load_rules_file(const std::string& path, std::vector<Rule>* out, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *error = path + ": cannot open the rules file";
    return Status::kInvalidArgument;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) {
    *error = path + ": read error";
    return Status::kInvalidArgument;
  }
  return parse_rules(ss.str(), path, out, error);
}

std::string format_rules(const std::vector<Rule>& rules, const std::string& header) {
  std::string out;
  std::istringstream h(header);
  std::string line;
  while (std::getline(h, line)) out += "# " + line + "\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-14s %-16s %-6s %-6s %-5s %-14s %-7s %-8s %s\n", "# coll",
                "size", "nodes", "ranks", "rpn", "algo", "proto", "channels", "chunk");
  out += buf;
  for (const Rule& r : rules) {
    const std::string size =
        (r.size_lo == 0 && r.size_hi == kNoLimit)
            ? "*"
            : "[" + format_size(r.size_lo) + "," + format_size(r.size_hi) + ")";
    const std::string ch = r.channels == kAny ? "*" : std::to_string(r.channels);
    const std::string chunk = r.chunk == 0 ? "*" : format_size(r.chunk);
    std::snprintf(buf, sizeof buf, "%-14s %-16s %-6s %-6s %-5s %-14s %-7s %-8s %s",
                  coll_name(r.coll), size.c_str(), range_text(r.nodes).c_str(),
                  range_text(r.ranks).c_str(), range_text(r.rpn).c_str(), algo_name(r.algo),
                  proto_name(r.proto), ch.c_str(), chunk.c_str());
    out += buf;
    if (!r.comment.empty()) {
      std::string c = r.comment;
      for (char& x : c)
        if (x == '\n' || x == '\r') x = ' ';
      out += "  # " + c;
    }
    out += "\n";
  }
  return out;
}

}  // namespace tuner
}  // namespace nf
