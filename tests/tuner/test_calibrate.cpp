// nccl-tests log parsing and calibration into tuner rules. The g5 log is real output; the
// synthetic-* logs were written for these tests by tests/tuner/data/make_synthetic.py (see its
// README), with the winners per size worked out by hand from the printed times.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tools/tune/nccltests.h"

using nf::Status;
using nf::tune::calibrate;
using nf::tune::CalibrateOptions;
using nf::tune::load_nccl_tests;
using nf::tune::NcclTestsLog;
using nf::tune::NcclTestsRow;
using nf::tune::parse_nccl_tests;
namespace tuner = nf::tuner;

namespace {

constexpr int kTree = 0, kRing = 1;
constexpr int kLL = 0, kLL128 = 1, kSimple = 2;
constexpr int kAllGather = 2, kAllReduce = 4;

std::string data(const std::string& name) { return std::string(NF_TUNER_DATA) + "/" + name; }

std::string synth(const std::string& pair) {
  return data("synthetic-2nodes-4ranks-all_reduce-" + pair + ".log");
}

NcclTestsLog load(const std::string& path) {
  NcclTestsLog log;
  std::string error;
  INFO(path);
  REQUIRE(load_nccl_tests(path, &log, &error) == Status::kOk);
  INFO(error);
  CHECK(error.empty());
  return log;
}

// The five forced pairs; ring/simple carries no NCCL_ALGO/NCCL_PROTO lines, so it is labelled
// as the tool's --label would.
std::vector<NcclTestsLog> five_pairs() {
  std::vector<NcclTestsLog> logs = {load(synth("tree-ll")), load(synth("ring-ll")),
                                    load(synth("ring-ll128")), load(synth("ring-simple")),
                                    load(synth("tree-simple"))};
  logs[3].algo = kRing;
  logs[3].proto = kSimple;
  return logs;
}

// A small untagged log: a Rank line per entry of hosts, then the table.
std::string mini_log(const std::string& before_table, const std::string& rows,
                     const std::vector<std::string>& hosts = {"h0", "h1"}) {
  std::string t = "# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor)\n#\n";
  for (size_t i = 0; i < hosts.size(); ++i)
    t += "#  Rank  " + std::to_string(i) + " Group  0 Pid 1 on " + hosts[i] + " device  0 X\n";
  t += before_table;
  t += "NCCL version 2.26.2+cuda12.2\n#\n";
  t += "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
       "time   algbw   busbw #wrong\n";
  t += "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            "
       "(us)  (GB/s)  (GB/s)\n";
  t += rows;
  t += "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.1\n#\n";
  return t;
}

const char* kRows =
    "           8             2     float     sum      -1    20.00    0.00    0.00      0    "
    "20.10    0.00    0.00      0\n"
    "          16             4     float     sum      -1    21.00    0.00    0.00      0    "
    "21.10    0.00    0.00      0\n";

// An in-memory log of one pair with the given out-of-place times (in-place the same).
NcclTestsLog fake(const std::string& path, int algo, int proto,
                  const std::vector<std::pair<uint64_t, double>>& times) {
  NcclTestsLog l;
  l.path = path;
  l.coll = kAllReduce;
  l.n_ranks = 4;
  l.n_nodes = 2;
  l.ranks_per_node = 2;
  l.algo = algo;
  l.proto = proto;
  for (const auto& t : times) {
    NcclTestsRow r;
    r.bytes = t.first;
    r.count = t.first / 4;
    r.type = "float";
    r.redop = "sum";
    r.time_us = r.ip_time_us = t.second;
    l.rows.push_back(r);
  }
  return l;
}

struct Expect {
  uint64_t lo, hi;
  int algo, proto;
};

void check_rules(const std::vector<tuner::Rule>& rules, const std::vector<Expect>& want) {
  REQUIRE(rules.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("rule " << i << ": " << rules[i].comment);
    CHECK(rules[i].size_lo == want[i].lo);
    CHECK(rules[i].size_hi == want[i].hi);
    CHECK(rules[i].algo == want[i].algo);
    CHECK(rules[i].proto == want[i].proto);
  }
}

Status calib(const std::vector<NcclTestsLog>& logs, std::vector<tuner::Rule>* rules,
             std::string* error, CalibrateOptions opt = CalibrateOptions()) {
  return calibrate(logs, opt, rules, error);
}

}  // namespace

TEST_CASE("the shipped g5.8xlarge all_reduce log parses", "[calibrate]") {
  const NcclTestsLog log = load(data("g5.8xlarge-2nodes-efa-nogdr-all_reduce.log"));
  CHECK(log.n_ranks == 2);
  CHECK(log.n_nodes == 2);
  CHECK(log.ranks_per_node == 1);
  CHECK(log.nccl_version == "2.26.2+cuda12.2");
  CHECK(log.coll == kAllReduce);  // from the file name: this nccl-tests prints no program name
  CHECK(log.algo == -1);
  CHECK(log.proto == -1);
  CHECK(log.avg_busbw == Approx(1.35737));
  REQUIRE(log.rows.size() == 30);  // 8 B .. 4 GiB, powers of two
  const NcclTestsRow& first = log.rows.front();
  CHECK(first.bytes == 8);
  CHECK(first.count == 2);
  CHECK(first.type == "float");
  CHECK(first.redop == "sum");
  CHECK(first.time_us == Approx(67.14));
  CHECK(first.ip_time_us == Approx(67.69));
  CHECK(first.wrong == 0);
  CHECK(first.ip_wrong == 0);
  const NcclTestsRow& big = log.rows[22];
  CHECK(big.bytes == 33554432);
  CHECK(big.time_us == Approx(12124));
  CHECK(big.algbw == Approx(2.77));
  CHECK(big.busbw == Approx(2.77));
  CHECK(big.ip_time_us == Approx(12060));
  CHECK(big.ip_busbw == Approx(2.78));
  const NcclTestsRow& last = log.rows.back();
  CHECK(last.bytes == 4294967296ull);
  CHECK(last.count == 1073741824ull);
  CHECK(last.time_us == Approx(1491861));
  CHECK(last.ip_time_us == Approx(1490178));
}

TEST_CASE("tagged log: pair from NCCL INFO lines, chatter inside the table skipped",
          "[calibrate]") {
  const NcclTestsLog log = load(synth("ring-ll"));
  CHECK(log.coll == kAllReduce);
  CHECK(log.algo == kRing);
  CHECK(log.proto == kLL);
  CHECK(log.n_ranks == 4);
  CHECK(log.n_nodes == 2);
  CHECK(log.ranks_per_node == 2);
  CHECK(log.nccl_version == "2.27.3+cuda12.8");
  // The "[1,3]<stderr>:1024 ..." line in the table is no row: 24 sizes, 8 B .. 64 MiB.
  REQUIRE(log.rows.size() == 24);
  CHECK(log.rows[6].bytes == 512);
  CHECK(log.rows[6].time_us == Approx(27.66));
  CHECK(log.rows.back().bytes == 64ull << 20);

  const NcclTestsLog lower = load(synth("ring-ll128"));  // "ring", "ll128"
  CHECK(lower.algo == kRing);
  CHECK(lower.proto == kLL128);
}

TEST_CASE("untagged -c 0 log: #wrong N/A, collective from the file name", "[calibrate]") {
  const NcclTestsLog log = load(synth("ring-simple"));
  CHECK(log.coll == kAllReduce);
  CHECK(log.algo == -1);  // no NCCL INFO lines: needs a label
  CHECK(log.proto == -1);
  CHECK(log.n_ranks == 4);
  REQUIRE(log.rows.size() == 24);
  CHECK(log.rows[0].wrong == -1);
  CHECK(log.rows[0].ip_wrong == -1);
  CHECK(log.rows[0].time_us == Approx(59.81));
}

TEST_CASE("out-of-place-only log with mixed-case NCCL_ALGO/NCCL_PROTO", "[calibrate]") {
  const NcclTestsLog log = load(synth("tree-simple"));
  CHECK(log.algo == kTree);        // "TREE"
  CHECK(log.proto == kSimple);     // "Simple"
  REQUIRE(log.rows.size() == 22);  // maxBytes reduced to 16 MiB
  CHECK(log.rows.back().bytes == 16u << 20);
  CHECK(log.rows.back().time_us == Approx(4041.5));
  CHECK(log.rows.back().busbw == Approx(6.23));
  CHECK(log.rows.back().ip_time_us == -1);
  CHECK(log.rows.back().ip_busbw == -1);
}

TEST_CASE("all_gather_perf log with redop none", "[calibrate]") {
  const NcclTestsLog log = load(data("synthetic-2nodes-4ranks-all_gather_perf-ring-simple.log"));
  CHECK(log.coll == kAllGather);
  CHECK(log.algo == kRing);
  CHECK(log.proto == kSimple);
  REQUIRE(log.rows.size() == 24);
  CHECK(log.rows[3].redop == "none");
  CHECK(log.rows[3].bytes == 64);
}

TEST_CASE("NCCL_ALGO that is not one plain algorithm is unknown", "[calibrate]") {
  auto algo_of = [](const std::string& value) {
    const std::string info = "[1,0]<stdout>:h0:1:1 [0] NCCL INFO NCCL_ALGO set by environment to " +
                             value +
                             "\n[1,0]<stdout>:h0:1:1 [0] NCCL INFO NCCL_PROTO set by "
                             "environment to LL128\n";
    NcclTestsLog log;
    std::string error;
    REQUIRE(parse_nccl_tests(mini_log(info, kRows), "x.log", &log, &error) == Status::kOk);
    CHECK(log.proto == kLL128);
    return log.algo;
  };
  CHECK(algo_of("Ring") == kRing);
  CHECK(algo_of("tree") == kTree);
  CHECK(algo_of("NVLSTree") == 5);
  CHECK(algo_of("collnet_direct") == 2);
  CHECK(algo_of("PAT") == 6);
  CHECK(algo_of("Ring,Tree") == -1);
  CHECK(algo_of("allreduce:tree") == -1);
  CHECK(algo_of("^Tree") == -1);
  CHECK(algo_of("Bogus") == -1);

  // Ranks that disagree leave it unknown.
  const std::string two =
      "h0:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring\n"
      "h1:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Tree\n";
  NcclTestsLog log;
  std::string error;
  REQUIRE(parse_nccl_tests(mini_log(two, kRows), "x.log", &log, &error) == Status::kOk);
  CHECK(log.algo == -1);
}

TEST_CASE("collective from the program line, else the file name", "[calibrate]") {
  auto coll_of = [](const std::string& path, const std::string& before) {
    NcclTestsLog log;
    std::string error;
    REQUIRE(parse_nccl_tests(before + mini_log("", kRows), path, &log, &error) == Status::kOk);
    return log.coll;
  };
  CHECK(coll_of("logs/reduce_perf.log", "") == 1);
  CHECK(coll_of("logs/run-reduce.log", "") == 1);
  CHECK(coll_of("logs/reduce_scatter_perf.txt", "") == 3);
  CHECK(coll_of("logs/ReduceScatter.txt", "") == 3);
  CHECK(coll_of("logs/all_gather_perf-8.log", "") == 2);
  CHECK(coll_of("logs/broadcast.log", "") == 0);
  CHECK(coll_of("logs/allreduce.log", "") == kAllReduce);
  CHECK(coll_of("logs/reduced.log", "") == -1);  // no collective, only a word containing one
  CHECK(coll_of("logs/all_reduce-vs-all_gather.log", "") == -1);
  CHECK(coll_of("logs/run.log", "") == -1);
  CHECK(coll_of("reduce_dir/run.log", "") == -1);  // only the file name counts
  CHECK(coll_of("logs/all_reduce.log", "# Collective test starting: reduce_scatter_perf\n") == 3);
}

TEST_CASE("a malformed row fails with path and line", "[calibrate]") {
  auto error_of = [](const std::string& rows) {
    NcclTestsLog log;
    std::string error;
    CHECK(parse_nccl_tests(mini_log("", rows), "mem.log", &log, &error) ==
          Status::kInvalidArgument);
    return error;
  };
  // mini_log: 2 lines, 2 Rank lines, version, '#', header, units: the first row is line 9.
  const std::string good = std::string(kRows);
  std::string e = error_of(good +
                           "          32             8     float     sum      -1    2x.00"
                           "    0.00    0.00      0    20.10    0.00    0.00      0\n");
  CHECK(e.rfind("mem.log:11: ", 0) == 0);
  CHECK(e.find("2x.00") != std::string::npos);
  e = error_of("          32             8     float     sum      -1    20.00    0.00\n");
  CHECK(e.rfind("mem.log:9: ", 0) == 0);
  CHECK(e.find("7 fields") != std::string::npos);
  e = error_of(good +
               "          32             8     float     sum      -1    20.00    0.00"
               "    0.00      x    20.10    0.00    0.00      0\n");
  CHECK(e.rfind("mem.log:11: ", 0) == 0);
  e = error_of(
      "          32             8     float     sum      zz    20.00    0.00    0.00"
      "      0    20.10    0.00    0.00      0\n");
  CHECK(e.rfind("mem.log:9: ", 0) == 0);
  // With a tag prefix the line number is still the file's.
  e = error_of("[1,0]<stdout>:          32             8     float     sum      -1    20.00\n");
  CHECK(e.rfind("mem.log:9: ", 0) == 0);

  // Only out-of-place figures on a row is fine (builds that print one group).
  NcclTestsLog log;
  std::string error;
  REQUIRE(parse_nccl_tests(mini_log("", "  32  8  float  sum  -1  20.00  0.00  0.00  0\n"),
                           "mem.log", &log, &error) == Status::kOk);
  REQUIRE(log.rows.size() == 1);
  CHECK(log.rows[0].ip_time_us == -1);
  CHECK(log.rows[0].ip_wrong == -1);

  // Two runs pasted into one file.
  CHECK(parse_nccl_tests(mini_log("", kRows) + mini_log("", kRows), "two.log", &log, &error) ==
        Status::kInvalidArgument);
  CHECK(error.rfind("two.log:", 0) == 0);
}

TEST_CASE("a log without result rows is an error naming the path", "[calibrate]") {
  NcclTestsLog log;
  std::string error;
  CHECK(parse_nccl_tests("", "empty.log", &log, &error) == Status::kInvalidArgument);
  CHECK(error.rfind("empty.log: ", 0) == 0);
  error.clear();
  CHECK(parse_nccl_tests(mini_log("", ""), "header-only.log", &log, &error) ==
        Status::kInvalidArgument);
  CHECK(error.rfind("header-only.log: ", 0) == 0);
  error.clear();
  // Rows without a table header are not taken on trust.
  CHECK(parse_nccl_tests(kRows, "noheader.log", &log, &error) == Status::kInvalidArgument);
  CHECK(error.rfind("noheader.log: ", 0) == 0);
  error.clear();
  CHECK(load_nccl_tests(data("no-such-file.log"), &log, &error) == Status::kInvalidArgument);
  CHECK(error.find("no-such-file.log: cannot open") != std::string::npos);
}

TEST_CASE("calibrate: five forced pairs, fastest pair per size merged into intervals",
          "[calibrate]") {
  std::vector<tuner::Rule> rules;
  std::string error;
  REQUIRE(calib(five_pairs(), &rules, &error) == Status::kOk);
  // tree/ll to 2K; ring/ll 4K (31.60 us vs tree/ll 32.70) and 8K; ring/ll128 from 16K, and at
  // 128K too: 83.5 us is within 3 % of ring/simple's 82.17; ring/simple from 256K.
  check_rules(rules, {{0, 4096, kTree, kLL},
                      {4096, 16384, kRing, kLL},
                      {16384, 262144, kRing, kLL128},
                      {262144, tuner::kNoLimit, kRing, kSimple}});
  for (const tuner::Rule& r : rules) {
    CHECK(r.coll == kAllReduce);
    CHECK(r.nodes.lo == 2);
    CHECK(r.nodes.hi == 2);
    CHECK(r.ranks.lo == 4);
    CHECK(r.ranks.hi == 4);
    CHECK(r.rpn.lo == 2);
    CHECK(r.rpn.hi == 2);
    CHECK(r.channels == tuner::kAny);
    CHECK(r.chunk == 0);
    CHECK(r.line == 0);
  }
  CHECK(rules[0].comment == "measured 8-2K: tree/ll 19.5 us vs next best ring/ll 27.2 us at 128");
  // tree/ll's 32K row has #wrong 3, and tree/simple stops at 16M (memory limit).
  CHECK(rules[2].comment ==
        "measured 16K-128K: ring/ll128 61.0 us vs next best tree/simple "
        "67.6 us at 64K; #wrong > 0, not used: tree/ll at 32K");
  CHECK(rules[3].comment ==
        "measured 256K-64M: ring/simple 756.2 us vs next best tree/simple "
        "1046.6 us at 4M; not measured: tree/simple at 32M,64M");
}

TEST_CASE("calibrate: the tolerance decides near ties", "[calibrate]") {
  std::vector<tuner::Rule> rules;
  std::string error;
  CalibrateOptions opt;
  opt.tolerance = 0;  // strictly fastest: ring/simple takes 128K
  REQUIRE(calib(five_pairs(), &rules, &error, opt) == Status::kOk);
  check_rules(rules, {{0, 4096, kTree, kLL},
                      {4096, 16384, kRing, kLL},
                      {16384, 131072, kRing, kLL128},
                      {131072, tuner::kNoLimit, kRing, kSimple}});
  opt.tolerance = 0.05;  // tree/ll at 4K is 3.5 % slower than ring/ll: kept
  REQUIRE(calib(five_pairs(), &rules, &error, opt) == Status::kOk);
  check_rules(rules, {{0, 8192, kTree, kLL},
                      {8192, 16384, kRing, kLL},
                      {16384, 262144, kRing, kLL128},
                      {262144, tuner::kNoLimit, kRing, kSimple}});
  opt.tolerance = -0.1;
  CHECK(calib(five_pairs(), &rules, &error, opt) == Status::kInvalidArgument);
}

TEST_CASE("calibrate: a tie keeps the previous size's winner", "[calibrate]") {
  // a wins 1K; b is 2 % faster at 2K and 4K (ties: a kept); b 10 % faster at 8K wins; a is 1 %
  // faster at 16K (tie: b kept), 20 % faster at 32K wins.
  const std::vector<NcclTestsLog> logs = {
      fake("a.log", kRing, kLL,
           {{1024, 10}, {2048, 10}, {4096, 10}, {8192, 10}, {16384, 9.9}, {32768, 8}}),
      fake("b.log", kTree, kLL,
           {{1024, 11}, {2048, 9.8}, {4096, 9.8}, {8192, 9}, {16384, 10}, {32768, 10}})};
  std::vector<tuner::Rule> rules;
  std::string error;
  REQUIRE(calib(logs, &rules, &error) == Status::kOk);
  check_rules(
      rules,
      {{0, 8192, kRing, kLL}, {8192, 32768, kTree, kLL}, {32768, tuner::kNoLimit, kRing, kLL}});
  CHECK(rules[1].comment ==
        "measured 8K-16K: tree/ll 10.0 us vs ring/ll 9.9 us at 16K (within 3%, kept)");
}

TEST_CASE("calibrate: rows with #wrong > 0 are no evidence", "[calibrate]") {
  std::vector<NcclTestsLog> logs = five_pairs();
  REQUIRE(logs[0].rows[7].bytes == 1024);
  logs[0].rows[7].wrong = 2;  // tree/ll would win 1K; ring/ll takes it instead
  std::vector<tuner::Rule> rules;
  std::string error;
  REQUIRE(calib(logs, &rules, &error) == Status::kOk);
  check_rules(rules, {{0, 1024, kTree, kLL},
                      {1024, 2048, kRing, kLL},
                      {2048, 4096, kTree, kLL},
                      {4096, 16384, kRing, kLL},
                      {16384, 262144, kRing, kLL128},
                      {262144, tuner::kNoLimit, kRing, kSimple}});
  CHECK(rules[1].comment.find("#wrong > 0, not used: tree/ll at 1K") != std::string::npos);

  for (NcclTestsRow& r : logs[0].rows) r.wrong = 1;
  CHECK(calib(logs, &rules, &error) == Status::kInvalidArgument);
  CHECK(error.find("tree-ll.log: every row has #wrong > 0") != std::string::npos);
}

TEST_CASE("calibrate: in-place times when asked", "[calibrate]") {
  std::vector<NcclTestsLog> logs = five_pairs();
  CalibrateOptions opt;
  opt.use_in_place = true;
  std::vector<tuner::Rule> rules;
  std::string error;
  // tree/simple printed no in-place columns.
  CHECK(calib(logs, &rules, &error, opt) == Status::kInvalidArgument);
  CHECK(error.find("tree-simple.log: no in-place columns") != std::string::npos);
  logs.pop_back();
  REQUIRE(calib(logs, &rules, &error, opt) == Status::kOk);
  // In place, ring/ll128 at 128K is 4 % slower than ring/simple: no tie there.
  check_rules(rules, {{0, 4096, kTree, kLL},
                      {4096, 16384, kRing, kLL},
                      {16384, 131072, kRing, kLL128},
                      {131072, tuner::kNoLimit, kRing, kSimple}});
}

TEST_CASE("calibrate: rules for any shape when exact_shape is off", "[calibrate]") {
  std::vector<NcclTestsLog> logs = five_pairs();
  CalibrateOptions opt;
  opt.exact_shape = false;
  std::vector<tuner::Rule> rules;
  std::string error;
  REQUIRE(calib(logs, &rules, &error, opt) == Status::kOk);
  REQUIRE(rules.size() == 4);
  CHECK(rules[0].nodes.any());
  CHECK(rules[0].ranks.any());
  CHECK(rules[0].rpn.any());
}

TEST_CASE("calibrate: inputs that cannot be compared are refused", "[calibrate]") {
  std::vector<tuner::Rule> rules;
  std::string error;
  CHECK(calib({}, &rules, &error) == Status::kInvalidArgument);

  SECTION("a log without its pair") {
    std::vector<NcclTestsLog> logs = five_pairs();
    logs[3].algo = -1;
    CHECK(calib(logs, &rules, &error) == Status::kInvalidArgument);
    CHECK(error.find("ring-simple.log: ") != std::string::npos);
    CHECK(error.find("label") != std::string::npos);
    logs[3].algo = kRing;
    logs[3].proto = -1;
    CHECK(calib(logs, &rules, &error) == Status::kInvalidArgument);
  }
  SECTION("the same pair twice") {
    std::vector<NcclTestsLog> logs = five_pairs();
    logs[3].proto = kLL128;  // mislabelled: ring/ll128 is logs[2]
    CHECK(calib(logs, &rules, &error) == Status::kInvalidArgument);
    CHECK(error.find("ring-simple.log: ring/ll128 again") != std::string::npos);
    CHECK(error.find("ring-ll128.log") != std::string::npos);
  }
  SECTION("different shapes") {
    std::vector<NcclTestsLog> logs = five_pairs();
    NcclTestsLog one_node;
    const std::string text = mini_log(
        "h0:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Tree\n"
        "h0:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL128\n",
        kRows, {"h0", "h0", "h0", "h0"});
    REQUIRE(parse_nccl_tests(text, "one-node-all_reduce.log", &one_node, &error) == Status::kOk);
    CHECK(one_node.n_nodes == 1);
    CHECK(one_node.ranks_per_node == 4);
    logs.push_back(one_node);
    CHECK(calib(logs, &rules, &error) == Status::kInvalidArgument);
    CHECK(error.find("one-node-all_reduce.log: 1 nodes, 4 ranks, 4 per node") != std::string::npos);
  }
  SECTION("different collectives") {
    std::vector<NcclTestsLog> logs = five_pairs();
    logs.pop_back();
    logs.push_back(load(data("synthetic-2nodes-4ranks-all_gather_perf-ring-simple.log")));
    logs.back().proto = kLL128;  // a pair not yet present, so only the collective differs
    logs.back().algo = kTree;
    CHECK(calib(logs, &rules, &error) == Status::kInvalidArgument);
    CHECK(error.find("all_gather_perf-ring-simple.log: allgather, but") != std::string::npos);
  }
  SECTION("a size twice in one log") {
    std::vector<NcclTestsLog> logs = five_pairs();
    logs[1].rows.push_back(logs[1].rows[0]);
    CHECK(calib(logs, &rules, &error) == Status::kInvalidArgument);
    CHECK(error.find("ring-ll.log: size 8 measured twice") != std::string::npos);
  }
}

TEST_CASE("calibrate: the shipped g5 log against a second pair derived from it", "[calibrate]") {
  // The real log, labelled ring/simple, and the same measurements as another pair that is 10 %
  // faster up to 64 KiB and 20 % slower above: the rules must switch at 128 KiB, on the logs'
  // shape (2 nodes, 2 ranks, 1 per node).
  NcclTestsLog a = load(data("g5.8xlarge-2nodes-efa-nogdr-all_reduce.log"));
  a.algo = kRing;
  a.proto = kSimple;
  NcclTestsLog b = a;
  b.path = "derived";
  b.algo = kTree;
  b.proto = kLL;
  for (NcclTestsRow& r : b.rows) r.time_us *= r.bytes <= 65536 ? 0.9 : 1.2;
  std::vector<tuner::Rule> rules;
  std::string error;
  REQUIRE(calibrate({a, b}, CalibrateOptions(), &rules, &error) == Status::kOk);
  check_rules(rules, {{0, 131072, kTree, kLL}, {131072, tuner::kNoLimit, kRing, kSimple}});
  for (const tuner::Rule& r : rules) {
    CHECK(r.nodes.lo == 2);
    CHECK(r.ranks.lo == 2);
    CHECK(r.rpn.lo == 1);
  }
}
