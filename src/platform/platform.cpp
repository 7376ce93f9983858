#include "platform/platform.h"

#include <strings.h>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "util/log.h"

namespace nf {
namespace {

// Every column the table must have, in the order describe/docs use. The header may order them
// freely: rows are read by name.
enum Column {
  kColName,
  kColEfa,
  kColEfaGbps,
  kColAccel,
  kColAccelModel,
  kColNicsPerGpu,
  kColEfaExpected,
  kColGdr,
  kColLatency,
  kColProtocol,
  kColLl128,
  kColRailAligned,
  kColSources,
  kColNcclEnv,
  kColCount
};

const char* const kColumnNames[kColCount] = {
    "name", "efa",        "efa_gbps", "accel", "accel_model",  "nics_per_gpu", "efa_expected",
    "gdr",  "latency_us", "protocol", "ll128", "rail_aligned", "sources",      "nccl_env"};

std::vector<std::string> split_ws(const std::string& line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// Collects the first problem of a row as "line N (row): ...".
class RowErrors {
 public:
  RowErrors(int line, std::string* error) : line_(line), error_(error) {}
  bool fail(const std::string& row, const std::string& what) {
    if (!failed_) {
      *error_ =
          "line " + std::to_string(line_) + (row.empty() ? "" : " (" + row + ")") + ": " + what;
      failed_ = true;
    }
    return false;
  }
  bool failed() const { return failed_; }

 private:
  int line_;
  std::string* error_;
  bool failed_ = false;
};

// '-' gives -1; otherwise a whole number in [lo, hi].
bool parse_count(const std::string& text, int lo, int hi, int* out) {
  if (text == "-") {
    *out = -1;
    return true;
  }
  if (text.empty() || text.size() > 9) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  long v = strtol(text.c_str(), nullptr, 10);
  if (v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

// '-' gives -1; otherwise a decimal number in (0, hi].
bool parse_positive(const std::string& text, double hi, double* out) {
  if (text == "-") {
    *out = -1;
    return true;
  }
  if (text.empty() || isdigit(static_cast<unsigned char>(text[0])) == 0) return false;
  errno = 0;
  char* end = nullptr;
  double v = strtod(text.c_str(), &end);
  if (errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(v) || v <= 0 || v > hi)
    return false;
  *out = v;
  return true;
}

bool valid_name(const std::string& name, bool* wildcard) {
  if (name.empty() || name.size() > 64) return false;
  *wildcard = name.back() == '*';
  const size_t body = *wildcard ? name.size() - 1 : name.size();
  if (body == 0) return false;
  for (size_t i = 0; i < body; ++i) {
    const char c = name[i];
    if (!(isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' || c == '_'))
      return false;
  }
  return true;
}

bool valid_env_name(const std::string& name) {
  if (name.rfind("NCCL_", 0) != 0 || name.size() == 5) return false;
  for (char c : name)
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

bool valid_source_key(const std::string& key) {
  if (key.empty()) return false;
  for (char c : key)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}

bool parse_row(const std::vector<std::string>& cells, const int (&col)[kColCount], int line,
               Platform* r, std::string* error) {
  RowErrors e(line, error);
  const std::string& name = cells[col[kColName]];
  if (!valid_name(name, &r->wildcard))
    return e.fail(name,
                  "name must be letters, digits, '.', '-', '_', with an optional '*' at "
                  "the end");
  if (strcasecmp(name.c_str(), "auto") == 0 || strcasecmp(name.c_str(), "none") == 0 ||
      strcasecmp(name.c_str(), "generic") == 0)
    return e.fail(name, "'" + name + "' is reserved (NCCL_FABRIC_PLATFORM values, built-in row)");
  r->name = name;
  r->line = line;

  auto cell = [&](Column c) -> const std::string& { return cells[col[c]]; };
  if (!parse_count(cell(kColEfa), 0, 64, &r->efa_count))
    return e.fail(name, "efa '" + cell(kColEfa) + "' is not '-' or a whole number 0..64");
  if (!parse_count(cell(kColEfaGbps), 1, 100000, &r->efa_gbps))
    return e.fail(name, "efa_gbps '" + cell(kColEfaGbps) +
                            "' is not '-' or a whole number of "
                            "Gb/s (1..100000)");
  if (!parse_count(cell(kColAccel), 0, 256, &r->accelerators))
    return e.fail(name, "accel '" + cell(kColAccel) + "' is not '-' or a whole number 0..256");
  r->accelerator_model = cell(kColAccelModel) == "-" ? "" : cell(kColAccelModel);
  if (!parse_positive(cell(kColNicsPerGpu), 64, &r->nics_per_gpu))
    return e.fail(name, "nics_per_gpu '" + cell(kColNicsPerGpu) + "' is not '-' or a number > 0");
  if (r->nics_per_gpu > 0 && r->efa_count >= 0 && r->accelerators > 0) {
    const double ratio = static_cast<double>(r->efa_count) / r->accelerators;
    if (std::fabs(ratio - r->nics_per_gpu) > 1e-9)
      return e.fail(name, "nics_per_gpu " + cell(kColNicsPerGpu) +
                              " is not efa/accel = " + cell(kColEfa) + "/" + cell(kColAccel));
  }

  const std::string& efa_exp = cell(kColEfaExpected);
  if (efa_exp != "yes" && efa_exp != "no")
    return e.fail(name, "efa_expected '" + efa_exp + "' is not yes or no");
  r->efa_expected = efa_exp == "yes";
  if (r->efa_expected && r->efa_count < 1)
    return e.fail(name, "efa_expected is yes but efa is " + cell(kColEfa));

  const std::string& gdr = cell(kColGdr);
  if (gdr == "yes")
    r->gdr_expected = GdrExpect::kYes;
  else if (gdr == "no")
    r->gdr_expected = GdrExpect::kNo;
  else if (gdr == "n/a")
    r->gdr_expected = GdrExpect::kNotApplicable;
  else
    return e.fail(name, "gdr '" + gdr + "' is not yes, no or n/a");
  if (r->gdr_expected == GdrExpect::kYes && !r->efa_expected)
    return e.fail(name, "gdr is yes but efa_expected is no (GPUDirect RDMA here means over EFA)");

  if (!parse_positive(cell(kColLatency), 100000, &r->latency_us))
    return e.fail(name, "latency_us '" + cell(kColLatency) + "' is not '-' or a number > 0");

  const std::string& proto = cell(kColProtocol);
  if (proto == "auto")
    r->protocol = PlatformProtocol::kAuto;
  else if (proto == "sendrecv")
    r->protocol = PlatformProtocol::kSendrecv;
  else if (proto == "rdma")
    r->protocol = PlatformProtocol::kRdma;
  else
    return e.fail(name, "protocol '" + proto + "' is not rdma, sendrecv or auto");

  const std::string& ll128 = cell(kColLl128);
  if (ll128 == "yes")
    r->ll128_expected = 1;
  else if (ll128 == "no")
    r->ll128_expected = 0;
  else if (ll128 != "-")
    return e.fail(name, "ll128 '" + ll128 + "' is not yes, no or -");
  if (r->ll128_expected == 1 && !r->efa_expected)
    return e.fail(name, "ll128 is yes but efa_expected is no (the 128-byte ordering is EFA's)");
  const std::string& rails = cell(kColRailAligned);
  if (rails == "yes")
    r->rail_aligned = 1;
  else if (rails == "no")
    r->rail_aligned = 0;
  else if (rails != "-")
    return e.fail(name, "rail_aligned '" + rails + "' is not yes, no or -");

  if (cell(kColSources) == "-")
    return e.fail(name, "sources is '-': every row cites where its values come from");
  for (const std::string& key : split_commas(cell(kColSources))) {
    if (!valid_source_key(key))
      return e.fail(name, "sources: '" + key + "' is not a key (lower-case letters, digits, '-')");
    r->sources.push_back(key);
  }

  if (cell(kColNcclEnv) != "-") {
    std::set<std::string> seen;
    for (const std::string& kv : split_commas(cell(kColNcclEnv))) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq + 1 == kv.size())
        return e.fail(name, "nccl_env: '" + kv + "' is not NAME=VALUE");
      const std::string var = kv.substr(0, eq);
      if (!valid_env_name(var))
        return e.fail(name, "nccl_env: '" + var + "' is not an NCCL_ variable name");
      if (!seen.insert(var).second) return e.fail(name, "nccl_env: " + var + " appears twice");
      r->nccl_env.emplace_back(var, kv.substr(eq + 1));
    }
  }
  return !e.failed();
}

// Reads the first line of a small file (the DMI product name), without its trailing blanks.
bool read_product_name(const std::string& path, std::string* out, std::string* why) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) {
    *why = strerror(errno);
    return false;
  }
  char buf[256];
  const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  const bool read_error = ferror(f) != 0;
  const int saved = errno;
  fclose(f);
  if (read_error) {
    *why = strerror(saved);
    return false;
  }
  std::string s(buf, n);
  s = s.substr(0, s.find('\n'));
  while (!s.empty() && isspace(static_cast<unsigned char>(s.back())) != 0) s.pop_back();
  size_t start = 0;
  while (start < s.size() && isspace(static_cast<unsigned char>(s[start])) != 0) ++start;
  s = s.substr(start);
  if (s.empty()) {
    *why = "the file is empty";
    return false;
  }
  *out = s;
  return true;
}

std::string row_names(const std::vector<Platform>& table) {
  std::string list;
  for (const Platform& r : table) list += (list.empty() ? "" : ", ") + r.name;
  return list;
}

std::string gbps_total(const Platform& row) {
  if (row.efa_count <= 0 || row.efa_gbps <= 0) return "";
  return std::to_string(row.efa_count) + " x " + std::to_string(row.efa_gbps) +
         " Gb/s = " + std::to_string(row.efa_count * row.efa_gbps) + " Gb/s";
}

}  // namespace

Status parse_platform_table(const std::string& text, std::vector<Platform>* out,
                            std::string* error) {
  out->clear();
  int col[kColCount];
  bool have_header = false;
  size_t ncols = 0;
  std::map<std::string, int> row_lines;
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::vector<std::string> cells = split_ws(line);
    if (cells.empty()) continue;

    if (!have_header) {
      for (int& c : col) c = -1;
      for (size_t i = 0; i < cells.size(); ++i) {
        int which = -1;
        for (int c = 0; c < kColCount; ++c)
          if (cells[i] == kColumnNames[c]) which = c;
        if (which < 0) {
          *error = "line " + std::to_string(line_no) + ": unknown column '" + cells[i] +
                   "' in the header (the first line that is not a comment)";
          return Status::kInvalidArgument;
        }
        if (col[which] >= 0) {
          *error = "line " + std::to_string(line_no) + ": column '" + cells[i] + "' appears twice";
          return Status::kInvalidArgument;
        }
        col[which] = static_cast<int>(i);
      }
      for (int c = 0; c < kColCount; ++c) {
        if (col[c] < 0) {
          *error = "line " + std::to_string(line_no) + ": the header has no column '" +
                   kColumnNames[c] + "'";
          return Status::kInvalidArgument;
        }
      }
      have_header = true;
      ncols = cells.size();
      continue;
    }

    if (cells.size() != ncols) {
      *error = "line " + std::to_string(line_no) + " (" + cells[0] +
               "): " + std::to_string(cells.size()) + " columns, the header has " +
               std::to_string(ncols);
      return Status::kInvalidArgument;
    }
    Platform row;
    if (!parse_row(cells, col, line_no, &row, error)) return Status::kInvalidArgument;
    auto seen = row_lines.emplace(row.name, line_no);
    if (!seen.second) {
      *error = "line " + std::to_string(line_no) + " (" + row.name +
               "): the row is already on line " + std::to_string(seen.first->second);
      return Status::kInvalidArgument;
    }
    out->push_back(std::move(row));
  }
  if (!have_header) {
    *error = "the table has no header line";
    return Status::kInvalidArgument;
  }
  return Status::kOk;
}

const std::vector<Platform>& platform_table() {
  static const std::vector<Platform> table = [] {
    std::vector<Platform> t;
    std::string error;
    if (parse_platform_table(platform_table_text(), &t, &error) != Status::kOk) {
      NF_WARN("The built-in platform table does not parse (%s); every machine is generic",
              error.c_str());
      t.clear();
    }
    return t;
  }();
  return table;
}

const Platform& generic_platform() {
  static const Platform generic = [] {
    Platform g;
    g.name = "generic";
    return g;
  }();
  return generic;
}

const Platform* match_platform(const std::vector<Platform>& table, const std::string& product) {
  for (const Platform& r : table)
    if (!r.wildcard && r.name == product) return &r;
  for (const Platform& r : table) {
    if (r.name == product) return &r;  // a wildcard row named literally ("g5.*")
    if (r.wildcard && product.compare(0, r.name.size() - 1, r.name, 0, r.name.size() - 1) == 0)
      return &r;
  }
  return nullptr;
}

Status choose_platform(const Params& p, PlatformChoice* out, std::string* error) {
  const std::vector<Platform>& table = platform_table();
  const std::string& value = p.get_str(ParamId::kPlatform);
  *out = PlatformChoice();
  out->row = &generic_platform();

  if (strcasecmp(value.c_str(), "none") == 0) {
    out->forced = true;
    out->source = "NCCL_FABRIC_PLATFORM=none";
  } else if (!value.empty() && strcasecmp(value.c_str(), "auto") != 0) {
    const Platform* row = match_platform(table, value);
    if (row == nullptr) {
      const std::string msg =
          "NCCL_FABRIC_PLATFORM='" + value +
          "' is not a row of the platform table; use auto, none or one of: " + row_names(table);
      NF_WARN("%s", msg.c_str());
      if (error != nullptr) *error = msg;
      return Status::kInvalidUsage;
    }
    out->forced = true;
    out->row = row;
    out->source = "NCCL_FABRIC_PLATFORM=" + value;
    if (row->name != value) out->source += " (row " + row->name + ")";
  } else {
    const std::string& path = p.get_str(ParamId::kTestDmiFile);
    std::string product, why;
    if (!read_product_name(path, &product, &why)) {
      out->source = "no DMI product name (" + path + ": " + why + "); generic";
    } else if (const Platform* row = match_platform(table, product)) {
      out->row = row;
      out->source = "DMI product name '" + product + "' from " + path;
      if (row->name != product) out->source += " (row " + row->name + ")";
    } else {
      out->source = "DMI product name '" + product + "' from " + path +
                    " is not in the platform table; generic";
    }
  }
  NF_INFO(kSubsysInit, "Platform %s: %s", out->row->name.c_str(), out->source.c_str());
  return Status::kOk;
}

std::vector<AppliedDefault> apply_platform_defaults(const PlatformChoice& choice) {
  // The environment is process-wide, so what we set and what we logged is too. Only init paths
  // come here.
  static std::mutex mu;
  static std::map<std::string, std::string> set_by_us;
  static std::set<std::string> logged;

  std::vector<AppliedDefault> result;
  if (choice.row == nullptr) return result;
  const Platform& row = *choice.row;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& kv : row.nccl_env) {
    AppliedDefault d;
    d.name = kv.first;
    d.platform_value = kv.second;
    d.row = row.name;
    const char* current = getenv(kv.first.c_str());
    auto ours = set_by_us.find(kv.first);
    if (current != nullptr && !(ours != set_by_us.end() && ours->second == current)) {
      d.origin = AppliedDefault::Origin::kUser;
      d.value = current;
      if (logged.insert("user:" + kv.first + "=" + current).second)
        NF_INFO(kSubsysInit | kSubsysEnv, "%s=%s set by the user (platform %s suggests %s)",
                kv.first.c_str(), current, row.name.c_str(), kv.second.c_str());
    } else {
      if (current == nullptr) {
        if (setenv(kv.first.c_str(), kv.second.c_str(), 0) != 0) {
          NF_WARN("setenv(%s) failed: %s; the platform default is not applied", kv.first.c_str(),
                  strerror(errno));
          continue;
        }
        set_by_us[kv.first] = kv.second;
      }
      d.origin = AppliedDefault::Origin::kPlatform;
      d.value = kv.second;
      if (logged.insert("platform:" + kv.first + "=" + kv.second).second)
        NF_INFO(kSubsysInit | kSubsysEnv, "%s=%s (default for platform %s)", kv.first.c_str(),
                kv.second.c_str(), row.name.c_str());
    }
    result.push_back(std::move(d));
  }
  return result;
}

bool provider_is_efa(const std::string& provider) {
  size_t start = 0;
  while (start <= provider.size()) {
    size_t end = provider.find(';', start);
    if (end == std::string::npos) end = provider.size();
    const std::string part = provider.substr(start, end - start);
    if (part == "efa" || part.rfind("efa-", 0) == 0 || part.rfind("efa_", 0) == 0) return true;
    start = end + 1;
  }
  return false;
}

std::string platform_expectation_warning(const Platform& row, const std::string& provider,
                                         bool gdr_on) {
  if (row.efa_expected && !provider_is_efa(provider)) {
    const std::string total = gbps_total(row);
    const bool big = row.efa_count > 0 && row.efa_gbps > 0 && row.efa_count * row.efa_gbps >= 1600;
    return "provider '" + provider + "' on " + row.name + ": EFA was expected" +
           (total.empty() ? "" : " (" + total + ")") + "; expect " +
           (big ? "20-30x" : "several times") +
           " lower bandwidth and higher latency; check that the EFA driver is loaded (fi_info -p "
           "efa lists the devices), that the EFA interfaces are attached (EKS: the EFA device "
           "plugin and vpc.amazonaws.com/efa resources), that FI_PROVIDER or NCCL_FABRIC_PROVIDER "
           "does not exclude efa, and that the security group allows all traffic to and from "
           "itself";
  }
  if (row.gdr_expected == GdrExpect::kYes && provider_is_efa(provider) && !gdr_on) {
    return "provider '" + provider + "' on " + row.name +
           ": GPUDirect RDMA was expected but is off; NCCL will stage every transfer through "
           "host memory (lower bandwidth, more CPU and PCIe traffic); check that nvidia-peermem "
           "is loaded or that DMA-BUF is supported (Linux 5.12+, NVIDIA open kernel modules), "
           "that FI_EFA_USE_DEVICE_RDMA is not 0, and that NCCL_FABRIC_GDR is not off";
  }
  return "";
}

const char* platform_protocol_name(PlatformProtocol p) {
  switch (p) {
    case PlatformProtocol::kSendrecv: return "sendrecv";
    case PlatformProtocol::kRdma: return "rdma";
    default: return "auto";
  }
}

const char* gdr_expect_name(GdrExpect g) {
  switch (g) {
    case GdrExpect::kYes: return "yes";
    case GdrExpect::kNotApplicable: return "n/a";
    default: return "no";
  }
}

std::string describe_platform(const Platform& row) {
  if (row.line == 0) return row.name + ": no expectations, no NCCL defaults";
  std::string s = row.name + ":";
  const std::string total = gbps_total(row);
  if (!total.empty())
    s += " EFA " + total + ",";
  else if (row.efa_count >= 0)
    s += " " + std::to_string(row.efa_count) + " EFA,";
  if (row.accelerators >= 0) s += " " + std::to_string(row.accelerators);
  if (!row.accelerator_model.empty()) s += " " + row.accelerator_model;
  if (row.accelerators >= 0 || !row.accelerator_model.empty()) s += ",";
  s += std::string(" EFA ") + (row.efa_expected ? "expected" : "not expected");
  s += std::string(", GPUDirect RDMA ") + gdr_expect_name(row.gdr_expected);
  if (row.latency_us > 0) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%g", row.latency_us);
    s += std::string(", latency ") + buf + " us";
  }
  s += std::string(", protocol ") + platform_protocol_name(row.protocol);
  s += ", " + std::to_string(row.nccl_env.size()) + " NCCL default" +
       (row.nccl_env.size() == 1 ? "" : "s");
  return s;
}

namespace {

// "auto", "none" or ids: *ids empty for the first two.
bool parse_id_list(const std::string& name, const std::string& v, int ndev, std::vector<int>* ids,
                   std::string* error) {
  ids->clear();
  if (v == "auto" || v == "none") return true;
  for (const std::string& item : split_commas(v)) {
    char* end = nullptr;
    const long x = strtol(item.c_str(), &end, 10);
    if (item.empty() || end == nullptr || *end != '\0' || x < -1 || x > 32767) {
      *error = name + "='" + v + "': '" + item +
               "' is not an id (-1 to 32767); use auto, none or "
               "one id per device, comma-separated";
      return false;
    }
    ids->push_back(static_cast<int>(x));
  }
  if (static_cast<int>(ids->size()) != ndev) {
    *error = name + "='" + v + "' names " + std::to_string(ids->size()) + " id(s), but there are " +
             std::to_string(ndev) + " device(s)";
    return false;
  }
  return true;
}

}  // namespace

Status choose_rail_plane(const Params& p, const Platform& row, int ndev,
                         std::vector<RailPlane>* out, std::string* error) {
  const std::string& rv = p.get_str(ParamId::kRailId);
  const std::string& pv = p.get_str(ParamId::kPlaneId);
  std::vector<int> rails, planes;
  if (!parse_id_list("NCCL_FABRIC_RAIL_ID", rv, ndev, &rails, error) ||
      !parse_id_list("NCCL_FABRIC_PLANE_ID", pv, ndev, &planes, error))
    return Status::kInvalidUsage;
  const std::string row_name = row.name.empty() ? "generic" : row.name;
  out->assign(static_cast<size_t>(ndev), RailPlane());
  for (int i = 0; i < ndev; ++i) {
    RailPlane& rp = (*out)[static_cast<size_t>(i)];
    if (!rails.empty()) {
      rp.rail = rails[static_cast<size_t>(i)];
      rp.rail_source = "NCCL_FABRIC_RAIL_ID";
    } else if (rv == "none") {
      rp.rail_source = "NCCL_FABRIC_RAIL_ID=none";
    } else if (row.rail_aligned == 1) {
      rp.rail = i;
      rp.rail_source = "platform row " + row_name + ": rail-aligned, the device's index";
    } else {
      rp.rail_source = "platform row " + row_name +
                       (row.rail_aligned == 0 ? ": not rail-aligned" : ": rail alignment unknown");
    }
    if (!planes.empty()) {
      rp.plane = planes[static_cast<size_t>(i)];
      rp.plane_source = "NCCL_FABRIC_PLANE_ID";
    } else {
      rp.plane_source = pv == "none" ? "NCCL_FABRIC_PLANE_ID=none" : "no NIC of ours has planes";
    }
  }
  return Status::kOk;
}

}  // namespace nf
