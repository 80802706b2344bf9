#include "core/device_queue.h"

#include "ops/common/error.h"

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

Status DeviceQueue::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void DeviceQueue::push(Job job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) failure_.raise();
    jobs_.push_back(std::move(job));
  }
  changed_.notify_all();
}

void DeviceQueue::work(std::function<void()> job) {
  push([job = std::move(job)](const Status& failed) {
    if (failed.ok()) job();
  });
}

void DeviceQueue::sync(const std::function<void()>& job) {
  auto done = std::make_shared<DeviceMark>();
  push([&job, done](const Status& failed) {
    if (!failed.ok()) return done->resolve(nullptr, failed);
    try {
      job();
    } catch (const std::exception& e) {
      done->resolve(nullptr, statusOf(e));
      throw;  // the queue fails as with any job
    }
    done->resolve(nullptr, {});
  });
  // No deadline of our own: `job` writes the caller's memory, so it must not outlive this
  // call; every wait of the device ops it runs has one.
  std::unique_lock<std::mutex> lock(done->mutex_);
  done->resolved_.wait(lock, [&] { return done->done_; });
  if (!done->failure_.ok()) done->failure_.raise();
}

void DeviceQueue::after(DeviceEvent event) {
  work([this, event = std::move(event)] { ops_->after(event); });
}

void DeviceQueue::copy(std::vector<DeviceCopy> copies) {
  if (copies.empty()) return;
  work([this, copies = std::move(copies)] { ops_->copy(copies); });
}

void DeviceQueue::scale(DType dtype, void* data, size_t n, double factor) {
  work([=] { ops_->scale(dtype, data, n, factor); });
}

void DeviceQueue::fillIdentity(DType dtype, ReduceOp op, void* data, size_t n) {
  work([=] { ops_->fillIdentity(dtype, op, data, n); });
}

std::shared_ptr<const RunStats> DeviceQueue::allreduce(void* data, size_t count, DType dtype,
                                                       const AllreduceOptions& options) {
  auto ran = std::make_shared<RunStats>();
  work([=] { *ran = ops_->allreduce(data, count, dtype, options); });
  return ran;
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

std::byte* DeviceQueue::fusionBuffer(size_t bytes) {
  std::byte* buffer = nullptr;
  sync([&] { buffer = ops_->fusionBuffer(bytes); });
  return buffer;
}

void DeviceQueue::download(void* host, const void* device, size_t bytes) {
  sync([&] { ops_->download(host, device, bytes); });
}

void DeviceQueue::upload(void* device, const void* host, size_t bytes) {
  sync([&] { ops_->upload(device, host, bytes); });
}

void DeviceQueue::drain() {
  auto done = std::make_shared<DeviceMark>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back([done](const Status& failed) { done->resolve(nullptr, failed); });
  }
  changed_.notify_all();
  std::unique_lock<std::mutex> lock(done->mutex_);
  done->resolved_.wait(lock, [&] { return done->done_; });
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
