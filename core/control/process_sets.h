// Process sets (Horovod's): subsets of the job's ranks whose collectives run among themselves.
// Set 0 is every rank. Sets are added and removed by negotiated operations of set 0, so every
// rank applies the same changes at the same point of the response stream and numbers them
// alike (ids count up from 1 and are never reused); no rank decides a set on its own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/status.h"

namespace cerar {

constexpr int32_t kGlobalProcessSet = 0;

// One set: its id and its members as global ranks, ascending. A member's rank in the set is
// its index here.
struct ProcessSet {
  int32_t id = kGlobalProcessSet;
  std::vector<int> ranks;

  int size() const { return int(ranks.size()); }
  // The set rank of global rank `global`, or -1 for a non-member.
  int rankOf(int global) const;
  bool contains(int global) const { return rankOf(global) >= 0; }
};

// A set as the table holds it: immutable once added, so readers share it without a copy.
using SetRef = std::shared_ptr<const ProcessSet>;

// The rank of `global` among `ranks` (ascending), or -1.
int rankIn(const std::vector<int>& ranks, int global);

// Ranks for a new set of a job of `jobSize` ranks: at least one, each in range, none twice.
Status checkSetRanks(const std::vector<int>& ranks, int jobSize);

// CERAR's c in a set of `setSize` ranks when the job forces `jobComponents` (0: the cost model
// decides): rounded up to a multiple of the set's size, since c must be one (the job-wide rule
// applied per set; a set of the job's size keeps it).
int componentsForSet(int jobComponents, int setSize);

// The sets this rank knows. Thread safety: every member may be called from any thread (the
// enqueuing threads read it; the coordinator thread changes it while processing responses).
class ProcessSetTable {
 public:
  explicit ProcessSetTable(int jobSize);

  int jobSize() const { return jobSize_; }
  // Null when there is no set `id`.
  SetRef find(int32_t id) const;
  // The id of the set with exactly these (ascending) ranks, if any.
  std::optional<int32_t> idOf(const std::vector<int>& ranks) const;
  // Registers a set with the next id; `ranks` must pass checkSetRanks and be ascending.
  int32_t add(std::vector<int> ranks);
  // Forgets set `id` (never set 0); false when there is none.
  bool remove(int32_t id);
  std::vector<int32_t> ids() const;

 private:
  mutable std::mutex mutex_;
  int jobSize_;
  SetRef global_;  // set 0, never removed: found without the lock (every call looks it up)
  int32_t nextId_ = 1;
  std::map<int32_t, SetRef> sets_;
};


// A negotiated change applied to `sets`, alike on every rank (same order, same ids): `root` > 0
// removes set `root`, else a set of `ranks` is added. The outcome is the caller's error if
// the change cannot be made; `id` is the set added or removed.
struct SetChange {
  Status outcome;
  int32_t id = 0;
  bool removed = false;
};
SetChange applySetChange(ProcessSetTable& sets, int32_t root, std::vector<int> ranks);

}  // namespace cerar
