#include "client/oob.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

namespace nfc {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p = {fd, events, 0};
    int rc = poll(&p, 1, ms_left(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace

Oob::~Oob() {
  if (fd_ >= 0) close(fd_);
}

Oob& Oob::operator=(Oob&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

bool Oob::send(const void* buf, size_t len, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    if (!wait_fd(fd_, POLLOUT, deadline)) return false;
    ssize_t n = ::send(fd_, p, len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool Oob::recv(void* buf, size_t len, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    if (!wait_fd(fd_, POLLIN, deadline)) return false;
    ssize_t n = ::recv(fd_, p, len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;  // peer closed or error
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool Oob::barrier(int timeout_ms) {
  char out = 'B', in = 0;
  return send(&out, 1, timeout_ms) && recv(&in, 1, timeout_ms) && in == 'B';
}

Oob Oob::tcp_listen(int port, int timeout_ms, std::string* err) {
  int s = socket(AF_INET6, SOCK_STREAM, 0);
  if (s < 0) {
    *err = std::string("socket: ") + strerror(errno);
    return Oob();
  }
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int zero = 0;
  setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  sockaddr_in6 a = {};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  a.sin6_port = htons(static_cast<uint16_t>(port));
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(s, 1) != 0) {
    *err = "cannot listen on port " + std::to_string(port) + ": " + strerror(errno);
    close(s);
    return Oob();
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  if (!wait_fd(s, POLLIN, deadline)) {
    *err = "no peer connected to port " + std::to_string(port) + " within " +
           std::to_string(timeout_ms / 1000) + " s";
    close(s);
    return Oob();
  }
  int c = accept(s, nullptr, nullptr);
  close(s);
  if (c < 0) {
    *err = std::string("accept: ") + strerror(errno);
    return Oob();
  }
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return Oob(c);
}

Oob Oob::tcp_connect(const std::string& host, int port, int timeout_ms, std::string* err) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *err = "cannot resolve " + host + ": " + gai_strerror(rc);
    return Oob();
  }
  std::string last = "timed out";
  while (Clock::now() < deadline) {
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
      if (s < 0) continue;
      if (::connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
        freeaddrinfo(res);
        int one = 1;
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return Oob(s);
      }
      last = strerror(errno);
      close(s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  freeaddrinfo(res);
  *err = "cannot reach " + host + ":" + std::to_string(port) + " within " +
         std::to_string(timeout_ms / 1000) + " s (" + last + ")";
  return Oob();
}

int socketpair_fork(Oob* parent_end, Oob* child_end) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return -1;
  fflush(nullptr);
  int pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  if (pid == 0) {
    close(sv[0]);
    *child_end = Oob(sv[1]);
    return 0;
  }
  close(sv[1]);
  *parent_end = Oob(sv[0]);
  return pid;
}

int wait_child(int pid, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  for (;;) {
    int rc = waitpid(pid, &status, WNOHANG);
    if (rc == pid) break;
    if (rc < 0) return -1;
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return -1;
}

}  // namespace nfc
