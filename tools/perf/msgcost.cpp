// msgcost: the plugin's data path with nothing around it, for counting instructions per message
// (tools/callgrind-msg.sh runs it under callgrind; docs/performance.md has the figures).
//
// One process, one thread, one connection to itself: the plugin is loaded through its NCCL ABI
// as NCCL loads it, then N 8-byte messages go one at a time (irecv, isend, test both until done).
// There is no second process and no clock on the data path, so what the plugin and libfabric
// execute per message is the same from run to run; running N1 and N2 messages and dividing the
// difference by N2 - N1 cancels everything else (loading, init, connecting, closing).
//
// usage: msgcost [--plugin LIB] [--timeout S] N
// The plugin: --plugin, else NF_PLUGIN_LIB, else the one built beside this program. Exit 0 when
// every message arrived intact, 1 on any error or timeout (with a line saying which), 2 on usage.
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "client/plugin_loader.h"

namespace {

constexpr size_t kMsgBytes = 8;
// The clock is read once per this many polls: a wait stays bounded without a clock read (a
// system call under valgrind) on every pass of the loop being measured.
constexpr uint64_t kPollsPerClockRead = 1024;

using Clock = std::chrono::steady_clock;

struct Options {
  std::string plugin;
  long messages = -1;
  double timeout_s = 10;
};

void usage(FILE* f) {
  fprintf(f,
          "usage: msgcost [--plugin LIB] [--timeout S] N\n"
          "Sends N 8-byte messages from the plugin to itself (one process, one thread, device 0),\n"
          "one at a time, checking every byte. The plugin: --plugin, else NF_PLUGIN_LIB, else\n"
          "the build's own. Each wait gives up after S seconds (default 10).\n");
}

int parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--plugin" || a == "--timeout") && i + 1 < argc) {
      const char* v = argv[++i];
      if (a == "--plugin") {
        o->plugin = v;
      } else {
        char* end = nullptr;
        o->timeout_s = strtod(v, &end);
        if (*end != '\0' || !(o->timeout_s > 0)) return 2;
      }
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      exit(0);
    } else if (o->messages < 0 && !a.empty() && a[0] != '-') {
      char* end = nullptr;
      o->messages = strtol(a.c_str(), &end, 10);
      if (*end != '\0' || o->messages < 1) return 2;
    } else {
      return 2;
    }
  }
  if (o->messages < 1) return 2;
  if (o->plugin.empty()) {
    const char* env = getenv("NF_PLUGIN_LIB");
    o->plugin = env != nullptr && *env != '\0' ? env : NF_BUILD_PLUGIN;
  }
  return 0;
}

// A deadline that is checked often enough to bound a wait, rarely enough to cost nothing.
class Bound {
 public:
  explicit Bound(double seconds)
      : limit_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))),
        start_(Clock::now()) {}
  bool expired() {
    if (++polls_ % kPollsPerClockRead != 0) return false;
    return Clock::now() - start_ > limit_;
  }

 private:
  Clock::duration limit_;
  Clock::time_point start_;
  uint64_t polls_ = 0;
};

// Message i's bytes: different for every message, never all zero (the receive buffer is cleared
// before each receive, so a message that did not land is seen).
uint64_t payload(long i) { return (static_cast<uint64_t>(i) + 1) * 0x9e3779b97f4a7c15ull; }

}  // namespace

// The four calls being counted, each in a function of its own that is never inlined:
// tools/callgrind-msg.sh collects only while one of them runs (--toggle-collect with
// msgcost::measured::*), and reads from each one's outgoing call what the plugin cost (the rest is
// this program's dispatch into the ABI table). They must not call one another (entering a nested
// match would toggle collection off) and nothing else may live in this namespace.
namespace msgcost {
namespace measured {

__attribute__((noinline)) ncclResult_t irecv(nfc::NetPlugin& p, void* comm, void** data,
                                             size_t* size, int* tag, void** mh, void** req) {
  return p.irecv(comm, 1, data, size, tag, mh, req);
}

__attribute__((noinline)) ncclResult_t isend(nfc::NetPlugin& p, void* comm, void* data, size_t size,
                                             int tag, void* mh, void** req) {
  return p.isend(comm, data, size, tag, mh, req);
}

__attribute__((noinline)) ncclResult_t test_recv(nfc::NetPlugin& p, void* req, int* done,
                                                 int* sizes) {
  return p.test(req, done, sizes);
}

__attribute__((noinline)) ncclResult_t test_send(nfc::NetPlugin& p, void* req, int* done,
                                                 int* sizes) {
  return p.test(req, done, sizes);
}

}  // namespace measured
}  // namespace msgcost

namespace {

namespace measured = msgcost::measured;

struct Counts {
  uint64_t send_posts = 0;  // isend calls, NULL answers included
  uint64_t recv_polls = 0;  // test calls on receives
  uint64_t send_polls = 0;  // test calls on sends
};

// One message: irecv, isend (again while the plugin answers NULL), then test the oldest
// outstanding request of each comm (each comm has only this one) until both are done, as NCCL's
// proxy thread drives its comms. Returns 0, or 1 after saying why.
int one_message(nfc::NetPlugin& p, const Options& o, long i, void* scomm, void* rcomm,
                uint64_t* sbuf, uint64_t* rbuf, void* smh, void* rmh, Counts* n) {
  *sbuf = payload(i);
  *rbuf = 0;
  void* rdata = rbuf;
  size_t rsize = kMsgBytes;
  int rtag = 1;
  void* rreq = nullptr;
  if (measured::irecv(p, rcomm, &rdata, &rsize, &rtag, &rmh, &rreq) != ncclSuccess) {
    fprintf(stderr, "msgcost: message %ld: irecv failed\n", i);
    return 1;
  }
  // One buffer, nothing outstanding: a NULL receive request would be a plugin bug (NCCL would
  // retry it; here it would only hide the error).
  if (rreq == nullptr) {
    fprintf(stderr, "msgcost: message %ld: irecv returned no request\n", i);
    return 1;
  }
  void* sreq = nullptr;
  Bound post(o.timeout_s);
  for (;;) {
    ++n->send_posts;
    if (measured::isend(p, scomm, sbuf, kMsgBytes, 1, smh, &sreq) != ncclSuccess) {
      fprintf(stderr, "msgcost: message %ld: isend failed\n", i);
      return 1;
    }
    if (sreq != nullptr) break;
    if (post.expired()) {
      fprintf(stderr, "msgcost: message %ld: isend still says 'later' after %g s\n", i,
              o.timeout_s);
      return 1;
    }
  }
  int rdone = 0, sdone = 0;
  int rsizes[NCCL_NET_MAX_REQUESTS] = {0};
  int ssize = 0;
  Bound wait(o.timeout_s);
  while (!rdone || !sdone) {
    if (!rdone) {
      ++n->recv_polls;
      if (measured::test_recv(p, rreq, &rdone, rsizes) != ncclSuccess) {
        fprintf(stderr, "msgcost: message %ld: test of the receive failed\n", i);
        return 1;
      }
    }
    if (!sdone) {
      ++n->send_polls;
      if (measured::test_send(p, sreq, &sdone, &ssize) != ncclSuccess) {
        fprintf(stderr, "msgcost: message %ld: test of the send failed\n", i);
        return 1;
      }
    }
    if ((!rdone || !sdone) && wait.expired()) {
      fprintf(stderr, "msgcost: message %ld: %s not done after %g s\n", i,
              !rdone && !sdone ? "receive and send"
              : !rdone         ? "receive"
                               : "send",
              o.timeout_s);
      return 1;
    }
  }
  if (rsizes[0] != static_cast<int>(kMsgBytes) || *rbuf != payload(i)) {
    fprintf(stderr,
            "msgcost: message %ld: received %d bytes 0x%016" PRIx64 ", sent %zu bytes 0x%016" PRIx64
            "\n",
            i, rsizes[0], *rbuf, kMsgBytes, payload(i));
    return 1;
  }
  return 0;
}

int run(const Options& o) {
  nfc::NetPlugin p;
  std::string err;
  if (!p.load(o.plugin, 0, &err)) {
    fprintf(stderr, "msgcost: cannot load %s: %s\n", o.plugin.c_str(), err.c_str());
    return 1;
  }
  if (p.init() != ncclSuccess) {
    fprintf(stderr, "msgcost: init failed (the plugin's WARN above says why)\n");
    return 1;
  }
  int ndev = 0;
  if (p.devices(&ndev) != ncclSuccess || ndev < 1) {
    fprintf(stderr, "msgcost: no devices (%d)\n", ndev);
    p.finalize();
    return 1;
  }
  void* scomm = nullptr;
  void* rcomm = nullptr;
  if (!nfc::connect_pair(p, 0, &scomm, &rcomm, static_cast<int>(o.timeout_s * 1000), &err)) {
    fprintf(stderr, "msgcost: connecting device 0 to itself: %s\n", err.c_str());
    if (scomm != nullptr) p.close_send(scomm);
    if (rcomm != nullptr) p.close_recv(rcomm);
    p.finalize();
    return 1;
  }
  // Each buffer on its own 64-byte line, as NCCL's are on their own pages.
  alignas(64) static uint64_t sbuf[8];
  alignas(64) static uint64_t rbuf[8];
  void* smh = nullptr;
  void* rmh = nullptr;
  int rc = 0;
  if (p.reg_mr(scomm, sbuf, kMsgBytes, NCCL_PTR_HOST, &smh) != ncclSuccess ||
      p.reg_mr(rcomm, rbuf, kMsgBytes, NCCL_PTR_HOST, &rmh) != ncclSuccess) {
    fprintf(stderr, "msgcost: regMr of an 8-byte host buffer failed\n");
    rc = 1;
  }
  Counts n;
  for (long i = 0; rc == 0 && i < o.messages; ++i)
    rc = one_message(p, o, i, scomm, rcomm, sbuf, rbuf, smh, rmh, &n);
  if (smh != nullptr && p.dereg_mr(scomm, smh) != ncclSuccess) rc = 1;
  if (rmh != nullptr && p.dereg_mr(rcomm, rmh) != ncclSuccess) rc = 1;
  if (p.close_send(scomm) != ncclSuccess) rc = 1;
  if (p.close_recv(rcomm) != ncclSuccess) rc = 1;
  if (p.finalize() != ncclSuccess) rc = 1;
  if (rc != 0) return 1;
  // The poll counts are what makes the instruction count move between runs, if anything does:
  // the script prints them beside its figure.
  printf("msgcost: %ld messages of %zu bytes, intact; isend calls %" PRIu64
         ", test calls on receives %" PRIu64 ", on sends %" PRIu64 "\n",
         o.messages, kMsgBytes, n.send_posts, n.recv_polls, n.send_polls);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (parse(argc, argv, &o) != 0) {
    usage(stderr);
    return 2;
  }
  return run(o);
}
