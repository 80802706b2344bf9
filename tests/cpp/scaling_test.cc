// The fusion buffer's scaling copies and identities.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "common/error.h"
#include "core/execution/scaling.h"

namespace cerar {
namespace {

TEST(Scaling, ScaledCopiesAndIdentities) {
  std::vector<float> in = {1, 2, 3}, out(3);
  scaledCopy(DType::kFloat32, in.data(), out.data(), 3, 0.5);
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1, 1.5f}));
  std::vector<double> d(2);
  fillIdentity(DType::kFloat64, ReduceOp::kMin, d.data(), 2);
  EXPECT_EQ(d[0], std::numeric_limits<double>::infinity());
  std::vector<int32_t> i(2, 7);
  fillIdentity(DType::kInt32, ReduceOp::kMax, i.data(), 2);
  EXPECT_EQ(i[1], std::numeric_limits<int32_t>::lowest());
  EXPECT_THROW(scaledCopy(DType::kInt32, i.data(), i.data(), 2, 2.0), Error);
}

}  // namespace
}  // namespace cerar
