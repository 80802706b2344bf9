// A rank's device work run in call order on a thread of its own, so that the coordinator
// returns to negotiation as soon as a device unit is enqueued: whatever the device side has to
// wait for on the host (a producer's stream, a staged transfer, a flag read back) blocks this
// thread, never the coordinator. Over NCCL the thread itself only enqueues (stream-ordered
// rounds); the finalizer observes completion through the marks.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/device/device.h"

namespace cerar {

// A point in a DeviceQueue's work: reached once the thread has run everything enqueued before
// it and recorded a device event there (or failed first).
class DeviceMark {
 public:
  // Waits for the thread to get here (or fail), then on the host for the device; false when
  // `timeout` passes first. Throws the queue's failure (typed, as Error::status()).
  bool wait(DeviceOps& ops, std::chrono::milliseconds timeout);

 private:
  friend class DeviceQueue;
  void resolve(DeviceEvent event, Status failure);
  // Waits, without a deadline, until resolved; returns the failure it carries.
  Status await();

  std::mutex mutex_;
  std::condition_variable resolved_;
  bool done_ = false;
  DeviceEvent event_;
  Status failure_;
};

// Thread safety: ready() and wait() from any thread; the rest from one thread (the
// coordinator's), in the order the work must run.
class DeviceQueue {
 public:
  explicit DeviceQueue(std::unique_ptr<DeviceOps> ops);
  ~DeviceQueue();  // runs what was enqueued, then stops the thread
  DeviceQueue(const DeviceQueue&) = delete;
  DeviceQueue& operator=(const DeviceQueue&) = delete;

  int device() const { return ops_->device(); }
  // On the calling thread, at once: an event after the work queued on `stream` so far.
  DeviceEvent ready(void* stream) { return ops_->ready(stream); }
  bool wait(const std::shared_ptr<DeviceMark>& mark, std::chrono::milliseconds timeout) {
    return mark->wait(*ops_, timeout);
  }

  // Enqueued: `work` runs on the queue's thread after everything enqueued before, with the
  // device ops; returns at once. What it captures must stay valid until it has run (device
  // memory, host memory it writes).
  void enqueue(std::function<void(DeviceOps&)> work);
  // A mark after everything enqueued so far.
  std::shared_ptr<DeviceMark> record();
  // Synchronous: `work` runs after everything enqueued before it; returns once it has, and
  // rethrows its failure.
  void run(const std::function<void(DeviceOps&)>& work);
  // Synchronous copies (run()), for the host paths' device tensors; a download waits for
  // the producers' events `ready` first.
  void download(void* host, const void* device, size_t bytes,
                const std::vector<DeviceEvent>* ready = nullptr);
  void upload(void* device, const void* host, size_t bytes);

  // Returns once everything enqueued so far has run (or been skipped after a failure).
  // After the first failure of queued work, later work is skipped, every mark after it
  // carries it, and enqueueing or synchronous calls throw it.
  void drain();

 private:
  // A job is called with the queue's failure so far: ok, or the reason to skip its work.
  using Job = std::function<void(const Status& failed)>;
  void push(Job job);
  void loop();

  std::unique_ptr<DeviceOps> ops_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  Status failure_;
  std::thread thread_;
};

}  // namespace cerar
