// nccl-fabric-perf: point-to-point latency and bandwidth of an NCCL net plugin, measured next to
// raw libfabric doing the same transfers on the same provider, so the plugin's overhead shows as
// a ratio. By default it forks two processes on this host (rank 0 = parent, rank 1 = child)
// joined by an out-of-band socketpair.
//
// Layout: options; failures and liveness (Watch); the transport interface (Xport) with one
// implementation over the plugin ABI and one over raw libfabric; the benchmark loops, written
// once against Xport; the per-rank driver; main.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <limits.h>
#include <memory>
#include <sched.h>
#include <stdexcept>
#include <string>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "client/oob.h"
#include "client/plugin_loader.h"
#include "client/raw_fabric.h"
#include "nccl/net.h"

#ifndef NF_DEFAULT_PLUGIN
#define NF_DEFAULT_PLUGIN ""
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kProg = "nccl-fabric-perf";
constexpr const char* kDefaultProvider = "tcp;ofi_rxm";
constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// ------------------------------------------------------------------------------------------------
// Options
// ------------------------------------------------------------------------------------------------

struct Options {
  std::string plugin;    // resolved path (plugin mode only)
  std::string provider;  // exported as NCCL_FABRIC_PROVIDER; the raw transport uses the same
  bool run_plugin = true;
  bool run_raw = true;
  long iters = 0;        // 0: the defaults below
  long warmup = 200;
  int window = 16;
  bool check = false;
  int timeout_s = 60;
  int rounds = 3;
  size_t lat_size = 8;
  std::vector<size_t> bw_sizes = {64 * KiB, 1 * MiB, 4 * MiB};

  static constexpr long kLatencyIters = 2000;
  static constexpr size_t kBwBytes = 128 * MiB;  // bandwidth: bytes per size and round...
  static constexpr long kBwMinIters = 20, kBwMaxIters = 5000;  // ...within these iterations

  int timeout_ms() const { return timeout_s * 1000; }
  size_t latency_iters() const { return iters > 0 ? static_cast<size_t>(iters) : kLatencyIters; }
  size_t bw_iters(size_t size) const {
    if (iters > 0) return static_cast<size_t>(iters);
    const long by_bytes = static_cast<long>(kBwBytes / size);
    return static_cast<size_t>(std::min(kBwMaxIters, std::max(kBwMinIters, by_bytes)));
  }
  size_t bw_warmup(size_t bw_iters_n) const {
    if (warmup == 0) return 0;
    return std::max<size_t>(static_cast<size_t>(window),
                            std::min<size_t>(static_cast<size_t>(warmup), bw_iters_n / 4));
  }
  size_t max_size() const {
    size_t m = lat_size;
    for (size_t s : bw_sizes) m = std::max(m, s);
    return m;
  }
};

void usage(FILE* f) {
  fprintf(f,
          "usage: %s [options]\n"
          "Measures an NCCL net plugin against raw libfabric on the same provider, between two\n"
          "processes on this host: 8-byte one-way latency (half a ping-pong round trip, median)\n"
          "and unidirectional bandwidth at 64 KiB, 1 MiB and 4 MiB with a window of messages in\n"
          "flight, then the ratio plugin/raw.\n"
          "\n"
          "  --plugin PATH    net plugin to load (default %s,\n"
          "                   else <dir of this binary>/../.libs/libnccl-net-fabric.so)\n"
          "  --provider NAME  libfabric provider, e.g. 'tcp;ofi_rxm' or shm; exported to the\n"
          "                   plugin as NCCL_FABRIC_PROVIDER and used by the raw transport\n"
          "                   (default: the NCCL_FABRIC_PROVIDER already set, else '%s')\n"
          "  --no-raw         plugin only\n"
          "  --raw-only       raw libfabric only (no plugin needed)\n"
          "  -n ITERS         iterations of every test (default: latency %ld; bandwidth\n"
          "                   %zu MiB per size and round, %ld to %ld messages)\n"
          "  -w WARMUP        untimed iterations before each latency test (default 200);\n"
          "                   bandwidth warms up with min(WARMUP, iters/4) messages, at least a\n"
          "                   window; 0 disables warm-up\n"
          "  --window W       messages in flight in the bandwidth test, 1..%d (default 16)\n"
          "  -r, --rounds R   each row alternates plugin and raw R times and shows the best round\n"
          "                   of each (default 3)\n"
          "  -c, --check      fill every message with a pattern of its own and verify every byte\n"
          "                   received (timings then include the fill and the check)\n"
          "  --timeout SEC    longest any wait may go without progress (default 60)\n"
          "  -h, --help       this text\n"
          "\n"
          "Environment: FI_TCP_IFACE=lo pins tcp;ofi_rxm to loopback; NCCL_FABRIC_INJECT=0\n"
          "turns fi_tinject off in the plugin and here alike; NCCL_DEBUG=INFO shows the plugin's\n"
          "log.\n"
          "Exit status: 0 on success; 1 on any failure, with one line on stderr saying which;\n"
          "2 on bad usage.\n",
          kProg, NF_DEFAULT_PLUGIN[0] ? NF_DEFAULT_PLUGIN : "(none built in)", kDefaultProvider,
          Options::kLatencyIters, Options::kBwBytes / MiB, Options::kBwMinIters,
          Options::kBwMaxIters, NCCL_NET_MAX_REQUESTS);
}

bool parse_long(const char* s, long lo, long hi, long* out) {
  errno = 0;
  char* end = nullptr;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool file_exists(const std::string& p) { return !p.empty() && access(p.c_str(), R_OK) == 0; }

std::string default_plugin_path(std::string* tried) {
  std::vector<std::string> candidates;
  if (NF_DEFAULT_PLUGIN[0] != '\0') candidates.push_back(NF_DEFAULT_PLUGIN);
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string dir(exe);
    dir = dir.substr(0, dir.rfind('/'));
    // tools/nccl-fabric-perf -> .libs/ of the top build dir; a libtool wrapper runs the real
    // binary from tools/.libs/, one level further down.
    candidates.push_back(dir + "/../.libs/libnccl-net-fabric.so");
    candidates.push_back(dir + "/../../.libs/libnccl-net-fabric.so");
  }
  for (const std::string& c : candidates) {
    if (!tried->empty()) *tried += ", ";
    *tried += c;
    if (file_exists(c)) {
      char real[PATH_MAX];
      return realpath(c.c_str(), real) != nullptr ? std::string(real) : c;
    }
  }
  return "";
}

// 0: go on; otherwise the exit status.
int parse_args(int argc, char** argv, Options* o) {
  auto bad = [](const std::string& m) {
    fprintf(stderr, "%s: %s (see --help)\n", kProg, m.c_str());
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string val;
    bool has_val = false;
    size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      val = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_val = true;
    }
    auto value = [&](std::string* out) {
      if (has_val) { *out = val; return true; }
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    long n = 0;
    if (a == "-h" || a == "--help") {
      usage(stdout);
      exit(0);
    } else if (a == "--plugin") {
      if (!value(&v) || v.empty()) return bad("--plugin needs a path");
      o->plugin = v;
    } else if (a == "--provider") {
      if (!value(&v) || v.empty()) return bad("--provider needs a provider name");
      o->provider = v;
    } else if (a == "--no-raw") {
      o->run_raw = false;
    } else if (a == "--raw-only") {
      o->run_plugin = false;
    } else if (a == "-n" || a == "--iters") {
      if (!value(&v) || !parse_long(v.c_str(), 1, 100000000, &n))
        return bad("-n needs an iteration count >= 1");
      o->iters = n;
    } else if (a == "-w" || a == "--warmup") {
      if (!value(&v) || !parse_long(v.c_str(), 0, 100000000, &n))
        return bad("-w needs a warm-up count >= 0");
      o->warmup = n;
    } else if (a == "--window") {
      if (!value(&v) || !parse_long(v.c_str(), 1, NCCL_NET_MAX_REQUESTS, &n))
        return bad("--window must be 1.." + std::to_string(NCCL_NET_MAX_REQUESTS) +
                   " (NCCL_NET_MAX_REQUESTS)");
      o->window = static_cast<int>(n);
    } else if (a == "-c" || a == "--check") {
      o->check = true;
    } else if (a == "-r" || a == "--rounds") {
      if (!value(&v) || !parse_long(v.c_str(), 1, 1000, &n))
        return bad("--rounds needs a count, 1..1000");
      o->rounds = static_cast<int>(n);
    } else if (a == "--timeout") {
      if (!value(&v) || !parse_long(v.c_str(), 1, 86400, &n))
        return bad("--timeout needs seconds, 1..86400");
      o->timeout_s = static_cast<int>(n);
    } else {
      return bad("unknown option '" + std::string(argv[i]) + "'");
    }
    if (has_val && (a == "--no-raw" || a == "--raw-only" || a == "--check"))
      return bad(a + " takes no value");
  }
  if (!o->run_plugin && !o->run_raw) return bad("--no-raw and --raw-only exclude each other");
  if (o->provider.empty()) {
    const char* env = getenv("NCCL_FABRIC_PROVIDER");
    o->provider = env != nullptr && env[0] != '\0' ? env : kDefaultProvider;
  }
  if (o->run_plugin) {
    if (o->plugin.empty()) {
      std::string tried;
      o->plugin = default_plugin_path(&tried);
      if (o->plugin.empty()) {
        fprintf(stderr, "%s: no plugin found (tried %s); build it with make, or pass --plugin PATH "
                        "or --raw-only\n", kProg, tried.c_str());
        return 1;
      }
    } else if (!file_exists(o->plugin)) {
      fprintf(stderr, "%s: plugin %s: %s\n", kProg, o->plugin.c_str(), strerror(errno));
      return 1;
    }
  }
  return 0;
}

// ------------------------------------------------------------------------------------------------
// Failures and liveness
// ------------------------------------------------------------------------------------------------

// Every failure is thrown as one of these and printed as one line. `peer` marks failures caused
// by the other rank going away: the other rank's own message, when it has one, says more.
struct Failure : std::runtime_error {
  bool peer;
  Failure(const std::string& m, bool p) : std::runtime_error(m), peer(p) {}
};
[[noreturn]] void fail(const std::string& m) { throw Failure(m, false); }
[[noreturn]] void peer_fail(const std::string& m) { throw Failure(m, true); }

const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "unknown ncclResult_t";
  }
}

[[noreturn]] void plugin_fail(const char* call, ncclResult_t r) {
  fail(std::string("plugin ") + call + " returned " + result_name(r) + " (" +
       std::to_string(static_cast<int>(r)) + ")");
}

// Bounds every wait: fails when nothing completed for `timeout` and notices a dead peer (rank 0
// watches its child, rank 1 its parent) within ~50 ms. Loops call tick() on every idle poll and
// progressed() when something completes. After kYieldAfter without a completion it also yields
// the CPU every 256 idle polls: that never happens in a quick ping-pong, and it keeps two
// busy-polling ranks from starving each other when they share the cores with other work.
class Watch {
 public:
  Watch(int rank, pid_t peer, int timeout_ms)
      : rank_(rank), peer_(peer), timeout_(std::chrono::milliseconds(timeout_ms)) {}

  void begin(const std::string& what) {
    what_ = what;
    last_progress_ = Clock::now();
    deadline_ = last_progress_ + timeout_;
    moved_ = false;
  }
  void progressed() { moved_ = true; }
  void tick() {
    if ((++spins_ & 255) == 0) check();
  }
  void check() {
    const auto now = Clock::now();
    if (moved_) {
      deadline_ = now + timeout_;
      last_progress_ = now;
      moved_ = false;
    } else if (now - last_progress_ > kYieldAfter) {
      sched_yield();
    }
    if (now > deadline_) {
      fail(what_ + ": no progress for " +
           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()) +
           " s (see --timeout)");
    }
    if (now > next_peer_check_) {
      next_peer_check_ = now + std::chrono::milliseconds(50);
      check_peer();
    }
  }
  void check_peer() const {
    if (rank_ == 0) {
      siginfo_t si;
      memset(&si, 0, sizeof(si));
      if (waitid(P_PID, static_cast<id_t>(peer_), &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          si.si_pid != 0) {
        if (si.si_code == CLD_EXITED)
          peer_fail(what_ + ": rank 1 exited with status " + std::to_string(si.si_status));
        peer_fail(what_ + ": rank 1 was killed by signal " + std::to_string(si.si_status) + " (" +
                  strsignal(si.si_status) + ")");
      }
    } else if (getppid() != peer_) {
      peer_fail(what_ + ": rank 0 exited");
    }
  }
  int timeout_ms() const {
    using std::chrono::milliseconds;
    return static_cast<int>(std::chrono::duration_cast<milliseconds>(timeout_).count());
  }

 private:
  int rank_;
  pid_t peer_;
  Clock::duration timeout_;
  static constexpr std::chrono::microseconds kYieldAfter{1000};
  Clock::time_point deadline_;
  Clock::time_point last_progress_;
  Clock::time_point next_peer_check_;
  std::string what_ = "setup";
  bool moved_ = false;
  unsigned spins_ = 0;
};

// ------------------------------------------------------------------------------------------------
// Transport interface: the benchmark loops see only this, so plugin and raw run the same code.
// ------------------------------------------------------------------------------------------------

// Slots name operations in flight: a window of sends or receives, plus the ack.
constexpr int kSlots = NCCL_NET_MAX_REQUESTS + 2;
constexpr int kAckSlot = kSlots - 1;
constexpr int kLatSendSlot = 0, kLatRecvSlot = 1;

class Xport {
 public:
  enum class Post { kPosted, kRetry };  // errors throw
  virtual ~Xport() = default;
  virtual const char* name() const = 0;
  // Registers a buffer for sends (for_send) or receives; the handle goes to post_*.
  virtual void* reg(void* buf, size_t len, bool for_send) = 0;
  // kRetry: the transport cannot take it now (NULL request / -FI_EAGAIN); call again later.
  virtual Post post_send(int slot, void* buf, size_t len, void* mr) = 0;
  virtual Post post_recv(int slot, void* buf, size_t cap, void* mr) = 0;
  // True once the slot's operation completed; *len = bytes received (receives).
  virtual bool poll(int slot, size_t* len) = 0;
};

// One send comm and one recv comm per side, as NCCL has for a pair of peers.
class PluginXport : public Xport {
 public:
  PluginXport(nfc::NetPlugin& p, int rank) : p_(p), my_tag_(rank), peer_tag_(1 - rank) {
    for (void*& r : reqs_) r = nullptr;
  }
  ~PluginXport() override {
    for (auto& m : mrs_) p_.dereg_mr(m.first, m.second);
    if (send_comm_ != nullptr) p_.close_send(send_comm_);
    if (recv_comm_ != nullptr) p_.close_recv(recv_comm_);
    if (listen_comm_ != nullptr) p_.close_listen(listen_comm_);
  }
  const char* name() const override { return "plugin"; }

  // Listens, trades handles with the peer over the Oob, then polls connect (to the peer's handle)
  // and accept (the peer's connection) alternately in this thread until both are done.
  void connect(int dev, nfc::Oob& oob, Watch& w) {
    char mine[NCCL_NET_HANDLE_MAXSIZE];
    memset(mine, 0, sizeof(mine));
    memset(peer_handle_, 0, sizeof(peer_handle_));
    ncclResult_t r = p_.listen(dev, mine, &listen_comm_);
    if (r != ncclSuccess) plugin_fail("listen", r);
    if (listen_comm_ == nullptr) fail("plugin listen returned ncclSuccess but no listen comm");
    if (!oob.send(mine, sizeof(mine), w.timeout_ms()) ||
        !oob.recv(peer_handle_, sizeof(peer_handle_), w.timeout_ms()))
      peer_fail("plugin handle exchange: out-of-band channel closed or timed out");
    w.begin("plugin connect/accept");
    while (send_comm_ == nullptr || recv_comm_ == nullptr) {
      // NCCL calls connect again with the same handle buffer until it returns a comm.
      if (send_comm_ == nullptr) {
        if ((r = p_.connect(dev, peer_handle_, &send_comm_)) != ncclSuccess) {
          // As NCCL does: a comm returned with an error is closed (by our destructor).
          plugin_fail("connect", r);
        }
        if (send_comm_ != nullptr) w.progressed();
      }
      if (recv_comm_ == nullptr) {
        if ((r = p_.accept(listen_comm_, &recv_comm_)) != ncclSuccess) plugin_fail("accept", r);
        if (recv_comm_ != nullptr) {
          // As NCCL does: the listen comm has served its one connection.
          p_.close_listen(listen_comm_);
          listen_comm_ = nullptr;
          w.progressed();
        }
      }
      w.tick();
    }
  }

  void* reg(void* buf, size_t len, bool for_send) override {
    void* comm = for_send ? send_comm_ : recv_comm_;
    void* mh = nullptr;
    ncclResult_t r = p_.reg_mr(comm, buf, len, NCCL_PTR_HOST, &mh);
    if (r != ncclSuccess) plugin_fail(for_send ? "regMr(send comm)" : "regMr(recv comm)", r);
    mrs_.emplace_back(comm, mh);
    return mh;
  }

  Post post_send(int slot, void* buf, size_t len, void* mr) override {
    void* req = nullptr;
    ncclResult_t r = p_.isend(send_comm_, buf, len, my_tag_, mr, &req);
    if (r != ncclSuccess) plugin_fail("isend", r);
    if (req == nullptr) return Post::kRetry;
    reqs_[slot] = req;
    return Post::kPosted;
  }

  Post post_recv(int slot, void* buf, size_t cap, void* mr) override {
    void* data[1] = {buf};
    size_t sizes[1] = {cap};
    int tags[1] = {peer_tag_};
    void* mhs[1] = {mr};
    void* req = nullptr;
    ncclResult_t r = p_.irecv(recv_comm_, 1, data, sizes, tags, mhs, &req);
    if (r != ncclSuccess) plugin_fail("irecv", r);
    if (req == nullptr) return Post::kRetry;
    reqs_[slot] = req;
    return Post::kPosted;
  }

  bool poll(int slot, size_t* len) override {
    int done = 0;
    int sizes[NCCL_NET_MAX_REQUESTS * 2] = {};  // NCCL passes int[64]
    ncclResult_t r = p_.test(reqs_[slot], &done, sizes);
    if (r != ncclSuccess) {
      reqs_[slot] = nullptr;
      plugin_fail("test", r);
    }
    if (!done) return false;
    reqs_[slot] = nullptr;
    *len = static_cast<size_t>(sizes[0] < 0 ? 0 : sizes[0]);
    return true;
  }

 private:
  nfc::NetPlugin& p_;
  int my_tag_, peer_tag_;  // NCCL tags a message with its sender's rank
  void* listen_comm_ = nullptr;
  void* send_comm_ = nullptr;
  void* recv_comm_ = nullptr;
  char peer_handle_[NCCL_NET_HANDLE_MAXSIZE];
  void* reqs_[kSlots];
  std::vector<std::pair<void*, void*>> mrs_;
};

// The same transfers on one raw RDM endpoint per side.
class RawXport : public Xport {
 public:
  explicit RawXport(int rank)
      : my_tag_(static_cast<uint64_t>(rank)), peer_tag_(static_cast<uint64_t>(1 - rank)) {}
  const char* name() const override { return "raw"; }

  void open(const nfc::RawConfig& cfg, nfc::Oob& oob, int timeout_ms) {
    std::string err;
    if (!fab_.open(cfg, &err)) fail("raw libfabric: " + err);
    if (!fab_.connect_peer(oob, timeout_ms, &err)) peer_fail("raw libfabric: " + err);
  }
  const nfc::RawFabric& fabric() const { return fab_; }

  void* reg(void* buf, size_t len, bool for_send) override {
    (void)for_send;  // one endpoint: registered for both directions
    std::string err;
    const nfc::RawMr* m = fab_.reg(buf, len, &err);
    if (m == nullptr) fail("raw libfabric: " + err);
    return const_cast<nfc::RawMr*>(m);
  }

  Post post_send(int slot, void* buf, size_t len, void* mr) override {
    return check(fab_.send(buf, len, static_cast<nfc::RawMr*>(mr), my_tag_, &ops_[slot], &err_));
  }
  Post post_recv(int slot, void* buf, size_t cap, void* mr) override {
    return check(fab_.recv(buf, cap, static_cast<nfc::RawMr*>(mr), peer_tag_, &ops_[slot], &err_));
  }

  bool poll(int slot, size_t* len) override {
    nfc::RawOp& op = ops_[slot];
    if (!op.done && !fab_.progress(&err_)) fail("raw libfabric: " + err_);
    if (!op.done) return false;
    if (op.err != 0) fail("raw libfabric: " + fab_.op_error());
    *len = op.len;
    return true;
  }

 private:
  Post check(nfc::RawFabric::Post p) {
    if (p == nfc::RawFabric::Post::kError) fail("raw libfabric: " + err_);
    return p == nfc::RawFabric::Post::kPosted ? Post::kPosted : Post::kRetry;
  }

  nfc::RawFabric fab_;
  uint64_t my_tag_, peer_tag_;
  nfc::RawOp ops_[kSlots];
  std::string err_;
};

// ------------------------------------------------------------------------------------------------
// Benchmark loops (identical for every transport)
// ------------------------------------------------------------------------------------------------

struct FreeDeleter {
  void operator()(void* p) const { free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;

Buffer alloc_buffer(size_t len) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, len) != 0) fail("cannot allocate " + std::to_string(len) + " bytes");
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

std::string size_text(size_t n) {
  char b[32];
  if (n >= MiB && n % MiB == 0) snprintf(b, sizeof(b), "%zu MiB", n / MiB);
  else if (n >= KiB && n % KiB == 0) snprintf(b, sizeof(b), "%zu KiB", n / KiB);
  else snprintf(b, sizeof(b), "%zu B", n);
  return b;
}

// What one rank runs the tests with: its channel, its buffers, and its transport's handles.
struct Bench {
  const Options& opt;
  int rank;
  nfc::Oob& oob;
  Watch& watch;
  char* sbuf;  // window x largest size: a slot per message in flight
  char* rbuf;
  uint64_t test_seq = 0;  // advances identically on both ranks: message patterns differ per test

  void sync(const std::string& what) {
    if (!oob.barrier(opt.timeout_ms()))
      peer_fail(what + ": rank " + std::to_string(1 - rank) +
                " did not reach the barrier (out-of-band channel closed or timed out)");
  }
};

struct Regs {
  void* send = nullptr;
  void* recv = nullptr;
};

void post_retry(Bench& b, Xport& x, bool send, int slot, void* buf, size_t len, void* mr) {
  for (;;) {
    Xport::Post p = send ? x.post_send(slot, buf, len, mr) : x.post_recv(slot, buf, len, mr);
    if (p == Xport::Post::kPosted) return;
    b.watch.tick();
  }
}

size_t wait_slot(Bench& b, Xport& x, int slot) {
  size_t len = 0;
  while (!x.poll(slot, &len)) b.watch.tick();
  b.watch.progressed();
  return len;
}

void check_received(Bench& b, const Xport& x, const char* what, uint64_t msg, const char* buf,
                    size_t got, size_t want, uint64_t seed) {
  if (got != want)
    fail(std::string(x.name()) + " " + what + ": message " + std::to_string(msg) +
         " arrived with " + std::to_string(got) + " bytes, expected " + std::to_string(want));
  if (!b.opt.check) return;
  size_t bad = check_pattern(buf, want, seed);
  if (bad == want) return;
  char m[256];
  uint64_t expect = pattern_word(seed, bad / 8);
  snprintf(m, sizeof(m),
           "%s %s: data mismatch in message %" PRIu64 " of %zu bytes at byte %zu: got 0x%02x, "
           "expected 0x%02x",
           x.name(), what, msg, want, bad, static_cast<unsigned char>(buf[bad]),
           static_cast<unsigned char>(reinterpret_cast<const char*>(&expect)[bad % 8]));
  fail(m);
}

// Ping-pong of opt.lat_size bytes. Rank 0 returns the median of half the round trips, in us.
double run_latency(Bench& b, Xport& x, const Regs& r, size_t iters, size_t warmup) {
  const size_t n = b.opt.lat_size;
  const uint64_t test = ++b.test_seq;
  const size_t total = warmup + iters;
  std::vector<double> half_rtt;
  half_rtt.reserve(iters);
  b.watch.begin(std::string(x.name()) + " latency test");
  if (b.rank == 1) post_retry(b, x, false, kLatRecvSlot, b.rbuf, n, r.recv);
  b.sync(std::string(x.name()) + " latency test start");
  for (size_t it = 0; it < total; ++it) {
    // Message ids: rank 0 sends the even ones, rank 1 the odd ones.
    const uint64_t mine = 2 * it + static_cast<uint64_t>(b.rank);
    const uint64_t theirs = 2 * it + 1 - static_cast<uint64_t>(b.rank);
    if (b.rank == 0) {
      const auto t0 = Clock::now();
      post_retry(b, x, false, kLatRecvSlot, b.rbuf, n, r.recv);
      if (b.opt.check) fill_pattern(b.sbuf, n, message_seed(test, mine));
      post_retry(b, x, true, kLatSendSlot, b.sbuf, n, r.send);
      wait_slot(b, x, kLatSendSlot);
      size_t got = wait_slot(b, x, kLatRecvSlot);
      const auto t1 = Clock::now();
      check_received(b, x, "latency test", theirs, b.rbuf, got, n, message_seed(test, theirs));
      if (it >= warmup)
        half_rtt.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    } else {
      size_t got = wait_slot(b, x, kLatRecvSlot);
      check_received(b, x, "latency test", theirs, b.rbuf, got, n, message_seed(test, theirs));
      if (it + 1 < total) post_retry(b, x, false, kLatRecvSlot, b.rbuf, n, r.recv);
      if (b.opt.check) fill_pattern(b.sbuf, n, message_seed(test, mine));
      post_retry(b, x, true, kLatSendSlot, b.sbuf, n, r.send);
      wait_slot(b, x, kLatSendSlot);
    }
  }
  b.sync(std::string(x.name()) + " latency test end");
  if (half_rtt.empty()) return 0;
  std::nth_element(half_rtt.begin(), half_rtt.begin() + static_cast<long>(half_rtt.size() / 2),
                   half_rtt.end());
  return half_rtt[half_rtt.size() / 2];
}

// Rank 0 sends `count` messages of `size` bytes to rank 1 with opt.window in flight; rank 1 keeps
// opt.window receives posted and acks the last one. Rank 0 returns seconds from its first post
// to the ack's arrival.
double run_bandwidth(Bench& b, Xport& x, const Regs& r, size_t size, size_t count) {
  const bool sender = b.rank == 0;
  const size_t window = static_cast<size_t>(b.opt.window);
  const uint64_t test = ++b.test_seq;
  const size_t ack_len = 8;
  char* const base = sender ? b.sbuf : b.rbuf;
  void* const mr = sender ? r.send : r.recv;
  const std::string what = std::string(x.name()) + " bandwidth test (" + size_text(size) + ")";
  b.watch.begin(what);

  size_t posted = 0, done = 0;
  if (sender) {
    post_retry(b, x, false, kAckSlot, b.rbuf, ack_len, r.recv);
  } else {
    for (; posted < std::min(window, count); ++posted)
      post_retry(b, x, false, static_cast<int>(posted), base + posted * size, size, mr);
  }
  b.sync(what + " start");

  const auto t0 = Clock::now();
  size_t filled = 0;  // sender with -c: messages [0, filled) already carry their pattern
  while (done < count) {
    while (posted < count && posted - done < window) {
      const int slot = static_cast<int>(posted % window);
      char* buf = base + static_cast<size_t>(slot) * size;
      Xport::Post p;
      if (sender) {
        if (b.opt.check && filled == posted) {
          fill_pattern(buf, size, message_seed(test, posted));
          ++filled;
        }
        p = x.post_send(slot, buf, size, mr);
      } else {
        p = x.post_recv(slot, buf, size, mr);
      }
      if (p == Xport::Post::kRetry) break;
      ++posted;
    }
    const int slot = static_cast<int>(done % window);
    size_t len = 0;
    if (!x.poll(slot, &len)) {
      b.watch.tick();
      continue;
    }
    if (!sender)
      check_received(b, x, "bandwidth test", done, base + static_cast<size_t>(slot) * size, len,
                     size, message_seed(test, done));
    ++done;
    b.watch.progressed();
  }

  double seconds = 0;
  if (sender) {
    size_t got = wait_slot(b, x, kAckSlot);
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    check_received(b, x, "bandwidth test ack", count, b.rbuf, got, ack_len,
                   message_seed(test, count));
  } else {
    fill_pattern(b.sbuf, ack_len, message_seed(test, count));
    post_retry(b, x, true, kAckSlot, b.sbuf, ack_len, r.send);
    wait_slot(b, x, kAckSlot);
  }
  return seconds;
}

// ------------------------------------------------------------------------------------------------
// Per-rank driver
// ------------------------------------------------------------------------------------------------

struct Row {
  size_t size = 0;
  size_t iters = 0;
  bool latency = false;
  double plugin = 0, raw = 0;  // us (latency) or GB/s
};

bool inject_enabled() {
  const char* v = getenv("NCCL_FABRIC_INJECT");
  if (v == nullptr) return true;
  return !(strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 ||
           strcasecmp(v, "off") == 0);
}

void print_header(const Options& o, const nfc::NetPlugin* p, const std::string& dev_name,
                  const nfc::RawFabric* raw) {
  printf("# %s: provider %s, ", kProg, o.provider.c_str());
  if (p != nullptr)
    printf("plugin %s (ncclNet v%d, \"%s\"), device 0 \"%s\"", o.plugin.c_str(), p->version(),
           p->name(), dev_name.c_str());
  else
    printf("raw libfabric only");
  printf(", window %d\n", o.window);
  printf("# libfabric %u.%u", FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
  if (raw != nullptr)
    printf(", raw endpoint on domain \"%s\" (inject %zu B%s, mr_mode 0x%llx)",
           raw->domain_name().c_str(), raw->inject_size(), raw->use_inject() ? "" : ", off",
           static_cast<unsigned long long>(raw->mr_mode()));
  printf("; data check %s; timeout %d s\n", o.check ? "on (timings include fill and check)" : "off",
         o.timeout_s);
  printf("# latency: %s-byte ping-pong, median of half the round trip over %zu iterations after "
         "%ld warm-up\n", std::to_string(o.lat_size).c_str(), o.latency_iters(), o.warmup);
  printf("# bandwidth: one way, GB/s = 1e9 bytes/s, sender's clock from first send to the "
         "receiver's ack\n");
  printf("# each row: best of %d round%s%s\n", o.rounds, o.rounds == 1 ? "" : "s",
         o.run_plugin && o.run_raw ? ", plugin and raw alternating" : "");
  printf("#\n# %8s %7s %14s %14s %11s\n", "size", "iters", "plugin", "raw", "plugin/raw");
  fflush(stdout);
}

void print_row(const Options& o, const Row& r) {
  char pv[32] = "-", rv[32] = "-", ratio[32] = "-";
  const char* unit = r.latency ? "us" : "GB/s";
  if (o.run_plugin) snprintf(pv, sizeof(pv), "%.2f %s", r.plugin, unit);
  if (o.run_raw) snprintf(rv, sizeof(rv), "%.2f %s", r.raw, unit);
  if (o.run_plugin && o.run_raw) {
    const double q = r.latency ? (r.plugin > 0 ? r.raw / r.plugin : 0)
                               : (r.raw > 0 ? r.plugin / r.raw : 0);
    snprintf(ratio, sizeof(ratio), "%.2f", q);
  }
  printf("  %8s %7zu %14s %14s %11s%s\n", size_text(r.size).c_str(), r.iters, pv, rv, ratio,
         r.latency && o.run_plugin && o.run_raw
             ? "  (latency: raw/plugin, 1.0 is ideal, lower is worse)"
             : "");
  fflush(stdout);
}

int run_rank(int rank, pid_t peer, nfc::Oob& oob, const Options& o) {
  Watch watch(rank, peer, o.timeout_ms());
  const auto started = Clock::now();

  // Buffers first, so they outlive every registration of them.
  const size_t buf_len = o.max_size() * static_cast<size_t>(o.window);
  Buffer sbuf = alloc_buffer(buf_len);
  Buffer rbuf = alloc_buffer(buf_len);

  // Plugin: load, init, first device, connected pair of comms. Declared first so it is torn
  // down last (the comms live in plugin_x, destroyed before finalize).
  std::unique_ptr<nfc::NetPlugin> plugin;
  struct Finalizer {
    nfc::NetPlugin* p = nullptr;
    ~Finalizer() { if (p != nullptr) p->finalize(); }
  } finalizer;
  std::unique_ptr<PluginXport> plugin_x;
  std::string dev_name;
  if (o.run_plugin) {
    plugin.reset(new nfc::NetPlugin());
    std::string err;
    if (!plugin->load(o.plugin, 0, &err)) fail(err);
    ncclResult_t r = plugin->init();
    if (r != ncclSuccess)
      fail(std::string("plugin init with NCCL_FABRIC_PROVIDER='") + o.provider + "' returned " +
           result_name(r) + " (its WARN above says why)");
    finalizer.p = plugin.get();
    int ndev = 0;
    if ((r = plugin->devices(&ndev)) != ncclSuccess) plugin_fail("devices", r);
    if (ndev < 1)
      fail("plugin " + std::string(plugin->name()) + " reports no devices for provider '" +
           o.provider + "' (NCCL_DEBUG=INFO says why)");
    nfc::NetProps props;
    if ((r = plugin->properties(0, &props)) != ncclSuccess) plugin_fail("getProperties", r);
    dev_name = props.name;
    if (props.max_p2p_bytes != 0 && props.max_p2p_bytes < o.max_size())
      fail("plugin device 0 takes messages of at most " + std::to_string(props.max_p2p_bytes) +
           " bytes");
    plugin_x.reset(new PluginXport(*plugin, rank));
    plugin_x->connect(0, oob, watch);
  }

  std::unique_ptr<RawXport> raw_x;
  if (o.run_raw) {
    nfc::RawConfig cfg;
    cfg.provider = o.provider;
    cfg.domain = dev_name;  // the plugin's NIC, when the plugin runs too
    cfg.use_inject = inject_enabled();
    cfg.cq_size = 1024;
    raw_x.reset(new RawXport(rank));
    watch.begin("raw libfabric setup");
    raw_x->open(cfg, oob, o.timeout_ms());
  }

  Bench b{o, rank, oob, watch, sbuf.get(), rbuf.get()};

  // The transports in the order each row measures them.
  std::vector<std::pair<Xport*, Regs>> xs;
  if (plugin_x) xs.push_back({plugin_x.get(), Regs()});
  if (raw_x) xs.push_back({raw_x.get(), Regs()});
  for (auto& e : xs) {
    e.second.send = e.first->reg(b.sbuf, buf_len, true);
    e.second.recv = e.first->reg(b.rbuf, buf_len, false);
  }
  b.sync("setup");
  if (rank == 0) print_header(o, plugin.get(), dev_name, raw_x ? &raw_x->fabric() : nullptr);

  // Each row alternates the transports for opt.rounds rounds and keeps each one's best round
  // (lowest latency, highest bandwidth): the machines are noisy, and a slow spell then hits a
  // round of one transport rather than the ratio.
  auto keep_best = [](Row* row, const Xport* x, double v) {
    double& slot = strcmp(x->name(), "plugin") == 0 ? row->plugin : row->raw;
    if (slot == 0 || (row->latency ? v < slot : v > slot)) slot = v;
  };
  {
    Row row;
    row.size = o.lat_size;
    row.iters = o.latency_iters();
    row.latency = true;
    for (int round = 0; round < o.rounds; ++round)
      for (auto& e : xs)
        keep_best(&row, e.first,
                  run_latency(b, *e.first, e.second, row.iters, static_cast<size_t>(o.warmup)));
    if (rank == 0) print_row(o, row);
  }
  for (size_t size : o.bw_sizes) {
    Row row;
    row.size = size;
    row.iters = o.bw_iters(size);
    const size_t warm = o.bw_warmup(row.iters);
    for (int round = 0; round < o.rounds; ++round) {
      for (auto& e : xs) {
        if (warm > 0) run_bandwidth(b, *e.first, e.second, size, warm);
        const double sec = run_bandwidth(b, *e.first, e.second, size, row.iters);
        const double bytes = static_cast<double>(size) * static_cast<double>(row.iters);
        keep_best(&row, e.first, sec > 0 ? bytes / sec / 1e9 : 0);
      }
    }
    if (rank == 0) print_row(o, row);
  }
  watch.begin("teardown");
  b.sync("teardown");
  if (rank == 0)
    printf("# done in %.1f s\n", std::chrono::duration<double>(Clock::now() - started).count());
  return 0;
}

// ------------------------------------------------------------------------------------------------
// main: fork the pair, report one line on failure
// ------------------------------------------------------------------------------------------------

std::string read_all_nonblocking(int fd) {
  std::string out;
  char buf[512];
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = parse_args(argc, argv, &o)) return rc;
  // The plugin reads its provider from the environment; the child inherits it.
  setenv("NCCL_FABRIC_PROVIDER", o.provider.c_str(), 1);
  signal(SIGPIPE, SIG_IGN);

  // The child reports its own failures through this pipe, so the parent prints one line.
  int errpipe[2];
  if (pipe(errpipe) != 0) {
    fprintf(stderr, "%s: pipe: %s\n", kProg, strerror(errno));
    return 1;
  }
  const pid_t parent = getpid();
  nfc::Oob oob;
  int pid = nfc::fork_with_oob(
      [&](nfc::Oob& child_oob) -> int {
        close(errpipe[0]);
        // Die with the parent, even when it is killed.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) return 1;
        try {
          return run_rank(1, parent, child_oob, o);
        } catch (const Failure& f) {
          if (!f.peer) {
            std::string m = std::string(f.what()) + "\n";
            ssize_t w = write(errpipe[1], m.data(), m.size());
            (void)w;
          }
        } catch (const std::exception& e) {
          std::string m = std::string("unexpected failure: ") + e.what() + "\n";
          ssize_t w = write(errpipe[1], m.data(), m.size());
          (void)w;
        }
        return 1;
      },
      &oob);
  if (pid < 0) {
    fprintf(stderr, "%s: cannot fork the peer process: %s\n", kProg, strerror(errno));
    return 1;
  }
  close(errpipe[1]);

  std::string own_error;
  bool own_peer = false;
  try {
    run_rank(0, pid, oob, o);
  } catch (const Failure& f) {
    own_error = f.what();
    own_peer = f.peer;
  } catch (const std::exception& e) {
    own_error = std::string("unexpected failure: ") + e.what();
  }
  if (own_error.empty()) {
    const int st = nfc::wait_child(pid, o.timeout_ms());
    if (st == 0) return 0;
    std::string child = read_all_nonblocking(errpipe[0]);
    fprintf(stderr, "%s: rank 1: %s\n", kProg,
            !child.empty() ? child.c_str()
                           : (st < 0 ? "killed, died on a signal or did not exit in time"
                                     : ("exited with status " + std::to_string(st)).c_str()));
    return 1;
  }
  oob = nfc::Oob();  // the child stops at its next out-of-band wait
  nfc::wait_child(pid, 3000);  // killed after 3 s if it is stuck in a network wait
  std::string child = read_all_nonblocking(errpipe[0]);
  // A failure rank 0 saw only because rank 1 went away is best told by rank 1's own message.
  if (own_peer && !child.empty())
    fprintf(stderr, "%s: rank 1: %s\n", kProg, child.c_str());
  else
    fprintf(stderr, "%s: rank 0: %s\n", kProg, own_error.c_str());
  return 1;
}
