// The test loops, written once against Xport, and the per-rank driver.
//
// Comms and slots: operation k of a test goes to comm k % C, as NCCL spreads its channels; each
// comm keeps up to W operations in flight per direction (its own window). Slot of operation j
// of comm c: c*W + j%W for sends, C*W + c*W + j%W for receives; then the latency send, the
// latency receive and the ack. Each slot has its own buffer of group x largest size.
#include "perf/bench.h"

#include <signal.h>
#include <strings.h>
#include <unistd.h>
#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "perf/report.h"
#include "perf/xport.h"

namespace nfp {

namespace {

struct FreeDeleter {
  void operator()(void* p) const { free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;

Buffer alloc_buffer(size_t len) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, len) != 0) fail("cannot allocate " + size_text(len));
  memset(p, 0x5a, len);  // fault the pages in now, not in a timed loop
  return Buffer(static_cast<char*>(p));
}

// The pattern of one message: 64-bit words that depend on the test, the message and the offset.
uint64_t message_seed(uint64_t test, uint64_t msg) {
  uint64_t x = (test << 40) ^ msg ^ 0x6e63636c66616272ull;  // "ncclfabr"
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline uint64_t pattern_word(uint64_t seed, size_t w) {
  uint64_t x = (seed + w) * 0x9e3779b97f4a7c15ull;
  return x ^ (x >> 29);
}
void fill_pattern(char* buf, size_t n, uint64_t seed) {
  size_t w = 0;
  for (; (w + 1) * 8 <= n; ++w) {
    uint64_t v = pattern_word(seed, w);
    memcpy(buf + w * 8, &v, 8);
  }
  if (w * 8 < n) {
    uint64_t v = pattern_word(seed, w);
    memcpy(buf + w * 8, &v, n - w * 8);
  }
}
// Returns n when all match, else the first bad offset.
size_t check_pattern(const char* buf, size_t n, uint64_t seed) {
  const size_t words = n / 8;
  size_t w = 0;
  for (; w < words; ++w) {
    uint64_t got;
    memcpy(&got, buf + w * 8, 8);
    if (got != pattern_word(seed, w)) break;
  }
  if (w == words && w * 8 == n) return n;
  const uint64_t want = pattern_word(seed, w);
  for (size_t b = 0; w * 8 + b < n && b < 8; ++b)
    if (buf[w * 8 + b] != reinterpret_cast<const char*>(&want)[b]) return w * 8 + b;
  return n;  // only a tail word, and it matched
}

// What one rank runs the tests with.
struct Bench {
  const Options& opt;
  int rank;
  Chan& chan;
  Watch& watch;
  char* sbuf;
  char* rbuf;
  size_t stride;  // bytes of one slot's buffer: group x largest size
  int W, C, G;
  uint64_t test_seq = 0;  // advances identically on both ranks: patterns differ per test
  long sends_posted = 0;  // for --stop-self-after

  int data_slot(bool send, int c, size_t j) const {
    return (send ? 0 : C * W) + c * W + static_cast<int>(j % static_cast<size_t>(W));
  }
  char* data_buf(bool send, int c, size_t j) const {
    const size_t idx = static_cast<size_t>(c * W) + j % static_cast<size_t>(W);
    return (send ? sbuf : rbuf) + idx * stride;
  }
  int lat_send_slot() const { return 2 * C * W; }
  int lat_recv_slot() const { return 2 * C * W + 1; }
  int ack_slot() const { return 2 * C * W + 2; }
  int slots() const { return 2 * C * W + 3; }
  // Operations of comm c among `count` dealt round-robin.
  size_t ops_of_comm(size_t count, int c) const {
    const size_t cc = static_cast<size_t>(C);
    return count / cc + (static_cast<size_t>(c) < count % cc ? 1 : 0);
  }
};

// Operation ids: distinct per direction, so every message of a test has a pattern of its own.
uint64_t op_id(uint64_t k, int sender) { return 2 * k + static_cast<uint64_t>(sender); }

void fill_op(const Bench& b, char* buf, size_t len, int n, uint64_t test, uint64_t op) {
  if (!b.opt.check) return;
  for (int i = 0; i < n; ++i)
    fill_pattern(buf + static_cast<size_t>(i) * len, len,
                 message_seed(test, op * kMaxGroup + static_cast<uint64_t>(i)));
}

void check_op(const Bench& b, const Xport& x, const char* what, uint64_t op, const char* buf,
              const size_t* lens, size_t len, int n, uint64_t test) {
  for (int i = 0; i < n; ++i) {
    const std::string msg = "operation " + std::to_string(op / 2) +
                            (n > 1 ? " message " + std::to_string(i) : std::string());
    if (lens[i] != len)
      fail(std::string(x.name()) + " " + what + ": " + msg + " arrived with " +
           std::to_string(lens[i]) + " bytes, expected " + std::to_string(len));
    if (!b.opt.check) continue;
    const char* m = buf + static_cast<size_t>(i) * len;
    const uint64_t seed = message_seed(test, op * kMaxGroup + static_cast<uint64_t>(i));
    const size_t bad = check_pattern(m, len, seed);
    if (bad == len) continue;
    const uint64_t expect = pattern_word(seed, bad / 8);
    char t[160];
    snprintf(t, sizeof(t), " of %zu bytes: data mismatch at byte %zu: got 0x%02x, expected 0x%02x",
             len, bad, static_cast<unsigned char>(m[bad]),
             static_cast<unsigned char>(reinterpret_cast<const char*>(&expect)[bad % 8]));
    fail(std::string(x.name()) + " " + what + ": " + msg + t);
  }
}

// Counts a posted send; --stop-self-after: a peer stopped in the middle of a transfer, with the
// other rank's requests toward it pending (tests/net/test_netns.sh). A SIGSTOP from outside can
// land where the other rank waits for results on the tool's socket, nothing pending in its plugin.
void sent_one(Bench& b) {
  if (++b.sends_posted == b.opt.stop_self_after) raise(SIGSTOP);
}

void post_retry(Bench& b, Xport& x, bool send, int slot, int comm, char* buf, size_t len, int n) {
  for (;;) {
    Xport::Post p =
        send ? x.post_send(slot, comm, buf, len, n) : x.post_recv(slot, comm, buf, len, n);
    if (p == Xport::Post::kPosted) {
      if (send) sent_one(b);
      return;
    }
    b.watch.tick();
  }
}

// --optional-completion: a receive the plugin reported done before its data (size 0) is waited
// for by reading the data until it is all there, as NCCL's LL reads its flags.
void await_data(Bench& b, const char* buf, size_t len, int n, uint64_t test, uint64_t op,
                size_t* lens) {
  if (!b.opt.optional_completion || n != 1 || len == 0 || lens[0] != 0) return;
  const uint64_t seed = message_seed(test, op * kMaxGroup);
  while (check_pattern(buf, len, seed) != len) b.watch.tick();
  b.watch.progressed();
  lens[0] = len;
}

void wait_op(Bench& b, Xport& x, int slot, size_t* lens) {
  while (!x.poll(slot, lens)) b.watch.tick();
  b.watch.progressed();
}

struct Measure {
  double seconds = 0;  // bw: sender's clock to the ack; bibw: this rank's clock
  double cpu = 0;      // this rank's CPU seconds over the timed part
  double lat_us = 0;   // lat (rank 0): median half round trip
};

// Ping-pong: rank 0 sends an operation, rank 1 answers with one; iteration i on comm i % C.
Measure run_latency(Bench& b, Xport& x, size_t size, size_t iters, size_t warmup) {
  const uint64_t test = ++b.test_seq;
  const size_t total = warmup + iters;
  const int G = b.G;
  std::vector<double> half_rtt;
  half_rtt.reserve(iters);
  size_t lens[kMaxGroup];
  const std::string what = std::string(x.name()) + " latency test (" + size_text(size) + ")";
  b.watch.begin(what);
  x.set_optional_completion(b.opt.optional_completion);
  if (b.rank == 1) post_retry(b, x, false, b.lat_recv_slot(), 0, b.rbuf, size, G);
  b.chan.sync(what + " start");
  Measure m;
  double cpu0 = cpu_seconds();
  for (size_t it = 0; it < total; ++it) {
    if (it == warmup) cpu0 = cpu_seconds();
    const int c = static_cast<int>(it % static_cast<size_t>(b.C));
    const uint64_t mine = op_id(it, b.rank), theirs = op_id(it, 1 - b.rank);
    if (b.rank == 0) {
      const auto t0 = Clock::now();
      post_retry(b, x, false, b.lat_recv_slot(), c, b.rbuf, size, G);
      fill_op(b, b.sbuf, size, G, test, mine);
      post_retry(b, x, true, b.lat_send_slot(), c, b.sbuf, size, G);
      wait_op(b, x, b.lat_send_slot(), lens);
      wait_op(b, x, b.lat_recv_slot(), lens);
      await_data(b, b.rbuf, size, G, test, theirs, lens);
      const auto t1 = Clock::now();
      check_op(b, x, "latency test", theirs, b.rbuf, lens, size, G, test);
      if (it >= warmup)
        half_rtt.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    } else {
      wait_op(b, x, b.lat_recv_slot(), lens);
      await_data(b, b.rbuf, size, G, test, theirs, lens);
      check_op(b, x, "latency test", theirs, b.rbuf, lens, size, G, test);
      if (it + 1 < total) {
        const int next = static_cast<int>((it + 1) % static_cast<size_t>(b.C));
        post_retry(b, x, false, b.lat_recv_slot(), next, b.rbuf, size, G);
      }
      fill_op(b, b.sbuf, size, G, test, mine);
      post_retry(b, x, true, b.lat_send_slot(), c, b.sbuf, size, G);
      wait_op(b, x, b.lat_send_slot(), lens);
    }
  }
  m.cpu = cpu_seconds() - cpu0;
  x.set_optional_completion(false);
  b.chan.sync(what + " end");
  if (!half_rtt.empty()) {
    std::nth_element(half_rtt.begin(), half_rtt.begin() + static_cast<long>(half_rtt.size() / 2),
                     half_rtt.end());
    m.lat_us = half_rtt[half_rtt.size() / 2];
  }
  return m;
}

// One direction of a windowed stream over every comm: `sender` posts sends, the other side
// receives and checks. Returns true when this call completed an operation.
struct Stream {
  bool send;
  size_t count;
  std::vector<size_t> posted, done, filled;
  size_t total_done = 0;
  Stream(bool s, size_t n, int comms)
      : send(s),
        count(n),
        posted(static_cast<size_t>(comms)),
        done(static_cast<size_t>(comms)),
        filled(static_cast<size_t>(comms)) {}
  bool finished() const { return total_done == count; }
};

bool stream_step(Bench& b, Xport& x, Stream& s, size_t size, uint64_t test, int sender,
                 const char* what) {
  bool moved = false;
  size_t lens[kMaxGroup];
  for (int c = 0; c < b.C; ++c) {
    const size_t cc = static_cast<size_t>(c);
    const size_t n = b.ops_of_comm(s.count, c);
    while (s.posted[cc] < n && s.posted[cc] - s.done[cc] < static_cast<size_t>(b.W)) {
      const size_t j = s.posted[cc];
      char* buf = b.data_buf(s.send, c, j);
      const int slot = b.data_slot(s.send, c, j);
      Xport::Post p;
      if (s.send) {
        if (s.filled[cc] == j) {
          fill_op(b, buf, size, b.G, test, op_id(j * static_cast<size_t>(b.C) + cc, sender));
          ++s.filled[cc];
        }
        p = x.post_send(slot, c, buf, size, b.G);
      } else {
        p = x.post_recv(slot, c, buf, size, b.G);
      }
      if (p == Xport::Post::kRetry) break;
      if (s.send) sent_one(b);
      ++s.posted[cc];
    }
    if (s.done[cc] < s.posted[cc]) {
      const size_t j = s.done[cc];
      if (x.poll(b.data_slot(s.send, c, j), lens)) {
        if (!s.send)
          check_op(b, x, what, op_id(j * static_cast<size_t>(b.C) + cc, sender),
                   b.data_buf(false, c, j), lens, size, b.G, test);
        ++s.done[cc];
        ++s.total_done;
        moved = true;
      }
    }
  }
  return moved;
}

// Rank 0 streams `count` operations to rank 1, which keeps a window of receives posted on every
// comm and acks the last one. Rank 0's seconds run from its first post to the ack's arrival.
Measure run_bandwidth(Bench& b, Xport& x, size_t size, size_t count) {
  const bool sender = b.rank == 0;
  const uint64_t test = ++b.test_seq;
  const size_t ack_len = 8;
  size_t lens[kMaxGroup];
  const std::string what = std::string(x.name()) + " bandwidth test (" + size_text(size) + ")";
  b.watch.begin(what);
  Stream s(sender, count, b.C);
  if (sender)
    post_retry(b, x, false, b.ack_slot(), 0, b.rbuf, ack_len, 1);
  else
    stream_step(b, x, s, size, test, 0, "bandwidth test");  // pre-posts the receives
  b.chan.sync(what + " start");

  Measure m;
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  while (!s.finished()) {
    if (stream_step(b, x, s, size, test, 0, "bandwidth test"))
      b.watch.progressed();
    else
      b.watch.tick();
  }
  if (sender) {
    wait_op(b, x, b.ack_slot(), lens);
    m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    check_op(b, x, "bandwidth test ack", op_id(count, 1), b.rbuf, lens, ack_len, 1, test);
  } else {
    fill_op(b, b.sbuf, ack_len, 1, test, op_id(count, 1));
    post_retry(b, x, true, b.ack_slot(), 0, b.sbuf, ack_len, 1);
    wait_op(b, x, b.ack_slot(), lens);
  }
  m.cpu = cpu_seconds() - cpu0;
  return m;
}

// Both ranks stream `count` operations to each other at once. Each rank's seconds run from the
// start barrier until all its sends and receives completed.
Measure run_bidir(Bench& b, Xport& x, size_t size, size_t count) {
  const uint64_t test = ++b.test_seq;
  const std::string what =
      std::string(x.name()) + " bidirectional bandwidth test (" + size_text(size) + ")";
  b.watch.begin(what);
  Stream out(true, count, b.C), in(false, count, b.C);
  stream_step(b, x, in, size, test, 1 - b.rank, "bidirectional test");  // pre-posts the receives
  b.chan.sync(what + " start");
  Measure m;
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  while (!out.finished() || !in.finished()) {
    bool moved =
        !in.finished() && stream_step(b, x, in, size, test, 1 - b.rank, "bidirectional test");
    moved = (!out.finished() && stream_step(b, x, out, size, test, b.rank, "bidirectional test")) ||
            moved;
    if (moved)
      b.watch.progressed();
    else
      b.watch.tick();
  }
  m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  m.cpu = cpu_seconds() - cpu0;
  return m;
}

bool inject_enabled() {
  const char* v = getenv("NCCL_FABRIC_INJECT");
  if (v == nullptr) return true;
  return !(strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 ||
           strcasecmp(v, "off") == 0);
}

std::string host_name() {
  char h[256] = {0};
  if (gethostname(h, sizeof(h) - 1) != 0) return "?";
  return h;
}

// The members NCCL calls unconditionally (ABI doc §3) that the plugin's table leaves NULL.
template <typename T>
std::string missing_members(const void* table) {
  const T* n = static_cast<const T*>(table);
  std::string m;
#define NFP_NEED(f) \
  if (n->f == nullptr) m += std::string(m.empty() ? "" : ", ") + #f
  NFP_NEED(name);
  NFP_NEED(init);
  NFP_NEED(devices);
  NFP_NEED(getProperties);
  NFP_NEED(listen);
  NFP_NEED(connect);
  NFP_NEED(accept);
  NFP_NEED(regMr);
  NFP_NEED(deregMr);
  NFP_NEED(isend);
  NFP_NEED(irecv);
  NFP_NEED(test);
  NFP_NEED(closeSend);
  NFP_NEED(closeRecv);
  NFP_NEED(closeListen);
#undef NFP_NEED
  return m;
}

std::string missing_members(int version, const void* table) {
  switch (version) {
    case 11: {
      std::string m = missing_members<ncclNet_v11_t>(table);
      if (static_cast<const ncclNet_v11_t*>(table)->finalize == nullptr)
        m += std::string(m.empty() ? "" : ", ") + "finalize";
      return m;
    }
    case 10: return missing_members<ncclNet_v10_t>(table);
    case 9: return missing_members<ncclNet_v9_t>(table);
    case 8: return missing_members<ncclNet_v8_t>(table);
    case 7: return missing_members<ncclNet_v7_t>(table);
    default: return missing_members<ncclNet_v6_t>(table);
  }
}

// The value of "key=value" among the lines of text ("" when absent).
std::string field(const std::string& text, const std::string& key) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    if (line.compare(0, key.size() + 1, key + "=") == 0) return line.substr(key.size() + 1);
    at = end + 1;
  }
  return "";
}

// Rank 0's row from both ranks' measurements.
Result make_result(Test t, const std::string& mode, const Options& o, size_t size, size_t iters,
                   const Measure& m0, const Measure& m1) {
  Result r;
  r.test = test_name(t);
  r.mode = mode;
  r.size = size;
  r.iters = iters;
  r.group = o.group;
  r.comms = o.comms;
  r.window = o.window;
  const double op_bytes = static_cast<double>(size) * o.group;
  double bytes = 0;  // moved over the timed part, both directions
  if (t == Test::kLat) {
    r.time_us = m0.lat_us;
    r.gbps = r.time_us > 0 ? op_bytes / (r.time_us * 1e-6) / 1e9 : 0;
    bytes = 2 * op_bytes * static_cast<double>(iters);
  } else {
    const double seconds = t == Test::kBw ? m0.seconds : std::max(m0.seconds, m1.seconds);
    bytes = op_bytes * static_cast<double>(iters) * (t == Test::kBibw ? 2 : 1);
    r.time_us = seconds / static_cast<double>(iters) * 1e6;
    r.gbps = seconds > 0 ? bytes / seconds / 1e9 : 0;
  }
  r.cpu_s[0] = m0.cpu;
  r.cpu_s[1] = m1.cpu;
  for (int i = 0; i < 2; ++i) r.cpu_per_gb[i] = bytes > 0 ? r.cpu_s[i] / (bytes / 1e9) : 0;
  return r;
}

// One plugin context (v11: an init of its own; before: the process-wide one) and the comms on
// it, which close before it is finalized.
struct PluginContext {
  nfc::NetPlugin plugin;
  bool inited = false;
  std::unique_ptr<PluginXport> x;
  ~PluginContext() {
    x.reset();
    if (inited) plugin.finalize();
  }
};

// Puts an environment variable back as it was (or unset) when it goes out of scope.
class EnvRestore {
 public:
  explicit EnvRestore(const char* name) : name_(name) {
    const char* v = getenv(name);
    had_ = v != nullptr;
    if (had_) value_ = v;
  }
  ~EnvRestore() {
    if (had_)
      setenv(name_, value_.c_str(), 1);
    else
      unsetenv(name_);
  }
  EnvRestore(const EnvRestore&) = delete;
  EnvRestore& operator=(const EnvRestore&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string value_;
};

}  // namespace

void run_rank(int rank, pid_t peer, Chan& chan, Options* op, std::vector<Result>* results) {
  // Rank 1 waits 3 s longer: when both are stuck in a forked pair, rank 0 tells (and takes
  // rank 1 with it).
  Watchdog dog(rank, op->timeout_ms() + 10000 + (rank == 1 ? 3000 : 0));
  Watch watch(rank, peer, &chan, op->timeout_ms());
  const auto started = Clock::now();
  RunInfo info;
  info.two_host = op->two_host();
  info.host[rank] = host_name();
  info.pid[rank] = static_cast<int>(getpid());

  // Handshake: rank 0 sends its plan, rank 1 adopts it and answers with where it runs.
  watch.begin("handshake");
  if (rank == 0) {
    chan.send('P', plan_text(*op), "handshake");
    const std::string ans = chan.recv('A', "handshake");
    info.host[1] = field(ans, "host");
    info.pid[1] = atoi(field(ans, "pid").c_str());
    if (op->mpi) info.two_host = info.host[1] != info.host[0];  // where the launcher put them
  } else {
    std::string err;
    if (!adopt_plan(chan.recv('P', "handshake"), op, &err)) fail(err);
    if (op->run_plugin && !resolve_plugin(op, &err)) fail(err);
    chan.send('A', "host=" + info.host[1] + "\npid=" + std::to_string(info.pid[1]) + "\n",
              "handshake");
  }
  const Options& o = *op;
  setenv("NCCL_FABRIC_PROVIDER", o.provider.c_str(), 1);  // what our plugin reads

  std::unique_ptr<Report> report;
  if (rank == 0) {
    report.reset(new Report(o));
    std::string err;
    if (!report->open(&err)) fail(err);
  }

  // Buffers first, so they outlive every registration of them.
  const int W = o.window, C = o.comms, G = o.group;
  const size_t stride = static_cast<size_t>(G) * o.max_size();
  const size_t buf_len = std::max<size_t>(64, static_cast<size_t>(C * W) * stride);
  Buffer sbuf = alloc_buffer(buf_len);
  Buffer rbuf = alloc_buffer(buf_len);
  Bench b{o, rank, chan, watch, sbuf.get(), rbuf.get(), stride, W, C, G};

  // Plugin: load, init, the device, comms connected: one context per transport of
  // o.plugin_modes() ("plugin", or "plugin:PROTO" per --protocol value, NCCL_FABRIC_PROTOCOL set
  // before its init). Declared first so they are torn down last.
  std::vector<std::unique_ptr<PluginContext>> plugins;
  if (o.run_plugin) {
    const std::vector<std::string> modes = o.plugin_modes();
    EnvRestore protocol_env("NCCL_FABRIC_PROTOCOL");  // as it was, once every context read its own
    for (size_t k = 0; k < modes.size(); ++k) {
      const std::string proto = o.protocols.empty() ? std::string() : o.protocols[k];
      watch.begin("loading the plugin");
      plugins.emplace_back(new PluginContext());
      nfc::NetPlugin& plugin = plugins.back()->plugin;
      std::string err;
      if (!plugin.load(o.plugin, o.abi, &err)) fail(err);  // the same library each time
      const std::string missing = missing_members(plugin.version(), plugin.table());
      if (!missing.empty())
        fail(o.plugin + ": ncclNetPlugin_v" + std::to_string(plugin.version()) +
             " leaves members NCCL always calls NULL: " + missing);
      info.plugin_path = o.plugin;
      info.plugin_name = plugin.name() != nullptr ? plugin.name() : "";
      info.abi = plugin.version();
      // Before v11 init sets up one context for the process, which reads the environment once:
      // a second protocol would silently run as the first.
      if (modes.size() > 1 && plugin.version() < 11)
        fail("--protocol with more than one value needs ncclNet v11 (a context per init), but " +
             o.plugin + " is used through ncclNetPlugin_v" + std::to_string(plugin.version()) +
             " (one process-wide context): run once per protocol");
      if (!proto.empty()) setenv("NCCL_FABRIC_PROTOCOL", proto.c_str(), 1);
      watch.begin(modes[k] + " init");
      ncclResult_t r = plugin.init();
      if (r != ncclSuccess)
        fail("plugin " + info.plugin_name + " init returned " + result_name(r) +
             " (NCCL_FABRIC_PROVIDER='" + o.provider + "'" +
             (proto.empty() ? std::string() : ", NCCL_FABRIC_PROTOCOL='" + proto + "'") +
             "; its WARN above, or NCCL_DEBUG=INFO, says why)");
      plugins.back()->inited = true;
      int ndev = 0;
      if ((r = plugin.devices(&ndev)) != ncclSuccess) plugin_fail("devices", r, modes[k]);
      if (ndev < 1)
        fail("plugin " + info.plugin_name + " reports no devices (provider '" + o.provider +
             "'; NCCL_DEBUG=INFO says why)");
      if (o.device >= ndev)
        fail("--device " + std::to_string(o.device) + ": plugin " + info.plugin_name + " has " +
             std::to_string(ndev) + " device" + (ndev == 1 ? "" : "s"));
      // As NCCL's topology detection does: the properties of every device.
      nfc::NetProps props;
      for (int d = 0; d < ndev; ++d) {
        nfc::NetProps p;
        if ((r = plugin.properties(d, &p)) != ncclSuccess)
          fail("plugin getProperties(" + std::to_string(d) + ") returned " + result_name(r));
        if (d == o.device) props = p;
      }
      info.device = props.name;
      info.dev_index = o.device;
      info.ndev = ndev;
      info.max_recvs = props.max_recvs;
      info.max_comms = props.max_comms;
      info.speed = props.speed;
      if (props.max_p2p_bytes != 0 && props.max_p2p_bytes < o.max_size())
        fail("plugin device " + std::to_string(o.device) + " takes messages of at most " +
             std::to_string(props.max_p2p_bytes) + " bytes (maxP2pBytes)");
      if (G > props.max_recvs)
        fail("--group " + std::to_string(G) + " needs grouped receives of " + std::to_string(G) +
             " buffers, but plugin " + info.plugin_name + " offers maxRecvs " +
             std::to_string(props.max_recvs) + " (use --raw-only, or a smaller --group)");
      if (props.max_comms > 0 && C > props.max_comms)
        fail("--comms " + std::to_string(C) + " is more than the plugin's maxComms (" +
             std::to_string(props.max_comms) + ")");
      // Both ranks create the contexts in the same order: the handle exchanges pair up.
      plugins.back()->x.reset(new PluginXport(plugin, modes[k], rank, C, b.slots()));
      plugins.back()->x->connect(o.device, chan, watch);
    }
  }

  std::unique_ptr<RawXport> raw_x;
  if (o.run_raw) {
    nfc::RawConfig cfg;
    cfg.provider = o.provider;
    cfg.domain = info.device;  // the plugin's NIC, when the plugin runs too
    cfg.use_inject = inject_enabled();
    cfg.cq_size = 1024;
    raw_x.reset(new RawXport(rank, C, b.slots(), G));
    watch.begin("raw libfabric setup");
    raw_x->open(cfg, chan, &info.raw_note);
    info.raw_domain = raw_x->fabric().domain_name();
    info.raw_inject = raw_x->fabric().inject_size();
    info.raw_inject_on = raw_x->fabric().use_inject();
    info.raw_mr_mode = raw_x->fabric().mr_mode();
  }

  // The transports in the order each row measures them.
  std::vector<Xport*> xs;
  for (const auto& pc : plugins) xs.push_back(pc->x.get());
  if (raw_x) xs.push_back(raw_x.get());
  watch.begin("memory registration");
  for (Xport* x : xs) x->reg(b.sbuf, b.rbuf, buf_len);
  chan.sync("setup");
  if (rank == 0) report->header(info);

  // Each row alternates the transports for opt.rounds rounds and keeps each one's best round:
  // the machines are noisy, and a slow spell then hits a round of one transport, not the ratio.
  for (Test t : o.tests) {
    for (size_t size : o.sizes_for(t)) {
      const size_t iters = o.iters_for(t, size);
      const size_t warm = o.warmup_for(t, iters);
      std::vector<Result> best(xs.size());
      for (int round = 0; round < o.rounds; ++round) {
        for (size_t xi = 0; xi < xs.size(); ++xi) {
          Xport& x = *xs[xi];
          Measure m;
          switch (t) {
            case Test::kLat: m = run_latency(b, x, size, iters, warm); break;
            case Test::kBw:
              if (warm > 0) run_bandwidth(b, x, size, warm);
              m = run_bandwidth(b, x, size, iters);
              break;
            case Test::kBibw:
              if (warm > 0) run_bidir(b, x, size, warm);
              m = run_bidir(b, x, size, iters);
              break;
          }
          const std::string what = std::string(x.name()) + " " + test_name(t) + " results";
          if (rank == 1) {
            char txt[128];
            snprintf(txt, sizeof(txt), "seconds=%.17g\ncpu=%.17g\n", m.seconds, m.cpu);
            chan.send('R', txt, what);
          } else {
            const std::string txt = chan.recv('R', what);
            Measure m1;
            m1.seconds = strtod(field(txt, "seconds").c_str(), nullptr);
            m1.cpu = strtod(field(txt, "cpu").c_str(), nullptr);
            Result r = make_result(t, x.name(), o, size, iters, m, m1);
            if (round == 0 || r.gbps > best[xi].gbps) best[xi] = r;
          }
        }
      }
      if (rank == 0) report->add(best);
    }
  }
  watch.begin("teardown");
  chan.sync("teardown");
  if (rank == 0) {
    std::string err;
    if (!report->finish(std::chrono::duration<double>(Clock::now() - started).count(), &err))
      fail(err);
    if (results != nullptr) *results = report->results();
  }
}

}  // namespace nfp
