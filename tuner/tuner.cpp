// The internal tuner: settles everything at init (facts, corrected constants, bands, rules for
// this communicator's shape), so that the per-collective calls are lookups.
#include "tuner/tuner.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>

#include "platform/platform.h"
#include "tuner/net_info.h"
#include "util/log.h"
#include "util/params.h"

namespace nf {
namespace tuner {
namespace {

constexpr unsigned long kSubsysTuning = 0x40;  // NCCL_TUNING

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0';
}

Mode parse_mode(const std::string& s) {
  if (s == "model") return Mode::kModel;
  if (s == "rules") return Mode::kRules;
  if (s == "off") return Mode::kOff;
  return Mode::kAuto;
}

// %h: host name, %p: process id (several processes of a job may share a file system).
std::string expand_path(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char c = pattern[i + 1];
      if (c == 'h') {
        char host[256] = {};
        if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "host");
        out += host;
        ++i;
        continue;
      }
      if (c == 'p') {
        out += std::to_string(static_cast<long>(getpid()));
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

// The network as the net side of this library found it; else the platform row's.
void gather_facts(const InitArgs& a, const Params& params, Facts* f) {
  f->n_ranks = static_cast<int>(std::min<size_t>(a.n_ranks, INT32_MAX));
  f->n_nodes = static_cast<int>(std::max<size_t>(1, std::min<size_t>(a.n_nodes, INT32_MAX)));
  f->ranks_per_node = a.ranks_per_node > 0
                          ? a.ranks_per_node
                          : (f->n_ranks + f->n_nodes - 1) / std::max(1, f->n_nodes);
  const int64_t latency = params.get_int(ParamId::kTunerNetLatency);
  PlatformChoice choice;
  const Platform* row = &generic_platform();
  if (ok(choose_platform(params, &choice)) && choice.row != nullptr) row = choice.row;
  facts_from_platform(*row, f);
  const NetSummary ns = tuner_net_summary();
  if (ns.found) {
    f->net_known = true;
    f->net_source = "the plugin's devices";
    f->provider = ns.provider;
    f->node_nics = ns.devices * std::max(1, ns.rails);
    // The speed NCCL plans with: a link of unknown speed has the provider's default by now
    // (settle_nic_speeds: TCP 10 Gb/s, EFA 100), so the 100 Gb/s here is only a guard.
    f->node_net_gbps = ns.devices * (ns.speed_mbps > 0 ? ns.speed_mbps / 1000.0 : 100.0);
    f->gdr = ns.gdr;
    f->net_latency_us = default_net_latency_us(ns.provider, ns.gdr);
  }
  if (latency > 0) f->net_latency_us = static_cast<double>(latency);
}

}  // namespace

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kAuto: return "auto";
    case Mode::kModel: return "model";
    case Mode::kRules: return "rules";
    case Mode::kOff: return "off";
  }
  return "?";
}

Tuner* Tuner::create(const InitArgs& a) {
  Tuner* t = new (std::nothrow) Tuner();
  if (t == nullptr) {
    NF_WARN("tuner: out of memory at init; NCCL decides for this communicator");
    return nullptr;
  }
  Params params;
  if (!ok(params.load_from_env())) {
    NF_WARN("tuner: a bad NCCL_FABRIC_* value (above); NCCL decides for this communicator");
    return t;  // mode off
  }
  Mode mode = parse_mode(params.get_str(ParamId::kTuner));
  t->rules_path_ = params.get_str(ParamId::kTunerRules);
  if (mode == Mode::kOff) {
    NF_INFO(kSubsysTuning, "tuner: NCCL_FABRIC_TUNER=off, NCCL decides everything");
    return t;
  }
  std::vector<Rule> rules;
  if (!t->rules_path_.empty() && mode != Mode::kModel) {
    std::string error;
    if (!ok(load_rules_file(t->rules_path_, &rules, &error))) {
      NF_WARN(
          "tuner: NCCL_FABRIC_TUNER_RULES: %s; NCCL decides everything for this "
          "communicator (%zu ranks)",
          error.c_str(), a.n_ranks);
      return t;  // mode off: a half-applied rules file would be worse than none
    }
  } else if (!t->rules_path_.empty()) {
    NF_INFO(kSubsysTuning, "tuner: NCCL_FABRIC_TUNER=model, the rules file %s is not read",
            t->rules_path_.c_str());
  } else if (mode == Mode::kRules) {
    NF_WARN("tuner: NCCL_FABRIC_TUNER=rules but NCCL_FABRIC_TUNER_RULES is empty: NCCL decides");
  }
  t->mode_ = mode;
  gather_facts(a, params, &t->facts_);
  t->shape_ = shape_from_facts(t->facts_);
  // LL128 across nodes where the net plugin found the provider cannot order 128-byte lines: it set
  // NCCL_PROTO=^LL128 itself (not the user's choice), and the model never picks LL128 then.
  const char* ll128_off = std::getenv(kLl128OffEnv);
  const bool proto_ours = ll128_off != nullptr && strcmp(ll128_off, "set-proto") == 0;
  t->ll128_off_ = proto_ours && a.n_nodes > 1;
  if (t->ll128_off_)
    NF_INFO(kSubsysTuning,
            "tuner: LL128 is not used across the %zu nodes: the network provider "
            "cannot order 128-byte lines (the net plugin set NCCL_PROTO=^LL128)",
            a.n_nodes);
  t->user_algo_proto_ = env_set("NCCL_ALGO") || (env_set("NCCL_PROTO") && !proto_ours);
  if (t->user_algo_proto_)
    NF_INFO(kSubsysTuning,
            "tuner: NCCL_ALGO/NCCL_PROTO set (%s/%s): algorithm and protocol are "
            "left to NCCL; rules still set channels and chunk sizes",
            env_set("NCCL_ALGO") ? std::getenv("NCCL_ALGO") : "-",
            env_set("NCCL_PROTO") ? std::getenv("NCCL_PROTO") : "-");

  // The model: NCCL's, with the constants corrected for this network.
  ncclTunerConstants_v5_t local;
  ncclTunerConstants_v5_t* c = a.constants;
  if (c == nullptr) {
    nccl_default_constants(&local);
    c = &local;
  }
  const bool model_on = mode == Mode::kAuto || mode == Mode::kModel;
  if (model_on) {
    const std::vector<ConstantChange> changes = correct_constants(t->facts_, t->shape_, c);
    for (const ConstantChange& ch : changes)
      NF_INFO(kSubsysTuning,
              "tuner: %s %s: %.2f -> %.2f (%s network, %.0f Gb/s per node, "
              "%.1f us per hop)",
              a.constants != nullptr ? "NCCL constant" : "model constant", ch.what.c_str(),
              ch.before, ch.after, t->facts_.provider.c_str(), t->facts_.node_net_gbps,
              t->facts_.net_latency_us);
    nccl_build_model(*c, t->shape_, &t->model_);
    build_decisions(t->model_, t->shape_, &t->decisions_);
    // The model decides only where it knows something NCCL does not: the network between nodes.
    // On one node, or on an unknown network, NCCL's own graph-based figures are the better ones.
    t->use_model_ = !t->user_algo_proto_ && t->facts_.net_known && t->facts_.n_nodes > 1;
    if (t->facts_.net_known && t->facts_.n_nodes > 1 && t->facts_.net_latency_us > 0) {
      // Bytes a channel moves over the network in one step's latency, as a power of two in
      // [16 KiB, 1 MiB] (p5.48xlarge: 20 us x 1.56 GB/s = 31 KB -> 32 KiB).
      const double bytes = t->facts_.net_latency_us * 1e-6 * t->shape_.inter_bw_gbs * 1e9;
      uint64_t f = 16 << 10;
      while (f < bytes && f < (1u << 20)) f <<= 1;
      t->chunk_floor_ = f;
    }
  }

  for (const Rule& r : rules) {
    if (!r.nodes.contains(t->facts_.n_nodes) || !r.ranks.contains(t->facts_.n_ranks) ||
        !r.rpn.contains(t->facts_.ranks_per_node))
      continue;
    const ActiveRule ar{r.size_lo,
                        r.size_hi,
                        static_cast<int8_t>(r.algo),
                        static_cast<int8_t>(r.proto),
                        r.channels,
                        r.chunk,
                        static_cast<int>(t->rule_lines_.size())};
    t->rule_lines_.push_back(r.line);
    for (int coll = 0; coll < kNumColls; ++coll)
      if (r.coll == kAny || r.coll == coll) t->rules_[coll].push_back(ar);
  }

  t->rule_hits_.reset(new std::atomic<uint64_t>[t->rule_lines_.size() + 1]);
  for (size_t i = 0; i <= t->rule_lines_.size(); ++i) t->rule_hits_[i].store(0);
  const size_t active = t->rule_lines_.size();
  NF_INFO(kSubsysTuning,
          "tuner: mode %s, %d ranks on %d nodes (%d per node), network %s: %s "
          "%.0f Gb/s per node over %d NICs, %.1f us per hop, GPUDirect %s; %zu rules of %s "
          "apply",
          mode_name(mode), t->facts_.n_ranks, t->facts_.n_nodes, t->facts_.ranks_per_node,
          t->facts_.net_known ? t->facts_.net_source.c_str() : "unknown",
          t->facts_.provider.empty() ? "-" : t->facts_.provider.c_str(), t->facts_.node_net_gbps,
          t->facts_.node_nics, t->facts_.net_latency_us, t->facts_.gdr ? "on" : "off", active,
          t->rules_path_.empty() ? "(no file)" : t->rules_path_.c_str());
  if (log_enabled(LogLevel::kInfo))
    for (const std::string& line : t->summary_lines())
      NF_INFO(kSubsysTuning, "tuner: %s", line.c_str());

  const std::string dump = params.get_str(ParamId::kTunerDump);
  if (!dump.empty()) {
    const std::string path = expand_path(dump);
    std::ofstream f(path, std::ios::trunc);
    f << t->dump_csv();
    f.close();
    if (!f)
      NF_WARN("tuner: NCCL_FABRIC_TUNER_DUMP: cannot write %s", path.c_str());
    else
      NF_INFO(kSubsysTuning, "tuner: decision table written to %s", path.c_str());
  }
  return t;
}

const ActiveRule* Tuner::match_rule(int coll, uint64_t n_bytes, const float* table, int num_algo,
                                    int num_proto, int* algo, int* proto) const {
  const int na = std::min(num_algo, kNumAlgos), np = std::min(num_proto, kNumProtos);
  for (const ActiveRule& r : rules_[coll]) {
    if (n_bytes < r.size_lo || n_bytes >= r.size_hi) continue;
    const int ra = user_algo_proto_ ? kAny : r.algo, rp = user_algo_proto_ ? kAny : r.proto;
    if (ra == kAny && rp == kAny) {
      if (user_algo_proto_ && r.channels == kAny && r.chunk == 0) continue;
      *algo = *proto = -1;
      return &r;
    }
    // The named pair, or the cheapest available one where the rule leaves a half open. A pair
    // NCCL ignored for this call skips the rule: never forced.
    int best_a = -1, best_p = -1;
    float best = 0;
    for (int x = (ra == kAny ? 0 : ra); x < (ra == kAny ? na : std::min(ra + 1, na)); ++x)
      for (int y = (rp == kAny ? 0 : rp); y < (rp == kAny ? np : std::min(rp + 1, np)); ++y) {
        const float v = table[x * num_proto + y];
        if (v >= 0 && (best_a < 0 || v < best)) {
          best_a = x;
          best_p = y;
          best = v;
        }
      }
    if (best_a < 0) continue;
    *algo = best_a;
    *proto = best_p;
    return &r;
  }
  return nullptr;
}

void Tuner::get_coll_info(int coll, size_t n_bytes, float* table, int num_algo, int num_proto,
                          int* n_channels) const {
  if (mode_ == Mode::kOff || table == nullptr || coll < 0 || coll >= kNumColls || num_algo <= 0 ||
      num_proto <= 0)
    return;
  const int na = std::min(num_algo, kNumAlgos), np = std::min(num_proto, kNumProtos);
  if (ll128_off_ && NCCL_PROTO_LL128 < np)
    for (int a = 0; a < na; ++a) table[a * num_proto + NCCL_PROTO_LL128] = NCCL_ALGO_PROTO_IGNORE;
  int algo = -1, proto = -1;
  const ActiveRule* r = rules_[coll].empty()
                            ? nullptr
                            : match_rule(coll, n_bytes, table, num_algo, num_proto, &algo, &proto);
  if (algo < 0 && use_model_ && !decisions_.bands[coll].empty()) {
    const Band& b = band_for(decisions_, coll, n_bytes);
    for (int i = 0; i < b.n; ++i) {
      const int a = b.pair[i] / kNumProtos, p = b.pair[i] % kNumProtos;
      if (a < na && p < np && table[a * num_proto + p] >= 0) {
        algo = a;
        proto = p;
        break;
      }
    }
  }
  if (algo >= 0 && !user_algo_proto_) {
    // NCCL takes the first smallest entry >= 0 in algorithm-major order: an earlier zero would
    // beat ours, so it is raised a little (it stays available).
    for (int a = 0; a < na; ++a)
      for (int p = 0; p < np; ++p) {
        float& v = table[a * num_proto + p];
        if (a == algo && p == proto)
          v = 0.0f;
        else if (v == 0.0f)
          v = 1e-3f;
      }
  }
  if (r != nullptr && r->channels > 0 && n_channels != nullptr) *n_channels = r->channels;
  if (r != nullptr)
    rule_hits_[r->index].fetch_add(1, std::memory_order_relaxed);
  else if (algo >= 0)
    model_hits_[algo * kNumProtos + proto].fetch_add(1, std::memory_order_relaxed);
  else
    nccl_calls_.fetch_add(1, std::memory_order_relaxed);
}

Tuner::~Tuner() {
  if (mode_ != Mode::kOff && log_enabled(LogLevel::kInfo))
    for (const std::string& line : usage_lines()) NF_INFO(kSubsysTuning, "tuner: %s", line.c_str());
}

std::vector<std::string> Tuner::usage_lines() const {
  std::vector<std::string> out;
  uint64_t total = nccl_calls_.load(std::memory_order_relaxed);
  std::string rules;
  for (size_t i = 0; i < rule_lines_.size(); ++i) {
    const uint64_t n = rule_hits_[i].load(std::memory_order_relaxed);
    total += n;
    if (n > 0)
      rules += " " + rules_path_ + ":" + std::to_string(rule_lines_[i]) + " x" + std::to_string(n);
  }
  std::string model;
  for (int k = 0; k < kNumAlgos * kNumProtos; ++k) {
    const uint64_t n = model_hits_[k].load(std::memory_order_relaxed);
    total += n;
    if (n > 0) model += " " + pair_name(k / kNumProtos, k % kNumProtos) + " x" + std::to_string(n);
  }
  out.push_back(std::to_string(total) + " collective calls decided: rules" +
                (rules.empty() ? std::string(" none") : rules) + "; model" +
                (model.empty() ? std::string(" none") : model) + "; NCCL " +
                std::to_string(nccl_calls_.load(std::memory_order_relaxed)));
  return out;
}

void Tuner::pick_v2(int coll, size_t n_bytes, int collnet_support, int nvls_support, int* algo,
                    int* proto, int* n_channels) const {
  *algo = NCCL_ALGO_UNDEF;
  *proto = NCCL_PROTO_UNDEF;
  // v2 NCCL (2.19-2.20) says only whether CollNet and NVLS exist; it predates PAT.
  float table[kNumAlgos][kNumProtos];
  for (int a = 0; a < kNumAlgos; ++a)
    for (int p = 0; p < kNumProtos; ++p) {
      const bool collnet = a == NCCL_ALGO_COLLNET_DIRECT || a == NCCL_ALGO_COLLNET_CHAIN;
      const bool nvls = a == NCCL_ALGO_NVLS || a == NCCL_ALGO_NVLS_TREE;
      const bool off = (collnet && !collnet_support) || (nvls && !nvls_support) ||
                       a == NCCL_ALGO_PAT || ((collnet || nvls) && p != NCCL_PROTO_SIMPLE);
      table[a][p] = off ? static_cast<float>(NCCL_ALGO_PROTO_IGNORE) : 1.0f;
    }
  get_coll_info(coll, n_bytes, &table[0][0], kNumAlgos, kNumProtos, n_channels);
  for (int a = 0; a < kNumAlgos; ++a)
    for (int p = 0; p < kNumProtos; ++p)
      if (table[a][p] == 0.0f) {
        *algo = a;
        *proto = p;
        return;
      }
}

void Tuner::get_chunk_size(int coll, size_t n_bytes, int algo, int proto, int n_channels,
                           size_t* chunk) const {
  if (mode_ == Mode::kOff || chunk == nullptr || coll < 0 || coll >= kNumColls) return;
  for (const ActiveRule& r : rules_[coll]) {
    if (n_bytes < r.size_lo || n_bytes >= r.size_hi) continue;
    if (!user_algo_proto_ &&
        ((r.algo != kAny && r.algo != algo) || (r.proto != kAny && r.proto != proto)))
      continue;
    if (r.chunk != 0) *chunk = static_cast<size_t>(r.chunk);
    return;
  }
  // The model: a rank's share of one step on one channel, cut in at least 4 chunks so the network
  // and the GPU overlap, but no chunk smaller than what one network step's latency is worth.
  if (chunk_floor_ == 0 || proto != NCCL_PROTO_SIMPLE ||
      (algo != NCCL_ALGO_RING && algo != NCCL_ALGO_TREE))
    return;
  const uint64_t nch = static_cast<uint64_t>(n_channels > 0 ? n_channels : shape_.n_channels);
  const uint64_t share = static_cast<uint64_t>(n_bytes) /
                         (nch * static_cast<uint64_t>(std::max(1, facts_.n_ranks)) * 4);
  uint64_t want = share < 2 ? 1 : 1ull << (63 - __builtin_clzll(share));
  if (want < chunk_floor_) want = chunk_floor_;
  if (want < *chunk) *chunk = static_cast<size_t>(want);
}

std::vector<std::string> Tuner::summary_lines() const {
  std::vector<std::string> out;
  if (!use_model_) {
    std::string why = user_algo_proto_ ? "NCCL_ALGO/NCCL_PROTO set"
                      : mode_ == Mode::kRules || mode_ == Mode::kOff
                          ? std::string("mode ") + mode_name(mode_)
                      : facts_.n_nodes < 2 ? "one node: nothing to correct"
                                           : "network unknown: nothing to correct";
    out.push_back("no model choices (" + why + "); NCCL decides where no rule does");
    return out;
  }
  for (int coll = 0; coll < kNumColls; ++coll) {
    std::string line = std::string(coll_name(coll)) + ":";
    const std::vector<Band>& bands = decisions_.bands[coll];
    int last = -1;
    for (size_t i = 0; i < bands.size(); ++i) {
      const int pick = bands[i].n > 0 ? bands[i].pair[0] : -1;
      if (pick == last) continue;
      last = pick;
      line += " [" + format_size(bands[i].lo) + ",";
      size_t j = i + 1;
      while (j < bands.size() && (bands[j].n > 0 ? bands[j].pair[0] : -1) == pick) ++j;
      line += (j < bands.size() ? format_size(bands[j].lo) : std::string("*")) + ") ";
      line += pick < 0 ? std::string("NCCL") : pair_name(pick / kNumProtos, pick % kNumProtos);
    }
    size_t n_rules = rules_[coll].size();
    if (n_rules > 0) line += " (" + std::to_string(n_rules) + " rules first)";
    out.push_back(line);
  }
  return out;
}

std::string Tuner::dump_csv() const {
  std::string out = "coll,size_lo,size_hi,rank,algo,proto,model_cost_us\n";
  char buf[160];
  for (int coll = 0; coll < kNumColls; ++coll) {
    const std::vector<Band>& bands = decisions_.bands[coll];
    for (size_t i = 0; i < bands.size(); ++i) {
      const std::string hi = i + 1 < bands.size() ? std::to_string(bands[i + 1].lo) : "";
      for (int k = 0; k < bands[i].n; ++k) {
        const int a = bands[i].pair[k] / kNumProtos, p = bands[i].pair[k] % kNumProtos;
        std::snprintf(buf, sizeof buf, "%s,%llu,%s,%d,%s,%s,%.3f\n", coll_name(coll),
                      static_cast<unsigned long long>(bands[i].lo), hi.c_str(), k + 1, algo_name(a),
                      proto_name(p), static_cast<double>(bands[i].cost_us[k]));
        out += buf;
      }
    }
  }
  return out;
}

}  // namespace tuner
}  // namespace nf
