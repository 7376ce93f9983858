// Reading nccl-tests output. The table is found by its header line, whose column names also give
// the row layout, so builds with or without the root column or the in-place group both read.
#include "tools/tune/nccltests.h"

#include <sys/stat.h>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace nf {
namespace tune {
namespace {

std::vector<std::string> split_ws(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string tok;
  while (in >> tok) out.push_back(tok);
  return out;
}

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool to_u64(const std::string& s, uint64_t* out) {
  if (!all_digits(s)) return false;  // strtoull would take "-1" and " 1"
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool to_long(const std::string& s, long* out) {
  const std::string digits = (!s.empty() && s[0] == '-') ? s.substr(1) : s;
  if (!all_digits(digits)) return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool to_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// The payload of an mpirun --tag-output line: whatever follows "[x,y]<stdout>:" or
// "[x,y]<stderr>:"; anything before the tag (timestamps added by a launcher) goes with it.
std::string strip_tag(const std::string& line, bool* is_stderr) {
  *is_stderr = false;
  for (size_t pos = line.find(']'); pos != std::string::npos; pos = line.find(']', pos + 1)) {
    const bool out = line.compare(pos + 1, 9, "<stdout>:") == 0;
    const bool err = line.compare(pos + 1, 9, "<stderr>:") == 0;
    if (!out && !err) continue;
    size_t open = line.rfind('[', pos);
    if (open == std::string::npos) continue;
    const std::string inside = line.substr(open + 1, pos - open - 1);
    bool ok = !inside.empty();
    for (char c : inside) ok = ok && ((c >= '0' && c <= '9') || c == ',');
    if (!ok) continue;
    *is_stderr = err;
    return line.substr(pos + 10);
  }
  return line;
}

// nccl-tests program or file name -> ncclFunc_t. Longer names are tried first at each position
// because "reduce" is part of all_reduce and reduce_scatter; a name must not run into letters on
// either side ("reduced" is no collective). Two different collectives in one name: unknown.
int coll_from_text(const std::string& text) {
  static const struct {
    const char* name;
    int coll;
  } kNames[] = {
      {"all_reduce", 4}, {"allreduce", 4}, {"reduce_scatter", 3}, {"reducescatter", 3},
      {"all_gather", 2}, {"allgather", 2}, {"broadcast", 0},      {"reduce", 1},
  };
  const std::string s = lower(text);
  int found = -1;
  for (size_t i = 0; i < s.size();) {
    bool matched = false;
    for (const auto& n : kNames) {
      const size_t len = std::char_traits<char>::length(n.name);
      if (s.compare(i, len, n.name) != 0) continue;
      const bool left_ok = i == 0 || !is_letter(s[i - 1]);
      const bool right_ok = i + len == s.size() || !is_letter(s[i + len]);
      if (!left_ok || !right_ok) continue;
      if (found >= 0 && found != n.coll) return -1;
      found = n.coll;
      i += len;
      matched = true;
      break;
    }
    if (!matched) ++i;
  }
  return found;
}

// A single algorithm or protocol name as NCCL_ALGO/NCCL_PROTO take it; lists ("Ring,Tree"),
// per-collective syntax ("allreduce:tree") and exclusions ("^LL128") are -1: the log then does
// not say which one pair ran.
int algo_from_env(const std::string& value) {
  const int a = tuner::algo_from_name(value);
  return a < 0 ? -1 : a;  // unknown (-2) and "*" alike
}

int proto_from_env(const std::string& value) {
  const int p = tuner::proto_from_name(value);
  return p < 0 ? -1 : p;
}

// "... NCCL_ALGO set by environment to Ring": every rank prints it; ranks that disagree (a
// per-rank environment) leave the value unknown.
void note_env(const std::string& line, const char* key, int (*decode)(const std::string&),
              int* value, bool* seen) {
  const std::string marker = std::string(key) + " set by environment to ";
  size_t pos = line.find(marker);
  if (pos == std::string::npos) return;
  const int v = decode(trim(line.substr(pos + marker.size())));
  if (!*seen) {
    *value = v;
    *seen = true;
  } else if (*value != v) {
    *value = -1;
  }
}

// Column positions, from the table header ("size count type redop root time algbw busbw #wrong
// time algbw busbw #wrong").
struct Layout {
  int n_prefix = 0;  // columns before the first time
  int size = -1, count = -1, type = -1, redop = -1, root = -1;
  int group = 0;  // columns per out-of-place/in-place group
  int n_groups = 0;
  int algbw = -1, busbw = -1, wrong = -1;  // offsets inside a group
};

bool parse_header(const std::vector<std::string>& cols, Layout* l) {
  int first_time = -1;
  for (size_t i = 0; i < cols.size(); ++i) {
    if (cols[i] == "time") {
      if (first_time < 0)
        first_time = static_cast<int>(i);
      else if (l->group == 0)
        l->group = static_cast<int>(i) - first_time;
      ++l->n_groups;
    }
  }
  if (first_time < 0) return false;
  if (l->group == 0) l->group = static_cast<int>(cols.size()) - first_time;
  l->n_prefix = first_time;
  for (int i = 0; i < first_time; ++i) {
    const std::string& c = cols[i];
    if (c == "size")
      l->size = i;
    else if (c == "count")
      l->count = i;
    else if (c == "type")
      l->type = i;
    else if (c == "redop")
      l->redop = i;
    else if (c == "root")
      l->root = i;
  }
  for (int i = 1; i < l->group; ++i) {
    const std::string& c = cols[first_time + i];
    if (c == "algbw")
      l->algbw = i;
    else if (c == "busbw")
      l->busbw = i;
    else if (c == "#wrong" || c == "wrong")
      l->wrong = i;
  }
  // Every group must look like the first, or rows cannot be cut into groups.
  if (static_cast<int>(cols.size()) != first_time + l->n_groups * l->group) return false;
  return l->size >= 0 && l->count >= 0 && l->type >= 0 && l->algbw > 0 && l->busbw > 0 &&
         l->wrong > 0;
}

std::string where(const std::string& path, int line) {
  return path + ":" + std::to_string(line) + ": ";
}

Status parse_row(const std::vector<std::string>& f, const Layout& l, const std::string& at,
                 NcclTestsRow* row, std::string* error) {
  const size_t full = static_cast<size_t>(l.n_prefix + l.n_groups * l.group);
  const size_t oop_only = static_cast<size_t>(l.n_prefix + l.group);
  if (f.size() != full && f.size() != oop_only) {
    *error = at + "result row has " + std::to_string(f.size()) + " fields, expected " +
             std::to_string(full) +
             (full != oop_only ? " (or " + std::to_string(oop_only) + " out-of-place only)" : "");
    return Status::kInvalidArgument;
  }
  auto bad = [&](int col, const char* what) {
    *error = at + "field " + std::to_string(col + 1) + " ('" + f[col] + "') is not " + what;
    return Status::kInvalidArgument;
  };
  if (!to_u64(f[l.size], &row->bytes)) return bad(l.size, "a byte count");
  if (!to_u64(f[l.count], &row->count)) return bad(l.count, "an element count");
  row->type = f[l.type];
  if (l.redop >= 0) row->redop = f[l.redop];
  long root = 0;
  if (l.root >= 0 && !to_long(f[l.root], &root)) return bad(l.root, "a root rank");
  // One group: time, algbw, busbw, #wrong at the header's offsets.
  auto group = [&](int base, double* time, double* algbw, double* busbw, long* wrong) {
    if (!to_double(f[base], time) || *time < 0) return bad(base, "a time in us");
    if (!to_double(f[base + l.algbw], algbw)) return bad(base + l.algbw, "a bandwidth");
    if (!to_double(f[base + l.busbw], busbw)) return bad(base + l.busbw, "a bandwidth");
    const std::string& w = f[base + l.wrong];
    if (w == "N/A") {
      *wrong = -1;  // run with -c 0: nothing was checked
    } else if (!to_long(w, wrong) || *wrong < 0) {
      return bad(base + l.wrong, "a #wrong count or N/A");
    }
    return Status::kOk;
  };
  NF_CHECK(group(l.n_prefix, &row->time_us, &row->algbw, &row->busbw, &row->wrong));
  row->ip_time_us = -1;
  row->ip_busbw = -1;
  row->ip_wrong = -1;
  if (f.size() == full && l.n_groups >= 2) {
    double ip_algbw = 0;
    NF_CHECK(
        group(l.n_prefix + l.group, &row->ip_time_us, &ip_algbw, &row->ip_busbw, &row->ip_wrong));
  }
  return Status::kOk;
}

}  // namespace

Status parse_nccl_tests(const std::string& text, const std::string& path, NcclTestsLog* out,
                        std::string* error) {
  *out = NcclTestsLog();
  out->path = path;
  std::string error_sink;
  if (error == nullptr) error = &error_sink;

  Layout layout;
  bool have_layout = false;
  bool in_table = false;
  bool algo_seen = false, proto_seen = false;
  int program_coll = -1;
  std::set<int> ranks;
  std::map<std::string, int> ranks_on_host;

  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    bool is_stderr = false;
    const std::string line = trim(strip_tag(raw, &is_stderr));
    if (line.empty()) continue;

    // NCCL's own lines ("host:pid:tid [0] NCCL INFO ...") may come from any rank and stream.
    if (out->nccl_version.empty()) {
      size_t v = line.find("NCCL version ");
      if (v != std::string::npos) {
        std::vector<std::string> t = split_ws(line.substr(v + 13));
        if (!t.empty()) out->nccl_version = t[0];
      }
    }
    if (line.find(" NCCL INFO ") != std::string::npos ||
        line.find(" NCCL WARN ") != std::string::npos) {
      note_env(line, "NCCL_ALGO", algo_from_env, &out->algo, &algo_seen);
      note_env(line, "NCCL_PROTO", proto_from_env, &out->proto, &proto_seen);
      continue;
    }

    if (line[0] == '#') {
      const size_t body = line.find_first_not_of('#');
      if (body == std::string::npos) continue;
      const std::vector<std::string> t = split_ws(line.substr(body));
      if (t.empty()) continue;
      if (t[0] == "size") {
        if (!out->rows.empty()) {
          *error = where(path, line_no) + "a second results table; give one nccl-tests run per log";
          return Status::kInvalidArgument;
        }
        if (!parse_header(t, &layout)) {
          *error = where(path, line_no) + "unrecognised results table header";
          return Status::kInvalidArgument;
        }
        have_layout = true;
        in_table = true;
      } else if (t[0] == "Rank" && t.size() >= 2) {
        long r = 0;
        if (!to_long(t[1], &r)) continue;
        for (size_t i = 2; i + 1 < t.size(); ++i) {
          if (t[i] != "on") continue;
          if (ranks.insert(static_cast<int>(r)).second) ++ranks_on_host[t[i + 1]];
          break;
        }
      } else if (line.find("Avg bus bandwidth") != std::string::npos) {
        size_t colon = line.find(':');
        double v = 0;
        if (colon != std::string::npos && to_double(trim(line.substr(colon + 1)), &v))
          out->avg_busbw = v;
      } else if (line.find("Collective test starting:") != std::string::npos) {
        program_coll = coll_from_text(trim(line.substr(line.find(':') + 1)));
      } else if (in_table && !out->rows.empty()) {
        in_table = false;  // "# Out of bounds values" and the like follow the last row
      }
      continue;
    }

    // Rows are nccl-tests' stdout; other lines in the table (a library's message) are not rows,
    // but one that starts like a row must be one.
    if (!in_table || is_stderr) continue;
    const std::vector<std::string> f = split_ws(line);
    if (!all_digits(f[0])) continue;
    NcclTestsRow row;
    NF_CHECK(parse_row(f, layout, where(path, line_no), &row, error));
    out->rows.push_back(row);
  }

  if (out->rows.empty()) {
    *error = path + ": no nccl-tests result rows" +
             (have_layout ? std::string(" under the table header")
                          : std::string(" (no table header \"# size count type ...\" found)"));
    return Status::kInvalidArgument;
  }
  out->n_ranks = static_cast<int>(ranks.size());
  out->n_nodes = static_cast<int>(ranks_on_host.size());
  for (const auto& h : ranks_on_host) {
    if (h.second > out->ranks_per_node) out->ranks_per_node = h.second;
  }
  if (program_coll >= 0) {
    out->coll = program_coll;
  } else {
    const size_t slash = path.find_last_of('/');
    out->coll = coll_from_text(slash == std::string::npos ? path : path.substr(slash + 1));
  }
  return Status::kOk;
}

Status load_nccl_tests(const std::string& path, NcclTestsLog* out, std::string* error) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    if (error != nullptr) *error = path + ": is a directory, not an nccl-tests log";
    return Status::kInvalidArgument;
  }
  errno = 0;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const int err = errno;
    if (error != nullptr)
      *error = path + ": cannot open for reading" +
               (err != 0 ? std::string(": ") + std::strerror(err) : std::string());
    return Status::kInvalidArgument;
  }
  std::ostringstream text;
  text << f.rdbuf();
  if (f.bad()) {
    if (error != nullptr) *error = path + ": read failed";
    return Status::kInvalidArgument;
  }
  return parse_nccl_tests(text.str(), path, out, error);
}

}  // namespace tune
}  // namespace nf
