#include "core/pending.h"

namespace cerar {

void completeEntry(Queue& queue, Entry& entry, const Status& status) {
  queue.release(entry.request);
  entry.state->complete(status);
}

void PendingUnits::add(std::unique_ptr<Entry> entry) {
  std::string key = entry->request.key();
  entries_[std::move(key)] = std::move(entry);
}

Entry* PendingUnits::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.get();
}

void PendingUnits::complete(const std::string& key, const Status& status) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  std::unique_ptr<Entry> entry = std::move(it->second);
  entries_.erase(it);
  completeEntry(queue_, *entry, status);
}

void PendingUnits::completeSet(int32_t id, const Status& status) {
  std::vector<std::string> orphans;
  for (const auto& [key, entry] : entries_) {
    if (entry->request.description.processSet == id) orphans.push_back(key);
  }
  for (const auto& key : orphans) complete(key, status);
}

void PendingUnits::completeAll(const Status& status) {
  for (auto& [key, entry] : entries_) entry->state->complete(status);
  entries_.clear();
}

void PendingUnits::completeOnDevice(const std::vector<const Response*>& members,
                                    Finalizer& finalizer, DeviceQueue& queue,
                                    std::shared_ptr<DeviceMark> mark,
                                    std::function<void(const Status&)> first) {
  auto done = std::make_shared<std::vector<std::unique_ptr<Entry>>>();
  for (const Response* member : members) {
    auto it = entries_.find(member->key());
    if (it == entries_.end()) continue;  // this rank has joined
    done->push_back(std::move(it->second));
    entries_.erase(it);
  }
  Queue& released = queue_;
  finalizer.add(queue, std::move(mark), [&released, done, first](const Status& status) {
    first(status);
    for (auto& entry : *done) completeEntry(released, *entry, status);
  });
}

}  // namespace cerar
