// Counters per comm and per device, the statistics file (NCCL_FABRIC_STATS, docs/stats.md) and
// the stall report (NCCL_FABRIC_STALL_WARN): what a person needs to see into a running job.
//
// A comm's counters have one writer, the thread that progresses the comm (under SharedEp::mu),
// and are read by the keeper and by finalize: relaxed atomics, incremented with a load and a store
// (no locked instruction on the data path). A comm that closes folds its counters into its
// device's totals.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "util/params.h"

namespace nf {

struct Comm;
struct SharedEp;

constexpr int kStatRails = 4;  // kMaxRails (fabric.h)

class Counter {
 public:
  void add(uint64_t n = 1) {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

struct CommStats {
  Counter msgs;                // NCCL messages completed (send comm: sent, recv comm: received)
  Counter bytes;               // ... their bytes
  Counter eagain;              // posts the provider pushed back (-FI_EAGAIN), retried later
  Counter cts_waits;           // RDMA: isends that had to wait for the receiver's clear-to-send
  Counter eager;               // RDMA: messages sent (or delivered) through bounce buffers
  Counter errors;              // requests reported to NCCL as failed
  Counter writes[kStatRails];  // RDMA writes posted, per rail
};

// Messages from senders an endpoint does not know, or that fail a check after the handshake
// (issue 36): counted process-wide, in the statistics file's "unsolicited" object. Lock-free:
// called under an endpoint's mu.
enum class Unsolicited { kPingUnknown, kPongRefused, kConnectPastAvCap, kWrongCookie, kCount };
void stats_unsolicited(Unsolicited what);
uint64_t stats_unsolicited_count(Unsolicited what);

// Reads the process-wide settings (first context only: the file and the stall threshold are the
// process's).
void stats_configure(const Params& p);
// A comm is closing: its counters join its device's totals. Not under sep->mu.
void stats_fold(const Comm& c);
// The keeper's periodic work on one endpoint, under sep.mu: the stall report of each comm.
void stats_watch(SharedEp& sep, uint64_t now_ns);
// The keeper calls it after every pass: writes the file when NCCL_FABRIC_STATS_INTERVAL is due.
// Holds the keeper's registry (the endpoints can neither come nor go).
void stats_tick(const std::vector<SharedEp*>& seps, uint64_t now_ns);
// The last context was finalized: the final file and an INFO summary per device.
void stats_finish();
// The document as it would be written now (tests, tools).
std::string stats_json(bool final);
// %h and %p of a NCCL_FABRIC_STATS path.
std::string stats_path(const std::string& pattern);

}  // namespace nf
