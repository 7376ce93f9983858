// A driver that calls the plugin exactly as NCCL 2.28's proxy thread does, to find what tests
// written around the plugin's own habits miss:
// - one thread loops over every comm of the process;
// - each comm keeps up to `window` requests in flight, from one registered buffer of slots;
// - a NULL request from isend/irecv means "later": the same call, with the same arguments, is
//   retried on a later pass, and nothing else is posted on that comm before it;
// - test() is called only on the oldest outstanding request of each comm;
// - sizes are checked against what was sent, every byte against its pattern, and a canary after
//   each slot (and after each message inside its slot) must stay untouched.
// Everything it does derives from a seed, so a failure prints the seed and replays.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness.h"

namespace nft {

enum class TagMode {
  kRank,      // every buffer's tag is the sender's rank (NCCL without grouping)
  kDistinct,  // the buffers of a group have distinct tags (NCCL's grouped receives)
  kRepeated,  // tags drawn from two values: a group holds several buffers of one tag
};

struct DriverConfig {
  uint64_t seed = 1;
  int comms_10 = 2;          // connections from rank 1 to rank 0 (A, B in issue 15)
  int comms_01 = 1;          // connections from rank 0 to rank 1 (C)
  int window = 8;            // requests in flight per comm
  int messages = 32;         // per comm per round: the fixed sizes, then random ones
  int group_max = 1;         // receives are grouped 1..group_max at a time (n of irecv)
  bool group_fixed = false;  // every group has exactly group_max buffers
  TagMode tags = TagMode::kRank;
  bool shuffle_sends = false;  // the sender sends a group's members in another tag order
  size_t slot_bytes = (16u << 20) + 4096;  // receive capacity; the largest message fits
  size_t max_random = 4u << 20;            // random sizes are 0..max_random
  bool optional_hint = false;  // *request = NCCL_NET_OPTIONAL_RECV_COMPLETION before irecv (n = 1)
  int rounds = 1;
  bool rereg = false;          // deregister and register again between rounds
  bool per_slot_reg = false;   // one registration per slot instead of one for the buffer
  bool reg_thread = false;     // a second thread calls regMr/deregMr while data flows
  int timeout_ms = 60000;      // without progress for this long: the run failed (state printed)
  bool phandle_array = false;  // irecv gets an array of NULL profiler handles, not NULL (NCCL 2.28)
  // After a request is posted, now and then (1 in 16) the proxy thread does nothing for
  // 0..idle_max_ms (NCCL's GPU work): only the plugin's own thread progresses the endpoint
  // meanwhile.
  int idle_max_ms = 0;
  // After the checked traffic, every comm posts up to `window` more requests (none waited for)
  // and is deregistered, closed and its memory freed at once, as NCCL's abort does.
  bool close_with_work = false;
};

// Describes a config in one line (printed with every failure, with the seed).
std::string describe(const DriverConfig& c);

// Two processes: the body for run_pair (opt.comms must be 0: the driver connects its own comms).
int drive_pair_side(Side& s, const DriverConfig& cfg);

// One process holding both sides (the mock provider does not cross processes): every comm of
// both ranks in one loop, one thread.
int drive_single(nfc::NetPlugin& p, const DriverConfig& cfg);

// NF_STRESS_SEED (replay one seed) and NF_STRESS_SEEDS (how many seeds a case runs).
uint64_t stress_seed(uint64_t fallback);
int stress_seeds(int fallback);

}  // namespace nft
