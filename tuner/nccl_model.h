// NCCL's own cost model, rebuilt from what NCCL 2.28.9 does (src/graph/tuning.cc and
// src/enqueue.cc), so that the tuner and nccl-fabric-tune can compute the cost table NCCL would
// hand the tuner for a given communicator shape, and what NCCL alone would pick from it.
// docs/tuning.md#nccl-model says what is modelled and what is approximated.
#pragma once
#include <cstddef>

#include "nccl/tuner.h"

namespace nf {
namespace tuner {

// NCCL 2.28.9's default tuning constants (what it passes to the tuner's init before any edit).
void nccl_default_constants(ncclTunerConstants_v5_t* c);

// What NCCL knows of a communicator when it builds its model (ncclTopoTuneModel's inputs).
struct CommShape {
  int n_ranks = 1;
  int n_nodes = 1;
  int ranks_per_node = 1;  // the largest number of ranks on one node
  int compcap_idx = NCCL_HOPPER_COMPCAP_IDX;
  int intra_link = NCCL_HW_NVLINK;  // NCCL_HW_NVLINK or NCCL_HW_PCI between local GPUs
  double intra_bw_gbs = 20.0;       // GB/s per channel inside a node (graph bwIntra)
  double inter_bw_gbs = 12.5;       // GB/s per channel over the network (graph bwInter)
  int n_channels = 2;               // ring/tree channels NCCL runs
  bool nvls = false;                // NVLS usable (NVSwitch with multicast)
  bool collnet = false;             // a CollNet plugin is present
};

// NCCL's per-communicator model: latency (µs) and bandwidth (GB/s) per collective, algorithm and
// protocol; bandwidth 0 means "not available" (NCCL then writes NCCL_ALGO_PROTO_IGNORE).
struct NcclModel {
  double lat[5][NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  double bw[5][NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
};

// Builds the model from the constants (possibly edited by a tuner) and the shape.
void nccl_build_model(const ncclTunerConstants_v5_t& c, const CommShape& s, NcclModel* m);

// The cost table NCCL hands getCollInfo for one call (µs; NCCL_ALGO_PROTO_IGNORE where
// unavailable), as enqueue.cc computes it from the model. coll is 0..4.
void nccl_cost_table(const NcclModel& m, const CommShape& s, int coll, size_t n_bytes,
                     int num_pipe_ops, float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS]);

// NCCL's selection over a table after the tuner ran: algorithm-major scan, the smallest entry
// >= 0 wins, first on ties. false when every entry is ignored.
bool nccl_pick(const float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS], int* algo, int* proto);

// Bus bandwidth (GB/s, nccl-tests' definition) for a collective of n_bytes taking time_us.
double bus_bandwidth(int coll, int n_ranks, size_t n_bytes, double time_us);

}  // namespace tuner
}  // namespace nf
