// This rank's cached units: submitted by their response-cache slot and not yet answered, so
// named ("held") in every cycle's report until they are (docs/scale.md, "What a report
// holds"). Owned by the coordinator thread; no sockets, no threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/control/message.h"
#include "core/control/operation.h"
#include "core/control/process_sets.h"
#include "core/control/response_cache.h"

namespace cerar {

class HeldUnits {
 public:
  HeldUnits(const ResponseCache& cache, const ProcessSetTable& sets, int rank)
      : cache_(cache), sets_(sets), rank_(rank) {}

  // `entry` submitted by `slot`; it stays pending (PendingUnits) while held.
  void hold(Entry* entry, size_t slot) { held_[entry->key] = Held{slot, entry}; }
  // `key` answered (or failed): no longer named.
  void release(const std::string& key) {
    if (!held_.empty()) held_.erase(key);
  }
  // Set `id` was removed: its entries are completed elsewhere and leave here first.
  void dropSet(int32_t id);
  // The sets changed: which slots this rank takes part in is worked out again.
  void setsChanged() { memberGeneration_ = ~uint64_t{0}; }
  // Slot `slot` is emptied on every rank: its holders here are submitted in full next cycle.
  void invalidate(size_t slot);
  // This cycle's bits: the slots held, and (unless this rank has joined) the slots of its
  // sets it does not hold. Each held unit is first moved to its slot in the cache as it is
  // now, or, gone from the cache, submitted in full.
  void report(CycleReport& report, bool joined);
  // Held units whose slot went: their requests, to send in full (taken once).
  std::vector<Request> takeResubmissions();

 private:
  struct Held {
    size_t slot;
    Entry* entry;
  };
  const std::vector<uint8_t>& memberSlots();
  void revalidate();

  const ResponseCache& cache_;
  const ProcessSetTable& sets_;
  int rank_;
  // By a view of the entry's own key: an entry leaves here before it completes.
  std::unordered_map<std::string_view, Held> held_;
  uint64_t heldGeneration_ = 0;  // the cache's generation the slots above are of
  std::vector<Request> resubmit_;
  std::vector<uint8_t> memberSlots_;
  uint64_t memberGeneration_ = ~uint64_t{0};
};

}  // namespace cerar
