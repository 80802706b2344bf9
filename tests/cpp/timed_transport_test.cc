// TimedTransport (ops/transport/timed.h): a receive that waits for a late sender is timed on
// the receiver's clock, the sender's prompt send hardly; transfers pass through unchanged.
#include "ops/transport/timed.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ops/transport/inproc.h"

namespace cerar {
namespace {

using std::chrono::milliseconds;

TEST(TimedTransport, TimesTheWaitOfWhoeverWaits) {
  InprocHub hub(2, milliseconds(5000));
  auto receiverClock = std::make_shared<WaitClock>();
  auto senderClock = std::make_shared<WaitClock>();
  TimedTransport receiver(hub.connect(0), receiverClock);
  TimedTransport sender(hub.connect(1), senderClock);
  ASSERT_EQ(receiver.rank(), 0);
  ASSERT_EQ(sender.size(), 2);

  int got = 0, sent = 42;
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(50));
    sender.postSend(0, &sent, sizeof sent);
    sender.waitSend(0);
  });
  receiver.postRecv(1, &got, sizeof got);
  receiver.waitRecv(1);
  late.join();
  EXPECT_EQ(got, 42);
  EXPECT_GE(receiverClock->read(), uint64_t(40'000'000));  // blocked about the sender's 50 ms
  EXPECT_LT(receiverClock->read(), uint64_t(5'000'000'000));
  EXPECT_LT(senderClock->read(), uint64_t(40'000'000));  // its receiver was there
}

TEST(TimedTransport, ChannelsShareTheClockOrAreAbsentLikeTheBase) {
  InprocHub hub(2, milliseconds(1000));
  std::shared_ptr<Transport> base = hub.connect(0);
  const bool baseHasChannels = base->channel(7) != nullptr;
  TimedTransport timed(base, std::make_shared<WaitClock>());
  EXPECT_EQ(timed.channel(8) != nullptr, baseHasChannels);
}

}  // namespace
}  // namespace cerar
