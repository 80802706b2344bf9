// Runtime scenarios on ranks as threads whose device is faked in host memory
// (host_device_ops.h): the harness of the device path's runtime tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "host_device_ops.h"
#include "ops/transport/inproc.h"
#include "runtime_scenarios.h"

namespace cerar {
namespace scenarios {

using DeviceScenario =
    std::function<std::string(int rank, Runtime& rt, testing::FakeDeviceLog& log)>;

// Runs `scenario` on N threads, each with a runtime whose device is faked; fails the test with
// every rank's error.
inline std::vector<std::string> runWithDevice(int N, const DeviceScenario& scenario,
                                              RuntimeConfig config = testConfig()) {
  InprocHub hub(N, std::chrono::seconds(20));
  std::vector<std::string> results(N), errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      auto log = std::make_shared<testing::FakeDeviceLog>();
      RuntimeConfig mine = config;
      mine.deviceOps = testing::hostDeviceOps(log);
      try {
        auto rt = Runtime::startWith(mine, hub.connect(rank));
        results[rank] = scenario(rank, *rt, *log);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < N; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
  return results;
}

inline Tensor onDevice(Tensor t, void* stream = nullptr) {
  t.device = 0;
  t.stream = stream;
  return t;
}

}  // namespace scenarios
}  // namespace cerar
