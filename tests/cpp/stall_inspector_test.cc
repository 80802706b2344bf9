// The stall inspector: warnings by missing rank, then failures.
#include <gtest/gtest.h>

#include <chrono>

#include "core/control/stall_inspector.h"

namespace cerar {
namespace {

TEST(StallInspector, WarnsByMissingRankThenFails) {
  StallInspector inspector(1.0, 3.0);
  const auto t0 = StallInspector::Clock::now();
  std::vector<NegotiationTable::Waiting> waiting = {{"a", {"a"}, {2}, t0}, {"b", {"b"}, {2, 3}, t0}};
  EXPECT_TRUE(inspector.inspect(waiting, t0 + std::chrono::milliseconds(500)).warning.empty());
  auto report = inspector.inspect(waiting, t0 + std::chrono::milliseconds(1500));
  EXPECT_NE(report.warning.find("rank 2 is missing 'a', 'b'"), std::string::npos)
      << report.warning;
  EXPECT_NE(report.warning.find("rank 3 is missing 'b'"), std::string::npos) << report.warning;
  EXPECT_TRUE(report.failures.empty());
  // Not again within the check time.
  EXPECT_TRUE(inspector.inspect(waiting, t0 + std::chrono::milliseconds(2000)).warning.empty());
  report = inspector.inspect(waiting, t0 + std::chrono::milliseconds(3500));
  ASSERT_EQ(report.failures.size(), 2u);
  const Status& failure = report.failures[1].second;
  EXPECT_NE(failure.message.find("ranks 2, 3 have not submitted"), std::string::npos)
      << failure.message;
  EXPECT_EQ(failure.code, StatusCode::kTimeout);
  EXPECT_EQ(failure.peer, 2);  // the first rank missing
}

}  // namespace
}  // namespace cerar
