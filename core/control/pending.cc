#include "core/control/pending.h"

namespace cerar {

void completeEntry(Queue& queue, Entry& entry, const Status& status) {
  queue.release(entry.request);
  entry.state->complete(status);
}

void completeEntries(Queue& queue, const std::vector<std::unique_ptr<Entry>>& entries,
                     const Status& status) {
  queue.release(entries);
  for (const auto& entry : entries) entry->state->complete(status);
}

void PendingUnits::add(std::unique_ptr<Entry> entry) {
  if (entry->key.empty()) entry->key = entry->request.key();
  const std::string_view key = entry->key;
  entries_.erase(key);  // a replaced entry would leave the table's key viewing its freed name
  entries_.emplace(key, std::move(entry));
}

Entry* PendingUnits::find(const std::string& key) const {
  auto it = entries_.find(std::string_view(key));
  return it == entries_.end() ? nullptr : it->second.get();
}

std::unique_ptr<Entry> PendingUnits::take(std::string_view key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  std::unique_ptr<Entry> entry = std::move(it->second);
  entries_.erase(it);
  return entry;
}

void PendingUnits::complete(const std::string& key, const Status& status) {
  if (auto entry = take(key)) completeEntry(queue_, *entry, status);
}

void PendingUnits::complete(const std::vector<Entry*>& entries, const Status& status) {
  std::vector<std::unique_ptr<Entry>> done;
  done.reserve(entries.size());
  for (Entry* entry : entries) {
    if (entry == nullptr) continue;  // this rank has joined
    if (auto mine = take(entry->key)) done.push_back(std::move(mine));
  }
  completeEntries(queue_, done, status);
}

void PendingUnits::completeSet(int32_t id, const Status& status) {
  std::vector<std::string> orphans;
  for (const auto& [key, entry] : entries_) {
    if (entry->request.description.processSet == id) orphans.emplace_back(key);
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
    if (auto entry = take(member->key())) done->push_back(std::move(entry));  // else: joined
  }
  Queue& released = queue_;
  finalizer.add(queue, std::move(mark), [&released, done, first](const Status& status) {
    first(status);
    completeEntries(released, *done, status);
  });
}

}  // namespace cerar
