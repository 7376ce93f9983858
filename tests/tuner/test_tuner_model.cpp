// The tuner's model: facts to NCCL's inputs, corrected constants, and choices that move the way
// measured curves say they should when the network differs from what NCCL assumes.
#include <catch2/catch.hpp>

#include <cstring>

#include "platform/platform.h"
#include "tuner/model.h"
#include "tuner/nccl_model.h"
#include "tuner/net_info.h"

using namespace nf;
using namespace nf::tuner;

namespace {

Facts efa_row(const char* name, int nodes) {
  Facts f;
  f.n_nodes = nodes;
  f.ranks_per_node = 8;
  f.n_ranks = nodes * 8;
  const Platform* row = match_platform(platform_table(), name);
  REQUIRE(row != nullptr);
  facts_from_platform(*row, &f);
  return f;
}

Facts efa_p5(int nodes) { return efa_row("p5.48xlarge", nodes); }

// The same machines behind one 25 Gb/s TCP link each.
Facts tcp_25g(int nodes) {
  Facts f = efa_p5(nodes);
  f.provider = "tcp;ofi_rxm";
  f.net_source = "test";
  f.node_nics = 1;
  f.node_net_gbps = 25;
  f.net_latency_us = default_net_latency_us(f.provider, false);
  f.gdr = false;
  return f;
}

struct Built {
  CommShape shape;
  ncclTunerConstants_v5_t c;
  NcclModel model;
  Decisions d;
};

void build(const Facts& f, bool correct, Built* b) {
  b->shape = shape_from_facts(f);
  nccl_default_constants(&b->c);
  if (correct) correct_constants(f, b->shape, &b->c);
  nccl_build_model(b->c, b->shape, &b->model);
  build_decisions(b->model, b->shape, &b->d);
}

// The smallest size from which all-reduce is Simple for good: where the bandwidth term has taken
// over from latency.
uint64_t simple_from(const Built& b, int coll = 4) {
  const std::vector<Band>& bands = b.d.bands[coll];
  uint64_t from = UINT64_MAX;
  for (size_t i = bands.size(); i-- > 0;) {
    if (bands[i].n == 0 || bands[i].pair[0] % kNumProtos != NCCL_PROTO_SIMPLE) break;
    from = bands[i].lo;
  }
  return from;
}

// Likewise the smallest size from which all-reduce runs Ring for good.
uint64_t ring_from(const Built& b, int coll = 4) {
  const std::vector<Band>& bands = b.d.bands[coll];
  uint64_t from = UINT64_MAX;
  for (size_t i = bands.size(); i-- > 0;) {
    if (bands[i].n == 0 || bands[i].pair[0] / kNumProtos != NCCL_ALGO_RING) break;
    from = bands[i].lo;
  }
  return from;
}

}  // namespace

TEST_CASE("facts: the platform row gives the network and the GPUs", "[tuner][model]") {
  const Facts f = efa_p5(16);
  CHECK(f.net_known);
  CHECK(f.provider == "efa");
  CHECK(f.node_nics == 32);
  CHECK(f.node_net_gbps == Approx(3200));
  CHECK(f.net_latency_us == Approx(20));  // EFA with GPUDirect
  CHECK(f.gdr);
  const CommShape s = shape_from_facts(f);
  CHECK(s.compcap_idx == NCCL_HOPPER_COMPCAP_IDX);
  CHECK(s.intra_link == NCCL_HW_NVLINK);
  CHECK(s.n_channels == 32);                   // 4 NICs per GPU
  CHECK(s.inter_bw_gbs == Approx(50.0 / 32));  // 400 Gb/s per GPU over 32 channels
  CHECK(s.nvls);
  const Platform* g5 = match_platform(platform_table(), "g5.8xlarge");
  REQUIRE(g5 != nullptr);
  Facts g;
  g.n_nodes = 2;
  g.n_ranks = 2;
  g.ranks_per_node = 1;
  facts_from_platform(*g5, &g);
  CHECK(g.net_latency_us == Approx(25));  // no latency in the row: the EFA default
  const CommShape gs = shape_from_facts(g);
  CHECK(gs.intra_link == NCCL_HW_PCI);
  CHECK(gs.compcap_idx == NCCL_AMPERE_COMPCAP_IDX);
  CHECK(gs.inter_bw_gbs * gs.n_channels == Approx(25.0 / 8));
  CHECK_FALSE(gs.nvls);
}

TEST_CASE("corrections: network latency and caps on several nodes, nothing on one or unknown",
          "[tuner][model]") {
  ncclTunerConstants_v5_t c0, c;
  nccl_default_constants(&c0);

  c = c0;
  const Facts one = efa_p5(1);
  CHECK(correct_constants(one, shape_from_facts(one), &c).empty());
  CHECK(std::memcmp(&c, &c0, sizeof c) == 0);

  Facts unknown;
  unknown.n_nodes = 4;
  unknown.n_ranks = 32;
  unknown.ranks_per_node = 8;
  c = c0;
  CHECK(correct_constants(unknown, shape_from_facts(unknown), &c).empty());

  // EFA p5: 20 µs a step; the network is fast enough that no cap is lowered.
  c = c0;
  const Facts efa = efa_p5(16);
  const std::vector<ConstantChange> ch = correct_constants(efa, shape_from_facts(efa), &c);
  CHECK_FALSE(ch.empty());
  const double delta = 20.0 - c0.hwLatencies[NCCL_HW_NET][NCCL_ALGO_RING][NCCL_PROTO_LL];
  for (int a = 0; a < 7; ++a)
    for (int p = 0; p < 3; ++p) {
      const double before = c0.hwLatencies[NCCL_HW_NET][a][p];
      CHECK(c.hwLatencies[NCCL_HW_NET][a][p] == Approx(before > 0 ? before + delta : 0.0));
    }
  CHECK(std::memcmp(c.llMaxBws, c0.llMaxBws, sizeof c.llMaxBws) == 0);
  CHECK(std::memcmp(c.perChMaxTreeBws, c0.perChMaxTreeBws, sizeof c.perChMaxTreeBws) == 0);

  // TCP at 25 Gb/s: 3.1 GB/s per node, shared by 8 ranks: every cap above that comes down.
  c = c0;
  const Facts tcp = tcp_25g(16);
  correct_constants(tcp, shape_from_facts(tcp), &c);
  const double share = 25.0 / 8 / 8;
  CHECK(c.llMaxBws[NCCL_HOPPER_COMPCAP_IDX][2] == Approx(share));
  CHECK(c.perChMaxTreeBws[NCCL_HOPPER_COMPCAP_IDX][2] == Approx(share));
  CHECK(c.perChMaxRingLL128Bws[NCCL_HOPPER_COMPCAP_IDX][2] == Approx(share));
  // Other GPU generations and scales are not this communicator's.
  CHECK(c.llMaxBws[NCCL_AMPERE_COMPCAP_IDX][2] == c0.llMaxBws[NCCL_AMPERE_COMPCAP_IDX][2]);
  CHECK(c.llMaxBws[NCCL_HOPPER_COMPCAP_IDX][0] == c0.llMaxBws[NCCL_HOPPER_COMPCAP_IDX][0]);
}

// Why the choices must move this way. NCCL's cost of a pair is latency x network steps + bytes /
// bandwidth.
// (1) A network step on EFA costs about 20 µs, several times the 2.7-14 µs NCCL's constants
// assume. The correction adds the same amount to every network step, so it does not move the
// protocol choice between pairs with the same steps, but it does move the algorithm: a ring
// all-reduce over n nodes takes 2(n-1) network steps, a tree about 2 log2(n). The slower the
// step, the larger the size up to which Tree beats Ring; AWS's and aws-ofi-nccl's measurements
// on p4d/p5 clusters show Tree (or NVLS-Tree) winning to MiB sizes over EFA, where NCCL's
// defaults switch to Ring earlier. Checked on 8 nodes of p4d (no NVLS to hide the effect).
// (2) On a 25 Gb/s TCP link the bandwidth term is over a hundred times larger than on 3.2 Tb/s of
// EFA, so Simple, the bandwidth-efficient protocol, must take over at smaller sizes there than on
// EFA; nccl-tests on slow Ethernet show all-reduce bandwidth-bound from tens of KiB.
TEST_CASE("choices move with the network the way measured curves say", "[tuner][model]") {
  Built p4d_alone, p4d;
  build(efa_row("p4d.24xlarge", 8), false, &p4d_alone);
  build(efa_row("p4d.24xlarge", 8), true, &p4d);
  const uint64_t alone_ring = ring_from(p4d_alone), efa_ring = ring_from(p4d);
  INFO("p4d x 8: Ring from " << alone_ring << " for NCCL alone, " << efa_ring << " corrected");
  REQUIRE(alone_ring != UINT64_MAX);
  REQUIRE(efa_ring != UINT64_MAX);
  CHECK(efa_ring > alone_ring);  // (1)

  Built efa, tcp;
  build(efa_p5(16), true, &efa);
  build(tcp_25g(16), true, &tcp);
  const uint64_t efa_at = simple_from(efa), tcp_at = simple_from(tcp);
  INFO("16 x 8 H100: Simple from " << efa_at << " on EFA, " << tcp_at << " on TCP 25G");
  REQUIRE(efa_at != UINT64_MAX);
  REQUIRE(tcp_at != UINT64_MAX);
  CHECK(tcp_at < efa_at);  // (2)
  // Large all-reduce is bandwidth-bound everywhere: Simple. Small is latency-bound: never Simple.
  int a = -1, p = -1;
  for (const Built* b : {&p4d_alone, &p4d, &efa, &tcp}) {
    REQUIRE(model_pick(b->d, 4, 1ull << 30, &a, &p));
    CHECK(p == NCCL_PROTO_SIMPLE);
    REQUIRE(model_pick(b->d, 4, 8, &a, &p));
    CHECK(p != NCCL_PROTO_SIMPLE);
  }
}

TEST_CASE("bands: a lookup returns the ranking of its size, every available pair once",
          "[tuner][model]") {
  Built b;
  build(efa_p5(16), true, &b);
  for (int coll = 0; coll < kNumColls; ++coll) {
    INFO("coll " << coll);
    const std::vector<Band>& bands = b.d.bands[coll];
    REQUIRE_FALSE(bands.empty());
    CHECK(bands[0].lo == 0);
    for (size_t i = 1; i < bands.size(); ++i) CHECK(bands[i].lo > bands[i - 1].lo);
    for (uint64_t size : {uint64_t(0), uint64_t(1), uint64_t(4096), uint64_t(1) << 20,
                          uint64_t(16) << 30, UINT64_MAX}) {
      const Band& band = band_for(b.d, coll, size);
      CHECK(band.lo <= size);
      // Costs ascend and the pairs are those NCCL's table has at the band's start.
      float t[7][3];
      nccl_cost_table(b.model, b.shape, coll, band.lo, 1, t);
      int available = 0;
      for (int x = 0; x < 7; ++x)
        for (int y = 0; y < 3; ++y) available += t[x][y] >= 0;
      CHECK(band.n == available);
      for (int k = 1; k < band.n; ++k) CHECK(band.cost_us[k] >= band.cost_us[k - 1]);
      for (int k = 0; k < band.n; ++k) CHECK(t[band.pair[k] / 3][band.pair[k] % 3] >= 0);
    }
  }
}

TEST_CASE(
    "what the net plugin publishes for a standalone tuner reads back; anything else is "
    "ignored",
    "[tuner][net_info]") {
  nf::NetSummary s;
  s.found = true;
  s.provider = "tcp;ofi_rxm";
  s.devices = 4;
  s.rails = 2;
  s.speed_mbps = 200000;
  s.gdr = true;
  s.platform = "p5.48xlarge";
  nf::NetSummary back;
  REQUIRE(nf::parse_net_summary(nf::format_net_summary(s), &back));
  CHECK(back.found);
  CHECK(back.provider == s.provider);
  CHECK(back.devices == 4);
  CHECK(back.rails == 2);
  CHECK(back.speed_mbps == 200000);
  CHECK(back.gdr);
  CHECK(back.platform == "p5.48xlarge");
  for (const char* bad :
       {"", "efa", "efa|1|1|100|1", "efa|0|1|100|1|x", "efa|1|0|100|1|x", "efa|1|1|-5|1|x",
        "efa|1|1|100|2|x", "|1|1|100|1|x", "efa|1|1|100|1|x|y", "efa|99999999999|1|100|1|x"}) {
    INFO(bad);
    nf::NetSummary out;
    CHECK_FALSE(nf::parse_net_summary(bad, &out));
    CHECK_FALSE(out.found);
  }
}
