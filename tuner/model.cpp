// The tuner's model: from facts (platform row, the plugin's devices, the communicator) to NCCL's
// model inputs, corrected constants, and precomputed size bands.
#include "tuner/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "platform/platform.h"

namespace nf {
namespace tuner {
namespace {

struct Gpu {
  const char* name;
  int compcap_idx;
  bool nvlink;       // SXM parts in NVLink/NVSwitch boxes
  double intra_gbs;  // GB/s per channel between GPUs of a node (NCCL's graph bwIntra, about)
};

// The GPUs of the platform table. Intra-node per-channel figures are of the order NCCL's graph
// search settles on for these systems; only their order of magnitude matters for choices that
// cross the network.
const Gpu kGpus[] = {
    {"V100", NCCL_VOLTA_COMPCAP_IDX, true, 20.0},
    {"A100", NCCL_AMPERE_COMPCAP_IDX, true, 20.0},
    {"A10G", NCCL_AMPERE_COMPCAP_IDX, false, 12.0},
    {"L4", NCCL_AMPERE_COMPCAP_IDX, false, 12.0},
    {"L40S", NCCL_AMPERE_COMPCAP_IDX, false, 12.0},
    {"H100", NCCL_HOPPER_COMPCAP_IDX, true, 40.0},
    {"H200", NCCL_HOPPER_COMPCAP_IDX, true, 40.0},
    {"B200", NCCL_BLACKWELL_COMPCAP_IDX, true, 40.0},
};

const Gpu* find_gpu(const std::string& name) {
  for (const Gpu& g : kGpus)
    if (name == g.name) return &g;
  return nullptr;
}

uint8_t pair_id(int a, int p) { return static_cast<uint8_t>(a * kNumProtos + p); }

}  // namespace

double default_net_latency_us(const std::string& provider, bool gdr) {
  // EFA: the g5.8xlarge log in tests/tuner/data takes 67 µs for an 8-byte all-reduce over two
  // nodes (two network steps plus NCCL's base latency): about 25 µs a step without GPUDirect,
  // where the proxy also copies through host memory. With GPUDirect, 20.
  if (provider_is_efa(provider)) return gdr ? 20.0 : 25.0;
  // TCP through the kernel on a data-centre network: a few tens of µs per message.
  if (provider.find("tcp") != std::string::npos || provider.find("sockets") != std::string::npos)
    return 40.0;
  if (provider.find("verbs") != std::string::npos) return 5.0;
  return 0.0;  // shm and the unknown: no opinion
}

void facts_from_platform(const Platform& row, Facts* f) {
  f->accelerator = row.accelerator_model;
  f->accelerators = row.accelerators > 0 ? row.accelerators : 0;
  if (row.efa_count > 0 && row.efa_gbps > 0) {
    f->net_known = true;
    f->net_source = "platform " + row.name;
    f->provider = "efa";
    f->node_nics = row.efa_count;
    f->node_net_gbps = static_cast<double>(row.efa_count) * row.efa_gbps;
    f->gdr = row.gdr_expected == GdrExpect::kYes;
    // Not the row's latency_us: that is the reference plugin's model figure (75 µs on p5), three
    // times what a step over EFA measures.
    f->net_latency_us = default_net_latency_us("efa", f->gdr);
  }
}

CommShape shape_from_facts(const Facts& f) {
  CommShape s;
  s.n_ranks = std::max(1, f.n_ranks);
  s.n_nodes = std::max(1, f.n_nodes);
  s.ranks_per_node = std::max(1, f.ranks_per_node);
  const Gpu* g = find_gpu(f.accelerator);
  s.compcap_idx = g != nullptr ? g->compcap_idx : NCCL_HOPPER_COMPCAP_IDX;
  const bool nvlink = g != nullptr ? g->nvlink : true;
  s.intra_link = nvlink ? NCCL_HW_NVLINK : NCCL_HW_PCI;
  s.intra_bw_gbs = g != nullptr ? g->intra_gbs : 20.0;
  // NICs per rank decide how many channels NCCL spreads over the network: about 8 per NIC on
  // NVLink systems (p5.48xlarge: 4 NICs per GPU, 32 channels), 2 per NIC over PCIe.
  const double nics_per_rank =
      f.net_known && f.node_nics > 0 ? static_cast<double>(f.node_nics) / s.ranks_per_node : 1.0;
  const int per_nic = nvlink ? 8 : 2;
  s.n_channels = static_cast<int>(
      std::min(32.0, std::max(2.0, std::ceil(per_nic * std::max(1.0, nics_per_rank)))));
  // The network share of one rank, spread over the channels.
  const double rank_net_gbs =
      f.net_known ? f.node_net_gbps / 8.0 / std::max(1, s.ranks_per_node) : 12.5;
  s.inter_bw_gbs = rank_net_gbs / s.n_channels;
  // With one GPU per node every ring and tree link leaves the node: NCCL's graph then finds the
  // network's bandwidth, not NVLink's or PCIe's.
  if (s.ranks_per_node == 1 && s.n_nodes > 1)
    s.intra_bw_gbs = std::min(s.intra_bw_gbs, s.inter_bw_gbs);
  s.nvls = nvlink && s.compcap_idx >= NCCL_HOPPER_COMPCAP_IDX && s.ranks_per_node >= 2 &&
           f.accelerators >= 8;
  s.collnet = false;
  return s;
}

std::vector<ConstantChange> correct_constants(const Facts& f, const CommShape& s,
                                              ncclTunerConstants_v5_t* c) {
  std::vector<ConstantChange> out;
  if (!f.net_known || s.n_nodes < 2) return out;
  char what[96];
  // Latency: NCCL's smallest network step (ring, LL) stands for the wire; where the real hop is
  // slower, every network step of every pair pays the difference.
  const double assumed = c->hwLatencies[NCCL_HW_NET][NCCL_ALGO_RING][NCCL_PROTO_LL];
  const double delta = f.net_latency_us - assumed;
  if (delta > 0.05) {
    for (int a = 0; a < kNumAlgos; ++a)
      for (int p = 0; p < kNumProtos; ++p) {
        double& v = c->hwLatencies[NCCL_HW_NET][a][p];
        if (v <= 0) continue;  // pairs NCCL never runs over the network keep their zero
        std::snprintf(what, sizeof what, "hwLatencies[NET][%s][%s]", algo_name(a), proto_name(p));
        out.push_back({what, v, v + delta});
        v += delta;
      }
  }
  // Bandwidth: no channel, and no LL transfer, can move more than the rank's share of the
  // network. NCCL's caps are written for InfiniBand-class links; on slower networks they
  // overstate the low-latency protocols.
  const int cc = s.compcap_idx, sc = s.n_nodes <= 2 ? s.n_nodes - 1 : 2;
  const double rank_net_gbs = f.node_net_gbps / 8.0 / std::max(1, s.ranks_per_node);
  struct Cap {
    const char* name;
    double* v;
  } caps[] = {
      {"llMaxBws", &c->llMaxBws[cc][sc]},
      {"perChMaxRingLL128Bws", &c->perChMaxRingLL128Bws[cc][sc]},
      {"perChMaxTreeLL128Bws", &c->perChMaxTreeLL128Bws[cc][sc]},
      {"perChMaxTreeBws", &c->perChMaxTreeBws[cc][sc]},
  };
  for (const Cap& k : caps) {
    if (*k.v > rank_net_gbs && rank_net_gbs > 0) {
      std::snprintf(what, sizeof what, "%s[%d][%d]", k.name, cc, sc);
      out.push_back({what, *k.v, rank_net_gbs});
      *k.v = rank_net_gbs;
    }
  }
  return out;
}

void build_decisions(const NcclModel& m, const CommShape& s, Decisions* d) {
  std::vector<uint64_t> sizes;
  sizes.push_back(0);
  for (int k = 0; k <= 34; ++k)
    for (int q = 0; q < 4; ++q) {
      const uint64_t v = (1ull << k) + ((1ull << k) * static_cast<uint64_t>(q)) / 4;
      if (v > (16ull << 30)) break;
      if (v > sizes.back()) sizes.push_back(v);
    }
  for (int coll = 0; coll < kNumColls; ++coll) {
    std::vector<Band>& bands = d->bands[coll];
    bands.clear();
    for (uint64_t size : sizes) {
      float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
      nccl_cost_table(m, s, coll, static_cast<size_t>(size), 1, table);
      Band b;
      b.lo = size;
      uint8_t order[kNumAlgos * kNumProtos];
      int n = 0;
      for (int a = 0; a < kNumAlgos; ++a)
        for (int p = 0; p < kNumProtos; ++p)
          if (table[a][p] >= 0) order[n++] = pair_id(a, p);
      // Cheapest first; ties keep algorithm-major order, as NCCL's own scan does.
      std::stable_sort(order, order + n, [&](uint8_t x, uint8_t y) {
        return table[x / kNumProtos][x % kNumProtos] < table[y / kNumProtos][y % kNumProtos];
      });
      b.n = static_cast<uint8_t>(n);
      for (int i = 0; i < n; ++i) {
        b.pair[i] = order[i];
        b.cost_us[i] = table[order[i] / kNumProtos][order[i] % kNumProtos];
      }
      if (!bands.empty()) {
        const Band& prev = bands.back();
        if (prev.n == b.n && std::equal(prev.pair, prev.pair + prev.n, b.pair)) continue;
      }
      bands.push_back(b);
    }
  }
}

const Band& band_for(const Decisions& d, int coll, uint64_t n_bytes) {
  const std::vector<Band>& b = d.bands[coll];
  // The last band whose lo <= n_bytes (bands[0].lo == 0, so there is one).
  size_t lo = 0, hi = b.size();
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    if (b[mid].lo <= n_bytes)
      lo = mid;
    else
      hi = mid;
  }
  return b[lo];
}

bool model_pick(const Decisions& d, int coll, uint64_t n_bytes, int* algo, int* proto) {
  if (coll < 0 || coll >= kNumColls || d.bands[coll].empty()) return false;
  const Band& b = band_for(d, coll, n_bytes);
  if (b.n == 0) return false;
  *algo = b.pair[0] / kNumProtos;
  *proto = b.pair[0] % kNumProtos;
  return true;
}

}  // namespace tuner
}  // namespace nf
