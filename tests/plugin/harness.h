// Plugin tests drive the built libnccl-net-fabric.so through its C ABI exactly as NCCL does.
// libfabric and the plugin's device table are per process, so each test case runs its sides in
// forked children that load the plugin fresh; the parent (Catch2) only checks their exit codes.
// Catch2 macros are never used inside a child: CHILD_CHECK prints and fails the child instead.
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "client/oob.h"
#include "client/plugin_loader.h"
#include "mockprov/mockefa.h"

namespace nft {

constexpr int kTimeoutMs = 60000;  // bound on every wait in a test

#define CHILD_CHECK(cond, ...)                                                                   \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "[pid %d] CHECK FAILED %s:%d: %s: ", static_cast<int>(getpid()), __FILE__, \
              __LINE__, #cond);                                                                  \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fprintf(stderr, "\n");                                                                     \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

// One side of a connected pair: a send comm to the peer and a recv comm from it.
struct Side {
  nfc::NetPlugin plugin;
  nfc::Oob oob;
  int rank = 0;
  std::vector<void*> send_comms;
  std::vector<void*> recv_comms;
  int max_recvs = 1;
};

struct PairOptions {
  std::string provider;                                  // NCCL_FABRIC_PROVIDER
  int abi_version = 0;                                   // 0 = newest
  int comms = 1;                                         // connections each way
  std::vector<std::pair<std::string, std::string>> env;  // extra environment ("" = unset it)
  // Runs in the child after the environment is set and before the plugin loads (e.g. to make a
  // CUDA context current, as NCCL has when it calls init). Non-zero fails the child.
  std::function<int()> before_init;
  // Rank 1 may be killed by the test (peer failure tests): its exit is not checked, and rank 0
  // closes without the final barrier. Rank 0's body is then the judge.
  bool rank1_may_die = false;
  // NCCL's profiler callback as init gets it (v10+); nullptr: none, as NCCL before 2.23.
  ncclProfilerCallback_t profiler = nullptr;
};

// The providers the two-process tests run on.
const std::vector<std::string>& real_providers();

// Options that select the mock EFA provider (single-process tests only: it does not cross
// processes).
PairOptions mock_options();

std::string plugin_path();

// Loads and inits the plugin in this (child) process with `opt`'s environment.
int child_setup(const PairOptions& opt, nfc::NetPlugin* p);

// Runs body(side) in two children (rank 0 and rank 1), connected `opt.comms` times each way.
// Returns true when both exit 0; *log gets a summary otherwise.
bool run_pair(const PairOptions& opt, const std::function<int(Side&)>& body, std::string* log);

// Listens, swaps handles over s.oob and connects one send and one recv comm with the peer (which
// calls it at the same time). Returns 0, or 1 after printing why.
int connect_more(Side& s, void** send_comm, void** recv_comm);

// Runs body() in one child with the plugin loaded and initialised.
bool run_single(const PairOptions& opt, const std::function<int(nfc::NetPlugin&)>& body,
                std::string* log);

// In a single-process mock test: loads the mock's test API (api may be NULL) and connects a send
// and a recv comm on device 0. Returns 0, or 1 after printing why.
int mock_pair(nfc::NetPlugin& p, mockefa_api* api, void** send_comm, void** recv_comm);

// Polls test() until done or error or timeout. Returns 0 when done; *sizes gets the sizes.
int wait_request(nfc::NetPlugin& p, void* req, int* sizes, int timeout_ms = kTimeoutMs);

// Polls every request round-robin until each is done or failed (test() returned an error).
// Returns how many failed, or -1 when some still pend after timeout_ms: every request must end,
// in success or error (a failed peer or connection fails them all, never leaves them pending).
int settle(nfc::NetPlugin& p, std::vector<void*>& reqs, std::vector<int>* sizes,
           std::vector<bool>* failed, int timeout_ms = kTimeoutMs);

// The plugin's log in a child, for tests that check what it said: pass capture_log to
// nfc::set_log_sink, read it with captured_log() (the keeper thread writes too). Lines start
// with "WARN " or "INFO ".
void capture_log(bool warn, const char* text);
std::string captured_log();

// Polls every request round-robin until all are done, as NCCL's progress thread does (with manual
// progress a receive may need its sender's comm polled). sizes[i] gets request i's first size.
// Returns 0; ncclSystemError when a request failed; -1 when one still pends at timeout_ms.
int wait_all(nfc::NetPlugin& p, std::vector<void*>& reqs, std::vector<int>* sizes,
             int timeout_ms = kTimeoutMs);

// isend/irecv retried while the plugin answers NULL ("not now"), bounded.
int post_send(nfc::NetPlugin& p, void* comm, void* buf, size_t size, int tag, void* mh, void** req);
int post_recv(nfc::NetPlugin& p, void* comm, int n, void** bufs, size_t* sizes, int* tags,
              void** mhs, void** req);
// post_recv of one buffer.
int post_recv1(nfc::NetPlugin& p, void* comm, void* buf, size_t cap, int tag, void* mh, void** req);
// One message on a pair of one process: a receive of cap bytes posted, then the send (NULL answers
// retried with the same arguments), both waited for. 0 with *got = the received size, else
// nonzero (a post failed, a request failed, or one was still pending after the timeout).
int transfer1(nfc::NetPlugin& p, void* sc, void* sbuf, size_t size, void* smh, void* rc, void* rbuf,
              size_t cap, void* rmh, int tag, int* got);

// Deterministic content: byte i of message `msg` of `rank`.
inline unsigned char pattern(int rank, int msg, size_t i) {
  return static_cast<unsigned char>((i * 131u) ^ (static_cast<unsigned>(msg) * 29u) ^
                                    (static_cast<unsigned>(rank) * 7u) ^ (i >> 8));
}
void fill(void* buf, size_t n, int rank, int msg);
// Returns the index of the first wrong byte, or SIZE_MAX when all are right.
size_t verify(const void* buf, size_t n, int rank, int msg);

}  // namespace nft
