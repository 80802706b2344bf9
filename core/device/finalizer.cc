#include "core/device/finalizer.h"

#include "common/error.h"

namespace cerar {

Finalizer::~Finalizer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();  // the loop finishes every job first
}

void Finalizer::add(DeviceQueue& queue, std::shared_ptr<DeviceMark> mark,
                    std::function<void(const Status&)> done) {
  std::lock_guard<std::mutex> lock(mutex_);
  jobs_.push_back(Job{&queue, std::move(mark), std::move(done)});
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  changed_.notify_all();
}

void Finalizer::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return jobs_.empty() && !busy_; });
}

bool Finalizer::onThread() {
  std::lock_guard<std::mutex> lock(mutex_);
  return thread_.get_id() == std::this_thread::get_id();
}

void Finalizer::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    Status error;
    try {
      if (!job.queue->wait(job.mark, timeout_)) {
        error = Status(StatusCode::kTimeout,
                       detail::concat("cerar: the device did not finish within ",
                                      timeout_.count(), " ms"));
      }
    } catch (const std::exception& e) {
      error = withContext(statusOf(e), "cerar: device error: ", "");
    }
    job.done(error);
    job = Job{};  // drop the event and the callback's captures before reporting idle
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace cerar
