#include "info/stats_report.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "info/json.h"

namespace nfi {
namespace {

constexpr const char* kFormat = "nccl-fabric-stats";
constexpr int64_t kVersion = 1;
// A statistics file holds a few hundred bytes per comm; anything near this is not one.
constexpr long kMaxFileBytes = 64L << 20;

// Reads the known members of one object. Absent members keep their defaults (a later writer may
// drop a counter); present ones must have the right type. The first problem is kept in *err,
// named by its path in the document ("comms[2].stalled_s").
class Fields {
 public:
  Fields(const JsonValue& obj, std::string where, std::string* err)
      : obj_(obj), where_(std::move(where)), err_(err) {}

  const JsonValue* get(const char* key) const { return obj_.find(key); }
  std::string path(const char* key) const { return where_ + key; }

  void integer(const char* key, int64_t* v) {
    const JsonValue* j = get(key);
    if (j == nullptr) return;
    if (!j->is_int()) return bad(key, "an integer");
    *v = j->integer();
  }
  void number(const char* key, double* v) {
    const JsonValue* j = get(key);
    if (j == nullptr) return;
    if (!j->is_number()) return bad(key, "a number");
    *v = j->number();
  }
  void str(const char* key, std::string* v) {
    const JsonValue* j = get(key);
    if (j == nullptr) return;
    if (!j->is_string()) return bad(key, "a string");
    *v = j->str();
  }
  void boolean(const char* key, bool* v) {
    const JsonValue* j = get(key);
    if (j == nullptr) return;
    if (!j->is_bool()) return bad(key, "true or false");
    *v = j->boolean();
  }
  void integers(const char* key, std::vector<int64_t>* v) {
    const JsonValue* j = get(key);
    if (j == nullptr) return;
    if (!j->is_array()) return bad(key, "an array of integers");
    for (const JsonValue& e : j->items()) {
      if (!e.is_int()) return bad(key, "an array of integers");
      v->push_back(e.integer());
    }
  }
  // An object member; nullptr when absent or (with the error kept) not an object.
  const JsonValue* object(const char* key, bool null_ok = false) {
    const JsonValue* j = get(key);
    if (j == nullptr || (null_ok && j->is_null())) return nullptr;
    if (!j->is_object()) {
      bad(key, null_ok ? "an object or null" : "an object");
      return nullptr;
    }
    return j;
  }
  const JsonValue* array(const char* key) {
    const JsonValue* j = get(key);
    if (j == nullptr) return nullptr;
    if (!j->is_array()) {
      bad(key, "an array");
      return nullptr;
    }
    return j;
  }

 private:
  const JsonValue& obj_;
  std::string where_;
  std::string* err_;

  void bad(const char* key, const char* what) {
    if (err_->empty()) *err_ = where_ + key + ": expected " + what;
  }
};

bool not_object(const JsonValue& v, const std::string& where, std::string* err) {
  if (v.is_object()) return false;
  if (err->empty()) *err = where + ": expected an object";
  return true;
}

void read_device(const JsonValue& v, const std::string& where, StatsDevice* d, std::string* err) {
  if (not_object(v, where, err)) return;
  Fields f(v, where + ".", err);
  f.integer("dev", &d->dev);
  f.str("name", &d->name);
  f.str("provider", &d->provider);
  if (const JsonValue* s = f.object("send")) {
    Fields sf(*s, f.path("send."), err);
    sf.integer("msgs", &d->send_msgs);
    sf.integer("bytes", &d->send_bytes);
  }
  if (const JsonValue* r = f.object("recv")) {
    Fields rf(*r, f.path("recv."), err);
    rf.integer("msgs", &d->recv_msgs);
    rf.integer("bytes", &d->recv_bytes);
  }
  f.integer("eagain", &d->eagain);
  f.integer("cts_waits", &d->cts_waits);
  f.integers("writes", &d->writes);
  f.integer("eager", &d->eager);
  f.integer("errors", &d->errors);
  f.integer("comms_open", &d->comms_open);
  f.integer("comms_closed", &d->comms_closed);
}

void read_comm(const JsonValue& v, const std::string& where, StatsComm* c, std::string* err) {
  if (not_object(v, where, err)) return;
  Fields f(v, where + ".", err);
  f.integer("dev", &c->dev);
  f.integer("id", &c->id);
  f.str("role", &c->role);
  f.str("peer", &c->peer);
  f.str("protocol", &c->protocol);
  f.integer("msgs", &c->msgs);
  f.integer("bytes", &c->bytes);
  f.integer("eagain", &c->eagain);
  f.integer("cts_waits", &c->cts_waits);
  f.integers("writes", &c->writes);
  f.integer("eager", &c->eager);
  f.integer("errors", &c->errors);
  f.integer("pending", &c->pending);
  f.number("stalled_s", &c->stalled_s);
  if (const JsonValue* o = f.object("oldest", true)) {
    Fields of(*o, f.path("oldest."), err);
    c->oldest.present = true;
    of.str("kind", &c->oldest.kind);
    of.str("state", &c->oldest.state);
    of.integer("bytes", &c->oldest.bytes);
    of.number("age_s", &c->oldest.age_s);
  }
  f.str("failed", &c->failed);
}

// Text from a file goes on one line of a table or verdict: control characters are shown escaped.
std::string printable(const std::string& s) {
  std::string o;
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      o += "\\n";
    } else if (c == '\t') {
      o += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char b[8];
      snprintf(b, sizeof(b), "\\x%02x", c);
      o += b;
    } else {
      o += ch;
    }
  }
  return o;
}

// Characters, not bytes, so that a host name in UTF-8 keeps the table aligned (near enough: wide
// characters count as one).
size_t columns(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string fmt(const char* f, double v) {
  char b[64];
  snprintf(b, sizeof(b), f, v);
  return b;
}

std::string gb(int64_t bytes) { return fmt("%.2f", static_cast<double>(bytes) / 1e9); }

// One row: a process and its totals over its devices and open comms.
struct Node {
  const StatsFile* f = nullptr;
  int64_t sent_msgs = 0, sent_bytes = 0, recv_msgs = 0, recv_bytes = 0;
  int64_t eagain = 0, cts_waits = 0, errors = 0, pending = 0;
  double stalled_s = 0;                  // the longest stall of a comm with pending requests
  const StatsComm* worst = nullptr;      // the most stalled stuck comm
  int stuck = 0;                         // comms stuck (pending, stalled >= the threshold)
  std::vector<const StatsComm*> failed;  // comms with a failure reason
  int64_t total() const { return sent_bytes + recv_bytes; }
};

Node summarize(const StatsFile& f, double stall_s) {
  Node n;
  n.f = &f;
  for (const StatsDevice& d : f.devices) {
    n.sent_msgs += d.send_msgs;
    n.sent_bytes += d.send_bytes;
    n.recv_msgs += d.recv_msgs;
    n.recv_bytes += d.recv_bytes;
    n.eagain += d.eagain;
    n.cts_waits += d.cts_waits;
    n.errors += d.errors;
  }
  for (const StatsComm& c : f.comms) {
    n.pending += c.pending;
    if (c.pending > 0) n.stalled_s = std::max(n.stalled_s, c.stalled_s);
    if (c.pending > 0 && c.stalled_s >= stall_s) {
      ++n.stuck;
      if (n.worst == nullptr || c.stalled_s > n.worst->stalled_s) n.worst = &c;
    }
    if (!c.failed.empty()) n.failed.push_back(&c);
  }
  return n;
}

struct Verdict {
  std::string kind;  // stuck, errors, slow
  const Node* node = nullptr;
  std::string message;  // with the file's strings as they are (the text output escapes them)
};

std::string describe_comm(const StatsComm& c) {
  std::string s = "comm " + std::to_string(c.id) + " (";
  if (c.role == "send")
    s += "send to ";
  else if (c.role == "recv")
    s += "recv from ";
  else
    s += c.role + " ";
  return s + c.peer + ")";
}

std::string stuck_message(const Node& n) {
  const StatsComm& c = *n.worst;
  std::string m = describe_comm(c) + " has " + std::to_string(c.pending) +
                  " pending, no progress for " + fmt("%.1f", c.stalled_s) + " s";
  if (c.oldest.present)
    m += "; oldest: " + c.oldest.kind + " of " + std::to_string(c.oldest.bytes) + " bytes, " +
         c.oldest.state + ", " + fmt("%.1f", c.oldest.age_s) + " s old";
  if (n.stuck > 1)
    m += " (" + std::to_string(n.stuck - 1) + " more stuck comm" + (n.stuck > 2 ? "s" : "") + ")";
  return m;
}

std::string errors_message(const Node& n) {
  std::string m = std::to_string(n.errors) + (n.errors == 1 ? " error" : " errors");
  if (!n.failed.empty()) {
    const StatsComm& c = *n.failed.front();
    m += " (comm " + std::to_string(c.id) + ": " + c.failed;
    if (n.failed.size() > 1)
      m += "; " + std::to_string(n.failed.size() - 1) + " more failed comm" +
           (n.failed.size() > 2 ? "s" : "");
    m += ")";
  }
  return m;
}

std::vector<Verdict> judge(const std::vector<Node>& nodes) {
  std::vector<Verdict> v;
  for (const Node& n : nodes)
    if (n.worst != nullptr) v.push_back({"stuck", &n, stuck_message(n)});
  for (const Node& n : nodes)
    if (n.errors > 0 || !n.failed.empty()) v.push_back({"errors", &n, errors_message(n)});
  // Slow needs a majority to compare against: with two nodes either could be the odd one.
  if (nodes.size() >= 3) {
    std::vector<int64_t> t;
    for (const Node& n : nodes) t.push_back(n.total());
    std::sort(t.begin(), t.end());
    const size_t k = t.size() / 2;
    const double median =
        t.size() % 2 == 1 ? static_cast<double>(t[k]) : (static_cast<double>(t[k - 1]) + t[k]) / 2;
    for (const Node& n : nodes)
      if (static_cast<double>(n.total()) < median / 2)
        v.push_back({"slow", &n,
                     "sent+recv " + gb(n.total()) + " GB, median " + fmt("%.2f", median / 1e9) +
                         " GB (below half)"});
  }
  return v;
}

void print_text(const std::vector<Node>& nodes, const std::vector<Verdict>& verdicts, size_t nfiles,
                size_t nbad, FILE* out) {
  fprintf(out, "== nccl-fabric stats: %zu file%s", nfiles, nfiles == 1 ? "" : "s");
  if (nbad > 0) fprintf(out, " (%zu unreadable, not shown)", nbad);
  fputc('\n', out);
  std::vector<std::vector<std::string>> rows = {{"host", "pid", "final", "uptime_s", "sent_msgs",
                                                 "sent_GB", "recv_msgs", "recv_GB", "eagain",
                                                 "cts_waits", "errors", "pending", "stalled_s"}};
  for (const Node& n : nodes)
    rows.push_back({printable(n.f->host), std::to_string(n.f->pid), n.f->final ? "yes" : "no",
                    fmt("%.1f", n.f->uptime_s), std::to_string(n.sent_msgs), gb(n.sent_bytes),
                    std::to_string(n.recv_msgs), gb(n.recv_bytes), std::to_string(n.eagain),
                    std::to_string(n.cts_waits), std::to_string(n.errors),
                    std::to_string(n.pending), fmt("%.1f", n.stalled_s)});
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], columns(r[i]));
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - columns(r[i]) + 2, ' ');
    }
    fprintf(out, "%s\n", line.c_str());
  }
  fprintf(out, "== verdict\n");
  for (const Verdict& v : verdicts)
    fprintf(out, "%s: %s pid %lld: %s\n", v.kind.c_str(), printable(v.node->f->host).c_str(),
            static_cast<long long>(v.node->f->pid), printable(v.message).c_str());
  if (verdicts.empty()) fprintf(out, "ok: no node stands out\n");
}

void print_json(const std::vector<Node>& nodes, const std::vector<Verdict>& verdicts,
                const std::vector<std::pair<std::string, std::string>>& bad, size_t nfiles,
                double stall_s, int code, FILE* out) {
  fprintf(out, "{\"stats_schema\": 1, \"files\": %zu, \"stall_s\": %g, \"unreadable\": [", nfiles,
          stall_s);
  for (size_t i = 0; i < bad.size(); ++i) {
    fputs(i ? ", {\"file\": " : "{\"file\": ", out);
    json_write_string(out, bad[i].first);
    fputs(", \"error\": ", out);
    json_write_string(out, bad[i].second);
    fputc('}', out);
  }
  fputs("], \"nodes\": [", out);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    fputs(i ? ", {\"file\": " : "{\"file\": ", out);
    json_write_string(out, n.f->path);
    fputs(", \"host\": ", out);
    json_write_string(out, n.f->host);
    fprintf(out,
            ", \"pid\": %lld, \"final\": %s, \"uptime_s\": %g, \"written_unix_ms\": %lld, "
            "\"sent_msgs\": %lld, \"sent_bytes\": %lld, \"recv_msgs\": %lld, \"recv_bytes\": "
            "%lld, \"eagain\": %lld, \"cts_waits\": %lld, \"errors\": %lld, \"pending\": %lld, "
            "\"stalled_s\": %g}",
            static_cast<long long>(n.f->pid), n.f->final ? "true" : "false", n.f->uptime_s,
            static_cast<long long>(n.f->written_unix_ms), static_cast<long long>(n.sent_msgs),
            static_cast<long long>(n.sent_bytes), static_cast<long long>(n.recv_msgs),
            static_cast<long long>(n.recv_bytes), static_cast<long long>(n.eagain),
            static_cast<long long>(n.cts_waits), static_cast<long long>(n.errors),
            static_cast<long long>(n.pending), n.stalled_s);
  }
  fputs("], \"verdict\": [", out);
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const Verdict& v = verdicts[i];
    fprintf(out, "%s{\"kind\": \"%s\", \"host\": ", i ? ", " : "", v.kind.c_str());
    json_write_string(out, v.node->f->host);
    fprintf(out, ", \"pid\": %lld, \"message\": ", static_cast<long long>(v.node->f->pid));
    json_write_string(out, v.message);
    fputc('}', out);
  }
  fprintf(out, "], \"exit_code\": %d}\n", code);
}

}  // namespace

bool parse_stats(const std::string& text, StatsFile* f, std::string* err) {
  JsonValue doc;
  if (!json_parse(text, &doc, err)) return false;
  if (!doc.is_object()) {
    *err = "not a JSON object (not a nccl-fabric-stats file)";
    return false;
  }
  const JsonValue* format = doc.find("format");
  if (format == nullptr) {
    *err = "no \"format\" (not a nccl-fabric-stats file)";
    return false;
  }
  if (!format->is_string() || format->str() != kFormat) {
    *err = std::string("format is not ") + kFormat;
    return false;
  }
  const JsonValue* version = doc.find("version");
  if (version == nullptr || !version->is_int()) {
    *err = "no integer \"version\"";
    return false;
  }
  if (version->integer() != kVersion) {
    *err = "version " + std::to_string(version->integer()) +
           " is not supported (this reader knows " + std::to_string(kVersion) + ")";
    return false;
  }
  err->clear();
  Fields top(doc, "", err);
  top.str("host", &f->host);
  top.integer("pid", &f->pid);
  top.integer("written_unix_ms", &f->written_unix_ms);
  top.number("uptime_s", &f->uptime_s);
  top.boolean("final", &f->final);
  if (const JsonValue* devs = top.array("devices")) {
    for (const JsonValue& d : devs->items()) {
      f->devices.emplace_back();
      read_device(d, "devices[" + std::to_string(f->devices.size() - 1) + "]", &f->devices.back(),
                  err);
    }
  }
  if (const JsonValue* comms = top.array("comms")) {
    for (const JsonValue& c : comms->items()) {
      f->comms.emplace_back();
      read_comm(c, "comms[" + std::to_string(f->comms.size() - 1) + "]", &f->comms.back(), err);
    }
  }
  return err->empty();
}

bool read_stats_file(const std::string& path, StatsFile* f, std::string* err) {
  std::unique_ptr<FILE, int (*)(FILE*)> fp(fopen(path.c_str(), "rb"), fclose);
  if (!fp) {
    *err = std::string("cannot open: ") + strerror(errno);
    return false;
  }
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), fp.get())) > 0) {
    text.append(buf, n);
    if (static_cast<long>(text.size()) > kMaxFileBytes) {
      *err = "larger than " + std::to_string(kMaxFileBytes >> 20) + " MiB: not a statistics file";
      return false;
    }
  }
  if (ferror(fp.get())) {
    *err = std::string("cannot read: ") + strerror(errno);
    return false;
  }
  if (text.empty()) {
    *err = "empty file";
    return false;
  }
  f->path = path;
  return parse_stats(text, f, err);
}

int stats_report(const std::vector<std::string>& files, double stall_s, FILE* out, FILE* err,
                 bool json) {
  std::vector<StatsFile> good;
  std::vector<std::pair<std::string, std::string>> bad;
  good.reserve(files.size());  // the nodes point into it
  for (const std::string& path : files) {
    StatsFile f;
    std::string e;
    if (read_stats_file(path, &f, &e)) {
      good.push_back(std::move(f));
    } else {
      fprintf(err, "nccl-fabric-info: %s: %s\n", path.c_str(), e.c_str());
      bad.emplace_back(path, e);
    }
  }
  std::sort(good.begin(), good.end(), [](const StatsFile& a, const StatsFile& b) {
    if (a.host != b.host) return a.host < b.host;
    if (a.pid != b.pid) return a.pid < b.pid;
    return a.path < b.path;
  });
  std::vector<Node> nodes;
  nodes.reserve(good.size());  // the verdicts point into it
  for (const StatsFile& f : good) nodes.push_back(summarize(f, stall_s));
  const std::vector<Verdict> verdicts = judge(nodes);
  const int code = !bad.empty() ? 2 : !verdicts.empty() ? 1 : 0;
  if (json)
    print_json(nodes, verdicts, bad, files.size(), stall_s, code, out);
  else
    print_text(nodes, verdicts, files.size(), bad.size(), out);
  return code;
}

}  // namespace nfi
