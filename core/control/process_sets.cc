#include "core/control/process_sets.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"

namespace cerar {

int rankIn(const std::vector<int>& ranks, int global) {
  const auto it = std::lower_bound(ranks.begin(), ranks.end(), global);
  return it != ranks.end() && *it == global ? int(it - ranks.begin()) : -1;
}

int ProcessSet::rankOf(int global) const { return rankIn(ranks, global); }

Status checkSetRanks(const std::vector<int>& ranks, int jobSize) {
  if (ranks.empty()) return Status(StatusCode::kInvalidArgument, "a process set needs ranks");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= jobSize) {
      return Status(StatusCode::kInvalidArgument,
                    detail::concat("process set rank ", sorted[i], " out of range for ",
                                   jobSize, " ranks"));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return Status(StatusCode::kInvalidArgument,
                    detail::concat("process set rank ", sorted[i], " appears twice"));
    }
  }
  return {};
}

int componentsForSet(int jobComponents, int setSize) {
  if (jobComponents <= 0 || setSize <= 0) return jobComponents;
  return (jobComponents + setSize - 1) / setSize * setSize;
}

ProcessSetTable::ProcessSetTable(int jobSize) : jobSize_(jobSize) {
  ProcessSet all;
  all.ranks.resize(size_t(jobSize));
  std::iota(all.ranks.begin(), all.ranks.end(), 0);
  global_ = std::make_shared<const ProcessSet>(std::move(all));
  sets_.emplace(kGlobalProcessSet, global_);
}

SetRef ProcessSetTable::find(int32_t id) const {
  if (id == kGlobalProcessSet) return global_;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second;
}

std::optional<int32_t> ProcessSetTable::idOf(const std::vector<int>& ranks) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [id, set] : sets_) {
    if (set->ranks == ranks) return id;
  }
  return std::nullopt;
}

int32_t ProcessSetTable::add(std::vector<int> ranks) {
  CERAR_ENFORCE(checkSetRanks(ranks, jobSize_).ok() && std::is_sorted(ranks.begin(), ranks.end()),
                "process sets: bad ranks for a new set");
  std::lock_guard<std::mutex> lock(mutex_);
  const int32_t id = nextId_++;
  sets_.emplace(id, std::make_shared<const ProcessSet>(ProcessSet{id, std::move(ranks)}));
  return id;
}

bool ProcessSetTable::remove(int32_t id) {
  if (id == kGlobalProcessSet) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return sets_.erase(id) > 0;
}

std::vector<int32_t> ProcessSetTable::ids() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<int32_t> out;
  for (const auto& [id, set] : sets_) out.push_back(id);
  return out;
}


SetChange applySetChange(ProcessSetTable& sets, int32_t root, std::vector<int> ranks) {
  SetChange change;
  change.id = root;
  if (root > 0) {
    change.removed = sets.remove(root);
    if (!change.removed) {
      change.outcome = Status(StatusCode::kInvalidArgument,
                              detail::concat("cerar: there is no process set ", root,
                                             " to remove"));
    }
    return change;
  }
  std::sort(ranks.begin(), ranks.end());
  const auto existing = sets.idOf(ranks);
  const Status valid = checkSetRanks(ranks, sets.jobSize());
  if (!valid.ok()) {
    change.outcome = withContext(valid, "cerar: ", "");
  } else if (existing) {
    change.outcome = Status(StatusCode::kInvalidArgument,
                            detail::concat("cerar: a process set with these ranks exists "
                                           "already (id ", *existing, ")"));
  } else {
    change.id = sets.add(ranks);
  }
  return change;
}

}  // namespace cerar
