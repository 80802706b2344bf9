// An idle job's pace: the coordinator rank counts cycles with nothing under way and, after
// kIdleCycles of them, slows every rank's cycle (doubling up to 2^kMaxIdleShift); a push or a
// join wakes a rank at once, and any work brings the set pace back.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "core/control/coordinator.h"
#include "core/control/negotiation.h"
#include "core/control/operation.h"
#include "core/control/response_cache.h"
#include "runtime_scenarios.h"
#include "ops/transport/inproc.h"
#include "units.h"

namespace cerar {
namespace {

using namespace scenarios;

TEST(IdlePace, DoublesEverySixteenIdleCyclesUpToSixteenTimes) {
  EXPECT_EQ(idlePaceShift(0), 0);
  EXPECT_EQ(idlePaceShift(kIdleCycles - 1), 0);
  EXPECT_EQ(idlePaceShift(kIdleCycles), 1);
  EXPECT_EQ(idlePaceShift(3 * kIdleCycles), 3);
  EXPECT_EQ(idlePaceShift(4 * kIdleCycles), kMaxIdleShift);
  EXPECT_EQ(idlePaceShift(uint64_t(1) << 40), kMaxIdleShift);
}

TEST(IdlePace, TravelsInTheAnswerBesideTheRollCall) {
  for (uint8_t shift = 0; shift <= kMaxIdleShift; ++shift) {
    for (bool roll : {false, true}) {
      ResponseMessage m;
      m.idleShift = shift;
      m.rollCall = roll;
      const ResponseMessage back = decodeResponseMessage(encode(m));
      EXPECT_EQ(back.idleShift, shift);
      EXPECT_EQ(back.rollCall, roll);
    }
  }
}

TEST(IdlePace, TheTableIsIdleOnlyWithNothingUnderWay) {
  NegotiationTable table(2);
  ResponseCache cache(0);
  const auto now = NegotiationTable::Clock::now();
  EXPECT_TRUE(table.idle());
  RequestMessage first;
  first.requests = {testing::request("a", {2})};
  table.receive(0, first, cache, now);
  table.decide(cache);
  EXPECT_FALSE(table.idle());  // rank 1 has not submitted "a"
  table.receive(1, first, cache, now);
  EXPECT_EQ(table.decide(cache).responses.size(), 1u);
  EXPECT_TRUE(table.idle());
  RequestMessage join;
  join.join = true;
  table.receive(1, join, cache, now);
  table.decide(cache);
  EXPECT_FALSE(table.idle());  // a joined rank waits for the others
}

TEST(IdlePace, NextCycleKeepsThePaceAndWaitsForAnIdleRanksCall) {
  using std::chrono::milliseconds;
  const auto t0 = Clock::now();
  const auto ms = [&](int n) { return t0 + milliseconds(n); };
  const milliseconds cycle(1);
  // On time: the pace's next cycle. Late: one cycle on, never a burst. Woken early: the
  // pace's next cycle, or one cycle on if the pace quickened.
  EXPECT_EQ(nextCycleStart({ms(0), ms(0), cycle, ms(0), false}), ms(1));
  EXPECT_EQ(nextCycleStart({ms(5), ms(1), cycle, ms(5), false}), ms(5));
  EXPECT_EQ(nextCycleStart({ms(0), ms(1), milliseconds(16), ms(0), false}), ms(1));
  EXPECT_EQ(nextCycleStart({ms(0), ms(16), cycle, ms(0), false}), ms(1));
  // Work that ran 9 ms and left the rank busy: the next cycle at once (the pace is behind).
  EXPECT_EQ(nextCycleStart({ms(0), ms(0), cycle, ms(9), false}), ms(1));
  // ... and left it idle: it waits for the rank's next call, up to a cycle after the work.
  EXPECT_EQ(nextCycleStart({ms(0), ms(0), cycle, ms(9), true}), ms(10));
}

TEST(IdlePace, AJoinEndsTheSleepAsAPushDoes) {
  Queue queue(0);
  const auto start = Clock::now();
  auto sleeper = std::async(std::launch::async,
                            [&] { queue.sleepUntil(start + std::chrono::seconds(30)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(queue.pushJoin(std::make_shared<OperationState>()).ok());
  sleeper.get();
  EXPECT_FALSE(queue.idle());  // the join waits for the others: its cycles go on
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
}

// Two ranks idle for a second cycle far less often than every millisecond, then a lone call
// is answered.
TEST(IdlePace, AnIdleJobCyclesLessAndStillAnswers) {
  InprocHub hub(2, std::chrono::seconds(20));
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        RuntimeConfig config = testConfig();
        config.cycleTimeMs = 1;
        auto rt = Runtime::startWith(config, hub.connect(rank));
        rt->barrier().wait();
        const uint64_t before = rt->stats().cycles;
        std::this_thread::sleep_for(std::chrono::seconds(1));
        const uint64_t idle = rt->stats().cycles - before;
        // At 1 ms a second is up to 1000 cycles; idle, 4 x 16 of them take 240 ms, then
        // one every 16 ms follows.
        check(idle < 400, "rank ", rank, ": ", idle, " cycles in an idle second");
        std::vector<float> x = {float(rank + 1), 2.0f};
        rt->allreduce("lone", f32(x), f32(x), Op::kSum).wait();
        check(x[0] == 3.0f && x[1] == 4.0f, "rank ", rank, ": ", x[0], " ", x[1]);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace cerar
