// Completes device operations once the device has reached their end, on a thread of its own,
// so that the coordinator goes on negotiating and dispatching while the GPU works.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/device/device_queue.h"
#include "common/status.h"

namespace cerar {

// Jobs finish in the order they were added. Thread safety: add() and drain() from any thread
// but the finalizer's own.
class Finalizer {
 public:
  // `timeout`: how long the device may take to reach an event before its job fails.
  explicit Finalizer(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  ~Finalizer();
  Finalizer(const Finalizer&) = delete;
  Finalizer& operator=(const Finalizer&) = delete;

  // Calls done(ok) on the finalizer thread once `queue` reaches `mark` (its thread has run the
  // work before it and the device has done it), or done(why) when waiting fails (the queue's
  // failure, a device error, the timeout). The thread starts with the first job.
  void add(DeviceQueue& queue, std::shared_ptr<DeviceMark> mark,
           std::function<void(const Status&)> done);
  // Returns once every job added so far has finished.
  void drain();
  // True on the finalizer thread (where the `done` callbacks run).
  bool onThread();

 private:
  struct Job {
    DeviceQueue* queue;
    std::shared_ptr<DeviceMark> mark;
    std::function<void(const Status&)> done;
  };
  void loop();

  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  bool busy_ = false;  // the thread holds a job taken from jobs_
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cerar
