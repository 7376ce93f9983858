// The tuner through its ABI as NCCL calls it, every exported version, from both libraries.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/tuner_loader.h"
#include "tuner/nccl_model.h"

using namespace nfc;
using namespace nf::tuner;

namespace {

// Sets variables for one scope and puts back what was there.
class Env {
 public:
  Env& set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.push_back({name, old != nullptr, old != nullptr ? old : ""});
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
    return *this;
  }
  ~Env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had)
        setenv(it->name.c_str(), it->value.c_str(), 1);
      else
        unsetenv(it->name.c_str());
    }
  }

 private:
  struct Saved {
    std::string name;
    bool had;
    std::string value;
  };
  std::vector<Saved> saved_;
};

std::string temp_file(const std::string& text) {
  char path[] = "/tmp/nf-tuner-test-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}

struct Shape {
  int nodes, rpn;
};
const Shape kShapes[] = {{1, 8}, {2, 1}, {2, 8}, {16, 8}, {128, 8}, {1024, 8}, {1024, 1}};

// The cost table NCCL would build for this shape with its default constants.
void nccl_table(const Shape& sh, int coll, size_t bytes, float out[7][3]) {
  ncclTunerConstants_v5_t c;
  nccl_default_constants(&c);
  CommShape s;
  s.n_nodes = sh.nodes;
  s.ranks_per_node = sh.rpn;
  s.n_ranks = sh.nodes * sh.rpn;
  s.n_channels = 16;
  s.inter_bw_gbs = 3.0;
  s.nvls = sh.rpn == 8;
  NcclModel m;
  nccl_build_model(c, s, &m);
  nccl_cost_table(m, s, coll, bytes, 1, out);
}

std::vector<size_t> sizes_1b_to_16g() {
  std::vector<size_t> v;
  for (size_t s = 1; s <= (16ull << 30); s *= 4) v.push_back(s);
  v.push_back(16ull << 30);
  return v;
}

constexpr float kGuard = 12345.5f;

// One call with guard cells around the table; checks everything NCCL relies on and returns the
// pair NCCL would pick afterwards (-1 when the tuner changed nothing).
int checked_call(const TunerLib& lib, void* ctx, int coll, size_t bytes, float (&in)[7][3],
                 int* nch_out) {
  float buf[4 + 21 + 4];
  for (float& g : buf) g = kGuard;
  float* table = buf + 4;
  std::memcpy(table, in, sizeof in);
  int nch = 0;
  REQUIRE(lib.coll_info(ctx, coll, bytes, table, 7, 3, &nch) == ncclSuccess);
  for (int i = 0; i < 4; ++i) {
    CHECK(buf[i] == kGuard);
    CHECK(buf[4 + 21 + i] == kGuard);
  }
  CHECK((nch == 0 || (nch >= 1 && nch <= 64)));
  *nch_out = nch;
  int zero = -1;
  for (int a = 0; a < 7; ++a)
    for (int p = 0; p < 3; ++p) {
      const float before = in[a][p], after = table[a * 3 + p];
      if (before < 0) {
        CHECK(after == before);  // an ignored cell stays ignored
        continue;
      }
      CHECK(after >= 0);  // an available cell stays available
      if (after != before && after == 0.0f && zero < 0) zero = a * 3 + p;
    }
  float picked[7][3];
  std::memcpy(picked, table, sizeof picked);
  int algo = -1, proto = -1;
  if (nccl_pick(picked, &algo, &proto)) CHECK(in[algo][proto] >= 0);
  if (zero >= 0) CHECK(algo * 3 + proto == zero);  // the tuner's choice is what NCCL takes
  return zero;
}

// Loads v5, inits a communicator of `nodes` x `rpn`, and checks the tuner changes nothing: not
// NCCL's constants, not a single call's table.
void expect_hands_off(int nodes, int rpn) {
  TunerLib lib;
  std::string err;
  REQUIRE(lib.load(TunerLib::path(false), 5, &err));
  ncclTunerConstants_v5_t c, c0;
  nccl_default_constants(&c);
  c0 = c;
  void* ctx = nullptr;
  REQUIRE(lib.init(&ctx, static_cast<size_t>(nodes) * rpn, nodes, rpn, &c) == ncclSuccess);
  CHECK(std::memcmp(&c, &c0, sizeof c) == 0);  // NCCL's constants untouched
  for (int coll = 0; coll < 5; ++coll)
    for (size_t b : sizes_1b_to_16g()) {
      float t[7][3];
      nccl_table({nodes, rpn}, coll, b, t);
      int nch = 0;
      CHECK(checked_call(lib, ctx, coll, b, t, &nch) == -1);
      CHECK(nch == 0);
    }
  CHECK(lib.finalize(ctx) == ncclSuccess);
}

}  // namespace

TEST_CASE(
    "every version from both libraries: only available cells win, nothing outside the "
    "table changes, nChannels stays in range",
    "[tuner][abi]") {
  Env env;
  env.set("NCCL_FABRIC_PLATFORM", "p5.48xlarge")
      .set("NCCL_ALGO", nullptr)
      .set("NCCL_PROTO", nullptr);
  std::mt19937 rng(7);
  for (bool tuner_only : {false, true}) {
    for (int v = 2; v <= 6; ++v) {
      INFO((tuner_only ? "libnccl-tuner-fabric" : "libnccl-net-fabric") << " v" << v);
      TunerLib lib;
      std::string err;
      REQUIRE(lib.load(TunerLib::path(tuner_only), v, &err));
      CHECK(std::string(lib.name()) == "fabric");
      int chosen = 0, calls = 0;
      for (const Shape& sh : kShapes) {
        INFO(sh.nodes << " nodes x " << sh.rpn);
        ncclTunerConstants_v5_t c;
        nccl_default_constants(&c);
        void* ctx = nullptr;
        REQUIRE(lib.init(&ctx, static_cast<size_t>(sh.nodes) * sh.rpn, sh.nodes, sh.rpn,
                         v >= 5 ? &c : nullptr) == ncclSuccess);
        REQUIRE(ctx != nullptr);
        for (int coll = 0; coll < 5; ++coll)
          for (size_t bytes : sizes_1b_to_16g()) {
            INFO("coll " << coll << " bytes " << bytes);
            float t[7][3];
            nccl_table(sh, coll, bytes, t);
            // NCCL_ALGO/NCCL_PROTO-style holes: a few available cells ignored at random.
            for (int a = 0; a < 7; ++a)
              for (int p = 0; p < 3; ++p)
                if (t[a][p] >= 0 && rng() % 4 == 0) t[a][p] = NCCL_ALGO_PROTO_IGNORE;
            int nch = 0;
            if (checked_call(lib, ctx, coll, bytes, t, &nch) >= 0) ++chosen;
            ++calls;
          }
        CHECK(lib.finalize(ctx) == ncclSuccess);
      }
      // The model decides most calls (v2 sees only some of the table); a tuner that never chose
      // would pass every check above.
      CHECK(chosen > calls / 2);
    }
  }
}

TEST_CASE("a NULL context is safe in every entry point", "[tuner][abi]") {
  for (int v = 2; v <= 6; ++v) {
    INFO("v" << v);
    TunerLib lib;
    std::string err;
    REQUIRE(lib.load(TunerLib::path(false), v, &err));
    float t[7][3];
    for (int a = 0; a < 7; ++a)
      for (int p = 0; p < 3; ++p) t[a][p] = 10.0f + a + p;
    float before[7][3];
    std::memcpy(before, t, sizeof t);
    int nch = 0;
    CHECK(lib.coll_info(nullptr, 4, 4096, &t[0][0], 7, 3, &nch) == ncclSuccess);
    CHECK(std::memcmp(before, t, sizeof t) == 0);
    CHECK(nch == 0);
    size_t chunk = 1234;
    if (v == 6) {
      CHECK(lib.chunk_size(nullptr, 4, 4096, 1, 2, &chunk));
      CHECK(chunk == 1234);
    }
    CHECK(lib.finalize(nullptr) == ncclSuccess);
  }
}

TEST_CASE("two threads on two communicators get the answers one thread gets", "[tuner][threads]") {
  Env env;
  env.set("NCCL_FABRIC_PLATFORM", "p5.48xlarge");
  TunerLib lib;
  std::string err;
  REQUIRE(lib.load(TunerLib::path(false), 5, &err));
  void* ctx[2] = {nullptr, nullptr};
  ncclTunerConstants_v5_t c[2];
  const Shape shapes[2] = {{16, 8}, {2, 1}};
  for (int i = 0; i < 2; ++i) {
    nccl_default_constants(&c[i]);
    REQUIRE(lib.init(&ctx[i], static_cast<size_t>(shapes[i].nodes) * shapes[i].rpn, shapes[i].nodes,
                     shapes[i].rpn, &c[i]) == ncclSuccess);
  }
  const std::vector<size_t> sizes = sizes_1b_to_16g();
  // What one thread sees.
  std::vector<int> expect[2];
  for (int i = 0; i < 2; ++i)
    for (int coll = 0; coll < 5; ++coll)
      for (size_t b : sizes) {
        float t[7][3];
        nccl_table(shapes[i], coll, b, t);
        int nch = 0;
        lib.coll_info(ctx[i], coll, b, &t[0][0], 7, 3, &nch);
        int a = -1, p = -1;
        nccl_pick(t, &a, &p);
        expect[i].push_back(a * 3 + p);
      }
  int mismatches[2] = {0, 0};
  auto run = [&](int i) {
    float base[5][32][7][3];
    for (int coll = 0; coll < 5; ++coll)
      for (size_t k = 0; k < sizes.size(); ++k)
        nccl_table(shapes[i], coll, sizes[k], base[coll][k]);
    for (int round = 0; round < 200; ++round)
      for (int coll = 0; coll < 5; ++coll)
        for (size_t k = 0; k < sizes.size(); ++k) {
          float t[7][3];
          std::memcpy(t, base[coll][k], sizeof t);
          int nch = 0;
          lib.coll_info(ctx[i], coll, sizes[k], &t[0][0], 7, 3, &nch);
          int a = -1, p = -1;
          nccl_pick(t, &a, &p);
          if (a * 3 + p != expect[i][static_cast<size_t>(coll) * sizes.size() + k]) ++mismatches[i];
        }
  };
  REQUIRE(sizes.size() <= 32);
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  CHECK(mismatches[0] == 0);
  CHECK(mismatches[1] == 0);
  for (void* x : ctx) CHECK(lib.finalize(x) == ncclSuccess);
}

TEST_CASE("rules: first match wins, an ignored pair skips its rule, channels and chunk apply",
          "[tuner][rules]") {
  const std::string path = temp_file(
      "# test rules\n"
      "allreduce  [0,64K)   *  *  *  tree            ll     *   *\n"
      "allreduce  [64K,1M)  *  *  *  collnet_direct  simple *   *      # NCCL ignores CollNet\n"
      "allreduce  [64K,1M)  *  *  *  ring            ll128  12  256K\n"
      "allgather  *         2  *  *  ring            *      *   *\n"
      "broadcast  *         *  *  *  *               *      3   *\n");
  Env env;
  env.set("NCCL_FABRIC_TUNER_RULES", path.c_str()).set("NCCL_FABRIC_PLATFORM", "p5.48xlarge");
  for (int v = 3; v <= 6; ++v) {
    INFO("v" << v);
    TunerLib lib;
    std::string err;
    REQUIRE(lib.load(TunerLib::path(true), v, &err));
    const Shape two = {2, 8};
    void* ctx = nullptr;
    ncclTunerConstants_v5_t c;
    nccl_default_constants(&c);
    REQUIRE(lib.init(&ctx, 16, 2, 8, v >= 5 ? &c : nullptr) == ncclSuccess);
    float t[7][3];
    int nch = 0;
    nccl_table(two, 4, 1024, t);
    REQUIRE(t[NCCL_ALGO_TREE][NCCL_PROTO_LL] >= 0);
    CHECK(checked_call(lib, ctx, 4, 1024, t, &nch) == NCCL_ALGO_TREE * 3 + NCCL_PROTO_LL);
    CHECK(nch == 0);
    // 100 KiB: the CollNet rule is skipped (its cell is ignored), the next one applies.
    nccl_table(two, 4, 100 << 10, t);
    REQUIRE(t[NCCL_ALGO_COLLNET_DIRECT][NCCL_PROTO_SIMPLE] < 0);
    CHECK(checked_call(lib, ctx, 4, 100 << 10, t, &nch) == NCCL_ALGO_RING * 3 + NCCL_PROTO_LL128);
    CHECK(nch == 12);
    // The same rule with ring/ll128 ignored by NCCL: skipped too, never forced.
    nccl_table(two, 4, 100 << 10, t);
    t[NCCL_ALGO_RING][NCCL_PROTO_LL128] = NCCL_ALGO_PROTO_IGNORE;
    CHECK(checked_call(lib, ctx, 4, 100 << 10, t, &nch) != NCCL_ALGO_RING * 3 + NCCL_PROTO_LL128);
    CHECK(nch == 0);
    // allgather on 2 nodes: ring, with the protocol NCCL's table finds cheapest.
    nccl_table(two, 2, 1 << 20, t);
    int best = -1;
    for (int p = 0; p < 3; ++p)
      if (t[NCCL_ALGO_RING][p] >= 0 && (best < 0 || t[NCCL_ALGO_RING][p] < t[NCCL_ALGO_RING][best]))
        best = p;
    REQUIRE(best >= 0);
    CHECK(checked_call(lib, ctx, 2, 1 << 20, t, &nch) == NCCL_ALGO_RING * 3 + best);
    // broadcast: the rule sets only channels; the pair is the model's.
    nccl_table(two, 0, 1 << 20, t);
    checked_call(lib, ctx, 0, 1 << 20, t, &nch);
    CHECK(nch == 3);
    size_t chunk = 1 << 20;
    if (v == 6) {
      CHECK(lib.chunk_size(ctx, 4, 100 << 10, NCCL_ALGO_RING, NCCL_PROTO_LL128, &chunk));
      CHECK(chunk == 256 * 1024);
      chunk = 777;
      CHECK(lib.chunk_size(ctx, 4, 100 << 10, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, &chunk));
      CHECK(chunk == 777);  // not the rule's pair
      CHECK(lib.chunk_size(ctx, 4, 2 << 20, NCCL_ALGO_RING, NCCL_PROTO_LL128, &chunk));
      CHECK(chunk == 777);  // outside its sizes
    }
    CHECK(lib.finalize(ctx) == ncclSuccess);
    // On 4 nodes the allgather rule does not apply.
    REQUIRE(lib.init(&ctx, 32, 4, 8, v >= 5 ? &c : nullptr) == ncclSuccess);
    nccl_table({4, 8}, 2, 1 << 20, t);
    t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = NCCL_ALGO_PROTO_IGNORE;
    t[NCCL_ALGO_RING][NCCL_PROTO_LL] = NCCL_ALGO_PROTO_IGNORE;
    t[NCCL_ALGO_RING][NCCL_PROTO_LL128] = NCCL_ALGO_PROTO_IGNORE;
    const int pick = checked_call(lib, ctx, 2, 1 << 20, t, &nch);
    CHECK(pick / 3 != NCCL_ALGO_RING);
    CHECK(lib.finalize(ctx) == ncclSuccess);
  }
  unlink(path.c_str());
}

TEST_CASE("a bad rules file or mode leaves every choice to NCCL, and init still succeeds",
          "[tuner][rules]") {
  const std::string bad =
      temp_file("allreduce [0,64K) * * * tree ll * *\nallreduce [4M,1M) * * * ring ll * *\n");
  struct Case {
    const char* var;
    const char* value;
  } cases[] = {{"NCCL_FABRIC_TUNER_RULES", bad.c_str()},
               {"NCCL_FABRIC_TUNER_RULES", "/nonexistent/rules"},
               {"NCCL_FABRIC_TUNER", "bogus"},
               {"NCCL_FABRIC_TUNER", "off"},
               {"NCCL_FABRIC_TUNER", "rules"}};  // rules mode without a file
  for (const Case& k : cases) {
    INFO(k.var << "=" << k.value);
    Env env;
    env.set(k.var, k.value).set("NCCL_FABRIC_PLATFORM", "p5.48xlarge");
    expect_hands_off(16, 8);
  }
  unlink(bad.c_str());
}

TEST_CASE("NCCL_ALGO or NCCL_PROTO set: the pair is NCCL's, rule channels still apply",
          "[tuner][rules]") {
  const std::string path = temp_file("allreduce * * * * tree ll 5 *\n");
  for (const char* var : {"NCCL_ALGO", "NCCL_PROTO"}) {
    INFO(var);
    Env env;
    env.set("NCCL_FABRIC_TUNER_RULES", path.c_str()).set(var, "ring");
    TunerLib lib;
    std::string err;
    REQUIRE(lib.load(TunerLib::path(false), 5, &err));
    void* ctx = nullptr;
    ncclTunerConstants_v5_t c;
    nccl_default_constants(&c);
    REQUIRE(lib.init(&ctx, 16, 2, 8, &c) == ncclSuccess);
    float t[7][3];
    nccl_table({2, 8}, 4, 4096, t);
    int nch = 0;
    CHECK(checked_call(lib, ctx, 4, 4096, t, &nch) == -1);
    CHECK(nch == 5);
    lib.finalize(ctx);
  }
  unlink(path.c_str());
}

TEST_CASE("v5 init corrects NCCL's network constants on several nodes only", "[tuner][abi]") {
  Env env;
  env.set("NCCL_FABRIC_PLATFORM", "p5.48xlarge");
  TunerLib lib;
  std::string err;
  REQUIRE(lib.load(TunerLib::path(false), 5, &err));
  ncclTunerConstants_v5_t c0;
  nccl_default_constants(&c0);
  ncclTunerConstants_v5_t one = c0, many = c0;
  void* ctx = nullptr;
  REQUIRE(lib.init(&ctx, 8, 1, 8, &one) == ncclSuccess);
  lib.finalize(ctx);
  CHECK(std::memcmp(&one, &c0, sizeof c0) == 0);
  REQUIRE(lib.init(&ctx, 128, 16, 8, &many) == ncclSuccess);
  lib.finalize(ctx);
  // EFA with GPUDirect: 20 µs a network step, far above NCCL's 2.7.
  CHECK(many.hwLatencies[NCCL_HW_NET][NCCL_ALGO_RING][NCCL_PROTO_LL] == Approx(20.0));
  CHECK(many.hwLatencies[NCCL_HW_NET][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] >
        c0.hwLatencies[NCCL_HW_NET][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE]);
  // Intra-node latencies are not the network's.
  CHECK(std::memcmp(many.hwLatencies[NCCL_HW_NVLINK], c0.hwLatencies[NCCL_HW_NVLINK],
                    sizeof c0.hwLatencies[NCCL_HW_NVLINK]) == 0);
  CHECK(std::memcmp(many.baseLatencies, c0.baseLatencies, sizeof c0.baseLatencies) == 0);
  // The user's figure wins.
  Env lat;
  lat.set("NCCL_FABRIC_TUNER_NET_LATENCY", "50");
  ncclTunerConstants_v5_t mine = c0;
  REQUIRE(lib.init(&ctx, 128, 16, 8, &mine) == ncclSuccess);
  lib.finalize(ctx);
  CHECK(mine.hwLatencies[NCCL_HW_NET][NCCL_ALGO_RING][NCCL_PROTO_LL] == Approx(50.0));
}

TEST_CASE("NCCL_FABRIC_TUNER_DUMP writes the decision table as CSV", "[tuner][abi]") {
  char dir[] = "/tmp/nf-tuner-dump-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string pattern = std::string(dir) + "/dump-%p.csv";
  const std::string path = std::string(dir) + "/dump-" + std::to_string(getpid()) + ".csv";
  Env env;
  env.set("NCCL_FABRIC_TUNER_DUMP", pattern.c_str()).set("NCCL_FABRIC_PLATFORM", "p5.48xlarge");
  TunerLib lib;
  std::string err;
  REQUIRE(lib.load(TunerLib::path(false), 5, &err));
  void* ctx = nullptr;
  ncclTunerConstants_v5_t c;
  nccl_default_constants(&c);
  REQUIRE(lib.init(&ctx, 128, 16, 8, &c) == ncclSuccess);
  lib.finalize(ctx);
  std::ifstream f(path);
  REQUIRE(f.good());
  std::string line;
  REQUIRE(std::getline(f, line));
  CHECK(line == "coll,size_lo,size_hi,rank,algo,proto,model_cost_us");
  int rows = 0, colls_seen = 0;
  std::string last_coll;
  while (std::getline(f, line)) {
    ++rows;
    const std::string coll = line.substr(0, line.find(','));
    if (coll != last_coll) ++colls_seen;
    last_coll = coll;
  }
  CHECK(rows > 20);
  CHECK(colls_seen == 5);
  unlink(path.c_str());
  rmdir(dir);
}

TEST_CASE("v6 getChunkSize: the model pipelines Simple across nodes, within NCCL's chunk",
          "[tuner][abi]") {
  Env env;
  env.set("NCCL_FABRIC_PLATFORM", "p5.48xlarge");
  TunerLib lib;
  std::string err;
  REQUIRE(lib.load(TunerLib::path(false), 6, &err));
  ncclTunerConstants_v5_t c;
  nccl_default_constants(&c);
  void* ctx = nullptr;
  REQUIRE(lib.init(&ctx, 128, 16, 8, &c) == ncclSuccess);
  const size_t kDefault = 512 << 10;
  auto chunk = [&](size_t bytes, int algo, int proto, int nch) {
    size_t ck = kDefault;
    REQUIRE(lib.chunk_size(ctx, 4, bytes, algo, proto, &ck, nch));
    return ck;
  };
  // 8 MiB over 32 channels and 128 ranks is 2 KiB a rank and channel per step: far below one
  // network step's worth on p5 (20 us x 1.56 GB/s, 32 KiB), so the floor.
  CHECK(chunk(8 << 20, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 32) == 32 * 1024);
  // 1 GiB: 256 KiB a step, a quarter is 64 KiB.
  CHECK(chunk(1ull << 30, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 32) == 64 * 1024);
  CHECK(chunk(1ull << 30, NCCL_ALGO_TREE, NCCL_PROTO_SIMPLE, 32) == 64 * 1024);
  // 16 GiB: a quarter step is 1 MiB, more than NCCL's: never raised.
  CHECK(chunk(16ull << 30, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 32) == kDefault);
  // Not Simple, or not Ring/Tree: NCCL's.
  CHECK(chunk(8 << 20, NCCL_ALGO_RING, NCCL_PROTO_LL128, 32) == kDefault);
  CHECK(chunk(8 << 20, NCCL_ALGO_NVLS_TREE, NCCL_PROTO_SIMPLE, 32) == kDefault);
  lib.finalize(ctx);
  // One node: the network is not in the way.
  REQUIRE(lib.init(&ctx, 8, 1, 8, &c) == ncclSuccess);
  CHECK(chunk(8 << 20, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 32) == kDefault);
  lib.finalize(ctx);
  // Rules only: the model does not decide.
  Env rules;
  rules.set("NCCL_FABRIC_TUNER", "rules");
  REQUIRE(lib.init(&ctx, 128, 16, 8, &c) == ncclSuccess);
  CHECK(chunk(8 << 20, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 32) == kDefault);
  lib.finalize(ctx);
}

TEST_CASE("no model choices where there is nothing to correct: one node, unknown network",
          "[tuner][abi]") {
  struct Case {
    const char* platform;
    int nodes;
  } cases[] = {{"p5.48xlarge", 1}, {"none", 16}};
  for (const Case& k : cases) {
    INFO(k.platform << " x " << k.nodes);
    Env env;
    env.set("NCCL_FABRIC_PLATFORM", k.platform);
    expect_hands_off(k.nodes, 8);
  }
}

TEST_CASE(
    "LL128 is never picked across nodes where the net plugin found the provider cannot "
    "order 128-byte lines; NCCL_PROTO it set itself is not the user's",
    "[tuner][ll128]") {
  // How often the model's pick (what NCCL then takes) is LL128, over collectives and sizes on 16
  // p5 nodes; with `off`, also that every LL128 cell is ignored.
  auto ll128_picks = [](bool off, int nodes, bool* cells_ignored) {
    Env env;
    env.set("NCCL_FABRIC_PLATFORM", "p5.48xlarge")
        .set("NCCL_FABRIC_INTERNAL_LL128_OFF", off ? "set-proto" : nullptr)
        .set("NCCL_PROTO", off ? "^LL128" : nullptr)
        .set("NCCL_ALGO", nullptr);
    TunerLib lib;
    std::string err;
    REQUIRE(lib.load(TunerLib::path(false), 5, &err));
    void* ctx = nullptr;
    ncclTunerConstants_v5_t c;
    nccl_default_constants(&c);
    REQUIRE(lib.init(&ctx, static_cast<size_t>(nodes) * 8, static_cast<size_t>(nodes), 8, &c) ==
            ncclSuccess);
    int picks = 0;
    *cells_ignored = true;
    for (int coll : {2, 3, 4}) {  // AllGather, ReduceScatter, AllReduce
      for (size_t bytes = 1024; bytes <= (size_t{1} << 30); bytes *= 4) {
        float t[7][3];
        nccl_table({nodes, 8}, coll, bytes, t);
        int nch = 0;
        REQUIRE(lib.coll_info(ctx, coll, bytes, &t[0][0], 7, 3, &nch) == ncclSuccess);
        for (int a = 0; a < 7; ++a)
          if (t[a][NCCL_PROTO_LL128] >= 0) *cells_ignored = false;
        int algo = -1, proto = -1;
        if (nccl_pick(t, &algo, &proto) && proto == NCCL_PROTO_LL128) ++picks;
      }
    }
    lib.finalize(ctx);
    return picks;
  };
  bool ignored = false;
  // Without the flag the model does pick LL128 somewhere (so the check below can fail)...
  CHECK(ll128_picks(false, 16, &ignored) > 0);
  CHECK_FALSE(ignored);
  // ... with it, never, and NCCL sees every LL128 cell ignored.
  CHECK(ll128_picks(true, 16, &ignored) == 0);
  CHECK(ignored);
  // One node: nothing crosses the network, LL128 stays NCCL's to pick.
  ll128_picks(true, 1, &ignored);
  CHECK_FALSE(ignored);
}
