// Reliable, unordered datagrams over UDP for the mock (mock_net.h).
#include "mock_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

namespace mockefa {
namespace net {

namespace {

constexpr uint32_t kMagic = 0x4d4e4554;  // "MNET"
constexpr uint8_t kData = 1;
constexpr uint8_t kAck = 2;

struct Hdr {
  uint32_t magic;
  uint8_t type;
  uint8_t pad[3];
  uint64_t sender;  // the sending channel instance's random id
  uint64_t seq;
  uint32_t len;  // payload bytes (data), 0 (ack)
  uint32_t pad2;
};
static_assert(sizeof(Hdr) == 32, "the frame header is 32 bytes");

}  // namespace

uint64_t now_us() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

Channel::~Channel() { close(); }

int Channel::open(uint32_t ip_host_order, uint16_t port_host_order, const Options& opt) {
  close();
  opt_ = opt;
  rng_.seed(opt.seed);
  std::random_device rd;
  id_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ now_us();
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return -errno;
  // Room for bursts: a pass may find many datagrams waiting.
  int sz = 4 << 20;
  // Past net.core.rmem_max where allowed (root), else up to it.
  if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) != 0)
    (void)setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
  (void)setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip_host_order);
  a.sin_port = htons(port_host_order);
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int e = errno;
    close();
    return -e;
  }
  socklen_t len = sizeof(a);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    close();
    return -e;
  }
  self_.ip = a.sin_addr.s_addr;
  self_.port = a.sin_port;
  buf_.resize(sizeof(Hdr) + kMaxPayload);
  return 0;
}

void Channel::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  out_.clear();
  q_.clear();
}

void Channel::pump(const Peer& to) {
  PeerQ& q = q_[to];
  while (!q.waiting.empty()) {
    auto it = out_.find(q.waiting.front());
    if (it == out_.end()) {
      q.waiting.pop_front();
      continue;
    }
    Out& o = it->second;
    if (q.inflight != 0 && q.inflight + o.frame.size() > opt_.window_bytes) break;
    q.waiting.pop_front();
    o.sent = true;
    o.first_us = o.last_us = now_us();
    o.rto_us = opt_.rto_us;
    q.inflight += o.frame.size();
    transmit(to, o.frame.data(), o.frame.size());
  }
}

void Channel::forget(uint64_t seq) {
  auto it = out_.find(seq);
  if (it == out_.end()) return;
  if (it->second.sent) q_[it->second.to].inflight -= it->second.frame.size();
  out_.erase(it);
}

void Channel::transmit(const Peer& to, const uint8_t* frame, size_t len) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (opt_.loss > 0 && u(rng_) < opt_.loss) {
    ++stats_.injected_drops;
    return;
  }
  const int copies = (opt_.dup > 0 && u(rng_) < opt_.dup) ? 2 : 1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = to.ip;
  a.sin_port = to.port;
  for (int i = 0; i < copies; ++i) {
    // A full socket buffer or an unreachable port is a lost datagram: retransmission repairs it.
    (void)::sendto(fd_, frame, len, 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ++stats_.datagrams;
  }
}

uint64_t Channel::send(const Peer& to, const void* data, size_t len) {
  if (fd_ < 0 || len > kMaxPayload) return 0;
  const uint64_t seq = ++seq_;
  Out& o = out_[seq];
  o.to = to;
  o.frame.resize(sizeof(Hdr) + len);
  Hdr h{};
  h.magic = kMagic;
  h.type = kData;
  h.sender = id_;
  h.seq = seq;
  h.len = static_cast<uint32_t>(len);
  std::memcpy(o.frame.data(), &h, sizeof(h));
  if (len) std::memcpy(o.frame.data() + sizeof(h), data, len);
  ++stats_.sent;
  PeerQ& q = q_[to];
  if (!q.waiting.empty() || q.inflight != 0) ++stats_.waited;
  q.waiting.push_back(seq);
  pump(to);
  return seq;
}

void Channel::progress(const std::function<void(const Peer&, const uint8_t*, size_t)>& on_msg,
                       const std::function<void(uint64_t id, bool delivered)>& on_done) {
  if (fd_ < 0) return;
  for (;;) {
    sockaddr_in from{};
    socklen_t flen = sizeof(from);
    const ssize_t n =
        ::recvfrom(fd_, buf_.data(), buf_.size(), 0, reinterpret_cast<sockaddr*>(&from), &flen);
    if (n < 0) break;  // EAGAIN: nothing more now (other errors: next pass)
    Hdr h;
    if (static_cast<size_t>(n) < sizeof(h)) {
      ++stats_.malformed;
      continue;
    }
    std::memcpy(&h, buf_.data(), sizeof(h));
    if (h.magic != kMagic || (h.type != kData && h.type != kAck) ||
        (h.type == kData && sizeof(h) + h.len != static_cast<size_t>(n))) {
      ++stats_.malformed;
      continue;
    }
    Peer p;
    p.ip = from.sin_addr.s_addr;
    p.port = from.sin_port;
    if (h.type == kAck) {
      // Only an ack from the peer the message went to, for a message of this instance.
      auto it = out_.find(h.seq);
      if (h.sender != id_ || it == out_.end() || !(it->second.to == p) || !it->second.sent)
        continue;
      forget(h.seq);
      ++stats_.acked;
      on_done(h.seq, true);
      continue;
    }
    // Data: acknowledged every time (the previous ack may have been lost), delivered once.
    Hdr ack{};
    ack.magic = kMagic;
    ack.type = kAck;
    ack.sender = h.sender;
    ack.seq = h.seq;
    transmit(p, reinterpret_cast<const uint8_t*>(&ack), sizeof(ack));
    In& in = in_[std::make_pair(p, h.sender)];
    if (h.seq <= in.floor || in.above.count(h.seq)) {
      ++stats_.duplicates;
      continue;
    }
    in.above.insert(h.seq);
    while (!in.above.empty() && *in.above.begin() == in.floor + 1) {
      in.above.erase(in.above.begin());
      ++in.floor;
    }
    if (h.len == 0) {
      ++stats_.probes_answered;  // a probe: its ack is the answer
      continue;
    }
    ++stats_.delivered;
    on_msg(p, buf_.data() + sizeof(h), h.len);
  }
  const uint64_t now = now_us();
  std::set<Peer> gone;
  for (auto& [seq, o] : out_) {
    if (!o.sent) continue;
    if (now - o.first_us >= opt_.give_up_us) {
      gone.insert(o.to);
      continue;
    }
    if (now - o.last_us >= o.rto_us) {
      o.last_us = now;
      o.rto_us = std::min(o.rto_us * 2, std::max(opt_.rto_max_us, opt_.rto_us));
      ++stats_.retransmits;
      transmit(o.to, o.frame.data(), o.frame.size());
    }
  }
  // A peer that let a message go unanswered for the give-up time is unreachable: everything to it
  // is given up at once (waiting ones too), as a device fails a queue pair's work to a lost peer.
  if (!gone.empty()) {
    std::vector<uint64_t> lost;
    for (const auto& [seq, o] : out_)
      if (gone.count(o.to)) lost.push_back(seq);
    for (uint64_t seq : lost) {
      forget(seq);
      ++stats_.lost;
      on_done(seq, false);
    }
    for (const Peer& p : gone) q_.erase(p);
  }
  for (auto& [to, q] : q_)
    if (!q.waiting.empty()) pump(to);
}

}  // namespace net
}  // namespace mockefa
