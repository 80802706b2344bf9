// The runtime's device path (CUDA tensors) with the device faked in host memory
// (host_device_ops.h), ranks as threads: results bit-identical to host tensors, ordering after
// the producers' streams, completion off the coordinator thread, joined ranks, ranks mixing
// host and device tensors, and the errors.
// The same path on a real GPU is tests/gpu/runtime_device_test.cc.
#include <gtest/gtest.h>

#include <random>

#include "device_scenarios.h"

namespace cerar {
namespace {

using namespace scenarios;
using testing::FakeDeviceLog;
using testing::Gate;

std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = 1.0f + normal(gen);
  return v;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// A fused group (a grouped allreduce: one fusion unit, so host and device buffers have the same
// layout whatever the timing), a lone tensor in place and out of place, scale factors, CERAR
// and the ring: every result equals the same operation on host tensors bit for bit.
std::string deviceEqualsHost(int rank, Runtime& rt, FakeDeviceLog& log) {
  const std::vector<size_t> sizes = {7, 1000, 33, 1 << 16};
  for (Op op : {Op::kSum, Op::kAverage, Op::kMax}) {
    std::vector<std::vector<float>> host, device;
    std::vector<Tensor> hostViews, deviceViews;
    std::vector<std::string> hostNames, deviceNames;
    for (size_t i = 0; i < sizes.size(); ++i) {
      host.push_back(randomFloats(sizes[i], 100 * rank + i));
      device.push_back(host.back());
      hostNames.push_back(detail::concat("h.", opName(op), ".", i));
      deviceNames.push_back(detail::concat("d.", opName(op), ".", i));
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      hostViews.push_back(f32(host[i]));
      deviceViews.push_back(onDevice(f32(device[i])));
    }
    const double pre = op == Op::kMax ? 1.0 : 0.5, post = op == Op::kMax ? 1.0 : 3.0;
    rt.groupedAllreduce(hostNames, hostViews, hostViews, op, pre, post).wait();
    rt.groupedAllreduce(deviceNames, deviceViews, deviceViews, op, pre, post).wait();
    for (size_t i = 0; i < sizes.size(); ++i) {
      check(sameBits(host[i], device[i]), "rank ", rank, " ", opName(op), " tensor ", i,
            ": device result differs from host");
    }
  }
  // Out of place, alone (the direct path).
  std::vector<float> in = randomFloats(5000, rank), out(5000), hostOut(5000);
  rt.allreduce("d.single", onDevice(f32(in)), onDevice(f32(out)), Op::kSum).wait();
  rt.allreduce("h.single", f32(in), f32(hostOut), Op::kSum).wait();
  check(sameBits(out, hostOut), "out of place differs");
  check(log.packs > 0, "fusion groups were not packed in one batched copy");
  check(log.made == 1, "device ops made ", int(log.made), " times");
  return "ok";
}

TEST(RuntimeDevice, ResultsEqualHostTensorsBitForBit) {
  runWithDevice(4, deviceEqualsHost);
  RuntimeConfig cerar = testConfig();
  cerar.algorithm = "cerar";
  cerar.components = 8;
  auto results = runWithDevice(4, [](int rank, Runtime& rt, FakeDeviceLog& log) {
    const std::string outcome = deviceEqualsHost(rank, rt, log);
    check(rt.stats().cerarBuffers > 0, "no CERAR buffer ran");
    return outcome;
  }, cerar);
}

TEST(RuntimeDevice, DebugErrorModeMeasuresDeviceBuffers) {
  RuntimeConfig config = testConfig();
  config.algorithm = "cerar";
  config.components = 8;
  config.debugError = true;
  runWithDevice(4, [](int rank, Runtime& rt, FakeDeviceLog&) {
    std::vector<float> g = randomFloats(1 << 14, rank);
    rt.allreduce("g", onDevice(f32(g)), onDevice(f32(g)), Op::kSum).wait();
    const RuntimeStats stats = rt.stats();
    check(stats.measuredBuffers == 1, "measured ", stats.measuredBuffers, " buffers");
    check(stats.measuredErrorMax > 0 && stats.measuredErrorMax <= stats.predictedErrorMax,
          "measured ", stats.measuredErrorMax, " predicted ", stats.predictedErrorMax);
    return std::string("ok");
  }, config);
}

TEST(RuntimeDevice, BroadcastAndAllgatherOfDeviceTensors) {
  runWithDevice(3, [](int rank, Runtime& rt, FakeDeviceLog&) {
    std::vector<float> weights(70000, float(rank));
    rt.broadcast("w", onDevice(f32(weights)), 1).wait();
    check(std::all_of(weights.begin(), weights.end(), [](float x) { return x == 1.0f; }),
          "broadcast did not deliver root's values");
    std::vector<float> rows(size_t(rank + 1) * 2, float(rank));
    Handle h = rt.allgather("rows", onDevice(view(rows, {rank + 1, 2}, DType::kFloat32)));
    h.wait();
    check(h.outputShape() == std::vector<int64_t>{6, 2}, "allgather shape");
    const float* got = reinterpret_cast<const float*>(h.output().data());
    const std::vector<float> want = {0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    check(std::equal(want.begin(), want.end(), got), "allgather values");
    return std::string("ok");
  });
}

// The producer's stream is still "running" when the tensor is enqueued: the runtime must take
// the data as it is once that stream reaches the enqueue point, not before.
TEST(RuntimeDevice, WaitsForTheProducersStream) {
  runWithDevice(2, [](int rank, Runtime& rt, FakeDeviceLog& log) {
    std::vector<float> grad(4096, -1.0f);  // not yet written
    Gate producer;
    Handle h = rt.allreduce("grad", onDevice(f32(grad), &producer),
                            onDevice(f32(grad), &producer), Op::kSum);
    std::this_thread::sleep_for(30ms);
    check(!h.poll(), "completed before its producer finished");
    std::fill(grad.begin(), grad.end(), float(rank + 1));
    producer.open();
    h.wait();
    check(std::all_of(grad.begin(), grad.end(), [](float x) { return x == 3.0f; }),
          "reduced stale data: ", grad[0]);
    check(log.readyEvents == 1, "ready events: ", int(log.readyEvents));
    return std::string("ok");
  });
}

// While the device has not reached the end of one operation, the coordinator goes on: a host
// operation enqueued later completes first; the device one completes once its event is reached.
TEST(RuntimeDevice, CompletionDoesNotBlockTheCoordinator) {
  runWithDevice(3, [](int rank, Runtime& rt, FakeDeviceLog& log) {
    log.holdCompletion = true;
    std::vector<float> grad(1000, float(rank)), other(10, 1.0f);
    std::atomic<bool> calledBack{false};
    Handle device = rt.allreduce("grad", onDevice(f32(grad)), onDevice(f32(grad)), Op::kSum,
                                 1.0, 1.0, [&](const Status& s) { calledBack = s.ok(); });
    Handle host = rt.allreduce("other", f32(other), f32(other), Op::kSum);
    host.wait();
    check(!device.poll() && !calledBack, "device operation completed before its event");
    // The name is still in flight meanwhile.
    check(failure(rt.allreduce("grad", onDevice(f32(grad)), onDevice(f32(grad)), Op::kSum))
              .find("in flight") != std::string::npos, "name released early");
    // The device queue records the unit's end on its own thread: release it once it is there.
    for (int i = 0; i < 5000; ++i) {
      {
        std::lock_guard<std::mutex> lock(log.mutex);
        if (!log.held.empty()) break;
      }
      std::this_thread::sleep_for(1ms);
    }
    log.releaseHeld();
    device.wait();
    // The callback runs just after waiters wake (operation.h).
    for (int i = 0; i < 1000 && !calledBack; ++i) std::this_thread::sleep_for(1ms);
    check(calledBack, "callback did not run");
    check(grad[0] == 3.0f, "grad ", grad[0]);
    rt.barrier().wait();
    return std::string("ok");
  });
}

// Polls `h` until it completes or `limit` passes (a blocked coordinator fails, never hangs).
bool completesWithin(const Handle& h, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!h.poll()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// The device is busy inside a unit's all-reduce (its rounds have not all run): the coordinator
// has handed the unit to the device queue and goes on, so a host operation enqueued after it
// completes meanwhile; the device unit completes, correct, once the device moves on.
TEST(RuntimeDevice, HostUnitCompletesWhileADeviceUnitIsBlockedInItsRounds) {
  runWithDevice(3, [](int rank, Runtime& rt, FakeDeviceLog& log) {
    auto busy = std::make_shared<Gate>();
    log.holdAllreduces(busy);
    std::vector<float> grad(1000, float(rank)), other(10, float(rank));
    std::vector<float> a(300, 1.0f), b(70, float(rank));
    Handle device = rt.allreduce("grad", onDevice(f32(grad)), onDevice(f32(grad)), Op::kSum);
    // A fused device unit behind it (the device's fusion buffer is still in use).
    Handle fused = rt.groupedAllreduce({"a", "b"}, {onDevice(f32(a)), onDevice(f32(b))},
                                       {onDevice(f32(a)), onDevice(f32(b))}, Op::kMax);
    Handle host = rt.allreduce("other", f32(other), f32(other), Op::kSum);
    const bool hostDone = completesWithin(host, 5000ms);
    const bool deviceDone = device.poll() || fused.poll();
    busy->open();
    check(hostDone, "the host unit waited for the device units' rounds");
    check(!deviceDone, "a device unit completed while its all-reduce was held");
    check(completesWithin(device, 10000ms) && completesWithin(fused, 10000ms),
          "a device unit never completed");
    check(outcome(device).ok() && outcome(fused).ok(), failure(device), failure(fused));
    check(other[0] == 3.0f && grad[0] == 3.0f && grad[999] == 3.0f, "results ", other[0], " ",
          grad[0]);
    check(a[0] == 1.0f && b[69] == 2.0f, "fused results ", a[0], " ", b[69]);
    check(rt.stats().ringBuffers == 3, "ring buffers ", rt.stats().ringBuffers);
    return std::string("ok");
  });
}

// Device units end in the order they were enqueued even when the device reaches the second
// one's end first (the held marks are released in reverse).
TEST(RuntimeDevice, MarksReachedOutOfOrderCompleteInOrder) {
  runWithDevice(2, [](int rank, Runtime& rt, FakeDeviceLog& log) {
    log.holdCompletion = true;
    std::vector<float> a(300, float(rank + 1)), b(500, float(2 * rank + 1));
    Handle first = rt.allreduce("a", onDevice(f32(a)), onDevice(f32(a)), Op::kSum);
    Handle second = rt.allreduce("b", onDevice(f32(b)), onDevice(f32(b)), Op::kMax);
    std::vector<std::shared_ptr<Gate>> held;
    for (int i = 0; i < 5000 && held.size() < 2; ++i) {
      std::this_thread::sleep_for(1ms);
      std::lock_guard<std::mutex> lock(log.mutex);
      held = log.held;
    }
    check(held.size() == 2, "held marks: ", held.size());
    held[1]->open();
    std::this_thread::sleep_for(50ms);
    check(!first.poll() && !second.poll(), "completed before the first mark was reached");
    held[0]->open();
    check(completesWithin(first, 5000ms) && completesWithin(second, 5000ms), "never completed");
    check(a[0] == 3.0f && a[299] == 3.0f && b[0] == 3.0f, "results ", a[0], " ", b[0]);
    log.releaseHeld();
    return std::string("ok");
  });
}

// Held inside the all-reduce past the timeout: the operation fails with the timeout, and the
// runtime still shuts down once the device moves on.
TEST(RuntimeDevice, DeviceStuckInItsRoundsFailsTheOperation) {
  RuntimeConfig config = testConfig();
  config.timeoutSeconds = 0.3;
  runWithDevice(2, [](int, Runtime& rt, FakeDeviceLog& log) {
    auto busy = std::make_shared<Gate>();
    log.holdAllreduces(busy);
    std::vector<float> g(10, 1.0f);
    Handle stuck = rt.allreduce("stuck", onDevice(f32(g)), onDevice(f32(g)), Op::kSum);
    const bool done = completesWithin(stuck, 5000ms);
    busy->open();
    rt.shutdown();  // runs the device work to its end while `g` is alive
    check(done, "no timeout");
    check(failure(stuck).find("did not finish within 300 ms") != std::string::npos,
          failure(stuck));
    check(outcome(stuck).code == StatusCode::kTimeout, "code ", int(outcome(stuck).code));
    return std::string("ok");
  }, config);
}

// Every dtype and reduction of the device path, fused, equals the host path bit for bit (the
// runtime scales integers in Python, cerar.torch, so they take no scale factors here).
template <typename T>
std::string dtypeEqualsHost(int rank, Runtime& rt, DType dtype, const char* label) {
  const std::vector<size_t> sizes = {5, 777, 4096};
  const bool floating = dtype != DType::kInt32 && dtype != DType::kInt64 &&
                        dtype != DType::kUInt8;
  for (Op op : {Op::kSum, Op::kAverage, Op::kMin, Op::kMax}) {
    if (op == Op::kAverage && !floating) continue;  // the runtime's integers: sum, min, max
    std::vector<std::vector<T>> host, device;
    std::vector<Tensor> hostViews, deviceViews;
    std::vector<std::string> hostNames, deviceNames;
    std::mt19937 gen(7 * rank + int(op));
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<T> v(sizes[i]);
      for (auto& x : v) {
        const int bits = int(gen() % 200);
        if constexpr (sizeof(T) == 2) x = T(0x3c00 + bits);  // f16 / bf16 bit patterns near 1
        else x = T(bits);
      }
      host.push_back(v);
      device.push_back(v);
      hostNames.push_back(detail::concat("h.", label, ".", opName(op), ".", i));
      deviceNames.push_back(detail::concat("d.", label, ".", opName(op), ".", i));
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      hostViews.push_back(view(host[i], {int64_t(sizes[i])}, dtype));
      deviceViews.push_back(onDevice(view(device[i], {int64_t(sizes[i])}, dtype)));
    }
    const double pre = floating && op == Op::kSum ? 2.0 : 1.0;
    const double post = floating && op == Op::kAverage ? 0.5 : 1.0;
    rt.groupedAllreduce(hostNames, hostViews, hostViews, op, pre, post).wait();
    rt.groupedAllreduce(deviceNames, deviceViews, deviceViews, op, pre, post).wait();
    for (size_t i = 0; i < sizes.size(); ++i) {
      check(std::memcmp(host[i].data(), device[i].data(), sizes[i] * sizeof(T)) == 0, label,
            " ", opName(op), " tensor ", i, ": device result differs from host");
    }
  }
  return "ok";
}

TEST(RuntimeDevice, EveryDtypeAndOpEqualsHostBitForBit) {
  runWithDevice(3, [](int rank, Runtime& rt, FakeDeviceLog& log) {
    dtypeEqualsHost<double>(rank, rt, DType::kFloat64, "f64");
    dtypeEqualsHost<float>(rank, rt, DType::kFloat32, "f32");
    dtypeEqualsHost<uint16_t>(rank, rt, DType::kFloat16, "f16");
    dtypeEqualsHost<uint16_t>(rank, rt, DType::kBFloat16, "bf16");
    dtypeEqualsHost<int32_t>(rank, rt, DType::kInt32, "i32");
    dtypeEqualsHost<int64_t>(rank, rt, DType::kInt64, "i64");
    dtypeEqualsHost<uint8_t>(rank, rt, DType::kUInt8, "u8");
    check(log.allreduces == 4 * 4 + 3 * 3, "device all-reduces: ", int(log.allreduces));
    return std::string("ok");
  });
}

TEST(RuntimeDevice, JoinedRankContributesOnItsDevice) {
  runWithDevice(3, [](int rank, Runtime& rt, FakeDeviceLog&) {
    const int steps = rank == 2 ? 1 : 3;  // rank 2 runs out of data first
    for (int s = 0; s < steps; ++s) {
      std::vector<float> g(100, 1.0f);
      rt.allreduce(detail::concat("g", s), onDevice(f32(g)), onDevice(f32(g)), Op::kSum).wait();
      const float want = s == 0 ? 3.0f : 2.0f;
      check(g[0] == want && g[99] == want, "step ", s, ": ", g[0]);
    }
    rt.join().wait();
    return std::string("ok");
  });
}

// A rank with host tensors (a CPU-only peer) in a job whose other ranks pass device tensors:
// the unit is reduced on the host everywhere, bit-identical to an all-host run, also from the
// response cache in the steady state.
TEST(RuntimeDevice, HostAndDeviceRanksMix) {
  runWithDevice(3, [](int rank, Runtime& rt, FakeDeviceLog& log) {
    const std::vector<size_t> sizes = {1000, 3, 1 << 15};
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> mixed, host;
      std::vector<Tensor> mixedViews, hostViews;
      for (size_t i = 0; i < sizes.size(); ++i) {
        mixed.push_back(randomFloats(sizes[i], 10 * rank + i + step));
        host.push_back(mixed.back());
      }
      for (size_t i = 0; i < sizes.size(); ++i) {
        mixedViews.push_back(rank == 1 ? f32(mixed[i]) : onDevice(f32(mixed[i])));
        hostViews.push_back(f32(host[i]));
      }
      rt.groupedAllreduce({"m0", "m1", "m2"}, mixedViews, mixedViews, Op::kAverage, 0.5, 2.0)
          .wait();
      rt.groupedAllreduce({"h0", "h1", "h2"}, hostViews, hostViews, Op::kAverage, 0.5, 2.0)
          .wait();
      for (size_t i = 0; i < sizes.size(); ++i) {
        check(sameBits(mixed[i], host[i]), "step ", step, " tensor ", i, " differs");
      }
    }
    check(log.allreduces == 0, "a mixed unit took the device path");
    check(rt.stats().cacheHits > 0, "mixed units never hit the cache");
    std::vector<float> w(100, float(rank));
    Tensor t = rank == 0 ? f32(w) : onDevice(f32(w));
    rt.broadcast("w", t, 2).wait();
    check(w[99] == 2.0f, "mixed broadcast");
    return std::string("ok");
  });
}

TEST(RuntimeDevice, ASecondDeviceOnOneRankIsRefused) {
  runWithDevice(2, [](int, Runtime& rt, FakeDeviceLog&) {
    std::vector<float> g(10, 1.0f);
    rt.allreduce("first", onDevice(f32(g)), onDevice(f32(g)), Op::kSum).wait();
    Tensor other = onDevice(f32(g));
    other.device = 1;
    Handle refused = rt.allreduce("second", other, other, Op::kSum);
    check(refused.poll(), "a second device was not refused at once");
    check(failure(refused).find("uses cuda:0 and got a tensor on cuda:1") != std::string::npos,
          failure(refused));
    rt.barrier().wait();
    return std::string("ok");
  });
}

TEST(RuntimeDevice, WithoutDeviceSupportCudaTensorsAreRefused) {
  InprocHub hub(1, std::chrono::seconds(5));
  auto rt = Runtime::startWith(testConfig(), hub.connect(0));
  std::vector<float> g(4, 1.0f);
  Handle h = rt->allreduce("g", onDevice(f32(g)), onDevice(f32(g)), Op::kSum);
  EXPECT_TRUE(h.poll());
  EXPECT_NE(failure(h).find("no CUDA support"), std::string::npos) << failure(h);
}

TEST(RuntimeDevice, DeviceThatNeverFinishesFailsTheOperation) {
  RuntimeConfig config = testConfig();
  config.timeoutSeconds = 0.3;
  runWithDevice(2, [](int, Runtime& rt, FakeDeviceLog& log) {
    log.holdCompletion = true;  // never released
    std::vector<float> g(10, 1.0f);
    const std::string error =
        failure(rt.allreduce("stuck", onDevice(f32(g)), onDevice(f32(g)), Op::kSum));
    check(error.find("did not finish within 300 ms") != std::string::npos, error);
    return std::string("ok");
  }, config);
}

// A callback on the finalizer thread may shut the runtime down without deadlocking.
TEST(RuntimeDevice, ShutdownFromADeviceCallback) {
  runWithDevice(2, [](int, Runtime& rt, FakeDeviceLog&) {
    std::vector<float> g(10, 1.0f);
    rt.allreduce("g", onDevice(f32(g)), onDevice(f32(g)), Op::kSum, 1.0, 1.0,
                 [&](const Status&) { rt.shutdown(); })
        .wait();
    rt.shutdown();
    return std::string("ok");
  });
}

}  // namespace
}  // namespace cerar
