#include "perf/channel.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <csignal>
#include <cstring>

namespace nfp {

namespace {

constexpr uint32_t kMaxFrame = 1u << 20;

std::atomic<int64_t> g_beat_ns{0};
std::mutex g_activity_mu;
std::string g_activity = "setup";

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::string type_text(char t) {
  switch (t) {
    case 'P': return "the test plan";
    case 'A': return "the answer to the plan";
    case 'H': return "the plugin's handles";
    case 'N': return "a raw endpoint name";
    case 'B': return "a barrier";
    case 'R': return "a measurement";
    case 'E': return "an error";
    default: return std::string("frame '") + t + "'";
  }
}

}  // namespace

void heartbeat() { g_beat_ns.store(now_ns(), std::memory_order_relaxed); }

void set_activity(const std::string& what) {
  std::lock_guard<std::mutex> g(g_activity_mu);
  g_activity = what;
  heartbeat();
}

// ------------------------------------------------------------------------------------------------
// Chan
// ------------------------------------------------------------------------------------------------

namespace {

class OobLink : public Link {
 public:
  explicit OobLink(nfc::Oob oob) : oob_(std::move(oob)) {}
  bool send(const void* buf, size_t len, int timeout_ms) override {
    return oob_.send(buf, len, timeout_ms);
  }
  bool recv(void* buf, size_t len, int timeout_ms) override {
    return oob_.recv(buf, len, timeout_ms);
  }
  nfc::Oob* oob() override { return &oob_; }

 private:
  nfc::Oob oob_;
};

}  // namespace

Chan::Chan(nfc::Oob oob, int rank, int timeout_ms) : rank_(rank), timeout_ms_(timeout_ms) {
  if (oob.valid()) link_.reset(new OobLink(std::move(oob)));
}

void Chan::send(char type, const std::string& payload, const std::string& what) {
  heartbeat();
  std::string f(5, '\0');
  f[0] = type;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) f[1 + i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
  f += payload;
  if (!link_ || !link_->send(f.data(), f.size(), timeout_ms_))
    peer_fail(what + ": cannot send " + type_text(type) + " to rank " + std::to_string(1 - rank_) +
              " (out-of-band channel closed or timed out)");
}

bool Chan::read_rest(char type, std::string* payload, int timeout_ms) {
  unsigned char len[4];
  if (!link_->recv(len, 4, timeout_ms)) return false;
  const uint32_t n = (static_cast<uint32_t>(len[0]) << 24) | (static_cast<uint32_t>(len[1]) << 16) |
                     (static_cast<uint32_t>(len[2]) << 8) | len[3];
  if (n > kMaxFrame)
    fail("out-of-band protocol error: rank " + std::to_string(1 - rank_) + " sent " +
         type_text(type) + " of " + std::to_string(n) + " bytes (is the peer " + kProg + "?)");
  payload->assign(n, '\0');
  return n == 0 || link_->recv(&(*payload)[0], n, timeout_ms);
}

void Chan::peer_error(const std::string& text) {
  throw Failure("rank " + std::to_string(1 - rank_) + " failed", true, text);
}

std::string Chan::recv(char type, const std::string& what) {
  heartbeat();
  char t = 0;
  std::string payload;
  if (!pending_.empty()) {
    t = pending_.front().first;
    payload = std::move(pending_.front().second);
    pending_.pop_front();
  } else if (!link_ || !link_->recv(&t, 1, timeout_ms_) || !read_rest(t, &payload, timeout_ms_)) {
    peer_fail(what + ": rank " + std::to_string(1 - rank_) + " sent nothing within " +
              std::to_string(timeout_ms_ / 1000) +
              " s or closed the out-of-band channel (see --timeout)");
  }
  heartbeat();
  if (t == 'E') peer_error(payload);
  if (t != type)
    fail(what + ": out-of-band protocol error: expected " + type_text(type) + ", got " +
         type_text(t) + " (both sides must run the same version of " + kProg + ")");
  return payload;
}

void Chan::sync(const std::string& what) {
  send('B', "", what);
  recv('B', what + " (barrier)");
}

void Chan::poll() {
  if (!link_) return;
  char t = 0;
  if (!link_->recv(&t, 1, 0)) return;  // nothing there (or closed: the next recv says so)
  std::string payload;
  if (!read_rest(t, &payload, timeout_ms_))
    peer_fail("out-of-band channel broke in the middle of " + type_text(t));
  if (t == 'E') peer_error(payload);
  pending_.emplace_back(t, std::move(payload));
}

std::string Chan::take_error(int timeout_ms) {
  for (const auto& p : pending_)
    if (p.first == 'E') return p.second;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  try {
    while (link_) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      char t = 0;
      std::string payload;
      if (left.count() <= 0 || !link_->recv(&t, 1, static_cast<int>(left.count())) ||
          !read_rest(t, &payload, 1000))
        break;
      if (t == 'E') return payload;
    }
  } catch (const std::exception&) {
  }
  return "";
}

bool Chan::send_error(const std::string& msg) {
  if (!link_) return false;
  std::string f(5, '\0');
  f[0] = 'E';
  const uint32_t n = static_cast<uint32_t>(msg.size());
  for (int i = 0; i < 4; ++i) f[1 + i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
  f += msg;
  return link_->send(f.data(), f.size(), 1000);
}

// ------------------------------------------------------------------------------------------------
// Watchdog
// ------------------------------------------------------------------------------------------------

Watchdog::Watchdog(int rank, int limit_ms) : rank_(rank), limit_ms_(limit_ms) {
  heartbeat();
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(200));
    if (stop_) break;
    const int64_t idle_ms = (now_ns() - g_beat_ns.load(std::memory_order_relaxed)) / 1000000;
    if (idle_ms > limit_ms_) {
      std::string what;
      {
        std::lock_guard<std::mutex> g(g_activity_mu);
        what = g_activity;
      }
      fprintf(stderr,
              "%s: rank %d: %s: stuck for %lld s in a call that does not return (the plugin or "
              "libfabric blocks); giving up\n",
              kProg, rank_, what.c_str(), static_cast<long long>(idle_ms / 1000));
      fflush(stderr);
      _exit(kExitFail);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Watch
// ------------------------------------------------------------------------------------------------

void Watch::begin(const std::string& what) {
  what_ = what;
  set_activity(what);
  last_progress_ = Clock::now();
  deadline_ = last_progress_ + timeout_;
  moved_ = false;
}

void Watch::check() {
  const auto now = Clock::now();
  heartbeat();
  if (moved_) {
    deadline_ = now + timeout_;
    last_progress_ = now;
    moved_ = false;
  } else if (now - last_progress_ > std::chrono::microseconds(1000)) {
    sched_yield();
  }
  if (now > deadline_) {
    fail(what_ + ": no progress for " +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()) +
         " s (see --timeout)" +
         (peer_ == 0 ? "; is rank " + std::to_string(1 - rank_) + " still running?" : ""));
  }
  if (now > next_peer_check_) {
    next_peer_check_ = now + std::chrono::milliseconds(50);
    if (chan_ != nullptr) chan_->poll();  // first: a peer that failed sent its reason, then exited
    check_peer();
  }
}

void Watch::check_peer() const {
  if (peer_ == 0) return;  // two hosts: the channel and the timeout tell
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

}  // namespace nfp
