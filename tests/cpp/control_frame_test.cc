// Control frames between ranks and the negotiation decoders against corrupt input: a
// violation is an Error on every rank, never an allocation of the claimed size.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "core/execution/dispatch.h"
#include "core/control/negotiation.h"
#include "ops/collectives.h"
#include "common/error.h"
#include "ops/control_frame.h"
#include "ops/transport/inproc.h"

namespace cerar {
namespace {

using namespace control_frame;

std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ControlFrame, HeaderIsCheckedFieldByField) {
  const std::vector<uint8_t> message(300, 7);
  std::vector<uint8_t> frame = encode(Type::kGather, message);
  ASSERT_EQ(frame.size(), kFrameBytes);
  EXPECT_EQ(parse(frame.data(), Type::kGather, kMaxMessageBytes, 0, 1).length, 300u);
  EXPECT_NE(errorOf([&] { parse(frame.data(), Type::kGather, 299, 0, 1); }).find("past the limit"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { parse(frame.data(), Type::kBroadcast, 1000, 0, 1); })
                .find("message type 1"),
            std::string::npos);
  auto corrupt = [&](size_t at, uint8_t value) {
    std::vector<uint8_t> bad = frame;
    bad[at] = value;
    return errorOf([&] { parse(bad.data(), Type::kGather, kMaxMessageBytes, 0, 1); });
  };
  EXPECT_NE(corrupt(0, 0).find("bad magic"), std::string::npos);
  EXPECT_NE(corrupt(4, 2).find("protocol version 2"), std::string::npos);
  EXPECT_NE(corrupt(15, 0x10).find("past the limit"), std::string::npos);  // 2^60 bytes
  std::vector<uint8_t> abort = encode(Type::kAbort, {});
  EXPECT_EQ(parse(abort.data(), Type::kBroadcast, 10, 0, 1).type, Type::kAbort);
}

// Rank 1 sends a frame claiming 2^36 bytes in place of its request; root refuses it and tells
// every rank why, as Coordinator::negotiate does. Rank 3's long message still completes.
TEST(ControlFrame, CorruptFrameFailsEveryRankAlikeWithoutAllocating) {
  const int N = 4;
  InprocHub hub(N, std::chrono::seconds(5));
  std::vector<std::string> errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      auto t = hub.connect(rank);
      errors[rank] = errorOf([&] {
        if (rank == 0) {
          try {
            gatherBytes(*t, {1, 2, 3}, 0);
          } catch (const Error& e) {
            broadcastAbort(*t, e.what(), 0);
            throw;
          }
          return;
        }
        if (rank == 1) {
          std::vector<uint8_t> frame = encode(Type::kGather, {});
          const uint64_t huge = uint64_t{1} << 36;
          std::memcpy(frame.data() + 8, &huge, sizeof huge);
          t->postSend(0, frame.data(), frame.size());
          t->waitSend(0);
        } else {
          gatherBytes(*t, std::vector<uint8_t>(rank == 3 ? 1000 : 2, 5), 0);
        }
        broadcastBytes(*t, {}, 0);
      });
    });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < N; ++rank) {
    EXPECT_NE(errors[rank].find("corrupt control frame from rank 1"), std::string::npos)
        << "rank " << rank << ": " << errors[rank];
    EXPECT_NE(errors[rank].find("68719476736 bytes"), std::string::npos) << errors[rank];
  }
}

TEST(ControlFrame, MessagesOfEveryLengthRoundTrip) {
  const int N = 3;
  InprocHub hub(N, std::chrono::seconds(5));
  std::vector<std::thread> threads;
  std::vector<std::vector<uint8_t>> got(N);
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      auto t = hub.connect(rank);
      for (size_t length : {size_t(0), kInlineBytes, kInlineBytes + 1, size_t(5000)}) {
        std::vector<uint8_t> mine(length, uint8_t(rank + 1));
        auto all = gatherBytes(*t, mine, 0);
        if (rank == 0) {
          for (int r = 0; r < N; ++r) EXPECT_EQ(all[r], std::vector<uint8_t>(length, r + 1));
        }
        got[rank] = broadcastBytes(*t, mine, 0);
        EXPECT_EQ(got[rank], std::vector<uint8_t>(length, 1));
      }
    });
  }
  for (auto& thread : threads) thread.join();
}

Request requestWithShape(std::vector<int64_t> shape) {
  Request r;
  r.names = {"t"};
  r.description.shapes = {std::move(shape)};
  return r;
}

TEST(ControlFrame, DecodersRejectNegativeAndOverflowingShapes) {
  auto requestError = [](std::vector<int64_t> shape) {
    RequestMessage m;
    m.requests = {requestWithShape(std::move(shape))};
    return errorOf([&] { decodeRequestMessage(encode(m)); });
  };
  EXPECT_EQ(requestError({3, 4}), "");
  EXPECT_NE(requestError({3, -4}).find("negative dimension -4"), std::string::npos);
  EXPECT_NE(requestError({int64_t{1} << 40, int64_t{1} << 40}).find("overflows"),
            std::string::npos);
  EXPECT_NE(requestError({int64_t{1} << 62}).find("overflows"), std::string::npos);  // bytes

  auto responseError = [](std::vector<int64_t> shape, std::vector<int64_t> firstDims) {
    ResponseMessage m;
    Response unit;
    unit.names = {"t"};
    unit.description = requestWithShape(std::move(shape)).description;
    unit.description.kind = Kind::kAllgather;
    unit.firstDims = std::move(firstDims);
    m.responses = {unit};
    return errorOf([&] { decodeResponseMessage(encode(m)); });
  };
  EXPECT_EQ(responseError({2, 3}, {2, 5}), "");
  EXPECT_NE(responseError({2, 3}, {2, -5}).find("negative dimension"), std::string::npos);
  EXPECT_NE(responseError({2, int64_t{1} << 40}, {int64_t{1} << 30, 1}).find("overflows"),
            std::string::npos);
}

// The coordinator's shape says 8 elements; this rank's tensor has 4: refused before packing.
TEST(ControlFrame, UnpackingChecksTheLocalTensorsSize) {
  InprocHub hub(1, std::chrono::seconds(5));
  Timeline timeline(0);
  DeviceSlot devices({}, DeviceSetup{});
  Dispatcher dispatcher(hub.connect(0), timeline, devices);
  Response unit;
  unit.names = {"t"};
  unit.description.shapes = {{8}};
  std::vector<float> small(4, 1.0f);
  Entry entry;
  entry.inputs = {Tensor{small.data(), DType::kFloat32, {4}}};
  entry.outputs = entry.inputs;
  FusedGroup decision;
  decision.algorithm = Algorithm::kRing;
  decision.components = 1;
  RuntimeStats stats;
  const std::string error = errorOf([&] { dispatcher.run({&unit}, {&entry}, decision, stats); });
  EXPECT_NE(error.find("the coordinator's shape has 8 elements, this rank's tensor 4"),
            std::string::npos)
      << error;
  unit.description.shapes = {{4}};
  dispatcher.run({&unit}, {&entry}, decision, stats);  // matching sizes run
  EXPECT_EQ(small[0], 1.0f);
}

}  // namespace
}  // namespace cerar
