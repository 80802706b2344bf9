// One rule for error classes (docs/errors.md): what the user set wrong is InvalidArgumentError,
// what ranks disagree on MismatchError, cerar's own faults InternalError.
#include <gtest/gtest.h>

#include "core/execution/dispatch.h"
#include "core/runtime.h"
#include "common/error.h"
#include "ops/transport/inproc.h"

namespace cerar {
namespace {

// A response that disagrees with this rank's own tensors is a mismatch between ranks, refused
// before anything is sent: the response is the first submitter's.
class DispatchAgreement : public ::testing::Test {
 protected:
  // Runs `unit` against `entry` on a one-rank job.
  void run(const Response& unit, Entry& entry) {
    FusedGroup decision;
    decision.algorithm = Algorithm::kRing;
    decision.components = 1;
    RuntimeStats stats;
    dispatcher_.run({&unit}, {&entry}, decision, stats);
  }

  static Response unitOf(Kind kind, std::vector<std::vector<int64_t>> shapes) {
    Response unit;
    unit.names = {"t"};
    unit.description.kind = kind;
    unit.description.shapes = std::move(shapes);
    return unit;
  }

  Entry entryOf(std::vector<int64_t> shape) {
    Entry entry;
    entry.inputs = {Tensor{data_.data(), DType::kFloat32, std::move(shape)}};
    entry.outputs = entry.inputs;
    return entry;
  }

  InprocHub hub_{1, std::chrono::seconds(5)};
  Timeline timeline_{0};
  DeviceSlot devices_{{}, DeviceSetup{}};
  Dispatcher dispatcher_{hub_.connect(0), timeline_, devices_};
  std::vector<float> data_ = std::vector<float>(8, 1.0f);
};

TEST_F(DispatchAgreement, AGroupOfAnotherSizeIsAMismatch) {
  Response unit = unitOf(Kind::kAllreduce, {{4}, {4}});
  unit.names = {"a", "b"};
  Entry entry = entryOf({4});
  EXPECT_THROW(run(unit, entry), MismatchError);
}

TEST_F(DispatchAgreement, AlltoallSendingMoreRowsThanItHasIsAMismatch) {
  Response unit = unitOf(Kind::kAlltoall, {{4, 2}});
  unit.firstDims = {6};  // one rank sending 6 rows of 4
  Entry entry = entryOf({4, 2});
  EXPECT_THROW(run(unit, entry), MismatchError);
}

TEST_F(DispatchAgreement, ReducescatterOfAScalarIsAMismatch) {
  Response unit = unitOf(Kind::kReducescatter, {{}});
  Entry entry = entryOf({1});
  EXPECT_THROW(run(unit, entry), MismatchError);
}

TEST_F(DispatchAgreement, AResponseMissingThisRanksRowsIsInternal) {
  Response unit = unitOf(Kind::kAllgather, {{4}});  // no firstDims
  Entry entry = entryOf({4});
  EXPECT_THROW(run(unit, entry), InternalError);
}

TEST(StartSettings, NoRendezvousPortIsTheUsersSetting) {
  RuntimeConfig config;
  config.rank = 1;
  config.size = 2;
  config.rendezvousPort = 0;
  EXPECT_THROW(Runtime::start(config), InvalidArgumentError);
}

TEST(StartSettings, StartingWithoutATransportIsTheCallersArgument) {
  EXPECT_THROW(Runtime::startWith(RuntimeConfig{}, nullptr), InvalidArgumentError);
}

}  // namespace
}  // namespace cerar
