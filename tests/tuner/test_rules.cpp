// The rules file: grammar, strict errors that name the line, and a writer that reads back.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "tuner/rules.h"

using namespace nf;
using namespace nf::tuner;

namespace {

std::string parse_error(const std::string& text) {
  std::vector<Rule> rules;
  std::string error;
  const Status s = parse_rules(text, "r.txt", &rules, &error);
  return s == Status::kOk ? std::string("OK") : error;
}

}  // namespace

TEST_CASE("sizes: K/M/G are powers of 1024, overflow and junk are refused", "[rules]") {
  uint64_t v = 0;
  CHECK((parse_size("0", &v) && v == 0));
  CHECK((parse_size("64K", &v) && v == 65536));
  CHECK((parse_size("4m", &v) && v == 4194304));
  CHECK((parse_size("16G", &v) && v == 17179869184ull));
  CHECK((parse_size("512KiB", &v) && v == 524288));
  CHECK((parse_size("100B", &v) && v == 100));
  CHECK_FALSE(parse_size("", &v));
  CHECK_FALSE(parse_size("K", &v));
  CHECK_FALSE(parse_size("-1", &v));
  CHECK_FALSE(parse_size("1.5M", &v));
  CHECK_FALSE(parse_size("4T", &v));
  CHECK_FALSE(parse_size("99999999999999999999", &v));
  CHECK_FALSE(parse_size("17179869184G", &v));  // overflows 64 bits
  CHECK(format_size(65536) == "64K");
  CHECK(format_size(1000) == "1000");
  CHECK(format_size(3ull << 30) == "3G");
  CHECK(format_size(0) == "0");
}

TEST_CASE("names: ours and NCCL's spellings", "[rules]") {
  CHECK(coll_from_name("allreduce") == 4);
  CHECK(coll_from_name("AllReduce") == 4);
  CHECK(coll_from_name("all_reduce") == 4);
  CHECK(coll_from_name("reduce") == 1);
  CHECK(coll_from_name("reducescatter") == 3);
  CHECK(coll_from_name("*") == kAny);
  CHECK(coll_from_name("alltoall") == -2);
  CHECK(algo_from_name("NVLSTree") == 5);
  CHECK(algo_from_name("collnet_direct") == 2);
  CHECK(algo_from_name("PAT") == 6);
  CHECK(algo_from_name("rings") == -2);
  CHECK(proto_from_name("LL128") == 1);
  CHECK(proto_from_name("Simple") == 2);
  CHECK(proto_from_name("ll64") == -2);
  for (int i = 0; i < kNumAlgos; ++i) CHECK(algo_from_name(algo_name(i)) == i);
  for (int i = 0; i < kNumProtos; ++i) CHECK(proto_from_name(proto_name(i)) == i);
  for (int i = 0; i < kNumColls; ++i) CHECK(coll_from_name(coll_name(i)) == i);
}

TEST_CASE("a good file parses to what it says", "[rules]") {
  const std::string text =
      "# a comment\n"
      "\n"
      "   # an indented comment\n"
      "allreduce   [0,64K)    *      *      *    tree  ll      *   *\n"
      "allreduce   [64K,4M)   2      16     8    ring  ll128   8   *   # trailing comment\n"
      "*           [4M,*)     2-16   *      8    ring  simple  *   512K\n"
      "allgather   *          *      *      *    *     simple  4   *\n"
      "broadcast   [1,2)      1      1      1    *     *       *   1M\n";
  std::vector<Rule> r;
  std::string error;
  REQUIRE(parse_rules(text, "r.txt", &r, &error) == Status::kOk);
  REQUIRE(r.size() == 5);
  CHECK(r[0].coll == 4);
  CHECK(r[0].size_lo == 0);
  CHECK(r[0].size_hi == 65536);
  CHECK(r[0].nodes.any());
  CHECK(r[0].algo == 0);
  CHECK(r[0].proto == 0);
  CHECK(r[0].channels == kAny);
  CHECK(r[0].chunk == 0);
  CHECK(r[0].line == 4);
  CHECK(r[1].nodes.lo == 2);
  CHECK(r[1].nodes.hi == 2);
  CHECK(r[1].ranks.lo == 16);
  CHECK(r[1].rpn.hi == 8);
  CHECK(r[1].channels == 8);
  CHECK(r[1].line == 5);
  CHECK(r[2].coll == kAny);
  CHECK(r[2].size_lo == 4194304);
  CHECK(r[2].size_hi == kNoLimit);
  CHECK(r[2].nodes.lo == 2);
  CHECK(r[2].nodes.hi == 16);
  CHECK(r[2].chunk == 524288);
  CHECK(r[3].size_lo == 0);
  CHECK(r[3].size_hi == kNoLimit);
  CHECK(r[3].algo == kAny);
  CHECK(r[3].proto == 2);
  CHECK(r[4].chunk == 1048576);
}

TEST_CASE("every bad line is refused with its file, line and problem", "[rules]") {
  const std::string ok = "allreduce [0,64K) * * * tree ll * *\n";
  CHECK(parse_error(ok) == "OK");
  CHECK(parse_error(ok + "allreduce [0,64K) * * * tree ll *\n") ==
        "r.txt:2: expected 9 columns (coll size nodes ranks rpn algo proto channels chunk), got 8");
  CHECK(parse_error("alltoall * * * * ring ll * *\n")
            .find("r.txt:1: unknown collective "
                  "\"alltoall\"") == 0);
  CHECK(parse_error("allreduce [64K,0) * * * ring ll * *\n").find("r.txt:1: empty size interval") ==
        0);
  CHECK(parse_error("allreduce [0,64K] * * * ring ll * *\n").find("r.txt:1: size must be") == 0);
  CHECK(parse_error("allreduce [0,64X) * * * ring ll * *\n").find("r.txt:1: bad upper size") == 0);
  CHECK(parse_error("allreduce [x,64K) * * * ring ll * *\n").find("r.txt:1: bad lower size") == 0);
  CHECK(parse_error("allreduce * 0 * * ring ll * *\n").find("r.txt:1: nodes: counts start at 1") ==
        0);
  CHECK(parse_error("allreduce * 8-2 * * ring ll * *\n").find("r.txt:1: nodes: empty range") == 0);
  CHECK(parse_error("allreduce * * x * ring ll * *\n").find("r.txt:1: ranks: expected") == 0);
  CHECK(parse_error("allreduce * * * -1 ring ll * *\n").find("r.txt:1: rpn: expected") == 0);
  CHECK(parse_error("allreduce * * * * rings ll * *\n").find("r.txt:1: unknown algorithm") == 0);
  CHECK(parse_error("allreduce * * * * ring ll64 * *\n").find("r.txt:1: unknown protocol") == 0);
  CHECK(parse_error("allreduce * * * * ring ll 0 *\n").find("r.txt:1: channels must be") == 0);
  CHECK(parse_error("allreduce * * * * ring ll 65 *\n").find("r.txt:1: channels must be") == 0);
  CHECK(parse_error("allreduce * * * * ring ll * 2G\n").find("r.txt:1: chunk must be") == 0);
  CHECK(parse_error("allreduce * * * * ring ll * 0\n").find("r.txt:1: chunk must be") == 0);
  CHECK(parse_error("allreduce * * * * * * * *\n").find("r.txt:1: the rule decides nothing") == 0);
  // The line number counts comments and blank lines.
  CHECK(parse_error("# x\n\n" + ok + "bogus\n").find("r.txt:4:") == 0);
}

TEST_CASE("a missing file names itself", "[rules]") {
  std::vector<Rule> r;
  std::string error;
  CHECK(load_rules_file("/nonexistent/rules.txt", &r, &error) == Status::kInvalidArgument);
  CHECK(error == "/nonexistent/rules.txt: cannot open the rules file");
}

TEST_CASE("format_rules writes what parse_rules reads back", "[rules]") {
  std::vector<Rule> in(3);
  in[0].coll = 4;
  in[0].size_hi = 65536;
  in[0].algo = 0;
  in[0].proto = 0;
  in[0].nodes = {2, 2};
  in[0].ranks = {16, 16};
  in[0].rpn = {8, 8};
  in[0].comment = "measured\nacross lines";
  in[1].coll = 4;
  in[1].size_lo = 65536;
  in[1].size_hi = 3 * 1048576 + 1;
  in[1].algo = 1;
  in[1].proto = 1;
  in[1].channels = 16;
  in[1].nodes = {2, 32};
  in[2].coll = kAny;
  in[2].size_lo = 3 * 1048576 + 1;
  in[2].proto = 2;
  in[2].chunk = 131072;
  const std::string text = format_rules(in, "written by a test\nsecond line");
  CHECK(text.rfind("# written by a test\n# second line\n", 0) == 0);
  std::vector<Rule> out;
  std::string error;
  REQUIRE(parse_rules(text, "gen", &out, &error) == Status::kOk);
  REQUIRE(out.size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    INFO("rule " << i);
    CHECK(out[i].coll == in[i].coll);
    CHECK(out[i].size_lo == in[i].size_lo);
    CHECK(out[i].size_hi == in[i].size_hi);
    CHECK(out[i].nodes.lo == in[i].nodes.lo);
    CHECK(out[i].nodes.hi == in[i].nodes.hi);
    CHECK(out[i].ranks.lo == in[i].ranks.lo);
    CHECK(out[i].rpn.hi == in[i].rpn.hi);
    CHECK(out[i].algo == in[i].algo);
    CHECK(out[i].proto == in[i].proto);
    CHECK(out[i].channels == in[i].channels);
    CHECK(out[i].chunk == in[i].chunk);
  }
}
