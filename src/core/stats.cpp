// Counters, the statistics file and the stall report (stats.h, docs/stats.md).
#include "core/stats.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/comm.h"
#include "core/liveness.h"
#include "util/clock.h"
#include "util/log.h"

namespace nf {
namespace {

constexpr uint64_t kWatchPeriodNs = 1000000000ull;  // stall checks, per endpoint

struct DevTotals {
  std::string name;
  std::string provider;
  int nrails = 1;
  uint64_t send_msgs = 0, send_bytes = 0, recv_msgs = 0, recv_bytes = 0;
  uint64_t eagain = 0, cts_waits = 0, eager = 0, errors = 0;
  uint64_t writes[kStatRails] = {};
  uint64_t open = 0, closed = 0;
};

struct Registry {
  std::mutex mu;  // lock order: the keeper's registry, this, then an endpoint's mu
  bool configured = false;
  std::string path;  // NCCL_FABRIC_STATS, unexpanded
  uint64_t interval_ns = 0;
  uint64_t stall_ns = 0;
  uint64_t start_ns = 0;
  uint64_t last_write_ns = 0;
  bool write_warned = false;
  bool finished = false;            // the final file is written: no periodic one may replace it
  std::map<int, DevTotals> closed;  // per device: what comms that closed counted
};

Registry& reg() {
  static Registry* r = new Registry();  // never destroyed: the keeper may use it at exit
  return *r;
}

void add_comm(DevTotals& t, const Comm& c) {
  const CommStats& s = c.st;
  if (c.role == CommRole::kSend) {
    t.send_msgs += s.msgs.get();
    t.send_bytes += s.bytes.get();
  } else {
    t.recv_msgs += s.msgs.get();
    t.recv_bytes += s.bytes.get();
  }
  t.eagain += s.eagain.get();
  t.cts_waits += s.cts_waits.get();
  t.eager += s.eager.get();
  t.errors += s.errors.get();
  for (int i = 0; i < kStatRails; ++i) t.writes[i] += s.writes[i].get();
  if (c.nrails > t.nrails) t.nrails = c.nrails;
}

void name_device(DevTotals& t, const SharedEp& sep) {
  if (t.name.empty()) t.name = sep.dev_name;
  if (t.provider.empty()) t.provider = sep.provider;
  if (sep.nrails > t.nrails) t.nrails = sep.nrails;
}

std::string esc(const std::string& in) {
  std::string o;
  for (unsigned char ch : in) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char b[8];
      snprintf(b, sizeof(b), "\\u%04x", ch);
      o += b;
    } else {
      o += static_cast<char>(ch);
    }
  }
  return o;
}

std::string u64(uint64_t v) { return std::to_string(v); }

std::string rails_json(const uint64_t* w, int n) {
  std::string o = "[";
  for (int i = 0; i < n; ++i) o += (i ? ", " : "") + u64(w[i]);
  return o + "]";
}

// The oldest request NCCL waits for on c (nullptr: none). Under sep->mu.
const Request* oldest_pending(const Comm& c) {
  const Request* best = nullptr;
  c.pool->for_each([&](Request* r) {
    if (r->state != ReqState::kPending || r->magic != kReqMagic) return;
    if (r->type != ReqType::kSend && r->type != ReqType::kRecv && r->type != ReqType::kFlush)
      return;
    if (best == nullptr || static_cast<int32_t>(r->seq - best->seq) < 0) best = r;
  });
  return best;
}

struct Oldest {
  bool any = false;
  const char* kind = "";
  const char* state = "";
  uint64_t bytes = 0;
};

// What the comm waits for, oldest first. Under sep->mu.
Oldest describe_oldest(const Comm& c) {
  Oldest o;
  const Request* r = oldest_pending(c);
  if (r != nullptr) {
    o.any = true;
    o.kind = r->type == ReqType::kSend ? "send" : r->type == ReqType::kRecv ? "recv" : "flush";
    o.state = c.protocol->waiting_for(*r);
    if (r->type == ReqType::kSend) o.bytes = r->send.size;
    if (r->type == ReqType::kRecv)
      for (int i = 0; i < r->recv.nbufs; ++i) o.bytes += r->recv.caps[i];
    if (r->type == ReqType::kFlush) o.bytes = r->flush.len;
  } else if (c.protocol->send_waiting(c)) {
    o.any = true;
    o.kind = "send";
    o.state = "waiting for the receiver's clear-to-send";
  }
  return o;
}

double secs(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

std::atomic<uint64_t> g_unsolicited[static_cast<int>(Unsolicited::kCount)];

// One comm's JSON object. Under sep->mu.
std::string comm_json(const Comm& c, uint64_t now) {
  const CommStats& s = c.st;
  int ps = 0, pr = 0;
  const bool pend = !c.closing && comm_pending(c, &ps, &pr);
  uint64_t w[kStatRails];
  for (int i = 0; i < kStatRails; ++i) w[i] = s.writes[i].get();
  char num[64];
  std::string o =
      "    {\"dev\": " + std::to_string(c.sep->dev) + ", \"id\": " + u64(c.id) + ", \"role\": \"" +
      (c.role == CommRole::kSend ? "send" : "recv") + "\", \"peer\": \"" + esc(c.peer_name) +
      "\", \"protocol\": \"" + c.protocol->name + "\",\n     \"msgs\": " + u64(s.msgs.get()) +
      ", \"bytes\": " + u64(s.bytes.get()) + ", \"eagain\": " + u64(s.eagain.get()) +
      ", \"cts_waits\": " + u64(s.cts_waits.get()) + ", \"writes\": " + rails_json(w, c.nrails) +
      ", \"eager\": " + u64(s.eager.get()) + ", \"errors\": " + u64(s.errors.get()) +
      ",\n     \"pending\": " + std::to_string(pend ? ps + pr : 0);
  snprintf(num, sizeof(num), "%.3f",
           pend && c.stall_since_ns != 0 && c.events == c.stall_events
               ? secs(now - c.stall_since_ns)
               : 0.0);
  o += std::string(", \"stalled_s\": ") + num + ", \"oldest\": ";
  const Oldest old = pend ? describe_oldest(c) : Oldest();
  if (old.any) {
    snprintf(num, sizeof(num), "%.3f", c.watch_seen_ns != 0 ? secs(now - c.watch_seen_ns) : 0.0);
    o += std::string("{\"kind\": \"") + old.kind + "\", \"state\": \"" + esc(old.state) +
         "\", \"bytes\": " + u64(old.bytes) + ", \"age_s\": " + num + "}";
  } else {
    o += "null";
  }
  o += std::string(", \"failed\": \"") + (ok(c.failed) ? "" : status_name(c.failed)) + "\"}";
  return o;
}

std::string build_json(const std::vector<SharedEp*>& seps, bool final) {
  Registry& g = reg();
  const uint64_t now = now_ns();
  std::lock_guard<std::mutex> lock(g.mu);
  std::map<int, DevTotals> devs = g.closed;
  std::vector<std::string> comms;
  for (SharedEp* sep : seps) {
    std::lock_guard<TicketLock> slock(sep->mu);
    DevTotals& t = devs[sep->dev];
    name_device(t, *sep);
    for (const Comm* c : sep->comms) {
      if (c->role == CommRole::kListen || c->stats_folded || !c->established) continue;
      add_comm(t, *c);
      ++t.open;
      comms.push_back(comm_json(*c, now));
    }
  }
  char host[256] = "unknown";
  gethostname(host, sizeof(host) - 1);
  char num[64];
  snprintf(num, sizeof(num), "%.3f", secs(now - g.start_ns));
  std::string o =
      std::string("{\n  \"format\": \"nccl-fabric-stats\",\n  \"version\": 1,\n") +
      "  \"host\": \"" + esc(host) + "\",\n  \"pid\": " + std::to_string(getpid()) +
      ",\n  \"written_unix_ms\": " + u64(wall_ms()) + ",\n  \"uptime_s\": " + num +
      ",\n  \"final\": " + (final ? "true" : "false") +
      ",\n  \"unsolicited\": {\"pings_from_unknown\": " +
      u64(stats_unsolicited_count(Unsolicited::kPingUnknown)) +
      ", \"pongs_refused\": " + u64(stats_unsolicited_count(Unsolicited::kPongRefused)) +
      ", \"connects_past_av_cap\": " +
      u64(stats_unsolicited_count(Unsolicited::kConnectPastAvCap)) +
      ", \"wrong_cookie\": " + u64(stats_unsolicited_count(Unsolicited::kWrongCookie)) +
      "},\n  \"devices\": [";
  bool first = true;
  for (const auto& kv : devs) {
    const DevTotals& t = kv.second;
    o += std::string(first ? "\n" : ",\n") + "    {\"dev\": " + std::to_string(kv.first) +
         ", \"name\": \"" + esc(t.name) + "\", \"provider\": \"" + esc(t.provider) +
         "\",\n     \"send\": {\"msgs\": " + u64(t.send_msgs) +
         ", \"bytes\": " + u64(t.send_bytes) + "}, \"recv\": {\"msgs\": " + u64(t.recv_msgs) +
         ", \"bytes\": " + u64(t.recv_bytes) + "},\n     \"eagain\": " + u64(t.eagain) +
         ", \"cts_waits\": " + u64(t.cts_waits) +
         ", \"writes\": " + rails_json(t.writes, t.nrails) + ", \"eager\": " + u64(t.eager) +
         ", \"errors\": " + u64(t.errors) + ", \"comms_open\": " + u64(t.open) +
         ", \"comms_closed\": " + u64(t.closed) + "}";
    first = false;
  }
  o += first ? "],\n  \"comms\": [" : "\n  ],\n  \"comms\": [";
  for (size_t i = 0; i < comms.size(); ++i) o += (i ? ",\n" : "\n") + comms[i];
  o += comms.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return o;
}

// Writes the file (a temporary then a rename: a reader never sees half of it). Registry unlocked.
// One write at a time (the keeper's periodic one, finalize's, the one at exit share the temporary
// file's name), and a periodic one never replaces the final one.
void write_file(const std::string& doc, bool final) {
  static std::mutex* write_mu = new std::mutex();  // never destroyed: used at exit
  std::lock_guard<std::mutex> wlock(*write_mu);
  Registry& g = reg();
  std::string path;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (g.path.empty() || (!final && g.finished)) return;
    path = stats_path(g.path);
  }
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  FILE* f = fopen(tmp.c_str(), "w");
  bool good = f != nullptr && fwrite(doc.data(), 1, doc.size(), f) == doc.size();
  if (f != nullptr) good = fclose(f) == 0 && good;
  if (good) good = rename(tmp.c_str(), path.c_str()) == 0;
  if (!good) {
    const int e = errno;
    unlink(tmp.c_str());
    std::lock_guard<std::mutex> lock(g.mu);
    if (!g.write_warned)
      NF_WARN("NCCL_FABRIC_STATS: cannot write %s: %s (said once)", path.c_str(), strerror(e));
    g.write_warned = true;
  }
}

// NCCL before 2.28 (net ABI v6-v10) never finalizes the plugin: the final file is written when the
// library is unloaded or the process exits, from what the closed comms counted (NCCL closes its
// comms when the application destroys its communicators). No log line: NCCL may be gone by then.
__attribute__((destructor)) void stats_at_exit() {
  Registry& g = reg();
  bool due = false;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    due = g.configured && !g.path.empty() && !g.finished;
    g.finished = true;
  }
  if (due) write_file(build_json(std::vector<SharedEp*>(), true), true);
}

}  // namespace

std::string stats_path(const std::string& pattern) {
  std::string o;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char k = pattern[i + 1];
      if (k == 'h') {
        char host[256] = "unknown";
        gethostname(host, sizeof(host) - 1);
        o += host;
        ++i;
        continue;
      }
      if (k == 'p') {
        o += std::to_string(getpid());
        ++i;
        continue;
      }
      if (k == '%') {
        o += '%';
        ++i;
        continue;
      }
    }
    o += pattern[i];
  }
  return o;
}

void stats_configure(const Params& p) {
  Registry& g = reg();
  std::lock_guard<std::mutex> lock(g.mu);
  g.finished = false;  // a new context: the process runs on
  if (g.configured) return;
  g.configured = true;
  g.path = p.get_str(ParamId::kStats);
  g.interval_ns = static_cast<uint64_t>(p.get_int(ParamId::kStatsInterval)) * 1000000000ull;
  g.stall_ns = static_cast<uint64_t>(p.get_int(ParamId::kStallWarn)) * 1000000000ull;
  g.start_ns = now_ns();
  g.last_write_ns = g.start_ns;
  if (!g.path.empty())
    NF_INFO(kSubsysInit, "statistics to %s (NCCL_FABRIC_STATS), every %llu s and at finalize",
            stats_path(g.path).c_str(),
            static_cast<unsigned long long>(g.interval_ns / 1000000000ull));
}

void stats_fold(const Comm& c) {
  Registry& g = reg();
  std::lock_guard<std::mutex> lock(g.mu);
  DevTotals& t = g.closed[c.sep->dev];
  name_device(t, *c.sep);
  add_comm(t, c);
  ++t.closed;
  const_cast<Comm&>(c).stats_folded = true;
}

void stats_watch(SharedEp& sep, uint64_t now) {
  if (now - sep.watch_last_ns < kWatchPeriodNs) return;
  sep.watch_last_ns = now;
  uint64_t stall_ns;
  {
    Registry& g = reg();
    std::lock_guard<std::mutex> lock(g.mu);
    stall_ns = g.stall_ns;
  }
  for (Comm* c : sep.comms) {
    if (c->role == CommRole::kListen || c->closing || !c->pool || !c->established) continue;
    int ps = 0, pr = 0;
    const bool pend = comm_pending(*c, &ps, &pr);
    if (!pend || c->stall_since_ns == 0 || c->events != c->stall_events) {
      if (c->stall_warned)
        NF_INFO(kSubsysNet, "comm %u (%s %s): completes requests again after %.0f s", c->id,
                c->role == CommRole::kSend ? "send to" : "recv from", c->peer_name.c_str(),
                secs(now - c->stall_since_ns));
      c->stall_warned = false;
      c->stall_since_ns = pend ? now : 0;
      c->stall_events = c->events;
      if (!pend) c->watch_seq = UINT32_MAX;
    }
    if (!pend) continue;
    const Request* r = oldest_pending(*c);
    const uint32_t seq = r != nullptr ? r->seq : UINT32_MAX - 1;
    if (seq != c->watch_seq) {
      c->watch_seq = seq;
      c->watch_seen_ns = now;
    }
    if (c->stall_warned || stall_ns == 0 || now - c->stall_since_ns < stall_ns) continue;
    c->stall_warned = true;
    const Oldest o = describe_oldest(*c);
    const bool probed = sep.live && sep.live->timeout_ns > 0;
    const CommStats& s = c->st;
    NF_WARN(
        "comm %u (%s %s, %s): no request completed for %.0f s with %d send(s) and %d receive(s) "
        "pending; oldest: %s of %llu bytes, %s, outstanding for at least %.0f s; counters: %llu "
        "messages, %llu bytes, %llu EAGAIN retries, %llu clear-to-send waits, %llu errors. %s",
        c->id, c->role == CommRole::kSend ? "send to" : "recv from", c->peer_name.c_str(),
        c->protocol->name, secs(now - c->stall_since_ns), ps, pr, o.kind,
        static_cast<unsigned long long>(o.bytes), o.state, secs(now - c->watch_seen_ns),
        static_cast<unsigned long long>(s.msgs.get()),
        static_cast<unsigned long long>(s.bytes.get()),
        static_cast<unsigned long long>(s.eagain.get()),
        static_cast<unsigned long long>(s.cts_waits.get()),
        static_cast<unsigned long long>(s.errors.get()),
        probed ? (c->role == CommRole::kSend
                      ? "The peer answers liveness probes: it is alive but has not posted the "
                        "matching receive (a rank that has not reached this operation, or "
                        "mismatched operations)"
                      : "The peer answers liveness probes: it is alive but has not sent the "
                        "matching message (a rank that has not reached this operation, or "
                        "mismatched operations)")
               : "Liveness probing is off (NCCL_FABRIC_PEER_TIMEOUT=0): the peer may be gone");
  }
}

void stats_tick(const std::vector<SharedEp*>& seps, uint64_t now) {
  Registry& g = reg();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (g.path.empty() || g.finished || g.interval_ns == 0 || now - g.last_write_ns < g.interval_ns)
      return;
    g.last_write_ns = now;
  }
  write_file(build_json(seps, false), false);
}

std::string stats_json(bool final) {
  std::string doc;
  keeper_with_endpoints([&](const std::vector<SharedEp*>& seps) { doc = build_json(seps, final); });
  return doc;
}

void stats_finish() {
  Registry& g = reg();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.finished = true;
  }
  const std::string doc = stats_json(true);
  write_file(doc, true);
  std::lock_guard<std::mutex> lock(g.mu);
  for (const auto& kv : g.closed) {
    const DevTotals& t = kv.second;
    NF_INFO(
        kSubsysNet,
        "device %d (%s, %s): sent %llu messages (%llu bytes), received %llu (%llu bytes), "
        "%llu EAGAIN retries, %llu clear-to-send waits, %llu eager, %llu errors, %llu comms "
        "closed",
        kv.first, t.name.c_str(), t.provider.c_str(), static_cast<unsigned long long>(t.send_msgs),
        static_cast<unsigned long long>(t.send_bytes), static_cast<unsigned long long>(t.recv_msgs),
        static_cast<unsigned long long>(t.recv_bytes), static_cast<unsigned long long>(t.eagain),
        static_cast<unsigned long long>(t.cts_waits), static_cast<unsigned long long>(t.eager),
        static_cast<unsigned long long>(t.errors), static_cast<unsigned long long>(t.closed));
  }
}

void stats_unsolicited(Unsolicited what) {
  g_unsolicited[static_cast<int>(what)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t stats_unsolicited_count(Unsolicited what) {
  return g_unsolicited[static_cast<int>(what)].load(std::memory_order_relaxed);
}

}  // namespace nf
