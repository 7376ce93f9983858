// nfq_fault: a network fault injector for kernels without the netem qdisc. Packets an iptables
// rule sends to NFQUEUE queue Q come here and are let through (late, out of order, or altered):
//
//   nfq_fault Q delay MS JITTER_MS   hold each packet MS + uniform(0, JITTER_MS) ms; with jitter,
//                                    packets leave out of order (jitter and reordering)
//   nfq_fault Q reorder P            hold a fraction P of the packets for 10 ms, pass the rest
//   nfq_fault Q corrupt P            flip one payload byte of a fraction P of the packets (the
//                                    receiver's TCP checksum then drops them: loss and retransmit)
//
// Runs until SIGTERM/SIGINT, then prints what it did. Verdicts are given in any order (NFQUEUE
// allows it), which is how a held packet is overtaken. Used by tests/net/test_netns.sh.
#include <arpa/inet.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <linux/netlink.h>
#include <netinet/ip.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <queue>
#include <random>
#include <string>
#include <vector>

namespace {

enum class Mode { kDelay, kReorder, kCorrupt };

struct Held {
  uint64_t due_ns;
  uint32_t id;
  bool operator>(const Held& o) const { return due_ns > o.due_ns; }
};

struct State {
  Mode mode = Mode::kDelay;
  double delay_ms = 0, jitter_ms = 0, p = 0;
  std::mt19937_64 rng{12345};
  std::priority_queue<Held, std::vector<Held>, std::greater<Held>> held;
  nfq_q_handle* qh = nullptr;
  uint64_t seen = 0, delayed = 0, corrupted = 0;
};

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

double uniform(State& s) { return std::uniform_real_distribution<double>(0.0, 1.0)(s.rng); }

int on_packet(nfq_q_handle* qh, nfgenmsg*, nfq_data* nfa, void* data) {
  State& s = *static_cast<State*>(data);
  nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph == nullptr) return 0;
  const uint32_t id = ntohl(ph->packet_id);
  ++s.seen;
  if (s.mode == Mode::kCorrupt) {
    unsigned char* pkt = nullptr;
    const int len = nfq_get_payload(nfa, &pkt);
    if (len > 0 && uniform(s) < s.p) {
      // IPv4 header, then the transport header (20 bytes is TCP's least): flip a byte beyond.
      const int ihl = (pkt[0] & 0x0f) * 4;
      const int off = ihl + 20 + 12;
      if ((pkt[0] >> 4) == 4 && len > off) {
        std::vector<unsigned char> copy(pkt, pkt + len);
        const int at = off + static_cast<int>(uniform(s) * (len - off));
        copy[static_cast<size_t>(at)] ^= 0x5a;
        ++s.corrupted;
        return nfq_set_verdict(qh, id, NF_ACCEPT, static_cast<uint32_t>(len), copy.data());
      }
    }
    return nfq_set_verdict(qh, id, NF_ACCEPT, 0, nullptr);
  }
  double hold_ms = 0;
  if (s.mode == Mode::kDelay)
    hold_ms = s.delay_ms + s.jitter_ms * uniform(s);
  else if (uniform(s) < s.p)
    hold_ms = 10;
  if (hold_ms <= 0) return nfq_set_verdict(qh, id, NF_ACCEPT, 0, nullptr);
  ++s.delayed;
  s.held.push({now_ns() + static_cast<uint64_t>(hold_ms * 1e6), id});
  return 0;
}

void release_due(State& s, bool all) {
  const uint64_t now = now_ns();
  while (!s.held.empty() && (all || s.held.top().due_ns <= now)) {
    nfq_set_verdict(s.qh, s.held.top().id, NF_ACCEPT, 0, nullptr);
    s.held.pop();
  }
}

int usage() {
  fprintf(stderr, "usage: nfq_fault QUEUE delay MS JITTER_MS | reorder P | corrupt P\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return usage();
  State s;
  const int queue = atoi(argv[1]);
  const std::string mode = argv[2];
  if (mode == "delay" && argc == 5) {
    s.mode = Mode::kDelay;
    s.delay_ms = atof(argv[3]);
    s.jitter_ms = atof(argv[4]);
  } else if (mode == "reorder" && argc == 4) {
    s.mode = Mode::kReorder;
    s.p = atof(argv[3]);
  } else if (mode == "corrupt" && argc == 4) {
    s.mode = Mode::kCorrupt;
    s.p = atof(argv[3]);
  } else {
    return usage();
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  nfq_handle* h = nfq_open();
  if (h == nullptr) {
    fprintf(stderr, "nfq_fault: nfq_open: %s (is nfnetlink_queue available? are we root?)\n",
            strerror(errno));
    return 1;
  }
  s.qh = nfq_create_queue(h, static_cast<uint16_t>(queue), on_packet, &s);
  if (s.qh == nullptr || nfq_set_mode(s.qh, NFQNL_COPY_PACKET, 0xffff) < 0) {
    fprintf(stderr, "nfq_fault: cannot bind queue %d: %s\n", queue, strerror(errno));
    nfq_close(h);
    return 1;
  }
  nfq_set_queue_maxlen(s.qh, 8192);
  // A full queue lets packets through rather than dropping them (the faults are what we inject,
  // not the queue's overflow), and the netlink socket gets room for bursts: without both, TCP
  // through the queue slows to a crawl on retransmission timeouts.
  nfq_set_queue_flags(s.qh, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN);
  nfnl_rcvbufsiz(nfq_nfnlh(h), 16u << 20);
  const int fd = nfq_fd(h);
  const int one = 1;
  setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof(one));
  printf("nfq_fault: queue %d, %s\n", queue, mode.c_str());
  fflush(stdout);
  std::vector<char> buf(1 << 17);
  while (!g_stop) {
    int timeout = 50;
    if (!s.held.empty()) {
      const uint64_t now = now_ns();
      const uint64_t due = s.held.top().due_ns;
      timeout = due <= now ? 0 : static_cast<int>((due - now) / 1000000 + 1);
      if (timeout > 50) timeout = 50;
    }
    pollfd p = {fd, POLLIN, 0};
    const int r = poll(&p, 1, timeout);
    if (r > 0) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n > 0) nfq_handle_packet(h, buf.data(), static_cast<int>(n));
    }
    release_due(s, false);
  }
  release_due(s, true);
  printf("nfq_fault: %llu packets, %llu held, %llu corrupted\n",
         static_cast<unsigned long long>(s.seen), static_cast<unsigned long long>(s.delayed),
         static_cast<unsigned long long>(s.corrupted));
  nfq_destroy_queue(s.qh);
  nfq_close(h);
  return 0;
}
