#include "perf/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <rdma/fabric.h>

namespace nfp {

namespace {

const char* const kCsvColumns =
    "test,mode,size,iters,group,comms,window,time_us,gb_per_s,cpu_s_per_gb_rank0,"
    "cpu_s_per_gb_rank1,cpu_s_rank0,cpu_s_rank1,plugin_vs_raw,plugin,abi,provider,check";

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string json_str(const std::string& s) {
  std::string q = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      q += '\\';
      q += static_cast<char>(c);
    } else if (c < 0x20) {
      char b[8];
      snprintf(b, sizeof(b), "\\u%04x", c);
      q += b;
    } else {
      q += static_cast<char>(c);
    }
  }
  return q + "\"";
}

// The transports of a row, in the order the row measures them and the table shows them.
std::vector<std::string> modes_of(const Options& o) {
  std::vector<std::string> m = o.plugin_modes();
  if (o.run_raw) m.push_back("raw");
  return m;
}

// The title of a plugin mode's ratio column: "plugin/raw", or "PROTO/raw" for "plugin:PROTO".
std::string ratio_title(const std::string& mode) {
  const size_t colon = mode.find(':');
  return (colon == std::string::npos ? mode : mode.substr(colon + 1)) + "/raw";
}

std::string num(double v, const char* fmt = "%.6g") {
  if (!std::isfinite(v)) return "null";
  char b[64];
  snprintf(b, sizeof(b), fmt, v);
  return b;
}

}  // namespace

Report::~Report() {
  if (csv_ != nullptr && csv_ != stdout) fclose(csv_);
  if (json_ != nullptr && json_ != stdout) fclose(json_);
}

bool Report::open(std::string* err) {
  auto open_one = [&](bool on, const std::string& path, FILE** f) {
    if (!on) return true;
    if (path.empty()) {
      *f = stdout;
      return true;
    }
    *f = fopen(path.c_str(), "w");
    if (*f == nullptr) {
      *err = "cannot write " + path + ": " + strerror(errno);
      return false;
    }
    return true;
  };
  if (!open_one(o_.csv, o_.csv_path, &csv_) || !open_one(o_.json, o_.json_path, &json_))
    return false;
  if (csv_ != nullptr) {
    fprintf(csv_, "%s\n", kCsvColumns);
    fflush(csv_);
  }
  return true;
}

void Report::header(const RunInfo& info) {
  info_ = info;
  if (!table()) return;
  const Options& o = o_;
  printf("# %s: provider %s, ", kProg, o.provider.c_str());
  if (o.run_plugin)
    printf("plugin %s (ncclNet v%d, \"%s\"), device %d of %d \"%s\" (maxRecvs %d, maxComms %d)",
           info_.plugin_path.c_str(), info_.abi, info_.plugin_name.c_str(), info_.dev_index,
           info_.ndev, info_.device.c_str(), info_.max_recvs, info_.max_comms);
  else
    printf("raw libfabric only");
  if (o.run_plugin && !o.protocols.empty()) {
    std::string list;
    for (const std::string& p : o.protocols) list += (list.empty() ? "" : ", ") + p;
    if (o.protocols.size() == 1)
      printf(
          "\n# protocol: %s (NCCL_FABRIC_PROTOCOL set before the plugin's init; rows "
          "plugin:%s)",
          list.c_str(), list.c_str());
    else
      printf(
          "\n# protocols: %s: a plugin context each, NCCL_FABRIC_PROTOCOL set before its "
          "init (rows plugin:PROTO)",
          list.c_str());
  }
  printf("\n# libfabric %u.%u", FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
  if (o.run_raw)
    printf(", raw endpoint on domain \"%s\" (inject %zu B%s, mr_mode 0x%llx)",
           info_.raw_domain.c_str(), info_.raw_inject, info_.raw_inject_on ? "" : ", off",
           static_cast<unsigned long long>(info_.raw_mr_mode));
  printf("; data check %s; timeout %d s\n", o.check ? "on (timings include fill and check)" : "off",
         o.timeout_s);
  if (!info_.raw_note.empty()) printf("# note: %s\n", info_.raw_note.c_str());
  if (info_.two_host)
    printf("# two hosts: rank 0 on %s, rank 1 on %s\n", info_.host[0].c_str(),
           info_.host[1].c_str());
  else
    printf("# two processes on %s (pids %d and %d)\n", info_.host[0].c_str(), info_.pid[0],
           info_.pid[1]);
  printf("# window %d per comm and direction, %d comm%s%s, group %d%s\n", o.window, o.comms,
         o.comms == 1 ? "" : "s", o.comms > 1 ? " (operations round-robin)" : "", o.group,
         o.group > 1 ? " (one irecv of that many buffers and tags per operation)" : "");
  const std::vector<std::string> modes = modes_of(o);
  std::string alternating;
  for (size_t i = 0; modes.size() > 1 && i < modes.size(); ++i)
    alternating += std::string(i == 0                  ? (o.protocols.empty() ? ", " : ",\n#   ")
                               : i + 1 == modes.size() ? " and "
                                                       : ", ") +
                   modes[i];
  if (!alternating.empty()) alternating += " alternating";
  printf(
      "# lat: ping-pong, time = half the round trip (median); bw: rank 0 sends, time = its\n"
      "#   clock from first send to rank 1's ack, per operation; bibw: both send at once, GB/s\n"
      "#   counts both directions. GB/s = 1e9 bytes/s. cpu0/cpu1: CPU seconds of rank 0/1 (all\n"
      "#   threads) per 1e9 bytes moved. Each row: best of %d round%s%s.\n",
      o.rounds, o.rounds == 1 ? "" : "s", alternating.c_str());
  if (o.run_plugin && o.run_raw && o.protocols.empty())
    printf(
        "# plugin/raw: plugin GB/s over raw GB/s (for lat: raw time over plugin time); 1.0 is "
        "ideal, lower is worse\n");
  else if (o.run_plugin && o.run_raw)
    printf(
        "# PROTO/raw: plugin:PROTO GB/s over raw GB/s of the same row (for lat: raw time over\n"
        "#   plugin:PROTO time); 1.0 is ideal, lower is worse\n");
  printf("#\n");
  printf("# %-26s", "");
  for (const std::string& m : modes) {
    std::string title = " " + m + " ";
    const size_t w = 42;
    const size_t left = (w - title.size()) / 2;
    printf("  %s%s%s", std::string(left, '-').c_str(), title.c_str(),
           std::string(w - left - title.size(), '-').c_str());
  }
  printf("\n# %-4s %9s %9s", "test", "size", "iters");
  for (size_t i = 0; i < modes.size(); ++i)
    printf("  %10s %9s %10s %10s", "time(us)", "GB/s", "cpu0 s/GB", "cpu1 s/GB");
  if (o.run_plugin && o.run_raw)
    for (const std::string& m : o.plugin_modes()) printf("  %10s", ratio_title(m).c_str());
  printf("\n");
  fflush(stdout);
}

void Report::csv_row(const Result& r) {
  const bool plugin = is_plugin_mode(r.mode);
  fprintf(csv_, "%s,%s,%zu,%zu,%d,%d,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%d\n", r.test.c_str(),
          r.mode.c_str(), r.size, r.iters, r.group, r.comms, r.window,
          num(r.time_us, "%.3f").c_str(), num(r.gbps).c_str(), num(r.cpu_per_gb[0]).c_str(),
          num(r.cpu_per_gb[1]).c_str(), num(r.cpu_s[0]).c_str(), num(r.cpu_s[1]).c_str(),
          r.vs_raw >= 0 ? num(r.vs_raw, "%.4f").c_str() : "",
          plugin ? csv_field(info_.plugin_name).c_str() : "",
          plugin ? std::to_string(info_.abi).c_str() : "", csv_field(o_.provider).c_str(),
          o_.check ? 1 : 0);
  fflush(csv_);
}

void Report::add(std::vector<Result> rs) {
  const Result* raw = nullptr;
  for (const Result& r : rs)
    if (r.mode == "raw") raw = &r;
  for (Result& r : rs)
    if (is_plugin_mode(r.mode) && raw != nullptr && raw->gbps > 0) r.vs_raw = r.gbps / raw->gbps;
  for (const Result& r : rs) {
    all_.push_back(r);
    if (csv_ != nullptr) csv_row(r);
  }
  if (!table() || rs.empty()) return;
  printf("  %-4s %9s %9zu", rs[0].test.c_str(), size_text(rs[0].size).c_str(), rs[0].iters);
  for (const Result& r : rs)
    printf("  %10.2f %9s %10s %10s", r.time_us, fmt_g(r.gbps).c_str(),
           fmt_g(r.cpu_per_gb[0]).c_str(), fmt_g(r.cpu_per_gb[1]).c_str());
  if (raw != nullptr)
    for (const Result& r : rs)
      if (is_plugin_mode(r.mode))
        printf("  %*s", static_cast<int>(std::max<size_t>(10, ratio_title(r.mode).size())),
               r.vs_raw >= 0 ? num(r.vs_raw, "%.2f").c_str() : "-");
  printf("\n");
  fflush(stdout);
}

bool Report::finish(double seconds, std::string* err) {
  if (table()) printf("# done in %.1f s\n", seconds);
  fflush(stdout);
  if (json_ != nullptr) {
    FILE* f = json_;
    fprintf(f, "{\n  \"tool\": %s,\n  \"format\": 1,\n  \"provider\": %s,\n",
            json_str(kProg).c_str(), json_str(o_.provider).c_str());
    if (o_.run_plugin)
      fprintf(f,
              "  \"plugin\": {\"path\": %s, \"name\": %s, \"abi\": %d, \"device\": %d, "
              "\"device_name\": %s, \"max_recvs\": %d, \"max_comms\": %d},\n",
              json_str(info_.plugin_path).c_str(), json_str(info_.plugin_name).c_str(), info_.abi,
              info_.dev_index, json_str(info_.device).c_str(), info_.max_recvs, info_.max_comms);
    else
      fprintf(f, "  \"plugin\": null,\n");
    if (o_.run_plugin && !o_.protocols.empty()) {
      std::string list;
      for (const std::string& p : o_.protocols) list += (list.empty() ? "" : ", ") + json_str(p);
      fprintf(f, "  \"protocols\": [%s],\n", list.c_str());
    }
    fprintf(f, "  \"raw\": %s,\n",
            o_.run_raw ? ("{\"domain\": " + json_str(info_.raw_domain) + "}").c_str() : "null");
    fprintf(f,
            "  \"hosts\": [%s, %s],\n  \"two_host\": %s,\n  \"window\": %d,\n  \"comms\": %d,\n"
            "  \"group\": %d,\n  \"rounds\": %d,\n  \"check\": %s,\n  \"seconds\": %s,\n"
            "  \"results\": [\n",
            json_str(info_.host[0]).c_str(), json_str(info_.host[1]).c_str(),
            info_.two_host ? "true" : "false", o_.window, o_.comms, o_.group, o_.rounds,
            o_.check ? "true" : "false", num(seconds, "%.3f").c_str());
    for (size_t i = 0; i < all_.size(); ++i) {
      const Result& r = all_[i];
      fprintf(f,
              "    {\"test\": %s, \"mode\": %s, \"size\": %zu, \"iters\": %zu, \"group\": %d, "
              "\"comms\": %d, \"window\": %d, \"time_us\": %s, \"gb_per_s\": %s, "
              "\"cpu_s_per_gb_rank0\": %s, \"cpu_s_per_gb_rank1\": %s, \"cpu_s_rank0\": %s, "
              "\"cpu_s_rank1\": %s, \"plugin_vs_raw\": %s}%s\n",
              json_str(r.test).c_str(), json_str(r.mode).c_str(), r.size, r.iters, r.group, r.comms,
              r.window, num(r.time_us, "%.3f").c_str(), num(r.gbps).c_str(),
              num(r.cpu_per_gb[0]).c_str(), num(r.cpu_per_gb[1]).c_str(), num(r.cpu_s[0]).c_str(),
              num(r.cpu_s[1]).c_str(), r.vs_raw >= 0 ? num(r.vs_raw, "%.4f").c_str() : "null",
              i + 1 < all_.size() ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fflush(f);
  }
  for (FILE* f : {csv_, json_}) {
    if (f == nullptr) continue;
    if (ferror(f) || (f != stdout && fflush(f) != 0)) {
      *err = std::string("writing the ") + (f == csv_ ? "CSV" : "JSON") + " output failed";
      return false;
    }
  }
  return true;
}

// ------------------------------------------------------------------------------------------------
// Reading result files back
// ------------------------------------------------------------------------------------------------

namespace {

// A small JSON reader: enough for the files --json writes (and their edits by hand or by jq).
struct JVal {
  enum Type { kNull, kBool, kNum, kStr, kArr, kObj } type = kNull;
  double n = 0;
  std::string s;
  std::vector<JVal> arr;
  std::vector<std::pair<std::string, JVal>> obj;
  const JVal* get(const std::string& k) const {
    for (const auto& kv : obj)
      if (kv.first == k) return &kv.second;
    return nullptr;
  }
};

class JParser {
 public:
  explicit JParser(const std::string& t) : t_(t) {}
  bool parse(JVal* v, std::string* err) {
    if (!value(v, 0) || (ws(), p_ != t_.size())) {
      *err = "bad JSON near byte " + std::to_string(p_);
      return false;
    }
    return true;
  }

 private:
  void ws() {
    while (p_ < t_.size() && strchr(" \t\r\n", t_[p_]) != nullptr) ++p_;
  }
  bool lit(const char* w) {
    const size_t n = strlen(w);
    if (t_.compare(p_, n, w) != 0) return false;
    p_ += n;
    return true;
  }
  bool str(std::string* out) {
    if (p_ >= t_.size() || t_[p_] != '"') return false;
    ++p_;
    while (p_ < t_.size() && t_[p_] != '"') {
      char c = t_[p_++];
      if (c == '\\') {
        if (p_ >= t_.size()) return false;
        c = t_[p_++];
        if (c == 'n')
          c = '\n';
        else if (c == 't')
          c = '\t';
        else if (c == 'u') {  // keep ASCII, replace the rest
          if (p_ + 4 > t_.size()) return false;
          const long cp = strtol(t_.substr(p_, 4).c_str(), nullptr, 16);
          p_ += 4;
          c = cp < 0x80 ? static_cast<char>(cp) : '?';
        } else if (c != '"' && c != '\\' && c != '/') {
          c = '?';
        }
      }
      *out += c;
    }
    if (p_ >= t_.size()) return false;
    ++p_;
    return true;
  }
  bool value(JVal* v, int depth) {
    if (depth > 32) return false;
    ws();
    if (p_ >= t_.size()) return false;
    const char c = t_[p_];
    if (c == '{') {
      v->type = JVal::kObj;
      ++p_;
      ws();
      if (p_ < t_.size() && t_[p_] == '}') return ++p_, true;
      for (;;) {
        std::pair<std::string, JVal> kv;
        ws();
        if (!str(&kv.first)) return false;
        ws();
        if (p_ >= t_.size() || t_[p_++] != ':') return false;
        if (!value(&kv.second, depth + 1)) return false;
        v->obj.push_back(std::move(kv));
        ws();
        if (p_ < t_.size() && t_[p_] == ',') {
          ++p_;
          continue;
        }
        if (p_ < t_.size() && t_[p_] == '}') return ++p_, true;
        return false;
      }
    }
    if (c == '[') {
      v->type = JVal::kArr;
      ++p_;
      ws();
      if (p_ < t_.size() && t_[p_] == ']') return ++p_, true;
      for (;;) {
        JVal e;
        if (!value(&e, depth + 1)) return false;
        v->arr.push_back(std::move(e));
        ws();
        if (p_ < t_.size() && t_[p_] == ',') {
          ++p_;
          continue;
        }
        if (p_ < t_.size() && t_[p_] == ']') return ++p_, true;
        return false;
      }
    }
    if (c == '"') {
      v->type = JVal::kStr;
      return str(&v->s);
    }
    if (lit("true")) {
      v->type = JVal::kBool;
      v->n = 1;
      return true;
    }
    if (lit("false")) {
      v->type = JVal::kBool;
      return true;
    }
    if (lit("null")) {
      v->type = JVal::kNull;
      return true;
    }
    char* end = nullptr;
    v->n = strtod(t_.c_str() + p_, &end);
    if (end == t_.c_str() + p_) return false;
    v->type = JVal::kNum;
    p_ = static_cast<size_t>(end - t_.c_str());
    return true;
  }

  const std::string& t_;
  size_t p_ = 0;
};

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"')
        quoted = false;
      else
        out.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

bool valid_row(const Result& r) {
  return !r.test.empty() && !r.mode.empty() && r.size > 0 && std::isfinite(r.time_us) &&
         std::isfinite(r.gbps);
}

}  // namespace

bool read_results(const std::string& path, std::vector<Result>* out, std::string* err) {
  std::ifstream f(path);
  if (!f.good()) {
    *err = path + ": " + strerror(errno);
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) {
    *err = path + ": empty file";
    return false;
  }
  const size_t before = out->size();
  if (text[first] == '{') {
    JVal root;
    std::string jerr;
    if (!JParser(text).parse(&root, &jerr)) {
      *err = path + ": " + jerr;
      return false;
    }
    const JVal* rows = root.get("results");
    if (rows == nullptr || rows->type != JVal::kArr) {
      *err = path + ": no \"results\" array (not a --json file of " + kProg + ")";
      return false;
    }
    for (const JVal& row : rows->arr) {
      Result r;
      auto s = [&](const char* k) {
        const JVal* v = row.get(k);
        return v != nullptr && v->type == JVal::kStr ? v->s : std::string();
      };
      auto n = [&](const char* k) {
        const JVal* v = row.get(k);
        return v != nullptr && v->type == JVal::kNum ? v->n : NAN;
      };
      r.test = s("test");
      r.mode = s("mode");
      const double size = n("size");
      r.size = std::isfinite(size) && size > 0 ? static_cast<size_t>(size) : 0;
      r.time_us = n("time_us");
      r.gbps = n("gb_per_s");
      if (valid_row(r)) out->push_back(r);
    }
  } else {
    std::stringstream lines(text);
    std::string line;
    std::map<std::string, size_t> col;
    while (std::getline(lines, line)) {
      if (line.empty() || line[0] == '#') continue;
      const std::vector<std::string> f2 = split_csv(line);
      if (col.empty()) {
        for (size_t i = 0; i < f2.size(); ++i) col[f2[i]] = i;
        for (const char* k : {"test", "mode", "size", "time_us", "gb_per_s"})
          if (col.count(k) == 0) {
            *err = path + ": no '" + k + "' column (not a --csv file of " + kProg + ")";
            return false;
          }
        continue;
      }
      auto at = [&](const char* k) {
        const size_t i = col[k];
        return i < f2.size() ? f2[i] : std::string();
      };
      Result r;
      r.test = at("test");
      r.mode = at("mode");
      r.size = static_cast<size_t>(strtoull(at("size").c_str(), nullptr, 10));
      const std::string t = at("time_us"), g = at("gb_per_s");
      r.time_us = t.empty() ? NAN : strtod(t.c_str(), nullptr);
      r.gbps = g.empty() ? NAN : strtod(g.c_str(), nullptr);
      if (valid_row(r)) out->push_back(r);
    }
  }
  if (out->size() == before) {
    *err = path + ": no result rows";
    return false;
  }
  return true;
}

}  // namespace nfp
