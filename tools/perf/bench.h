// The per-rank driver: handshake, plugin and raw setup, the tests, the results.
#pragma once
#include <sys/types.h>
#include <vector>

#include "perf/channel.h"
#include "perf/perf.h"

namespace nfp {

// Runs one rank to the end. peer: the other rank's pid in a forked pair, 0 between two hosts.
// Rank 1 adopts rank 0's plan into *o. Rank 0 prints the report and returns its rows in
// *results. Throws Failure.
void run_rank(int rank, pid_t peer, Chan& chan, Options* o, std::vector<Result>* results);

}  // namespace nfp
