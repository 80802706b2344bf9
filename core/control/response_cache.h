// The response cache: negotiated units remembered in numbered slots, so that in the steady
// state ranks exchange bit vectors of slots instead of full descriptions (as in Horovod).
//
// Agreement: every rank applies put() for the same responses in the same order (the order of
// the coordinator's answers), so slots, contents and LRU eviction are identical on all ranks
// without extra messages. Not thread-safe: owned by the coordinator thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/control/message.h"

namespace cerar {

class ResponseCache {
 public:
  // capacity 0 disables the cache (lookups miss, puts are ignored).
  explicit ResponseCache(size_t capacity);

  size_t capacity() const { return capacity_; }
  size_t size() const { return byKey_.size(); }

  // The slot whose response matches `request` as submitted by `rank`, or -1.
  int64_t lookup(const Request& request, int rank) const;
  // The same with the request's key (Request::key()) made by the caller.
  int64_t lookup(const Request& request, const std::string& key, int rank) const;
  // The slot holding exactly `response`, or -1.
  int64_t find(const Response& response) const;
  // The slot holding the unit of this key (Response::key()), or -1.
  int64_t slotOf(const std::string& key) const;
  // The response in `slot`; throws Error when the slot is empty.
  const Response& at(size_t slot) const;
  // Stores `response` (error responses and alltoalls are ignored) or marks it used: an entry
  // of the same key is replaced in place; otherwise a free slot is taken, else the least
  // recently used one.
  void put(const Response& response);
  // Empties `slot` (a unit some rank submitted in full with another description); its slot
  // is the first taken again once the cache is full.
  void erase(size_t slot);

  // Slots ever taken (each used or emptied), and whether `slot` holds a response.
  size_t slotCount() const { return slots_.size(); }
  bool used(size_t slot) const { return slot < slots_.size() && slots_[slot].used; }
  // Changes whenever a slot gets another unit or none (not when a unit is only marked used).
  uint64_t generation() const { return generation_; }

 private:
  struct Slot {
    Response response;
    uint64_t lastUse = 0;
    bool used = false;
  };
  size_t capacity_;
  uint64_t clock_ = 0;
  uint64_t generation_ = 0;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, size_t> byKey_;
};

}  // namespace cerar
