// The two ranks' out-of-band channel (framed messages over nfc::Oob), the watch that bounds
// every wait of the test loops, and a watchdog for calls that never return.
#pragma once
#include <sys/types.h>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "client/oob.h"
#include "perf/perf.h"

namespace nfp {

// The bytes under a Chan: a socket (a forked pair, two hosts) or MPI under mpirun
// (channel_mpi.cpp). Each call returns false on error, a closed peer or when timeout_ms passes;
// recv with timeout 0 takes only what is already there.
class Link {
 public:
  virtual ~Link() = default;
  virtual bool send(const void* buf, size_t len, int timeout_ms) = 0;
  virtual bool recv(void* buf, size_t len, int timeout_ms) = 0;
  // The socket, for the raw transport's unframed address exchange; nullptr when there is none.
  virtual nfc::Oob* oob() { return nullptr; }
};

// Frames: a type byte, a 4-byte big-endian length, the payload. Types: P plan, A answer to it,
// H plugin handles, N a raw endpoint name (over MPI), B barrier, R a rank-1 measurement, E an
// error (payload: the message).
// Every wait is bounded by timeout_ms. An E frame from the peer throws a peer Failure that
// carries its text; a closed or silent channel throws a peer Failure too.
class Chan {
 public:
  Chan(nfc::Oob oob, int rank, int timeout_ms);
  Chan(std::unique_ptr<Link> link, int rank, int timeout_ms)
      : link_(std::move(link)), rank_(rank), timeout_ms_(timeout_ms) {}

  int rank() const { return rank_; }
  int timeout_ms() const { return timeout_ms_; }
  // For unframed exchanges between two sync()s: the socket, nullptr over MPI.
  nfc::Oob* oob() { return link_ ? link_->oob() : nullptr; }

  void send(char type, const std::string& payload, const std::string& what);
  std::string recv(char type, const std::string& what);
  void sync(const std::string& what);  // both ranks: returns when both got there
  // Non-blocking: reads a frame if one is there; throws if it is the peer's error, else keeps
  // it for the next recv().
  void poll();
  // After a failure: the peer's error message if it sent one within timeout_ms, else "".
  // Never throws.
  std::string take_error(int timeout_ms);
  // Best effort, bounded by a second: tells the peer why this rank stops.
  bool send_error(const std::string& msg);
  void close() { link_.reset(); }

 private:
  bool read_rest(char type, std::string* payload, int timeout_ms);
  [[noreturn]] void peer_error(const std::string& text);

  std::unique_ptr<Link> link_;
  int rank_;
  int timeout_ms_;
  std::deque<std::pair<char, std::string>> pending_;
};

// Lets the watchdog know this thread is alive, and what it is doing.
void heartbeat();
void set_activity(const std::string& what);

// A thread that ends the process when the rank's thread has shown no sign of life for limit_ms:
// a call into the plugin or the provider that blocks (the loops themselves are bounded).
class Watchdog {
 public:
  Watchdog(int rank, int limit_ms);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void run();
  int rank_;
  int limit_ms_;
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

// Bounds every wait of the loops: fails when nothing completed for the timeout, and notices a
// dead peer (rank 0 watches its forked child, rank 1 its parent) or a peer's error frame within
// ~50 ms. Loops call tick() on every idle poll and progressed() when something completes. After
// 1 ms without a completion it also yields the CPU every 256 idle polls: that never happens in a
// quick ping-pong, and it keeps two busy-polling ranks from starving each other on shared cores.
class Watch {
 public:
  // peer: the other rank's pid in a forked pair, 0 between two hosts.
  Watch(int rank, pid_t peer, Chan* chan, int timeout_ms)
      : rank_(rank), peer_(peer), chan_(chan), timeout_(std::chrono::milliseconds(timeout_ms)) {}

  void begin(const std::string& what);
  void progressed() { moved_ = true; }
  void tick() {
    if ((++spins_ & 255) == 0) check();
  }
  void check();
  const std::string& what() const { return what_; }

 private:
  void check_peer() const;

  int rank_;
  pid_t peer_;
  Chan* chan_;
  Clock::duration timeout_;
  Clock::time_point deadline_;
  Clock::time_point last_progress_;
  Clock::time_point next_peer_check_;
  std::string what_ = "setup";
  bool moved_ = false;
  unsigned spins_ = 0;
};

}  // namespace nfp
