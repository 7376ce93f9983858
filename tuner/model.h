// The tuner's cost model: NCCL's own model (nccl_model.h) fed with what we know of the machine and
// the network instead of NCCL's one-size-fits-all constants, turned at init into per-collective
// size bands, each with the pairs (algorithm, protocol) ranked cheapest first, so that
// getCollInfo is a binary search and a short scan. docs/tuning.md#model explains it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl/tuner.h"
#include "tuner/nccl_model.h"
#include "tuner/rules.h"

namespace nf {
struct Platform;
namespace tuner {

// What the tuner knows of the communicator and the network when it builds its model.
struct Facts {
  int n_ranks = 1;
  int n_nodes = 1;
  int ranks_per_node = 1;
  // The network, per node: from the plugin's devices when the net side of this library runs, else
  // from the platform row; net_known = false when neither says anything.
  bool net_known = false;
  std::string net_source;    // "plugin devices", "platform p5.48xlarge", "unknown"
  std::string provider;      // "efa", "tcp;ofi_rxm", "" when unknown
  double node_net_gbps = 0;  // all of a node's NICs together, Gb/s
  int node_nics = 0;
  double net_latency_us = 0;  // one network hop for a small message
  bool gdr = false;
  // The GPUs, from the platform row ("" when unknown).
  std::string accelerator;  // "H100"
  int accelerators = 0;     // per node
};

// Fills the network and GPU part of Facts from a platform row (latency, NICs x speed, GPUs).
void facts_from_platform(const Platform& row, Facts* f);
// The latency of one network step we assume for a provider (µs); 0 when we have no figure.
double default_net_latency_us(const std::string& provider, bool gdr);

// The communicator as NCCL's model sees it, derived from the facts (GPU generation, NVLink or PCI,
// per-channel bandwidths, channel count). docs/tuning.md#model lists the figures used.
CommShape shape_from_facts(const Facts& f);

// One change the tuner makes to NCCL's constants, for the log.
struct ConstantChange {
  std::string what;  // "hwLatencies[NET][ring][ll]"
  double before = 0;
  double after = 0;
};

// Corrects NCCL's constants for the real network: network hop latency (hwLatencies[NET]) and, on
// networks slower than NCCL's per-channel caps, the caps. Returns what changed (nothing when the
// network is unknown).
std::vector<ConstantChange> correct_constants(const Facts& f, const CommShape& s,
                                              ncclTunerConstants_v5_t* c);

// A size band [lo, next band's lo) of one collective: the available pairs, cheapest first.
struct Band {
  uint64_t lo = 0;
  uint8_t n = 0;                               // pairs ranked
  uint8_t pair[kNumAlgos * kNumProtos] = {};   // algo * kNumProtos + proto
  float cost_us[kNumAlgos * kNumProtos] = {};  // the model's cost of each ranked pair at lo
};

struct Decisions {
  std::vector<Band> bands[kNumColls];  // ascending lo; bands[c][0].lo == 0
};

// Evaluates the model at 4 sizes per octave from 1 B to 16 GiB (plus 0) and keeps one band per
// distinct ranking. Sizes above the last band use the last band.
void build_decisions(const NcclModel& m, const CommShape& s, Decisions* d);

// The band of a size: binary search, no allocation.
const Band& band_for(const Decisions& d, int coll, uint64_t n_bytes);

// The model's pick for one size in a plain table (what show and the dump print): the first ranked
// pair; false when nothing is available.
bool model_pick(const Decisions& d, int coll, uint64_t n_bytes, int* algo, int* proto);

}  // namespace tuner
}  // namespace nf
