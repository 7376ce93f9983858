// docs/configuration.md must describe every parameter the registry has, with its default.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "util/params.h"

TEST_CASE("docs/configuration.md lists every parameter with its default", "[docs]") {
  std::ifstream f(std::string(NF_SRCDIR) + "/docs/configuration.md");
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  int n = 0;
  const nf::ParamDef* defs = nf::param_defs(&n);
  for (int i = 0; i < n; ++i) {
    INFO(defs[i].name);
    const std::string row = std::string("| `") + defs[i].name + "` |";
    const size_t at = doc.find(row);
    REQUIRE(at != std::string::npos);
    const std::string line = doc.substr(at, doc.find('\n', at) - at);
    const std::string def = std::string("`") + defs[i].default_value + "`";
    CHECK(line.find(def) != std::string::npos);
  }
}
