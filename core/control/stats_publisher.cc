#include "core/control/stats_publisher.h"

#include "ops/control_frame.h"

namespace cerar {

void StatsPublisher::publish() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& count : late_) count(working_);
  late_.clear();
  published_ = working_;
}

void StatsPublisher::countLate(std::function<void(RuntimeStats&)> count) {
  std::lock_guard<std::mutex> lock(mutex_);
  count(published_);
  late_.push_back(std::move(count));
}

RuntimeStats StatsPublisher::published() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return published_;
}

void countControl(RuntimeStats& stats, size_t messageBytes, bool sent) {
  const uint64_t onWire = control_frame::wireBytes(messageBytes);
  if (sent) {
    ++stats.controlMessagesSent;
    stats.controlBytesSent += onWire;
  } else {
    ++stats.controlMessagesReceived;
    stats.controlBytesReceived += onWire;
  }
}

}  // namespace cerar
