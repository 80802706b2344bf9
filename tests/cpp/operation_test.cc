// The queue's wake-ups: a push to an idle rank ends the coordinator's sleep at once; pushes
// while work is in flight leave it to the cycle's pace (so a step's tensors still fuse).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "core/control/operation.h"

namespace cerar {
namespace {

std::unique_ptr<Entry> entryNamed(const std::string& name) {
  auto entry = std::make_unique<Entry>();
  entry->request.names = {name};
  entry->key = entry->request.key();
  entry->state = std::make_shared<OperationState>();
  return entry;
}

// Seconds the coordinator's sleep of up to `sleep` took, while `pushing` runs after it began.
template <typename Push>
double sleptWhile(Queue& queue, std::chrono::milliseconds sleep, Push pushing) {
  const auto start = Clock::now();
  auto sleeper = std::async(std::launch::async, [&] { queue.sleepUntil(start + sleep); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pushing();
  sleeper.get();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(QueueWake, APushToAnIdleRankEndsTheSleep) {
  Queue queue(0);
  const double slept = sleptWhile(queue, std::chrono::seconds(30), [&] {
    ASSERT_TRUE(queue.push(entryNamed("lone")).ok());
  });
  EXPECT_LT(slept, 10.0);  // woken, not the 30 s deadline
}

TEST(QueueWake, PushesWhileWorkIsInFlightKeepThePace) {
  Queue queue(0);
  ASSERT_TRUE(queue.push(entryNamed("first")).ok());
  queue.sleepUntil(Clock::now() + std::chrono::seconds(30));  // the first push's wake, taken
  bool join = false;
  ASSERT_EQ(queue.drain(join).size(), 1u);  // in flight, not yet complete
  const double slept = sleptWhile(queue, std::chrono::milliseconds(400), [&] {
    ASSERT_TRUE(queue.push(entryNamed("second")).ok());
    ASSERT_TRUE(queue.push(entryNamed("third")).ok());
  });
  EXPECT_GE(slept, 0.39);  // the deadline, not the pushes
}

TEST(QueueWake, APushDuringACycleMakesTheNextSleepShort) {
  Queue queue(0);
  ASSERT_TRUE(queue.push(entryNamed("lone")).ok());  // no one sleeping yet
  const auto start = Clock::now();
  queue.sleepUntil(start + std::chrono::seconds(30));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  // Taken once: the next sleep, with nothing new, lasts to its deadline.
  const auto again = Clock::now();
  queue.sleepUntil(again + std::chrono::milliseconds(200));
  EXPECT_GE(std::chrono::duration<double>(Clock::now() - again).count(), 0.19);
}

TEST(QueueWake, OnceTheWorkCompletesTheRankIsIdleAgain) {
  Queue queue(0);
  EXPECT_TRUE(queue.idle());
  auto entry = entryNamed("step");
  const Request request = entry->request;
  ASSERT_TRUE(queue.push(std::move(entry)).ok());
  EXPECT_FALSE(queue.idle());
  queue.sleepUntil(Clock::now() + std::chrono::seconds(30));
  bool join = false;
  queue.drain(join);
  queue.release(request);  // completed: nothing in flight
  EXPECT_TRUE(queue.idle());
  const double slept = sleptWhile(queue, std::chrono::seconds(30), [&] {
    ASSERT_TRUE(queue.push(entryNamed("next")).ok());
  });
  EXPECT_LT(slept, 10.0);
}

}  // namespace
}  // namespace cerar
