// NCCL's own cost model: the default tuning constants, the per-communicator latency/bandwidth
// model (ncclTopoTuneModel) and the per-call cost table and selection (enqueue.cc).
//
// Where the figures come from:
// - src/graph/tuning.cc at NVIDIA/nccl tag v2.28.9-1 (commit dbc86fd0): the default constants,
//   ncclTopoTuneModel, the tree correction factors and ncclTopoGetAlgoTime. All 144 doubles of
//   the default constants were also compared with the read-only data of the installed
//   libnccl.so.2 (2.28.9+cuda13.0): identical.
// - src/enqueue.cc (updateCollCostTable, topoGetAlgoInfo, ncclPrepareTasks), src/include/device.h
//   and src/graph/search.cc at v2.28.7-1 (commit ae7aed19): no 2.28.9 copy of those was at hand.
//   What we use from them matches nccl-plugin-abi.md §6.4, which was written against 2.28.9.
//
// Deliberate simplifications (CommShape is all we know; NCCL has its topology graphs):
// - bwIntra, bwInter and nChannels are inputs, and one "graph" serves every algorithm. NCCL
//   searches one graph per algorithm (NVLS's usually has other channel counts), and uses the
//   communicator's channel count in the ring plateau rule; we use n_channels everywhere.
// - On one node NVLS's "network" bandwidth is taken as 2 x intra_bw_gbs: with no network to limit
//   it, NCCL's search raises the NVLS graph's bwInter toward twice its bwIntra.
// - Graph path types: the GPU-to-NIC path is assumed close enough for LL128 (<= PXB; Hopper and
//   later accept up to PXN), all GPUs have the same compute capability, and the CUDA 11.8 H100
//   two-rank exception is ignored. Between local GPUs: NVLink, or a single GPU per node (path LOC),
//   allows LL128; PCI does not. A single GPU per node also means PCI hardware latencies and the
//   plain TREE pattern (Tree bandwidth x0.85), as the search makes it; otherwise a balanced tree.
// - The ring search keeps "same channels" (its first try), so Broadcast/Reduce pay one hop of
//   latency. Graph latencyInter (a latency the net plugin may report) is 0.
// - CPU: x86 Intel (1 us network overhead per ring step, x3 for Simple; the non-AMD llMaxBws row
//   for multi-node). NCCL uses 2 us and the AMD row on AMD hosts, and swaps a latency on POWER.
// - NVSwitch presence (needed by CollNet Direct) is taken as intra_link == NVLINK.
// - collnet == true means NCCL_COLLNET_ENABLE, a plugin that supports the operation and data type
//   (iallgather/ireducescatter included) and one CollNet head per local GPU. nvls == true means
//   the NVLS reduction supports the operation and data type.
// - Not modelled: NCCL_ALGO/NCCL_PROTO/NCCL_NET_OVERHEAD and other environment overrides, the FP8
//   ring penalty (x1024 above 8 ranks), PAT ReduceScatter with PreMulSum/SumPostDiv (excluded by
//   NCCL), net devices other than host memory (which disable PAT).
// - Arithmetic is in double where NCCL uses float (relative differences ~1e-7).
#include "tuner/nccl_model.h"

#include <algorithm>
#include <cstdint>

namespace nf {
namespace tuner {
namespace {

constexpr int kColls = 5;  // ncclFuncBroadcast..ncclFuncAllReduce

// The 2.28.9 defaults, one table per member, in NCCL's index order.
constexpr ncclTunerConstants_v5_t kDefaults = {
    // baseLatencies[algo] = {LL, LL128, Simple}, us
    {
        {6.8, 14.0, 8.4},  // tree
        {6.6, 14.0, 8.4},  // ring
        {0.0, 0.0, 0.0},   // collnet direct
        {0.0, 0.0, 0.0},   // collnet chain
        {0.0, 0.0, 0.0},   // nvls
        {0.0, 0.0, 0.0},   // nvls tree
        {8.0, 8.0, 8.0},   // pat
    },
    // hwLatencies[link][algo] = {LL, LL128, Simple}, us
    {
        {
            // NVLink
            {0.6, 1.25, 4.0},  // tree
            {0.6, 1.9, 3.4},   // ring
            {0.0, 0.0, 3.7},   // collnet direct
            {0.0, 0.0, 2.8},   // collnet chain
            {0.0, 0.0, 25.0},  // nvls
            {0.0, 0.0, 25.0},  // nvls tree
            {0.0, 0.0, 4.0},   // pat
        },
        {
            // PCI
            {1.0, 1.9, 4.0},  // tree
            {1.0, 2.5, 5.7},  // ring
            {0.0, 0.0, 3.7},  // collnet direct
            {0.0, 0.0, 2.8},  // collnet chain
            {0.0, 0.0, 0.0},  // nvls
            {0.0, 0.0, 0.0},  // nvls tree
            {0.0, 0.0, 4.0},  // pat
        },
        {
            // network
            {5.0, 8.5, 14.0},  // tree
            {2.7, 4.0, 14.0},  // ring
            {0.0, 0.0, 31.0},  // collnet direct
            {0.0, 0.0, 30.0},  // collnet chain
            {0.0, 0.0, 18.0},  // nvls
            {0.0, 0.0, 20.9},  // nvls tree
            {0.0, 0.0, 14.0},  // pat
        },
    },
    // llMaxBws[row][scale], GB/s. One node: the row is the GPU generation; several nodes: row 0
    // for Intel CPUs, row 1 for AMD (NCCL's own labels).
    {
        {39.0, 39.0, 20.4},
        {87.7, 22.5, 19.0},
        {141.0, 45.0, 35.0},
        {282.0, 90.0, 70.0},
    },
    // perChMaxRingLL128Bws[compcap][scale], GB/s per channel
    {
        {20.0, 20.0, 20.0},
        {20.0, 20.0, 20.0},
        {36.7, 36.7, 36.7},
        {73.4, 34.6, 73.4},
    },
    // perChMaxTreeLL128Bws[compcap][scale]
    {
        {20.0, 20.0, 20.0},
        {20.0, 20.0, 20.0},
        {36.7, 36.7, 29.0},
        {55.6, 31.67, 20.0},
    },
    // perChMaxTreeBws[compcap][scale]
    {
        {26.5, 18.5, 10.0},
        {24.0, 23.6, 17.8},
        {38.7, 41.4, 36.0},
        {70.0, 42.8, 24.0},
    },
    // perChMaxNVLSTreeBws[compcap][scale]
    {
        {26.5, 18.5, 10.0},
        {24.0, 23.6, 17.8},
        {0.0, 57.7, 45.5},
        {0.0, 96.0, 43.8},
    },
};

// Fraction of the NVLink bandwidth NVLS reaches, per compute capability (tuning.cc).
constexpr double kNvlsEfficiency[NCCL_NUM_COMPCAPS] = {0.0, 0.0, 0.85, 0.74};

// Tree AllReduce measured/modelled bandwidth ratio for sizes 64 B << i (i = log2(bytes / 64)),
// i = 0..22; larger sizes use 1.0.
constexpr int kTreeCorrectionSizes = 23;
constexpr double kTreeCorrection[NCCL_NUM_PROTOCOLS][kTreeCorrectionSizes] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6, .5,
     .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6, .6,
     .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9},
};

// Collectives in one device work batch: 1024 B / sizeof(ncclDevWorkColl) (96 B on x86_64).
// Tree-like algorithms pay their latency once per batch of aggregated operations.
constexpr int kCollsPerWorkBatch = 10;
constexpr int kMaxDirectArity = 7;  // CollNet Direct/Chain need <= kMaxDirectArity+1 local GPUs
constexpr int kMaxNvlsArity = 32;   // NVLS AllGather/ReduceScatter: at most this many local GPUs
constexpr int kMaxChannels = 64;
constexpr double kNetOverheadUs = 1.0;             // per ring step over the network, x86 Intel host
constexpr double kMaxSelectableUs = 3600000000.0;  // 2.28.9's starting minimum: larger never wins

// CommShape with every value made usable (no division by zero, indexes in range).
struct Shape {
  int ranks;
  int nodes;
  int rpn;        // largest number of ranks on one node
  int ranks_div;  // nRanks / nNodes, integer, as NCCL writes it in its latency formulas
  double ppn;     // nRanks / nNodes as a real number
  int cc;         // compute capability index
  int scale;      // tuning scale index
  int intra_hw;   // hardware latency row between local GPUs
  bool nvlink;    // NVLink between local GPUs (also: NVSwitch present)
  bool one_gpu;   // one GPU per node: graph path type LOC, plain TREE pattern
  int channels;
  double bw_intra;  // GB/s per channel
  double bw_inter;
  bool nvls;
  bool collnet;
};

double non_negative(double v) { return v > 0.0 ? v : 0.0; }  // NaN too

Shape sanitize(const CommShape& s) {
  Shape g;
  g.ranks = std::max(1, s.n_ranks);
  g.nodes = std::min(std::max(1, s.n_nodes), g.ranks);
  g.rpn = std::min(std::max(1, s.ranks_per_node), g.ranks);
  g.ranks_div = g.ranks / g.nodes;
  g.ppn = static_cast<double>(g.ranks) / g.nodes;
  g.cc = std::min(std::max(0, s.compcap_idx), NCCL_NUM_COMPCAPS - 1);
  g.scale = g.nodes <= 2 ? g.nodes - 1 : 2;
  g.one_gpu = g.rpn == 1;
  g.nvlink = s.intra_link == NCCL_HW_NVLINK;
  // NCCL picks the NVLink row only for an NVLink path type; a lone GPU's path (LOC) is not one.
  g.intra_hw = g.nvlink && !g.one_gpu ? NCCL_HW_NVLINK : NCCL_HW_PCI;
  g.channels = std::min(std::max(1, s.n_channels), kMaxChannels);
  g.bw_intra = non_negative(s.intra_bw_gbs);
  g.bw_inter = non_negative(s.inter_bw_gbs);
  g.nvls = s.nvls;
  g.collnet = s.collnet;
  return g;
}

int floor_log2(uint64_t v) {  // -1 for 0, like NCCL's log2i
  int r = -1;
  while (v != 0) {
    v >>= 1;
    ++r;
  }
  return r;
}

bool is_collnet(int a) { return a == NCCL_ALGO_COLLNET_DIRECT || a == NCCL_ALGO_COLLNET_CHAIN; }
bool is_nvls(int a) { return a == NCCL_ALGO_NVLS || a == NCCL_ALGO_NVLS_TREE; }
bool is_gather_scatter(int coll) {
  return coll == ncclFuncAllGather || coll == ncclFuncReduceScatter;
}

// Which algorithms NCCL models at all for a collective.
bool algo_models_coll(int coll, int a) {
  switch (coll) {
    case ncclFuncBroadcast:
    case ncclFuncReduce: return a == NCCL_ALGO_RING;
    case ncclFuncAllGather:
    case ncclFuncReduceScatter:
      return a == NCCL_ALGO_RING || a == NCCL_ALGO_PAT || a == NCCL_ALGO_NVLS ||
             a == NCCL_ALGO_COLLNET_DIRECT;
    case ncclFuncAllReduce: return a != NCCL_ALGO_PAT;
    default: return false;
  }
}

// PAT's default: one GPU per node and a host-memory net device (the latter assumed).
bool pat_enabled(const Shape& g) { return g.nodes == g.ranks; }

// LL128 default enablement: NVLink-or-better between local GPUs, a close NIC (assumed), one GPU
// generation (assumed), compute capability 7.0 or more (all our indexes).
bool ll128_enabled(const Shape& g) { return g.nvlink || g.one_gpu; }

// NCCL's algorithm switches after the model, before any environment override.
bool algo_enabled(const Shape& g, int a) {
  if (a == NCCL_ALGO_NVLS_TREE && g.nodes == 1) return false;
  if (!g.collnet && (is_collnet(a) || (a == NCCL_ALGO_NVLS && g.nodes > 1))) return false;
  if (a == NCCL_ALGO_COLLNET_DIRECT && !g.nvlink) return false;  // needs an NVSwitch
  return true;
}

int ring_steps(int coll, int n) {
  if (coll == ncclFuncAllReduce) return 2 * (n - 1);
  if (is_gather_scatter(coll)) return n - 1;
  return n;
}

// Whether NCCL computes a latency and bandwidth for the pair at all (it skips the others, which
// keep 0 for both).
bool modelled(const Shape& g, int coll, int a, int p) {
  if (!algo_models_coll(coll, a)) return false;
  if (is_nvls(a) && p != NCCL_PROTO_SIMPLE) return false;
  if (a == NCCL_ALGO_PAT && (p != NCCL_PROTO_SIMPLE || !pat_enabled(g))) return false;
  // Without NVLS support NCCL's NVLS graph has no channels; it needs two.
  if (is_nvls(a) && (!g.nvls || g.channels < 2)) return false;
  return true;
}

// Algorithm bandwidth (GB/s) of a modelled pair; 0 when NCCL would not use it.
double model_bw(const ncclTunerConstants_v5_t& c, const Shape& g, int coll, int a, int p) {
  if (is_collnet(a) && p != NCCL_PROTO_SIMPLE) return 0.0;
  if (p == NCCL_PROTO_LL128 && !ll128_enabled(g)) return 0.0;
  if (!algo_enabled(g, a)) return 0.0;

  const double ch = g.channels;
  // NCCL starts from the intra-node speed up to two nodes (the search ties both speeds there),
  // from the network speed beyond; CollNet always from the intra-node one.
  double bw = g.nodes <= 2 || is_collnet(a) ? g.bw_intra : g.bw_inter;
  if (is_nvls(a)) {
    double intra = g.bw_intra * kNvlsEfficiency[g.cc] * (ch - 1) / ch;
    intra *= coll == ncclFuncAllReduce ? 2.0 : (g.ppn - 1) / g.ppn;
    double inter = g.nodes == 1 ? 2 * g.bw_intra : g.bw_inter;
    if (a == NCCL_ALGO_NVLS_TREE && g.nodes <= 2) inter *= 2;  // both nodes feed the tree root
    bw = std::min(intra, inter);
    if (a == NCCL_ALGO_NVLS_TREE) bw = std::min(bw, c.perChMaxNVLSTreeBws[g.cc][g.scale]);
  }
  double bus = ch * bw;

  const double ll_max = c.llMaxBws[g.nodes == 1 ? g.cc : 0][g.scale];
  if (a == NCCL_ALGO_RING && p == NCCL_PROTO_LL) bus = std::min(ll_max, bus * 0.5);
  if (a == NCCL_ALGO_RING && p == NCCL_PROTO_LL128)
    bus = std::min(bus * 0.92, ch * c.perChMaxRingLL128Bws[g.cc][g.scale]);
  if (a == NCCL_ALGO_TREE && coll == ncclFuncAllReduce)
    bus = std::min(bus * 0.92, ch * c.perChMaxTreeBws[g.cc][g.scale]);
  if (a == NCCL_ALGO_TREE && p == NCCL_PROTO_LL) bus = std::min(bus / 3.8, ll_max);
  if (a == NCCL_ALGO_TREE && p == NCCL_PROTO_LL128)
    bus = std::min(bus * (g.nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0),
                   ch * c.perChMaxTreeLL128Bws[g.cc][g.scale]);
  if (a == NCCL_ALGO_TREE && g.one_gpu) bus *= 0.85;
  if (a == NCCL_ALGO_PAT) bus *= 0.75;
  if (a == NCCL_ALGO_COLLNET_DIRECT) {
    if (is_gather_scatter(coll)) {
      bus = g.ppn * std::min(g.bw_intra, g.bw_inter * 0.9);
    } else {
      // Full speed needs a NIC per GPU: discount by (half of) the GPU/NIC oversubscription.
      double factor = g.ppn / ch;
      factor -= (factor - 1) / 2;
      bus /= factor;
      if (g.cc >= NCCL_HOPPER_COMPCAP_IDX) bus *= 0.85;
    }
  }
  // Multi-node NVLS/CollNet AllGather and ReduceScatter go through CollNet, one head per GPU.
  if ((a == NCCL_ALGO_NVLS || a == NCCL_ALGO_COLLNET_DIRECT) && is_gather_scatter(coll) &&
      g.nodes > 1 && !g.collnet)
    return 0.0;

  // Bus bandwidth to algorithm bandwidth; NCCL leaves the non-ring AllGather/ReduceScatter ones.
  if (a == NCCL_ALGO_RING || !is_gather_scatter(coll)) {
    if (a == NCCL_ALGO_RING || is_nvls(a))
      bus *= static_cast<double>(g.ranks) / ring_steps(coll, g.ranks);
    else
      bus *= 0.5;
  }
  return bus;
}

// Latency (us) of a modelled pair, usable or not.
double model_lat(const ncclTunerConstants_v5_t& c, const Shape& g, int coll, int a, int p) {
  const double base = c.baseLatencies[a][p];
  double intra = c.hwLatencies[g.intra_hw][a][p];
  // With one rank per node nothing hides the network latency: NCCL then uses the tree's.
  const double inter = c.hwLatencies[NCCL_HW_NET][g.ranks == g.nodes ? NCCL_ALGO_TREE : a][p];
  const int log_nodes = floor_log2(static_cast<uint64_t>(g.nodes));
  const int local_hops = g.ranks_div - 1;
  switch (a) {
    case NCCL_ALGO_RING: {
      if (coll == ncclFuncBroadcast || coll == ncclFuncReduce) {
        const int hw = g.nodes == 1 ? g.intra_hw : NCCL_HW_NET;
        return base + c.hwLatencies[hw][NCCL_ALGO_RING][p];
      }
      // Each step over the network also costs the proxy's post overhead.
      double overhead = 0.0;
      if (g.nodes > 1) overhead = kNetOverheadUs * (p == NCCL_PROTO_SIMPLE ? 3 : 1);
      intra = std::max(intra, overhead);
      const int steps = ring_steps(coll, g.ranks);
      const int net_steps = g.nodes == 1                ? 0
                            : coll == ncclFuncAllReduce ? 2 * (g.nodes - 1)
                                                        : g.nodes - 1;
      return base + (steps - net_steps) * intra + net_steps * inter;
    }
    case NCCL_ALGO_TREE:  // AllReduce only
      return base + 2 * (local_hops * intra + log_nodes * inter);
    case NCCL_ALGO_COLLNET_DIRECT:
      // 0.4 us per local GPU serialised behind the head.
      return base + 2 * (std::min(1, local_hops) * intra + local_hops * 0.4) + inter;
    case NCCL_ALGO_COLLNET_CHAIN: return base + 2 * local_hops * intra + inter;
    case NCCL_ALGO_NVLS:  // NCCL replaces the base latency here
      return intra + (g.nodes > 1 ? inter : 0.0);
    case NCCL_ALGO_NVLS_TREE: return base + intra + 2 * log_nodes * inter;
    case NCCL_ALGO_PAT:  // AllGather and ReduceScatter only
      return base + log_nodes * (inter / 3.5) + g.ranks * 2.8;
    default: return base;
  }
}

// ncclTopoGetAlgoTime: one table entry, or NCCL_ALGO_PROTO_IGNORE.
float algo_time(const NcclModel& m, const Shape& g, int coll, int a, int p, size_t n_bytes,
                int pipe_ops) {
  double bw = m.bw[coll][a][p];
  double lat = m.lat[coll][a][p];
  if (!(bw > 0.0)) return static_cast<float>(NCCL_ALGO_PROTO_IGNORE);
  const int log_size = floor_log2(static_cast<uint64_t>(n_bytes) >> 6);
  if (a == NCCL_ALGO_TREE && coll == ncclFuncAllReduce && log_size >= 0 &&
      log_size < kTreeCorrectionSizes)
    bw *= kTreeCorrection[p][log_size];
  // Multi-node ring AllReduce latency plateaus higher once each rank's slice per channel is
  // non-trivial.
  const uint64_t per_rank_channel =
      static_cast<uint64_t>(n_bytes) / (static_cast<uint64_t>(g.channels) * g.ranks);
  if (a == NCCL_ALGO_RING && p == NCCL_PROTO_SIMPLE && g.nodes > 1 && coll == ncclFuncAllReduce &&
      per_rank_channel >= 64)
    lat *= g.cc < NCCL_AMPERE_COMPCAP_IDX ? 1.9 : 1.4;
  // Rings pay the latency per pipelined operation, the others once per work batch.
  const int lat_count =
      a == NCCL_ALGO_RING ? pipe_ops : (pipe_ops + kCollsPerWorkBatch - 1) / kCollsPerWorkBatch;
  return static_cast<float>(lat * lat_count + static_cast<double>(n_bytes) / (1000.0 * bw));
}

}  // namespace

void nccl_default_constants(ncclTunerConstants_v5_t* c) {
  if (c != nullptr) *c = kDefaults;
}

void nccl_build_model(const ncclTunerConstants_v5_t& c, const CommShape& s, NcclModel* m) {
  if (m == nullptr) return;
  *m = NcclModel{};
  const Shape g = sanitize(s);
  if (g.ranks <= 1) return;  // NCCL builds no model for a single rank
  for (int coll = 0; coll < kColls; ++coll)
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
      for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) {
        if (!modelled(g, coll, a, p)) continue;
        m->bw[coll][a][p] = model_bw(c, g, coll, a, p);
        m->lat[coll][a][p] = model_lat(c, g, coll, a, p);
      }
}

void nccl_cost_table(const NcclModel& m, const CommShape& s, int coll, size_t n_bytes,
                     int num_pipe_ops, float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS]) {
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p)
      table[a][p] = static_cast<float>(NCCL_ALGO_PROTO_IGNORE);
  const Shape g = sanitize(s);
  if (g.ranks <= 1) {
    table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = 0.0f;
    return;
  }
  if (coll < 0 || coll >= kColls) return;
  const int pipe_ops = std::max(1, num_pipe_ops);
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a) {
    // Per-call filters from updateCollCostTable.
    if (is_collnet(a) && (!g.collnet || g.rpn > kMaxDirectArity + 1)) continue;
    if (is_nvls(a) && (!g.nvls || (coll != ncclFuncAllReduce && g.rpn > kMaxNvlsArity))) continue;
    if (a == NCCL_ALGO_NVLS && !g.collnet && g.nodes > 1) continue;
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p)
      table[a][p] = algo_time(m, g, coll, a, p, n_bytes, pipe_ops);
  }
}

bool nccl_pick(const float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS], int* algo, int* proto) {
  double best = kMaxSelectableUs;
  int best_a = NCCL_ALGO_UNDEF;
  int best_p = NCCL_PROTO_UNDEF;
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) {
      const double t = table[a][p];
      if (t >= 0.0 && t < best) {  // NaN and negatives (IGNORE included) never win
        best = t;
        best_a = a;
        best_p = p;
      }
    }
  if (algo != nullptr) *algo = best_a;
  if (proto != nullptr) *proto = best_p;
  return best_a != NCCL_ALGO_UNDEF;
}

double bus_bandwidth(int coll, int n_ranks, size_t n_bytes, double time_us) {
  if (!(time_us > 0.0) || n_ranks < 1) return 0.0;
  const double alg_bw = static_cast<double>(n_bytes) / (time_us * 1000.0);  // bytes/us -> GB/s
  const double n = n_ranks;
  switch (coll) {
    case ncclFuncAllReduce: return alg_bw * 2.0 * (n - 1) / n;
    case ncclFuncAllGather:
    case ncclFuncReduceScatter: return alg_bw * (n - 1) / n;
    case ncclFuncBroadcast:
    case ncclFuncReduce: return alg_bw;
    default: return 0.0;
  }
}

}  // namespace tuner
}  // namespace nf
