// The response cache: slots evicted identically on every rank.
#include <gtest/gtest.h>

#include "core/control/response_cache.h"
#include "units.h"

namespace cerar {
namespace {

using testing::request;

TEST(ResponseCache, LeastRecentlyUsedIsEvictedIdenticallyEverywhere) {
  ResponseCache a(2), b(2);
  auto unit = [](const std::string& n) { return Response{{n}, request(n, {1}).description, {}, "", {}}; };
  for (auto* cache : {&a, &b}) {
    cache->put(unit("x"));
    cache->put(unit("y"));
    cache->put(unit("x"));  // touch x: y is now the least recently used
    cache->put(unit("z"));
  }
  EXPECT_EQ(a.find(unit("y")), -1);
  EXPECT_EQ(a.find(unit("x")), b.find(unit("x")));
  EXPECT_EQ(a.find(unit("z")), b.find(unit("z")));
  EXPECT_EQ(a.size(), 2u);
  ResponseCache off(0);
  off.put(unit("x"));
  EXPECT_EQ(off.find(unit("x")), -1);
}

}  // namespace
}  // namespace cerar
