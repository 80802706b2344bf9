// The runtime with CUDA tensors on a real device (core/device/cuda/cuda_device_ops.cc): ranks are
// threads sharing one GPU over the in-process transport, so the device transport is Gloo-style
// staging through pinned memory; NCCL is checked where one GPU allows (one rank, and the clear
// refusal of two ranks on one GPU). Results equal the same runtime's host tensors bit for bit.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <thread>

#include "core/device/cuda/cuda_device_ops.h"
#include "core/runtime.h"
#include "common/error.h"
#include "ops/transport/inproc.h"
#include "tests/gpu/gpu_test_util.h"

namespace cerar {
namespace {

using testing::DeviceBuffer;
using RankBody = std::function<void(int rank, Runtime& rt)>;

// Runs `body` on N threads, each with a runtime whose device side is CUDA; returns each rank's
// error ("" when it passed).
std::vector<std::string> runRanks(int N, const RankBody& body, const std::string& transport,
                                  const std::string& algorithm = "auto",
                                  const std::function<void(RuntimeConfig&)>& adjust = {}) {
  InprocHub hub(N, std::chrono::seconds(30));
  std::vector<std::string> errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      RuntimeConfig config;
      config.measureLink = false;
      config.timeoutSeconds = 30;
      config.algorithm = algorithm;
      config.deviceTransport = transport;
      config.deviceOps = cudaDeviceOps();
      if (adjust) adjust(config);
      try {
        auto rt = Runtime::startWith(config, hub.connect(rank));
        body(rank, *rt);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

Tensor deviceTensor(const DeviceBuffer& b, size_t n, void* stream = nullptr) {
  Tensor t{b.data(), DType::kFloat32, {int64_t(n)}, 0};
  t.stream = stream;
  return t;
}

std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = 1.0f + normal(gen);
  return v;
}

void expectAllPassed(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(RuntimeCuda, DeviceTensorsEqualHostTensorsBitForBit) {
  CERAR_REQUIRE_GPU();
  for (const char* algorithm : {"ring", "cerar"}) {
    const std::vector<size_t> sizes = {7, 1000, 33, 1 << 18};
    auto errors = runRanks(4, [&](int rank, Runtime& rt) {
      for (Op op : {Op::kSum, Op::kAverage, Op::kMax}) {
        std::vector<std::vector<float>> host;
        std::vector<std::unique_ptr<DeviceBuffer>> device;
        std::vector<Tensor> hostViews, deviceViews;
        std::vector<std::string> hostNames, deviceNames;
        for (size_t i = 0; i < sizes.size(); ++i) {
          host.push_back(randomFloats(sizes[i], 100 * rank + i));
          device.push_back(std::make_unique<DeviceBuffer>(sizes[i] * 4));
          device.back()->upload(host.back().data(), sizes[i] * 4);
          hostNames.push_back(detail::concat("h", algorithm, opName(op), i));
          deviceNames.push_back(detail::concat("d", algorithm, opName(op), i));
          hostViews.push_back(Tensor{host[i].data(), DType::kFloat32, {int64_t(sizes[i])}, -1});
          deviceViews.push_back(deviceTensor(*device[i], sizes[i]));
        }
        // Grouped: one fusion unit each, so both buffers have one layout whatever the timing.
        const double pre = op == Op::kMax ? 1.0 : 0.5, post = op == Op::kMax ? 1.0 : 3.0;
        rt.groupedAllreduce(hostNames, hostViews, hostViews, op, pre, post).wait();
        rt.groupedAllreduce(deviceNames, deviceViews, deviceViews, op, pre, post).wait();
        for (size_t i = 0; i < sizes.size(); ++i) {
          const auto got = device[i]->read<float>(sizes[i]);
          const long at = testing::firstDifference(got.data(), host[i].data(), sizes[i] * 4);
          if (at != -1)
            throw Error(detail::concat(algorithm, " ", opName(op), " tensor ", i,
                                       ": device differs from host at byte ", at));
        }
      }
    }, "auto", algorithm);
    expectAllPassed(errors);
  }
}

// The producer's copy is still queued on its stream when the tensor is enqueued.
TEST(RuntimeCuda, WaitsForTheProducersStreamWithoutHostSync) {
  CERAR_REQUIRE_GPU();
  auto errors = runRanks(2, [](int rank, Runtime& rt) {
    const size_t n = 16 << 20;  // 64 MiB: the copy takes a while
    std::vector<float> values(n, float(rank + 1));
    DeviceBuffer source(n * 4), grad(n * 4);
    source.upload(values.data(), n * 4);
    cudaStream_t stream = nullptr;
    cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    cuda::check(cudaMemsetAsync(grad.data(), 0, n * 4, stream), "memset");
    cuda::check(cudaMemcpyAsync(grad.data(), source.data(), n * 4, cudaMemcpyDeviceToDevice,
                                stream), "copy");
    rt.allreduce("grad", deviceTensor(grad, n, stream), deviceTensor(grad, n, stream), Op::kSum)
        .wait();
    const auto got = grad.read<float>(n);
    for (size_t i = 0; i < n; i += 4099) {
      if (got[i] != 3.0f) throw Error(detail::concat("element ", i, " is ", got[i]));
    }
    cudaStreamDestroy(stream);
  }, "auto");
  expectAllPassed(errors);
}

TEST(RuntimeCuda, BroadcastAndAllgather) {
  CERAR_REQUIRE_GPU();
  auto errors = runRanks(3, [](int rank, Runtime& rt) {
    std::vector<float> mine(1000, float(rank));
    DeviceBuffer weights(4000);
    weights.upload(mine.data(), 4000);
    rt.broadcast("w", deviceTensor(weights, 1000), 2).wait();
    if (weights.read<float>(1000)[999] != 2.0f) throw Error("broadcast value");
    Handle h = rt.allgather("g", deviceTensor(weights, 1000));
    h.wait();
    if (h.output().size() != 3 * 4000) throw Error("allgather size");
  }, "auto");
  expectAllPassed(errors);
}

// Rank 1 is a CPU-only peer: the unit is reduced on the host, rank 0 copying in and out.
TEST(RuntimeCuda, HostAndDeviceRanksMix) {
  CERAR_REQUIRE_GPU();
  auto errors = runRanks(2, [](int rank, Runtime& rt) {
    const size_t n = 100000;
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = float(i % 1000) + float(rank);
    DeviceBuffer g(n * 4);
    g.upload(values.data(), n * 4);
    Tensor t = rank == 0 ? deviceTensor(g, n)
                         : Tensor{values.data(), DType::kFloat32, {int64_t(n)}, -1};
    rt.allreduce("g", t, t, Op::kSum).wait();
    const std::vector<float> got = rank == 0 ? g.read<float>(n) : values;
    for (size_t i = 0; i < n; ++i) {
      if (got[i] != 2.0f * float(i % 1000) + 1.0f)
        throw Error(detail::concat("element ", i, " is ", got[i]));
    }
  }, "auto");
  expectAllPassed(errors);
}

TEST(RuntimeCuda, NcclForTwoRanksOnOneGpuIsRefusedOnEveryRank) {
  CERAR_REQUIRE_GPU();
  auto errors = runRanks(2, [](int, Runtime& rt) {
    DeviceBuffer g(64);
    rt.allreduce("g", deviceTensor(g, 16), deviceTensor(g, 16), Op::kSum).wait();
  }, "nccl");
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_NE(errors[r].find("two ranks share a GPU"), std::string::npos) << errors[r];
  }
}

// Ranks declared as 2 hosts of 2 with CERAR_HIERARCHICAL_ALLREDUCE=1: on one GPU no host can
// run NCCL among its ranks, so every rank agrees to run the exact ring flat for device buffers
// (docs/hierarchical.md, "GPU buffers"); integer-valued sums stay exact.
TEST(RuntimeCuda, HostByHostWithoutNcclInsideAHostRunsFlatEverywhere) {
  CERAR_REQUIRE_GPU();
  const size_t n = 4099;
  auto errors = runRanks(4, [&](int rank, Runtime& rt) {
    std::vector<float> host(n);
    for (size_t e = 0; e < n; ++e) host[e] = float((e + size_t(rank)) % 7);
    DeviceBuffer device(n * 4);
    device.upload(host.data(), n * 4);
    rt.allreduce("ints", deviceTensor(device, n), deviceTensor(device, n), Op::kSum).wait();
    const auto got = device.read<float>(n);
    for (size_t e = 0; e < n; ++e) {
      float want = 0;
      for (int r = 0; r < 4; ++r) want += float((e + size_t(r)) % 7);
      if (got[e] != want) throw Error(detail::concat("element ", e, ": ", got[e], " != ", want));
    }
    const RuntimeStats s = rt.stats();
    if (s.hierarchicalBuffers != 0 || s.ringBuffers != 1)
      throw Error(detail::concat(s.hierarchicalBuffers, " buffers host by host, ",
                                 s.ringBuffers, " by the ring"));
  }, "auto", "cerar", [](RuntimeConfig& config) {
    config.localSize = 2;
    config.hierarchicalAllreduce = "1";
  });
  expectAllPassed(errors);
}

TEST(RuntimeCuda, OneRankOverNccl) {
  CERAR_REQUIRE_GPU();
  auto errors = runRanks(1, [](int, Runtime& rt) {
    std::vector<float> v = randomFloats(5000, 3);
    DeviceBuffer g(v.size() * 4);
    g.upload(v.data(), v.size() * 4);
    rt.allreduce("g", deviceTensor(g, v.size()), deviceTensor(g, v.size()), Op::kAverage, 2.0)
        .wait();
    const auto got = g.read<float>(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (got[i] != v[i] * 2.0f) throw Error(detail::concat("element ", i));
    }
  }, "nccl");
  expectAllPassed(errors);
}

}  // namespace
}  // namespace cerar
