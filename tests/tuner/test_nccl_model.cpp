// NCCL's cost model (tuner/nccl_model.cpp) against figures worked out by hand from NCCL 2.28.9's
// src/graph/tuning.cc (tag v2.28.9-1) and src/enqueue.cc, and against a real nccl-tests log.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tuner/nccl_model.h"

using nf::tuner::CommShape;
using nf::tuner::NcclModel;

namespace {

constexpr size_t KiB = size_t(1) << 10;
constexpr size_t MiB = size_t(1) << 20;
constexpr size_t GiB = size_t(1) << 30;
constexpr float kIgnore = static_cast<float>(NCCL_ALGO_PROTO_IGNORE);

using Table = float[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];

ncclTunerConstants_v5_t defaults() {
  ncclTunerConstants_v5_t c;
  nf::tuner::nccl_default_constants(&c);
  return c;
}

// 16 nodes x 8 H100 over NVLink, 8 channels, 50 GB/s of network per GPU (6.25 GB/s a channel).
CommShape h100_16x8() {
  CommShape s;
  s.n_ranks = 128;
  s.n_nodes = 16;
  s.ranks_per_node = 8;
  s.compcap_idx = NCCL_HOPPER_COMPCAP_IDX;
  s.intra_link = NCCL_HW_NVLINK;
  s.intra_bw_gbs = 40.0;
  s.inter_bw_gbs = 50.0 / 8;
  s.n_channels = 8;
  return s;
}

CommShape one_node(int ranks, int compcap, int link) {
  CommShape s;
  s.n_ranks = ranks;
  s.n_nodes = 1;
  s.ranks_per_node = ranks;
  s.compcap_idx = compcap;
  s.intra_link = link;
  s.intra_bw_gbs = 40.0;
  s.inter_bw_gbs = 40.0;
  s.n_channels = 16;
  return s;
}

CommShape one_gpu_per_node(int nodes) {
  CommShape s;
  s.n_ranks = nodes;
  s.n_nodes = nodes;
  s.ranks_per_node = 1;
  s.compcap_idx = NCCL_AMPERE_COMPCAP_IDX;
  s.intra_link = NCCL_HW_PCI;
  s.intra_bw_gbs = 12.0;
  s.inter_bw_gbs = 12.0;
  s.n_channels = 2;
  return s;
}

NcclModel model_of(const CommShape& s, const ncclTunerConstants_v5_t& c = defaults()) {
  NcclModel m;
  nf::tuner::nccl_build_model(c, s, &m);
  return m;
}

struct Costs {
  Table t;
  float at(int a, int p) const { return t[a][p]; }
};

Costs costs(const NcclModel& m, const CommShape& s, int coll, size_t bytes, int pipe_ops = 1) {
  Costs c;
  nf::tuner::nccl_cost_table(m, s, coll, bytes, pipe_ops, c.t);
  return c;
}

Costs costs(const CommShape& s, int coll, size_t bytes, int pipe_ops = 1) {
  return costs(model_of(s), s, coll, bytes, pipe_ops);
}

// What NCCL alone would pick; {-1, -1} when nothing is selectable.
std::pair<int, int> pick(const Costs& c) {
  int a = -2, p = -2;
  nf::tuner::nccl_pick(c.t, &a, &p);
  return {a, p};
}

float best(const Costs& c) {
  const std::pair<int, int> ap = pick(c);
  return c.at(ap.first, ap.second);
}

}  // namespace

TEST_CASE("nccl_default_constants: NCCL 2.28.9 defaults", "[nccl_model]") {
  // Values from ncclTunerConstantsDefaults in src/graph/tuning.cc, tag v2.28.9-1 (identical to the
  // read-only data of the installed libnccl.so.2 2.28.9).
  ncclTunerConstants_v5_t c;
  std::memset(&c, 0xff, sizeof(c));  // NaNs: every member must be written
  nf::tuner::nccl_default_constants(&c);
  CHECK(c.baseLatencies[NCCL_ALGO_TREE][NCCL_PROTO_LL] == 6.8);
  CHECK(c.baseLatencies[NCCL_ALGO_RING][NCCL_PROTO_LL] == 6.6);
  CHECK(c.baseLatencies[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == 8.4);
  CHECK(c.baseLatencies[NCCL_ALGO_PAT][NCCL_PROTO_SIMPLE] == 8.0);
  CHECK(c.baseLatencies[NCCL_ALGO_NVLS][NCCL_PROTO_SIMPLE] == 0.0);
  CHECK(c.hwLatencies[NCCL_HW_NVLINK][NCCL_ALGO_TREE][NCCL_PROTO_LL128] == 1.25);
  CHECK(c.hwLatencies[NCCL_HW_NVLINK][NCCL_ALGO_NVLS][NCCL_PROTO_SIMPLE] == 25.0);
  CHECK(c.hwLatencies[NCCL_HW_PCI][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == 5.7);
  CHECK(c.hwLatencies[NCCL_HW_NET][NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] == 14.0);
  CHECK(c.hwLatencies[NCCL_HW_NET][NCCL_ALGO_COLLNET_DIRECT][NCCL_PROTO_SIMPLE] == 31.0);
  // 2.28.7 had 14 here; 2.28.9 has 20.9.
  CHECK(c.hwLatencies[NCCL_HW_NET][NCCL_ALGO_NVLS_TREE][NCCL_PROTO_SIMPLE] == 20.9);
  CHECK(c.llMaxBws[NCCL_HOPPER_COMPCAP_IDX][NCCL_TUNING_SCALE_1NODE] == 141.0);
  CHECK(c.llMaxBws[NCCL_VOLTA_COMPCAP_IDX][NCCL_TUNING_SCALE_4NODES] == 20.4);
  CHECK(c.llMaxBws[NCCL_BLACKWELL_COMPCAP_IDX][NCCL_TUNING_SCALE_2NODES] == 90.0);
  CHECK(c.perChMaxRingLL128Bws[NCCL_HOPPER_COMPCAP_IDX][NCCL_TUNING_SCALE_4NODES] == 36.7);
  CHECK(c.perChMaxRingLL128Bws[NCCL_BLACKWELL_COMPCAP_IDX][NCCL_TUNING_SCALE_1NODE] == 73.4);
  CHECK(c.perChMaxRingLL128Bws[NCCL_BLACKWELL_COMPCAP_IDX][NCCL_TUNING_SCALE_2NODES] == 34.6);
  CHECK(c.perChMaxTreeLL128Bws[NCCL_BLACKWELL_COMPCAP_IDX][NCCL_TUNING_SCALE_2NODES] == 31.67);
  CHECK(c.perChMaxTreeBws[NCCL_HOPPER_COMPCAP_IDX][NCCL_TUNING_SCALE_2NODES] == 41.4);
  CHECK(c.perChMaxNVLSTreeBws[NCCL_HOPPER_COMPCAP_IDX][NCCL_TUNING_SCALE_1NODE] == 0.0);
  CHECK(c.perChMaxNVLSTreeBws[NCCL_BLACKWELL_COMPCAP_IDX][NCCL_TUNING_SCALE_4NODES] == 43.8);
  // All 144 doubles together (sum taken from the 2.28.9 library).
  const double* all = reinterpret_cast<const double*>(&c);
  double sum = 0;
  for (size_t i = 0; i < sizeof(c) / sizeof(double); ++i) sum += all[i];
  CHECK(sum == Approx(2711.62).epsilon(1e-12));
  nf::tuner::nccl_default_constants(nullptr);  // no crash
}

TEST_CASE("nccl_build_model: hand-computed figures, 16 nodes x 8 H100", "[nccl_model]") {
  const NcclModel m = model_of(h100_16x8());
  const int ar = ncclFuncAllReduce;
  // Ring AllReduce: 254 steps, 30 of them over the network; intra-node steps cost at least the
  // network post overhead (1 us, x3 for Simple). Bus bandwidth is 8 x 6.25 = 50 GB/s, algorithm
  // bandwidth x 128/254.
  CHECK(m.lat[ar][NCCL_ALGO_RING][NCCL_PROTO_LL] == Approx(6.6 + 224 * 1.0 + 30 * 2.7));
  CHECK(m.lat[ar][NCCL_ALGO_RING][NCCL_PROTO_LL128] == Approx(14.0 + 224 * 1.9 + 30 * 4.0));
  CHECK(m.lat[ar][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == Approx(8.4 + 224 * 3.4 + 30 * 14.0));
  CHECK(m.bw[ar][NCCL_ALGO_RING][NCCL_PROTO_LL] == Approx(20.4 * 128 / 254));  // llMaxBws cap
  CHECK(m.bw[ar][NCCL_ALGO_RING][NCCL_PROTO_LL128] == Approx(50 * 0.92 * 128 / 254));
  CHECK(m.bw[ar][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == Approx(50.0 * 128 / 254));
  // Tree: 7 hops in the node and log2(16) = 4 over the network, each way; bandwidth x0.92, then
  // /3.8 for LL and x120/128 for LL128, halved.
  CHECK(m.lat[ar][NCCL_ALGO_TREE][NCCL_PROTO_LL] == Approx(6.8 + 2 * (7 * 0.6 + 4 * 5.0)));
  CHECK(m.lat[ar][NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] == Approx(8.4 + 2 * (7 * 4.0 + 4 * 14.0)));
  CHECK(m.bw[ar][NCCL_ALGO_TREE][NCCL_PROTO_LL] == Approx(46.0 / 3.8 / 2));
  CHECK(m.bw[ar][NCCL_ALGO_TREE][NCCL_PROTO_LL128] == Approx(46.0 * 120 / 128 / 2));
  CHECK(m.bw[ar][NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] == Approx(23.0));
  // AllGather ring: 127 steps, 15 over the network, x128/127.
  const int ag = ncclFuncAllGather;
  CHECK(m.lat[ag][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == Approx(8.4 + 112 * 3.4 + 15 * 14.0));
  CHECK(m.bw[ag][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == Approx(50.0 * 128 / 127));
  // Broadcast: one hop (same channels), no bus/algorithm conversion.
  CHECK(m.lat[ncclFuncBroadcast][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == Approx(8.4 + 14.0));
  CHECK(m.bw[ncclFuncBroadcast][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == Approx(50.0));

  // The cost of one entry: latency (x1.4 past the ring plateau) + bytes / (1000 x bandwidth);
  // Tree AllReduce bandwidth scaled by the correction factor (Simple, 64 KiB: 0.6).
  const Costs c = costs(h100_16x8(), ar, 64 * KiB);
  CHECK(c.at(NCCL_ALGO_RING, NCCL_PROTO_SIMPLE) ==
        Approx(1190.0 * 1.4 + 65536 / (1000 * 50.0 * 128 / 254)).epsilon(1e-5));
  CHECK(c.at(NCCL_ALGO_TREE, NCCL_PROTO_SIMPLE) ==
        Approx(176.4 + 65536 / (1000 * 23.0 * 0.6)).epsilon(1e-5));
  // Below 64 bytes per rank and channel the plateau does not apply.
  CHECK(costs(h100_16x8(), ar, 32 * KiB).at(NCCL_ALGO_RING, NCCL_PROTO_SIMPLE) ==
        Approx(1190.0 + 32768 / (1000 * 50.0 * 128 / 254)).epsilon(1e-5));
}

TEST_CASE("nccl_build_model: one GPU per node, two nodes (g5.8xlarge-like)", "[nccl_model]") {
  // Up to two nodes NCCL starts from the graph's intra-node speed; with one GPU per node the
  // network latency is the tree's, the hardware row is PCI and the tree pattern costs x0.85.
  CommShape s = one_gpu_per_node(2);
  const NcclModel m = model_of(s);
  const int ar = ncclFuncAllReduce;
  CHECK(m.lat[ar][NCCL_ALGO_RING][NCCL_PROTO_LL] == Approx(6.6 + 2 * 5.0));
  CHECK(m.lat[ar][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == Approx(8.4 + 2 * 14.0));
  CHECK(m.lat[ar][NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] == Approx(8.4 + 2 * 14.0));
  CHECK(m.bw[ar][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == Approx(24.0 * 2 / 2));
  CHECK(m.bw[ar][NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] == Approx(24.0 * 0.92 * 0.85 / 2));
  // LL128 stays enabled (a lone GPU's path type is LOC).
  CHECK(m.bw[ar][NCCL_ALGO_RING][NCCL_PROTO_LL128] > 0);
  // inter_bw_gbs does not enter a two-node ring.
  s.inter_bw_gbs = 1.0;
  CHECK(model_of(s).bw[ar][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == Approx(24.0));
}

TEST_CASE("nccl_cost_table: availability rules", "[nccl_model]") {
  const CommShape multi = h100_16x8();

  SECTION("Tree is AllReduce-only; Broadcast and Reduce are ring-only") {
    for (int coll : {ncclFuncBroadcast, ncclFuncReduce, ncclFuncAllGather, ncclFuncReduceScatter})
      for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p)
        CHECK(costs(multi, coll, MiB).at(NCCL_ALGO_TREE, p) == kIgnore);
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p)
      CHECK(costs(multi, ncclFuncAllReduce, MiB).at(NCCL_ALGO_TREE, p) > 0);
    for (int coll : {ncclFuncBroadcast, ncclFuncReduce}) {
      const Costs c = costs(multi, coll, MiB);
      for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p)
          CHECK((c.at(a, p) >= 0) == (a == NCCL_ALGO_RING));
    }
  }

  SECTION("PAT: AllGather/ReduceScatter, Simple, one rank per node") {
    const CommShape s = one_gpu_per_node(4);
    for (int coll : {ncclFuncAllGather, ncclFuncReduceScatter}) {
      const Costs c = costs(s, coll, MiB);
      CHECK(c.at(NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE) > 0);
      CHECK(c.at(NCCL_ALGO_PAT, NCCL_PROTO_LL) == kIgnore);
      CHECK(c.at(NCCL_ALGO_PAT, NCCL_PROTO_LL128) == kIgnore);
      // 8 + log2(4) x 14/3.5 + 4 x 2.8 us; bandwidth 2 x 12 x 0.75 with no bus conversion.
      const NcclModel m = model_of(s);
      CHECK(m.lat[coll][NCCL_ALGO_PAT][NCCL_PROTO_SIMPLE] == Approx(8.0 + 2 * 4.0 + 11.2));
      CHECK(m.bw[coll][NCCL_ALGO_PAT][NCCL_PROTO_SIMPLE] == Approx(18.0));
    }
    CHECK(costs(s, ncclFuncAllReduce, MiB).at(NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE) == kIgnore);
    CHECK(costs(s, ncclFuncBroadcast, MiB).at(NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE) == kIgnore);
    CHECK(costs(multi, ncclFuncAllGather, MiB).at(NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE) == kIgnore);
  }

  SECTION("NVLS needs s.nvls, Simple, Hopper or later; NVLS Tree needs several nodes") {
    CommShape s = one_node(8, NCCL_HOPPER_COMPCAP_IDX, NCCL_HW_NVLINK);
    for (int a : {NCCL_ALGO_NVLS, NCCL_ALGO_NVLS_TREE})
      for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p)
        CHECK(costs(s, ncclFuncAllReduce, MiB).at(a, p) == kIgnore);
    s.nvls = true;
    Costs c = costs(s, ncclFuncAllReduce, MiB);
    CHECK(c.at(NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE) > 0);
    CHECK(c.at(NCCL_ALGO_NVLS, NCCL_PROTO_LL) == kIgnore);
    CHECK(c.at(NCCL_ALGO_NVLS_TREE, NCCL_PROTO_SIMPLE) == kIgnore);
    // NVLS latency replaces the base: 25 us on NVLink. Bandwidth: 40 x 0.85 x 15/16 x 2 per
    // channel, x16 channels, x8/14.
    const NcclModel m = model_of(s);
    CHECK(m.lat[ncclFuncAllReduce][NCCL_ALGO_NVLS][NCCL_PROTO_SIMPLE] == Approx(25.0));
    CHECK(m.bw[ncclFuncAllReduce][NCCL_ALGO_NVLS][NCCL_PROTO_SIMPLE] ==
          Approx(40 * 0.85 * 15 / 16 * 2 * 16 * 8 / 14));
    CHECK(costs(s, ncclFuncAllGather, MiB).at(NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE) > 0);
    // Ampere has no NVLS bandwidth.
    s.compcap_idx = NCCL_AMPERE_COMPCAP_IDX;
    CHECK(costs(s, ncclFuncAllReduce, MiB).at(NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE) == kIgnore);
    // Several nodes: NVLS Tree is there, NVLS itself needs CollNet.
    CommShape mn = multi;
    mn.nvls = true;
    c = costs(mn, ncclFuncAllReduce, MiB);
    CHECK(c.at(NCCL_ALGO_NVLS_TREE, NCCL_PROTO_SIMPLE) > 0);
    CHECK(c.at(NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE) == kIgnore);
    mn.collnet = true;
    CHECK(costs(mn, ncclFuncAllReduce, MiB).at(NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE) > 0);
  }

  SECTION("CollNet needs s.collnet, Simple, NVLink and at most 8 local ranks") {
    CommShape s = multi;
    for (int a : {NCCL_ALGO_COLLNET_DIRECT, NCCL_ALGO_COLLNET_CHAIN})
      for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p)
        CHECK(costs(s, ncclFuncAllReduce, MiB).at(a, p) == kIgnore);
    s.collnet = true;
    Costs c = costs(s, ncclFuncAllReduce, MiB);
    CHECK(c.at(NCCL_ALGO_COLLNET_DIRECT, NCCL_PROTO_SIMPLE) > 0);
    CHECK(c.at(NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_SIMPLE) > 0);
    CHECK(c.at(NCCL_ALGO_COLLNET_DIRECT, NCCL_PROTO_LL) == kIgnore);
    CHECK(c.at(NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_LL128) == kIgnore);
    CHECK(costs(s, ncclFuncAllGather, MiB).at(NCCL_ALGO_COLLNET_DIRECT, NCCL_PROTO_SIMPLE) > 0);
    CHECK(costs(s, ncclFuncAllGather, MiB).at(NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_SIMPLE) ==
          kIgnore);
    // Chain: 2 x 7 x 2.8 + 30 us.
    CHECK(model_of(s).lat[ncclFuncAllReduce][NCCL_ALGO_COLLNET_CHAIN][NCCL_PROTO_SIMPLE] ==
          Approx(2 * 7 * 2.8 + 30.0));
    s.ranks_per_node = 16;
    s.n_ranks = 256;
    c = costs(s, ncclFuncAllReduce, MiB);
    CHECK(c.at(NCCL_ALGO_COLLNET_DIRECT, NCCL_PROTO_SIMPLE) == kIgnore);
    CHECK(c.at(NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_SIMPLE) == kIgnore);
  }

  SECTION("LL128 only with NVLink between local GPUs (or one GPU per node)") {
    CommShape s = one_node(8, NCCL_AMPERE_COMPCAP_IDX, NCCL_HW_NVLINK);
    CHECK(costs(s, ncclFuncAllReduce, MiB).at(NCCL_ALGO_RING, NCCL_PROTO_LL128) > 0);
    s.intra_link = NCCL_HW_PCI;
    const Costs c = costs(s, ncclFuncAllReduce, MiB);
    CHECK(c.at(NCCL_ALGO_RING, NCCL_PROTO_LL128) == kIgnore);
    CHECK(c.at(NCCL_ALGO_TREE, NCCL_PROTO_LL128) == kIgnore);
    CHECK(c.at(NCCL_ALGO_RING, NCCL_PROTO_LL) > 0);
    // The PCI row of hardware latencies: 6.6 + 14 x 1.0 us for a ring AllReduce LL.
    CHECK(model_of(s).lat[ncclFuncAllReduce][NCCL_ALGO_RING][NCCL_PROTO_LL] ==
          Approx(6.6 + 14 * 1.0));
  }

  SECTION("a single rank: Ring/Simple at 0, nothing else") {
    CommShape s = one_node(1, NCCL_HOPPER_COMPCAP_IDX, NCCL_HW_NVLINK);
    s.nvls = s.collnet = true;
    for (int coll = 0; coll < 5; ++coll) {
      const Costs c = costs(s, coll, MiB);
      for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p)
          CHECK(c.at(a, p) == (a == NCCL_ALGO_RING && p == NCCL_PROTO_SIMPLE ? 0.0f : kIgnore));
      CHECK(pick(c) == std::make_pair(NCCL_ALGO_RING, NCCL_PROTO_SIMPLE));
    }
  }

  SECTION("a collective the tuner never sees: all ignored") {
    const Costs c = costs(multi, ncclFuncSendRecv, MiB);
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
      for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) CHECK(c.at(a, p) == kIgnore);
  }
}

TEST_CASE("nccl_cost_table: numPipeOps", "[nccl_model]") {
  // Rings pay the latency per pipelined operation; the others once per batch of 10.
  const CommShape s = h100_16x8();
  const NcclModel m = model_of(s);
  const Costs one = costs(m, s, ncclFuncAllReduce, 4 * KiB, 1);
  const float ring_lat = static_cast<float>(m.lat[ncclFuncAllReduce][NCCL_ALGO_RING][0]);
  const float tree_lat = static_cast<float>(m.lat[ncclFuncAllReduce][NCCL_ALGO_TREE][0]);
  CHECK(costs(m, s, ncclFuncAllReduce, 4 * KiB, 3).at(NCCL_ALGO_RING, NCCL_PROTO_LL) ==
        Approx(one.at(NCCL_ALGO_RING, NCCL_PROTO_LL) + 2 * ring_lat));
  CHECK(costs(m, s, ncclFuncAllReduce, 4 * KiB, 10).at(NCCL_ALGO_TREE, NCCL_PROTO_LL) ==
        Approx(one.at(NCCL_ALGO_TREE, NCCL_PROTO_LL)));
  CHECK(costs(m, s, ncclFuncAllReduce, 4 * KiB, 11).at(NCCL_ALGO_TREE, NCCL_PROTO_LL) ==
        Approx(one.at(NCCL_ALGO_TREE, NCCL_PROTO_LL) + tree_lat));
  // 0 is not a real count: treated as 1.
  CHECK(costs(m, s, ncclFuncAllReduce, 4 * KiB, 0).at(NCCL_ALGO_RING, NCCL_PROTO_LL) ==
        one.at(NCCL_ALGO_RING, NCCL_PROTO_LL));
}

TEST_CASE("nccl model: NCCL's published behaviour on 16 nodes x 8 H100", "[nccl_model]") {
  const CommShape s = h100_16x8();
  const NcclModel m = model_of(s);

  SECTION("small AllReduce: a low-latency protocol") {
    for (size_t n = 8; n <= 64 * KiB; n *= 2) {
      const int proto = pick(costs(m, s, ncclFuncAllReduce, n)).second;
      INFO(n << " bytes");
      CHECK((proto == NCCL_PROTO_LL || proto == NCCL_PROTO_LL128));
    }
    CHECK(pick(costs(m, s, ncclFuncAllReduce, 8)) == std::make_pair(NCCL_ALGO_TREE, NCCL_PROTO_LL));
  }

  SECTION("large AllReduce: Simple") {
    // With 2.28.9's figures this shape switches from Ring/LL128 to Ring/Simple between 256 MiB
    // (12.14 ms vs 12.32 ms) and 512 MiB.
    CHECK(pick(costs(m, s, ncclFuncAllReduce, 256 * MiB)) ==
          std::make_pair(NCCL_ALGO_RING, NCCL_PROTO_LL128));
    for (size_t n = 512 * MiB; n <= 4 * GiB; n *= 2) {
      INFO(n << " bytes");
      CHECK(pick(costs(m, s, ncclFuncAllReduce, n)) ==
            std::make_pair(NCCL_ALGO_RING, NCCL_PROTO_SIMPLE));
    }
  }

  SECTION("every available pair's cost grows with the size") {
    for (int coll = 0; coll < 5; ++coll) {
      Costs prev = costs(m, s, coll, 8);
      for (size_t n = 16; n <= 4 * GiB; n *= 2) {
        const Costs cur = costs(m, s, coll, n);
        for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
          for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) {
            INFO("coll " << coll << " algo " << a << " proto " << p << " " << n << " bytes");
            CHECK((cur.at(a, p) >= 0) == (prev.at(a, p) >= 0));
            if (cur.at(a, p) >= 0) CHECK(cur.at(a, p) > prev.at(a, p));
          }
        prev = cur;
      }
    }
  }

  SECTION("a slower network latency costs small messages, hardly large ones") {
    ncclTunerConstants_v5_t slow = defaults();
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
      for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) slow.hwLatencies[NCCL_HW_NET][a][p] += 10.0;
    const NcclModel ms = model_of(s, slow);
    for (int coll = 0; coll < 5; ++coll) {
      const Costs small0 = costs(m, s, coll, 8), small1 = costs(ms, s, coll, 8);
      const Costs large0 = costs(m, s, coll, 4 * GiB), large1 = costs(ms, s, coll, 4 * GiB);
      int checked = 0;
      for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) {
          if (small0.at(a, p) < 0) continue;
          INFO("coll " << coll << " algo " << a << " proto " << p);
          CHECK(small1.at(a, p) - small0.at(a, p) > 9.99f);  // at least one network hop
          CHECK(large1.at(a, p) / large0.at(a, p) == Approx(1.0).epsilon(0.02));
          ++checked;
        }
      CHECK(checked >= 3);
    }
  }

  SECTION("half the network bandwidth doubles large-message time") {
    CommShape half = s;
    half.inter_bw_gbs /= 2;
    const NcclModel mh = model_of(half);
    for (int coll = 0; coll < 5; ++coll) {
      INFO("coll " << coll);
      const double ratio = best(costs(mh, half, coll, 4 * GiB)) / best(costs(m, s, coll, 4 * GiB));
      CHECK(ratio > 1.9);
      CHECK(ratio <= 2.0);
    }
  }
}

TEST_CASE("nccl_pick: algorithm-major scan, smallest non-negative entry", "[nccl_model]") {
  Table t;
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) t[a][p] = kIgnore;
  int a = 0, p = 0;
  CHECK_FALSE(nf::tuner::nccl_pick(t, &a, &p));
  CHECK(a == NCCL_ALGO_UNDEF);
  CHECK(p == NCCL_PROTO_UNDEF);
  t[NCCL_ALGO_PAT][NCCL_PROTO_SIMPLE] = 5.0f;
  t[NCCL_ALGO_RING][NCCL_PROTO_LL] = 7.0f;
  t[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] = -3.0f;  // any negative is out
  REQUIRE(nf::tuner::nccl_pick(t, &a, &p));
  CHECK(a == NCCL_ALGO_PAT);
  CHECK(p == NCCL_PROTO_SIMPLE);
  t[NCCL_ALGO_NVLS][NCCL_PROTO_SIMPLE] = 5.0f;  // a tie: the first in algorithm-major order stays
  t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = 5.0f;
  REQUIRE(nf::tuner::nccl_pick(t, &a, &p));
  CHECK(a == NCCL_ALGO_RING);
  CHECK(p == NCCL_PROTO_SIMPLE);
  t[NCCL_ALGO_COLLNET_CHAIN][NCCL_PROTO_LL] = 0.0f;  // 0 selects
  REQUIRE(nf::tuner::nccl_pick(t, &a, &p));
  CHECK(a == NCCL_ALGO_COLLNET_CHAIN);
  // 2.28.9 starts its search at 3.6e9 us: nothing at or above it is selectable.
  for (int x = 0; x < NCCL_NUM_ALGORITHMS; ++x)
    for (int y = 0; y < NCCL_NUM_PROTOCOLS; ++y) t[x][y] = 4e9f;
  CHECK_FALSE(nf::tuner::nccl_pick(t, &a, &p));
}

TEST_CASE("bus_bandwidth: nccl-tests' busBw", "[nccl_model]") {
  // The log's 4 MiB row: 1369.3 us, busbw 3.06 GB/s.
  CHECK(nf::tuner::bus_bandwidth(ncclFuncAllReduce, 2, 4194304, 1369.3) ==
        Approx(3.0631).epsilon(1e-4));
  CHECK(nf::tuner::bus_bandwidth(ncclFuncAllReduce, 8, 1000000, 1.0) == Approx(1000.0 * 14 / 8));
  CHECK(nf::tuner::bus_bandwidth(ncclFuncAllGather, 8, 1000000, 1.0) == Approx(1000.0 * 7 / 8));
  CHECK(nf::tuner::bus_bandwidth(ncclFuncReduceScatter, 4, 1000000, 2.0) == Approx(500.0 * 3 / 4));
  CHECK(nf::tuner::bus_bandwidth(ncclFuncBroadcast, 8, 1000000, 1.0) == Approx(1000.0));
  CHECK(nf::tuner::bus_bandwidth(ncclFuncReduce, 8, 1000000, 1.0) == Approx(1000.0));
  CHECK(nf::tuner::bus_bandwidth(ncclFuncAllReduce, 2, 4194304, 0.0) == 0.0);
  CHECK(nf::tuner::bus_bandwidth(ncclFuncSendRecv, 2, 4194304, 1.0) == 0.0);

  // Every row of a real log: out-of-place and in-place busbw, printed to 2 decimals from times
  // printed to 4-5 significant digits.
  std::ifstream in(NF_NCCL_TESTS_DATA "/g5.8xlarge-2nodes-efa-nogdr-all_reduce.log");
  REQUIRE(in.good());
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    std::istringstream f(colon == std::string::npos ? line : line.substr(colon + 1));
    uint64_t size = 0, count = 0;
    std::string type, op;
    long root = 0;
    double t1, alg1, bus1, t2, alg2, bus2;
    long wrong1, wrong2;
    if (!(f >> size >> count >> type >> op >> root >> t1 >> alg1 >> bus1 >> wrong1 >> t2 >> alg2 >>
          bus2 >> wrong2))
      continue;
    INFO(line);
    CHECK(nf::tuner::bus_bandwidth(ncclFuncAllReduce, 2, size, t1) ==
          Approx(bus1).margin(0.005 + 1e-3 * bus1));
    CHECK(nf::tuner::bus_bandwidth(ncclFuncAllReduce, 2, size, t2) ==
          Approx(bus2).margin(0.005 + 1e-3 * bus2));
    ++rows;
  }
  CHECK(rows == 30);
}

TEST_CASE("nccl model: deterministic and safe to share between threads", "[nccl_model]") {
  const CommShape s = h100_16x8();
  const NcclModel ref = model_of(s);
  std::vector<NcclModel> out(4);
  std::vector<std::thread> threads;
  for (NcclModel& m : out) threads.emplace_back([&s, &m] { m = model_of(s); });
  for (std::thread& t : threads) t.join();
  for (const NcclModel& m : out) CHECK(std::memcmp(&m, &ref, sizeof(ref)) == 0);

  // Nonsense shapes are clamped, not undefined behaviour.
  CommShape bad;
  bad.n_ranks = 4;
  bad.n_nodes = 0;
  bad.ranks_per_node = -3;
  bad.compcap_idx = 17;
  bad.n_channels = 0;
  bad.intra_bw_gbs = -1.0;
  const Costs c = costs(bad, ncclFuncAllReduce, MiB);
  CHECK_FALSE(nf::tuner::nccl_pick(c.t, nullptr, nullptr));  // no bandwidth anywhere
}
