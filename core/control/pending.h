// This rank's units from the cycle that collects them until they complete, by unit key, on
// the coordinator thread; and their completion, here or (device work) on the finalizer's.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/device/finalizer.h"
#include "core/control/operation.h"

namespace cerar {

// Ends `entry` with `status`. Its names leave the queue's in-flight set first, since the
// callback may enqueue them again.
void completeEntry(Queue& queue, Entry& entry, const Status& status);
// The same for several entries, their names released under one lock.
void completeEntries(Queue& queue, const std::vector<std::unique_ptr<Entry>>& entries,
                     const Status& status);

class PendingUnits {
 public:
  explicit PendingUnits(Queue& queue) : queue_(queue) {}

  void add(std::unique_ptr<Entry> entry);
  // The unit's entry; null when this rank never submitted it (it has joined).
  Entry* find(const std::string& key) const;
  // Completes the unit, if this rank submitted it.
  void complete(const std::string& key, const Status& status);
  // Completes these entries of this rank's (found here; null ones are skipped), their names
  // released together first.
  void complete(const std::vector<Entry*>& entries, const Status& status);
  // Completes every unit of process set `id`.
  void completeSet(int32_t id, const Status& status);
  // Completes every unit, leaving the queue alone (it is closed: the end of the runtime).
  void completeAll(const Status& status);
  // Hands the members' entries to `finalizer`, which completes them once `queue` reaches
  // `mark`, after calling `first` with the outcome. The names stay in flight until then: a
  // rank that enqueues one again before is refused, as on the host.
  void completeOnDevice(const std::vector<const Response*>& members, Finalizer& finalizer,
                        DeviceQueue& queue, std::shared_ptr<DeviceMark> mark,
                        std::function<void(const Status&)> first);

 private:
  Queue& queue_;
  // Keyed by a view of the entry's own key (no copy per unit).
  std::unordered_map<std::string_view, std::unique_ptr<Entry>> entries_;

  std::unique_ptr<Entry> take(std::string_view key);
};

}  // namespace cerar
