// The wire between mock endpoints of different processes (issue 35, point 1; first step):
// reliable, unordered datagrams, the promise of EFA's SRD. Every message is delivered exactly once,
// in any order, or its sender learns that it could not be (no acknowledgement within the give-up
// time, as EFA fails an operation to a peer that stopped answering). UDP underneath, so a message
// crosses processes and network namespaces, and loss, duplication and reordering on the path
// (iptables, tc, or the channel's own injection) are repaired by sequence numbers, acks and
// retransmission. Single-threaded: the mock calls it under its global lock.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace mockefa {
namespace net {

constexpr size_t kMaxPayload = 60000;  // bytes of one message (one datagram)

struct Peer {
  uint32_t ip = 0;    // IPv4, network order
  uint16_t port = 0;  // network order
  bool operator<(const Peer& o) const { return ip != o.ip ? ip < o.ip : port < o.port; }
  bool operator==(const Peer& o) const { return ip == o.ip && port == o.port; }
};

struct Options {
  double loss = 0;                // chance that a datagram this channel sends is dropped
  double dup = 0;                 // chance that it is sent twice
  uint64_t seed = 1;              // of the injection decisions
  uint64_t rto_us = 20000;        // first retransmission after this long without an ack
  uint64_t rto_max_us = 100000;   // the wait doubles with each retransmission, up to this
  uint64_t give_up_us = 5000000;  // a message unacknowledged this long is lost
  // Bytes of unacknowledged datagrams to one peer; later messages wait their turn (SRD has
  // congestion control: without a window, a bulk sender overran the receiver's socket buffer and
  // retransmitted everything every rto, and under 5 % loss a message missed the give-up time).
  size_t window_bytes = 1 << 20;
};

struct Stats {
  uint64_t sent = 0;       // messages queued
  uint64_t datagrams = 0;  // datagrams handed to the kernel (data, retransmits, acks)
  uint64_t retransmits = 0;
  uint64_t waited = 0;      // messages that waited for the window
  uint64_t delivered = 0;   // messages handed to on_msg
  uint64_t duplicates = 0;  // data datagrams dropped as already delivered
  uint64_t acked = 0;
  uint64_t lost = 0;             // given up
  uint64_t injected_drops = 0;   // datagrams dropped by Options::loss
  uint64_t malformed = 0;        // datagrams that were not ours
  uint64_t probes_answered = 0;  // 0-byte messages acknowledged and not delivered
};

class Channel {
 public:
  Channel() = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel();

  // Binds a UDP socket to ip:port (host order; port 0: any free one). 0, or -errno.
  int open(uint32_t ip_host_order, uint16_t port_host_order, const Options& opt);
  void close();
  Peer self() const { return self_; }

  // Queues a message of at most kMaxPayload bytes to `to`; returns its id (> 0), or 0 when too
  // large or the channel is closed. A message of 0 bytes is a probe: the peer acknowledges it and
  // does not deliver it, so on_done says whether the peer still answers.
  uint64_t send(const Peer& to, const void* data, size_t len);

  // One pass: reads every datagram waiting (each new message goes to on_msg once; every data
  // datagram is acknowledged), retransmits what is due, and reports each message of ours that was
  // acknowledged (delivered true) or given up (false) to on_done.
  void progress(const std::function<void(const Peer&, const uint8_t*, size_t)>& on_msg,
                const std::function<void(uint64_t id, bool delivered)>& on_done);

  size_t in_flight() const { return out_.size(); }
  const Stats& stats() const { return stats_; }

 private:
  struct Out {
    Peer to;
    std::vector<uint8_t> frame;  // header and payload, as sent
    bool sent = false;           // false: waiting for the window
    uint64_t first_us = 0, last_us = 0, rto_us = 0;
  };
  struct PeerQ {
    size_t inflight = 0;           // bytes sent and not acknowledged
    std::deque<uint64_t> waiting;  // seqs, in order
  };
  // What one sender (a channel instance: its address and random id) delivered to us.
  struct In {
    uint64_t floor = 0;        // every seq <= floor was delivered
    std::set<uint64_t> above;  // delivered seqs above the floor
  };
  void transmit(const Peer& to, const uint8_t* frame, size_t len);
  void pump(const Peer& to);  // sends what the window to `to` lets go
  void forget(uint64_t seq);  // an acknowledged or given-up message leaves out_ and its window

  int fd_ = -1;
  Peer self_;
  Options opt_;
  uint64_t id_ = 0;   // this instance's random id: a restarted peer's seqs start afresh
  uint64_t seq_ = 0;  // messages sent
  std::map<uint64_t, Out> out_;
  std::map<Peer, PeerQ> q_;
  std::map<std::pair<Peer, uint64_t>, In> in_;
  std::mt19937_64 rng_;
  Stats stats_;
  std::vector<uint8_t> buf_;
};

uint64_t now_us();

}  // namespace net
}  // namespace mockefa
