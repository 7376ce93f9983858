#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>
#include <string>

#include "util/params.h"

using namespace nf;

TEST_CASE("every parameter's default parses and names are unique and prefixed", "[params]") {
  int n = 0;
  const ParamDef* defs = param_defs(&n);
  REQUIRE(n == static_cast<int>(ParamId::kCount));
  std::set<std::string> names;
  for (int i = 0; i < n; ++i) {
    INFO(defs[i].name);
    CHECK(static_cast<int>(defs[i].id) == i);
    CHECK(std::string(defs[i].name).rfind("NCCL_FABRIC_", 0) == 0);
    CHECK(names.insert(defs[i].name).second);
    CHECK(std::string(defs[i].doc).size() > 10);
    int64_t iv = 0;
    std::string sv, err;
    CHECK(parse_param(defs[i], defs[i].default_value, &iv, &sv, &err));
    if (defs[i].type == ParamType::kInt) CHECK((iv >= defs[i].min && iv <= defs[i].max));
  }
}

TEST_CASE("NCCL_FABRIC_SPEED takes Mb/s from 0 (not set) to 10 Tb/s and names itself when bad",
          "[params]") {
  const ParamDef& speed = param_def(ParamId::kSpeed);
  CHECK(std::string(speed.name) == "NCCL_FABRIC_SPEED");
  CHECK(Params().get_int(ParamId::kSpeed) == 0);
  int64_t iv = 0;
  std::string sv, err;
  CHECK(parse_param(speed, "12345", &iv, &sv, &err));
  CHECK(iv == 12345);
  for (const char* bad : {"-5", "abc", "10000001", "100G", ""}) {
    INFO(bad);
    err.clear();
    CHECK_FALSE(parse_param(speed, bad, &iv, &sv, &err));
    CHECK(err.find("NCCL_FABRIC_SPEED") != std::string::npos);
    CHECK(err.find("0..10000000") != std::string::npos);
  }
}

TEST_CASE("bad values are refused with a message naming the parameter", "[params]") {
  const ParamDef& recvs = param_def(ParamId::kMaxRecvs);
  int64_t iv = 0;
  std::string sv, err;
  CHECK_FALSE(parse_param(recvs, "abc", &iv, &sv, &err));
  CHECK(err.find("NCCL_FABRIC_MAX_RECVS") != std::string::npos);
  CHECK(err.find("1..8") != std::string::npos);
  CHECK_FALSE(parse_param(recvs, "9", &iv, &sv, &err));
  CHECK(err.find("out of range") != std::string::npos);
  CHECK_FALSE(parse_param(recvs, "", &iv, &sv, &err));
  CHECK_FALSE(parse_param(recvs, "4x", &iv, &sv, &err));
  CHECK(parse_param(recvs, "0x4", &iv, &sv, &err));
  CHECK(iv == 4);

  const ParamDef& inject = param_def(ParamId::kInject);
  CHECK(parse_param(inject, "off", &iv, &sv, &err));
  CHECK(iv == 0);
  CHECK(parse_param(inject, "TRUE", &iv, &sv, &err));
  CHECK(iv == 1);
  CHECK_FALSE(parse_param(inject, "2", &iv, &sv, &err));
  CHECK(err.find("NCCL_FABRIC_INJECT") != std::string::npos);
}

TEST_CASE("Params reads the environment and keeps defaults on a bad value", "[params]") {
  setenv("NCCL_FABRIC_CQ_BATCH", "32", 1);
  setenv("NCCL_FABRIC_MAX_RECVS", "0", 1);
  Params p;
  CHECK(p.load_from_env() == Status::kInvalidUsage);
  CHECK(p.get_int(ParamId::kCqBatch) == 32);
  CHECK(p.get_int(ParamId::kMaxRecvs) == 8);  // the default survives the bad value
  unsetenv("NCCL_FABRIC_CQ_BATCH");
  unsetenv("NCCL_FABRIC_MAX_RECVS");
  Params q;
  CHECK(q.load_from_env() == Status::kOk);
  CHECK(q.set(ParamId::kProvider, "shm") == Status::kOk);
  CHECK(q.get_str(ParamId::kProvider) == "shm");
  CHECK(q.set(ParamId::kConnectTimeout, "-1") == Status::kInvalidUsage);
  CHECK(q.get_int(ParamId::kConnectTimeout) == 120);
}
