// The device path's hierarchical all-reduce (DeviceOps::allreduceByHost) in the runtime, on
// ranks declared as 2 hosts of 2 with the device faked in host memory, whose host level is the
// exact ring where the CUDA device's is NCCL's collectives: the decision reaches the device,
// results are the same bits on every rank and as host tensors reduced host by host, and a host
// without a level of its own makes every rank run the flat ring.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "device_scenarios.h"

namespace cerar {
namespace {

using namespace scenarios;
using testing::FakeDeviceLog;

RuntimeConfig twoHostsOfTwo(const std::string& algorithm) {
  RuntimeConfig config = testConfig();
  config.localSize = 2;
  config.hierarchicalAllreduce = "1";
  config.algorithm = algorithm;
  return config;
}

// Integer-valued sums (exact in any order by the ring), random averages as host and as device
// tensors; returns the device results' bits.
std::string hostAndDevice(int rank, Runtime& rt, FakeDeviceLog& log, bool exact,
                          bool hostLevel) {
  log.noHostLevel = !hostLevel && rank == 2;
  std::vector<float> ints(1001), hostGrads(4099), grads;
  for (size_t e = 0; e < ints.size(); ++e) ints[e] = float((e + size_t(rank)) % 7);
  std::mt19937 gen(rank);
  std::normal_distribution<float> normal(0, 1);
  for (float& g : hostGrads) g = normal(gen);
  grads = hostGrads;
  // One unit each, so that host and device buffers have the same layout.
  rt.allreduce("h", f32(hostGrads), f32(hostGrads), Op::kAverage).wait();
  rt.allreduce("ints", onDevice(f32(ints)), onDevice(f32(ints)), Op::kSum).wait();
  rt.allreduce("d", onDevice(f32(grads)), onDevice(f32(grads)), Op::kAverage).wait();
  for (size_t e = 0; exact && e < ints.size(); ++e) {
    float want = 0;
    for (int r = 0; r < 4; ++r) want += float((e + size_t(r)) % 7);
    check(ints[e] == want, "element ", e, ": ", ints[e], " != ", want);
  }
  check(std::memcmp(hostGrads.data(), grads.data(), grads.size() * 4) == 0 || !hostLevel,
        "rank ", rank, ": device and host results differ");
  const RuntimeStats s = rt.stats();
  check(log.byHost == 2, "rank ", rank, ": ", log.byHost.load(), " device runs host by host");
  check(log.allreduces == 0, "rank ", rank, ": a flat device all-reduce was asked for");
  // The host tensor's unit always runs host by host; the device units only with host levels.
  const uint64_t want = hostLevel ? 3 : 1;
  check(s.hierarchicalBuffers == want && s.fusedBuffers == 3, "rank ", rank, ": ",
        s.hierarchicalBuffers, " of ", s.fusedBuffers, " buffers host by host, want ", want);
  return std::string(reinterpret_cast<const char*>(grads.data()), grads.size() * 4);
}

TEST(DeviceByHost, SameBitsEverywhereAndAsHostTensors) {
  for (std::string algorithm : {"ring", "cerar"}) {
    auto results = runWithDevice(
        4, [&](int rank, Runtime& rt, FakeDeviceLog& log) {
          return hostAndDevice(rank, rt, log, algorithm == "ring", true);
        },
        twoHostsOfTwo(algorithm));
    for (const auto& r : results) EXPECT_EQ(r, results[0]) << algorithm;
  }
}

TEST(DeviceByHost, AHostWithoutItsOwnLevelMakesEveryRankRunFlat) {
  auto results = runWithDevice(
      4, [](int rank, Runtime& rt, FakeDeviceLog& log) {
        return hostAndDevice(rank, rt, log, true, false);  // the flat ring: exact
      },
      twoHostsOfTwo("cerar"));
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
}

}  // namespace
}  // namespace cerar
