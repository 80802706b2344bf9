#include "core/control/response_cache.h"

#include "common/error.h"

namespace cerar {

ResponseCache::ResponseCache(size_t capacity) : capacity_(capacity) {}

int64_t ResponseCache::lookup(const Request& request, int rank) const {
  return lookup(request, request.key(), rank);
}

int64_t ResponseCache::lookup(const Request& request, const std::string& key, int rank) const {
  auto it = byKey_.find(key);
  if (it == byKey_.end()) return -1;
  const Response& cached = slots_[it->second].response;
  // The cached description is the first submitter's; this rank's placement and allgather rows
  // are in the response.
  const size_t tensors = cached.description.shapes.size();
  if (cached.description.kind == Kind::kAllgather &&
      (size_t(rank) + 1) * tensors > cached.firstDims.size()) {
    return -1;
  }
  if (!cached.describes(request.description, rank)) return -1;
  return static_cast<int64_t>(it->second);
}

int64_t ResponseCache::find(const Response& response) const {
  auto it = byKey_.find(response.key());
  if (it == byKey_.end() || !(slots_[it->second].response == response)) return -1;
  return static_cast<int64_t>(it->second);
}

int64_t ResponseCache::slotOf(const std::string& key) const {
  auto it = byKey_.find(key);
  return it == byKey_.end() ? -1 : static_cast<int64_t>(it->second);
}

const Response& ResponseCache::at(size_t slot) const {
  CERAR_ENFORCE(slot < slots_.size() && slots_[slot].used, "response cache: slot ", slot,
                " is empty (the ranks' caches disagree)");
  return slots_[slot].response;
}

void ResponseCache::put(const Response& response) {
  // An alltoall's splits are each rank's own and change from call to call, and a process set
  // change happens once: never cached.
  if (capacity_ == 0 || !response.error.empty() ||
      response.description.kind == Kind::kAlltoall ||
      response.description.kind == Kind::kProcessSet) {
    return;
  }
  const std::string key = response.key();
  size_t slot;
  if (auto it = byKey_.find(key); it != byKey_.end()) {
    slot = it->second;
  } else if (slots_.size() < capacity_) {
    slot = slots_.size();
    slots_.emplace_back();
  } else {
    slot = 0;
    for (size_t i = 1; i < slots_.size(); ++i) {
      if (slots_[i].lastUse < slots_[slot].lastUse) slot = i;
    }
    if (slots_[slot].used) byKey_.erase(slots_[slot].response.key());
  }
  Slot& entry = slots_[slot];
  if (!entry.used || byKey_.count(key) == 0) ++generation_;
  if (!(entry.used && entry.response == response)) entry.response = response;
  entry.used = true;
  entry.lastUse = ++clock_;
  byKey_[key] = slot;
}

void ResponseCache::erase(size_t slot) {
  if (!used(slot)) return;
  byKey_.erase(slots_[slot].response.key());
  slots_[slot].used = false;
  slots_[slot].lastUse = 0;
  ++generation_;
}

}  // namespace cerar
