#include "core/device/device_queue.h"

#include "common/error.h"

namespace cerar {

bool DeviceMark::wait(DeviceOps& ops, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  DeviceEvent event;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!resolved_.wait_until(lock, deadline, [&] { return done_; })) return false;
    if (!failure_.ok()) failure_.raise();
    event = event_;
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return ops.wait(event, std::max(left, std::chrono::milliseconds(0)));
}

Status DeviceMark::await() {
  std::unique_lock<std::mutex> lock(mutex_);
  resolved_.wait(lock, [&] { return done_; });
  return failure_;
}

void DeviceMark::resolve(DeviceEvent event, Status failure) {
  std::lock_guard<std::mutex> lock(mutex_);
  event_ = std::move(event);
  failure_ = std::move(failure);
  done_ = true;
  resolved_.notify_all();
}

DeviceQueue::DeviceQueue(std::unique_ptr<DeviceOps> ops) : ops_(std::move(ops)) {
  CERAR_ENFORCE(ops_ != nullptr, "device queue without device ops");
  thread_ = std::thread([this] { loop(); });
}

DeviceQueue::~DeviceQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();  // the loop runs every job first (marks are resolved, none left hanging)
}

void DeviceQueue::push(Job job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) failure_.raise();
    jobs_.push_back(std::move(job));
  }
  changed_.notify_all();
}

void DeviceQueue::enqueue(std::function<void(DeviceOps&)> work) {
  push([this, work = std::move(work)](const Status& failed) {
    if (failed.ok()) work(*ops_);  // skipped after a failure
  });
}

void DeviceQueue::run(const std::function<void(DeviceOps&)>& work) {
  auto done = std::make_shared<DeviceMark>();
  push([this, &work, done](const Status& failed) {
    if (!failed.ok()) return done->resolve(nullptr, failed);
    try {
      work(*ops_);
    } catch (const std::exception& e) {
      done->resolve(nullptr, statusOf(e));
      throw;  // the queue fails as with any job
    }
    done->resolve(nullptr, {});
  });
  // No deadline of our own: `work` may write the caller's memory, so it must not outlive
  // this call; every wait of the device ops it runs has one.
  const Status failed = done->await();
  if (!failed.ok()) failed.raise();
}

void DeviceQueue::download(void* host, const void* device, size_t bytes,
                           const std::vector<DeviceEvent>* ready) {
  run([&](DeviceOps& ops) {
    if (ready) {
      for (const DeviceEvent& event : *ready) ops.after(event);
    }
    ops.download(host, device, bytes);
  });
}

void DeviceQueue::upload(void* device, const void* host, size_t bytes) {
  run([&](DeviceOps& ops) { ops.upload(device, host, bytes); });
}

std::shared_ptr<DeviceMark> DeviceQueue::record() {
  auto mark = std::make_shared<DeviceMark>();
  push([this, mark](const Status& failed) {
    if (!failed.ok()) return mark->resolve(nullptr, failed);
    try {
      mark->resolve(ops_->record(), {});
    } catch (const std::exception& e) {
      mark->resolve(nullptr, statusOf(e));
      throw;
    }
  });
  return mark;
}

void DeviceQueue::drain() {
  auto done = std::make_shared<DeviceMark>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back([done](const Status& failed) { done->resolve(nullptr, failed); });
  }
  changed_.notify_all();
  done->await();
}

void DeviceQueue::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    const Status failed = failure_;
    lock.unlock();
    Status outcome;
    try {
      job(failed);  // after a failure, jobs only resolve what waits on them
    } catch (const std::exception& e) {
      outcome = statusOf(e);
    }
    job = nullptr;  // its captures (events, buffers' owners) go before the next job
    lock.lock();
    if (!outcome.ok() && failure_.ok()) failure_ = outcome;
  }
}

}  // namespace cerar
