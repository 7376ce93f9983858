// The out-of-band channel two processes exchange handles and barriers over: a socket, every wait
// bounded. Forked pairs use a socketpair; hosts use TCP (listen/peer).
#pragma once
#include <cstddef>
#include <string>

namespace nfc {

class Oob {
 public:
  Oob() = default;
  explicit Oob(int fd) : fd_(fd) {}
  ~Oob();
  Oob(Oob&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Oob& operator=(Oob&& o) noexcept;
  Oob(const Oob&) = delete;
  Oob& operator=(const Oob&) = delete;

  bool valid() const { return fd_ >= 0; }
  // Each returns false on error, peer close or when timeout_ms passes.
  bool send(const void* buf, size_t len, int timeout_ms);
  bool recv(void* buf, size_t len, int timeout_ms);
  // Both sides call it; returns when both got there.
  bool barrier(int timeout_ms);

  // TCP: one side listens on a port and accepts one peer; the other connects (retrying until
  // timeout_ms, since the listener may start later).
  static Oob tcp_listen(int port, int timeout_ms, std::string* err);
  static Oob tcp_connect(const std::string& host, int port, int timeout_ms, std::string* err);

 private:
  int fd_ = -1;
};

// Forks; the child runs `child(oob)` and exits with its return value. The parent gets its end of
// the channel and the child's pid.
template <typename F>
int fork_with_oob(F child, Oob* parent_end);

// Waits for a child at most timeout_ms, then kills it. Returns its exit status, or -1 when it
// was killed, died on a signal or could not be waited for.
int wait_child(int pid, int timeout_ms);

int socketpair_fork(Oob* parent_end, Oob* child_end);

}  // namespace nfc

#include <unistd.h>

namespace nfc {

template <typename F>
int fork_with_oob(F child, Oob* parent_end) {
  Oob child_end;
  int pid = socketpair_fork(parent_end, &child_end);
  if (pid == 0) {
    *parent_end = Oob();
    int rc = child(child_end);
    fflush(nullptr);
    _exit(rc);
  }
  return pid;
}

}  // namespace nfc
