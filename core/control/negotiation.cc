#include "core/control/negotiation.h"

#include <algorithm>

#include "common/error.h"

namespace cerar {
namespace {
std::string quoteNames(const std::vector<std::string>& names) {
  std::string out = names.size() == 1 ? "tensor " : "tensors ";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", '" : "'") + names[i] + "'";
  return out;
}
}  // namespace

NegotiationTable::NegotiationTable(int size, const ProcessSetTable* sets)
    : size_(size), sets_(sets), joined_(size, false) {
  ProcessSet all;
  for (int rank = 0; rank < size_; ++rank) all.ranks.push_back(rank);
  all_ = std::make_shared<const ProcessSet>(std::move(all));
}

SetRef NegotiationTable::setOf(int32_t id) const {
  if (sets_ != nullptr) {
    if (auto set = sets_->find(id)) return set;
  }
  if (id == kGlobalProcessSet) return all_;
  return std::make_shared<const ProcessSet>(ProcessSet{id, {}});
}

void NegotiationTable::dropSet(int32_t id) {
  for (size_t slot : liveSlots_) {
    if (slots_[slot].live && slots_[slot].set->id == id) slots_[slot].live = false;
  }
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->second.first.description.processSet == id ? erase(it) : std::next(it);
  }
}

std::map<std::string, NegotiationTable::Entry>::iterator NegotiationTable::erase(
    std::map<std::string, Entry>::iterator it) {
  if (const int64_t slot = it->second.slot; slot >= 0) {
    auto mark = inFullTable_.find(size_t(slot));
    if (mark != inFullTable_.end() && --mark->second == 0) inFullTable_.erase(mark);
  }
  return entries_.erase(it);
}

bool NegotiationTable::addBySlot(int rank, size_t slot, const Response& cached,
                                 Clock::time_point now) {
  if (inFullTable_.count(slot) != 0) return false;
  if (slot >= slots_.size()) slots_.resize(slot + 1);
  SlotEntry& e = slots_[slot];
  if (!e.live) {
    e.live = true;
    e.sequence = sequence_++;
    e.firstSeen = now;
    e.firstRank = rank;
    e.set = setOf(cached.description.processSet);
    e.submitted.assign(size_, false);
    e.count = 0;
    liveSlots_.push_back(slot);
  } else if (e.submitted[rank]) {
    materialize(slot);  // the full table names the second submission
    return false;
  }
  e.submitted[rank] = true;
  ++e.count;
  return true;
}

void NegotiationTable::materialize(size_t slot) {
  SlotEntry& e = slots_[slot];
  if (!e.live) return;
  e.live = false;
  const Response& cached = cache_->at(slot);
  // The first submitter first, then the rest by rank, as receive() adds them.
  add(e.firstRank, cached.names, cached.description, e.firstSeen);
  for (int rank = 0; rank < size_; ++rank) {
    if (rank != e.firstRank && e.submitted[rank]) {
      add(rank, cached.names, cached.description, e.firstSeen);
    }
  }
  entries_.at(cached.key()).sequence = e.sequence;
}

void NegotiationTable::materializeAll() {
  for (size_t slot : liveSlots_) materialize(slot);
  liveSlots_.clear();
}

void NegotiationTable::receive(int rank, const RequestMessage& message,
                               const ResponseCache& cache, Clock::time_point now) {
  CERAR_ENFORCE(rank >= 0 && rank < size_, "negotiation: rank ", rank, " out of range");
  shutdown_ = shutdown_ || message.shutdown;
  if (message.join) {
    joined_[rank] = true;
    lastJoined_ = rank;
  }
  cache_ = &cache;
  for (size_t slot : setBits(message.cacheBits)) {
    const Response& cached = cache.at(slot);
    const int setRank = setOf(cached.description.processSet)->rankOf(rank);
    CERAR_ENFORCE(setRank >= 0, "negotiation: rank ", rank, " sent a cached unit of a set it "
                  "is not in");
    // descriptionAt(setRank) is the description itself unless placements differ or rows do.
    if (cached.placement.empty() && cached.description.kind != Kind::kAllgather) {
      if (!addBySlot(rank, slot, cached, now)) add(rank, cached.names, cached.description, now);
    } else {
      add(rank, cached.names, cached.descriptionAt(setRank), now);
    }
  }
  for (const auto& request : message.requests) add(rank, request.names, request.description, now);
}

void NegotiationTable::add(int rank, const std::vector<std::string>& names,
                           const Description& d, Clock::time_point now) {
  std::string key = unitKey(names, d.processSet);
  const int64_t slot = cache_ != nullptr ? cache_->slotOf(key) : -1;
  // Submissions of this unit counted by slot so far join this one in the full table.
  if (slot >= 0 && size_t(slot) < slots_.size() && slots_[slot].live) materialize(size_t(slot));
  auto [it, fresh] = entries_.try_emplace(std::move(key));
  Entry& entry = it->second;
  if (fresh) {
    entry.slot = slot;
    if (slot >= 0) ++inFullTable_[size_t(slot)];
    entry.sequence = sequence_++;
    entry.firstSeen = now;
    entry.firstRank = rank;
    entry.first = Request{names, d};
    entry.submitted.assign(size_, false);
    entry.set = setOf(d.processSet);
    const size_t n = entry.set->ranks.size();
    // alltoall: the n x n matrix of rows sent, row by sender
    const Kind kind = d.kind;
    const size_t columns = kind == Kind::kAlltoall    ? n
                           : kind == Kind::kAllgather ? d.shapes.size()
                                                      : 1;
    entry.firstDims.assign(n * columns, 0);
    entry.placement.assign(n, Response::kNone);
    if (n == 0) {
      // Removed before this unit was negotiated: every submitter fails it now.
      entry.error = detail::concat(quoteNames(names), ": process set ",
                                   d.processSet, " does not exist");
      entry.errorCode = StatusCode::kInvalidArgument;
      entry.failNow = true;
    }
  }
  const int setRank = entry.set->rankOf(rank);
  if (setRank < 0) {
    // Refused at enqueue on every rank; only a foreign or stale message gets here.
    if (entry.error.empty()) {
      entry.error = detail::concat(quoteNames(names), ": rank ", rank,
                                   " is not in process set ", d.processSet);
      entry.errorCode = StatusCode::kInvalidArgument;
      entry.errorPeer = rank;
      entry.failNow = true;
    }
    return;
  }
  if (!fresh && entry.submitted[rank]) {
    // A rank never has one name in flight twice; seeing it is a protocol error worth naming.
    entry.error = "rank " + std::to_string(rank) + " submitted " + quoteNames(names) +
                  " twice";
    entry.errorCode = StatusCode::kInternal;
    entry.errorPeer = rank;
  } else if (entry.error.empty() && !d.agrees(entry.first.description)) {
    entry.error = "mismatched " + quoteNames(names) + ": rank " +
                  std::to_string(entry.firstRank) + " submitted " +
                  entry.first.description.toString() + ", rank " + std::to_string(rank) +
                  " submitted " + d.toString();
    entry.errorCode = StatusCode::kMismatch;
    entry.errorPeer = rank;
  }
  entry.submitted[rank] = true;
  entry.placement[setRank] = d.onDevice ? Response::kDevice : Response::kHost;
  const Kind kind = entry.first.description.kind;
  if (kind != d.kind) return;  // a mismatch, recorded above
  const auto& shapes = d.shapes;
  const size_t n = entry.set->ranks.size();
  if (kind == Kind::kAllgather && shapes.size() == entry.first.description.shapes.size()) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      if (!shapes[k].empty()) entry.firstDims[setRank * shapes.size() + k] = shapes[k][0];
    }
  }
  if (kind == Kind::kAlltoall && d.splits.size() == n) {
    std::copy(d.splits.begin(), d.splits.end(),
              entry.firstDims.begin() + size_t(setRank) * n);
  } else if (kind == Kind::kAlltoall && entry.error.empty()) {
    entry.error = detail::concat("alltoall of ", quoteNames(names), ": rank ", rank,
                                 " gave ", d.splits.size(), " splits for ",
                                 n, " ranks");
    entry.errorCode = StatusCode::kInvalidArgument;
    entry.errorPeer = rank;
  }
}

bool NegotiationTable::complete(const Entry& entry) const {
  if (entry.failNow) return true;
  for (int rank : entry.set->ranks) {
    if (!entry.submitted[rank] && !joined_[rank]) return false;
  }
  return true;
}

Response NegotiationTable::respond(const Entry& entry) const {
  Response response;
  response.names = entry.first.names;
  response.description = entry.first.description;
  response.error = entry.error;
  response.errorCode = entry.errorCode;
  response.errorPeer = entry.errorPeer;
  const Description& d = response.description;
  if (d.kind == Kind::kAllgather || d.kind == Kind::kAlltoall) {
    response.firstDims = entry.firstDims;
  }
  const uint8_t first = d.onDevice ? Response::kDevice : Response::kHost;
  for (uint8_t place : entry.placement) {
    if (place != Response::kNone && place != first) response.placement = entry.placement;
  }
  // As Horovod: a joined rank takes part only in all-reduces (with the op's identity) and
  // barriers; an allgather, broadcast, alltoall or reducescatter that some rank joined instead
  // of submitting fails on every rank.
  const bool joinable = d.kind == Kind::kAllreduce || d.kind == Kind::kBarrier;
  if (response.error.empty() && !joinable) {
    for (int rank : entry.set->ranks) {
      if (entry.submitted[rank]) continue;
      response.error = detail::concat(kindName(d.kind), " of ", quoteNames(response.names),
                                      ": rank ", rank, " has joined; only all-reduces run while "
                                      "ranks have joined");
      response.errorCode = StatusCode::kInvalidArgument;
      response.errorPeer = rank;
      break;
    }
  }
  return response;
}

ResponseMessage NegotiationTable::decide(const ResponseCache& cache) {
  ResponseMessage message;
  message.shutdown = shutdown_;
  cache_ = &cache;
  // Cached units by slot: all members have them (the answer is the slot), or a member has
  // joined instead (the full table decides what that means for the unit), or they wait.
  size_t kept = 0;
  for (size_t slot : liveSlots_) {
    SlotEntry& e = slots_[slot];
    if (!e.live) continue;
    if (e.count == e.set->size()) {
      setBit(message.cacheBits, slot);
      e.live = false;
      continue;
    }
    bool joinedMissing = false;
    for (int rank : e.set->ranks) joinedMissing |= !e.submitted[rank] && joined_[rank];
    if (joinedMissing) {
      materialize(slot);
    } else {
      liveSlots_[kept++] = slot;
    }
  }
  liveSlots_.resize(kept);
  std::vector<std::map<std::string, Entry>::iterator> ready;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (complete(it->second)) ready.push_back(it);
  }
  std::sort(ready.begin(), ready.end(),
            [](auto a, auto b) { return a->second.sequence < b->second.sequence; });
  for (auto it : ready) {
    Response response = respond(it->second);
    const int64_t slot = response.error.empty() ? cache.find(response) : -1;
    if (slot >= 0) {
      setBit(message.cacheBits, static_cast<size_t>(slot));
    } else {
      message.responses.push_back(std::move(response));
    }
    erase(it);
  }
  // A full answer is put into the caches after this cycle, which may move or evict slots
  // that units still waiting by slot refer to: they wait in the full table instead.
  if (!message.responses.empty()) materializeAll();
  if (std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) {
    message.lastJoinedRank = lastJoined_;
    joined_.assign(size_, false);
    lastJoined_ = -1;
  }
  return message;
}

std::vector<NegotiationTable::Waiting> NegotiationTable::waiting() const {
  std::vector<Waiting> out;
  for (size_t slot : liveSlots_) {
    const SlotEntry& e = slots_[slot];
    if (!e.live) continue;
    const Response& cached = cache_->at(slot);
    Waiting w{cached.key(), cached.names, {}, e.firstSeen};
    for (int rank : e.set->ranks) {
      if (!e.submitted[rank] && !joined_[rank]) w.missingRanks.push_back(rank);
    }
    if (!w.missingRanks.empty()) out.push_back(std::move(w));
  }
  for (const auto& [key, entry] : entries_) {
    Waiting w{key, entry.first.names, {}, entry.firstSeen};
    for (int rank : entry.set->ranks) {
      if (!entry.submitted[rank] && !joined_[rank]) w.missingRanks.push_back(rank);
    }
    if (!w.missingRanks.empty()) out.push_back(std::move(w));
  }
  return out;
}

void NegotiationTable::fail(const std::string& key, const Status& error) {
  if (cache_ != nullptr) {
    const int64_t slot = cache_->slotOf(key);
    if (slot >= 0 && size_t(slot) < slots_.size()) materialize(size_t(slot));
  }
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  it->second.error = error.message;
  it->second.errorCode = error.code;
  it->second.errorPeer = error.peer;
  it->second.failNow = true;
}

}  // namespace cerar
