// Counting and consistency of the pure plans (cerar-protocol.md, "Tests": counting).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/algorithms/plan.h"
#include "common/error.h"

namespace cerar {
namespace {

std::vector<size_t> sizesFor(int c) {
  const size_t uc = c;
  return {0, 1, uc - 1, uc, uc + 1, 3 * uc + 5, 1000, 64 * uc + 7};
}

// Every element is stored exactly once per rank: the result covers the whole buffer.
void expectStoresPartition(const Plan& plan) {
  if (plan.N == 1) return;  // zero rounds: the input is the output
  std::vector<int> written(plan.d, 0);
  auto mark = [&](const Range& range) {
    for (size_t e = range.offset; e < range.offset + range.length; ++e) ++written[e];
  };
  for (const Round& round : plan.rounds) {
    if (round.action != Action::kSendGradient && round.action != Action::kAccumulate)
      mark(round.store);
  }
  mark(plan.finalStore);
  for (size_t e = 0; e < plan.d; ++e) ASSERT_EQ(written[e], 1) << "element " << e;
}

TEST(PlanCounting, CerarRoundsAndPayload) {
  for (int N = 1; N <= 16; ++N) {
    for (int r = 1; r <= 8; ++r) {
      const int c = r * N;
      const int L = N == 1 ? 0 : c + N - 2;
      for (size_t d : sizesFor(c)) {
        const double ideal = N == 1 ? 0.0 : (1.0 + double(N - 2) / c) * double(d);
        for (int rank = 0; rank < N; ++rank) {
          const Plan plan = makeCerarPlan(N, c, d, rank);
          ASSERT_EQ(plan.numRounds(), L) << "N=" << N << " c=" << c;
          const double sent = double(plan.elementsSent());
          EXPECT_LE(sent, ideal + L) << "N=" << N << " c=" << c << " d=" << d;
          EXPECT_GE(sent, ideal - L) << "N=" << N << " c=" << c << " d=" << d;
          expectStoresPartition(plan);
        }
      }
    }
  }
}

TEST(PlanCounting, RingRoundsAndPayload) {
  for (int N = 1; N <= 16; ++N) {
    for (size_t d : sizesFor(N)) {
      for (int rank = 0; rank < N; ++rank) {
        const Plan plan = makeRingPlan(N, d, rank);
        const int L = N == 1 ? 0 : 2 * (N - 1);
        ASSERT_EQ(plan.numRounds(), L);
        const double ideal = 2.0 * (N - 1) / N * double(d);
        EXPECT_LE(std::abs(double(plan.elementsSent()) - ideal), L) << "N=" << N << " d=" << d;
        expectStoresPartition(plan);
      }
    }
  }
}

// What rank i sends in round t is exactly what rank i+1 expects to receive.
TEST(PlanCounting, NeighboursAgreeOnMessageLengths) {
  for (int N = 2; N <= 9; ++N) {
    for (int r : {1, 2, 5}) {
      for (size_t d : sizesFor(r * N)) {
        std::vector<Plan> plans;
        for (int rank = 0; rank < N; ++rank) plans.push_back(makeCerarPlan(N, r * N, d, rank));
        for (int rank = 0; rank < N; ++rank) {
          const Plan& next = plans[(rank + 1) % N];
          for (int t = 0; t < plans[rank].numRounds(); ++t)
            ASSERT_EQ(plans[rank].rounds[t].message, next.rounds[t].receive);
        }
      }
    }
  }
}

TEST(PlanCounting, RingHasCerarShapeAtROne) {
  for (int N = 2; N <= 8; ++N) {
    const Plan ring = makeRingPlan(N, 1001, 1);
    const Plan cerar = makeCerarPlan(N, N, 1001, 1);
    ASSERT_EQ(ring.numRounds(), cerar.numRounds());
    for (int t = 0; t < ring.numRounds(); ++t) {
      EXPECT_EQ(ring.rounds[t].action, cerar.rounds[t].action) << "round " << t + 1;
      EXPECT_EQ(ring.rounds[t].token, cerar.rounds[t].token) << "round " << t + 1;
      EXPECT_EQ(ring.rounds[t].message, cerar.rounds[t].message) << "round " << t + 1;
    }
  }
}

TEST(PlanCounting, LayoutIsChunkMajorLongerFirst) {
  const Layout layout(4, 8, 30);  // q = 3, m = 6
  size_t offset = 0;
  for (int k = 0; k < 8; ++k) {
    EXPECT_EQ(layout.component(k).offset, offset);
    EXPECT_EQ(layout.component(k).length, k < 6 ? 4u : 3u);
    offset += layout.component(k).length;
  }
  EXPECT_EQ(offset, 30u);
  EXPECT_EQ(layout.slice(1, 0).offset, layout.component(2).offset);
}

TEST(PlanValidation, RejectsBadComponents) {
  EXPECT_THROW(makeCerarPlan(4, 6, 100, 0), Error);
  EXPECT_THROW(makeCerarPlan(4, 0, 100, 0), Error);
  EXPECT_THROW(makeCerarPlan(4, 8, 100, 4), Error);
  EXPECT_NO_THROW(makeCerarPlan(1, 3, 100, 0));
}

}  // namespace
}  // namespace cerar
