// A stand-in for the CUDA device in runtime tests: "device memory" is host memory, streams and
// events are gates a test opens, and the all-reduce is the host Communicator over the
// device work's channel of the runtime's links. Lets the runtime's device path (ordering after
// the producers' streams, fusion on the device, device work off the coordinator thread,
// completion through marks) run without a GPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/device/device.h"
#include "core/execution/scaling.h"
#include "ops/hierarchical.h"
#include "common/error.h"

namespace cerar::testing {

// A point in fake device work: reached once opened.
class Gate {
 public:
  explicit Gate(bool open = false) : open_(open) {}
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  bool waitFor(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_;
};

// What the fakes of one rank saw; shared with the test.
struct FakeDeviceLog {
  std::atomic<int> made{0};
  std::atomic<int> packs{0};         // copy() calls with more than one slice
  std::atomic<int> readyEvents{0};
  std::atomic<int> allreduces{0};
  std::atomic<int> byHost{0};              // allreduceByHost() calls
  std::atomic<bool> noHostLevel{false};    // this rank's host has no level of its own
  std::atomic<bool> holdCompletion{false};  // record() returns closed gates ...
  std::mutex mutex;
  std::vector<std::shared_ptr<Gate>> held;  // ... collected here for the test to open
  std::shared_ptr<Gate> allreduceGate;      // set: each all-reduce waits for it (a busy GPU)
  void holdAllreduces(std::shared_ptr<Gate> gate) {
    std::lock_guard<std::mutex> lock(mutex);
    allreduceGate = std::move(gate);
  }
  void releaseHeld() {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& gate : held) gate->open();
    held.clear();
  }
};

class HostDeviceOps : public DeviceOps {
 public:
  HostDeviceOps(int device, const DeviceSetup& setup, std::shared_ptr<FakeDeviceLog> log)
      : device_(device < 0 ? 0 : device), communicator_(setup.transport), setup_(setup),
        log_(std::move(log)) {
    log_->made += 1;
  }
  int device() const override { return device_; }
  // `stream` is a Gate* the producer opens when its data is written (null: written already).
  DeviceEvent ready(void* stream) override {
    log_->readyEvents += 1;
    if (stream == nullptr) return std::make_shared<Gate>(true);
    return std::shared_ptr<void>(std::shared_ptr<void>{}, stream);  // aliasing, not owning
  }
  bool wait(const DeviceEvent& event, std::chrono::milliseconds timeout) override {
    return !event || static_cast<Gate*>(event.get())->waitFor(timeout);
  }
  void after(const DeviceEvent& event) override {
    // Fake work runs at once, so "later work waits" means the caller waits here.
    CERAR_ENFORCE(wait(event, std::chrono::seconds(20)), "fake device: producer never done");
  }
  std::byte* fusionBuffer(size_t bytes) override {
    if (buffer_.size() < bytes) buffer_.resize(bytes);
    return buffer_.data();
  }
  void copy(const std::vector<DeviceCopy>& copies) override {
    if (copies.size() > 1) log_->packs += 1;
    for (const auto& c : copies) std::memcpy(c.dst, c.src, c.bytes);
  }
  void scale(DType dtype, void* data, size_t n, double factor) override {
    scaledCopy(dtype, data, data, n, factor);
  }
  void fillIdentity(DType dtype, ReduceOp op, void* data, size_t n) override {
    cerar::fillIdentity(dtype, op, data, n);
  }
  void download(void* host, const void* device, size_t bytes) override {
    std::memcpy(host, device, bytes);
  }
  void upload(void* device, const void* host, size_t bytes) override {
    std::memcpy(device, host, bytes);
  }
  RunStats allreduce(void* data, size_t count, DType dtype,
                     const AllreduceOptions& options) override {
    log_->allreduces += 1;
    std::shared_ptr<Gate> gate;
    {
      std::lock_guard<std::mutex> lock(log_->mutex);
      gate = log_->allreduceGate;
    }
    CERAR_ENFORCE(!gate || gate->waitFor(std::chrono::seconds(20)),
                  "fake device: all-reduce held for 20 s");
    return communicator_.allreduce(data, count, dtype, options);
  }
  // As the CUDA device's, whose host level is NCCL's collectives: here the exact ring over
  // the host's links.
  RunStats allreduceByHost(void* data, size_t count, DType dtype,
                           const AllreduceOptions& options) override {
    log_->byHost += 1;
    if (!levelsTried_) {
      levelsTried_ = true;
      if (everyRankAgrees(!log_->noHostLevel, setup_.local, setup_.cross))
        hierarchy_ = std::make_unique<HierarchicalAllreduce>(
            ringHostLevel(setup_.local), std::make_unique<Communicator>(setup_.cross));
    }
    if (!hierarchy_) {
      AllreduceOptions flat = options;
      flat.algorithm = Algorithm::kRing;
      flat.components = 0;
      RunStats run = communicator_.allreduce(data, count, dtype, flat);
      run.flatFallback = true;
      return run;
    }
    return hierarchy_->allreduce(data, count, dtype, options);
  }
  DeviceEvent record() override {
    auto gate = std::make_shared<Gate>(!log_->holdCompletion);
    if (log_->holdCompletion) {
      std::lock_guard<std::mutex> lock(log_->mutex);
      log_->held.push_back(gate);
    }
    return gate;
  }

 private:
  int device_;
  Communicator communicator_;
  DeviceSetup setup_;
  bool levelsTried_ = false;
  std::unique_ptr<HierarchicalAllreduce> hierarchy_;
  std::vector<std::byte> buffer_;
  std::shared_ptr<FakeDeviceLog> log_;
};

inline DeviceOpsFactory hostDeviceOps(std::shared_ptr<FakeDeviceLog> log) {
  return [log](int device, const DeviceSetup& setup) -> std::unique_ptr<DeviceOps> {
    CERAR_ENFORCE(device < 2, "fake device: no cuda:", device, " (2 devices)");
    return std::make_unique<HostDeviceOps>(device, setup, log);
  };
}

}  // namespace cerar::testing
