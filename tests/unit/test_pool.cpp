#include <catch2/catch.hpp>

#include <set>

#include "util/pool.h"

using nf::Pool;

TEST_CASE("the pool hands out each object once and takes it back", "[pool]") {
  struct Item {
    int v[5];
  };
  Pool<Item> pool(32);
  std::set<Item*> out;
  for (int i = 0; i < 32; ++i) {
    Item* it = pool.get();
    REQUIRE(it != nullptr);
    CHECK(pool.owns(it));
    CHECK(out.insert(it).second);
  }
  CHECK(pool.get() == nullptr);  // exhausted, not grown
  CHECK(pool.in_use() == 32);
  Item* back = *out.begin();
  pool.put(back);
  CHECK(pool.in_use() == 31);
  CHECK(pool.get() == back);
  Item stranger;
  CHECK_FALSE(pool.owns(&stranger));
  CHECK_FALSE(pool.owns(reinterpret_cast<char*>(back) + 1));
}
