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
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->second.first.description.processSet == id ? entries_.erase(it) : std::next(it);
  }
}

void NegotiationTable::materialize(size_t slot, Clock::time_point now) {
  const Response& cached = cache_->at(slot);
  const SetRef set = setOf(cached.description.processSet);
  for (size_t setRank = 0; setRank < set->ranks.size(); ++setRank) {
    const int rank = set->ranks[setRank];
    if (!joined_[rank]) add(rank, cached.names, cached.descriptionAt(int(setRank)), now);
  }
}

void NegotiationTable::receive(const CycleReport& report, const ResponseCache& cache,
                               Clock::time_point now) {
  cache_ = &cache;
  now_ = now;
  held_ = report.held;
  missing_ = report.missing;
  const bool rollCall = rollCallDue_;
  rollCallDue_ = false;
  if (rollCall) {
    for (auto& [key, wait] : heldWaits_) wait.holders.assign(size_, false);
  }
  for (const RankPart& part : report.parts) receive(part.rank, part.message, cache, now);
}

void NegotiationTable::receive(int rank, const RequestMessage& message,
                               const ResponseCache& cache, Clock::time_point now) {
  CERAR_ENFORCE(rank >= 0 && rank < size_, "negotiation: rank ", rank, " out of range");
  cache_ = &cache;
  shutdown_ = shutdown_ || message.shutdown;
  if (message.join) {
    joined_[rank] = true;
    lastJoined_ = rank;
  }
  for (size_t slot : setBits(message.cacheBits)) {  // a roll call's answer
    auto wait = heldWaits_.find(cache.at(slot).key());
    if (wait != heldWaits_.end()) {
      wait->second.holders.resize(size_, false);
      wait->second.holders[rank] = true;
    }
  }
  for (const auto& request : message.requests) {
    // The unit's slot, if cached, is emptied on every rank: its holders submit it in full.
    const int64_t slot = cache.slotOf(request.key());
    if (slot >= 0) setBit(invalidated_, size_t(slot));
    add(rank, request.names, request.description, now);
  }
}

void NegotiationTable::add(int rank, const std::vector<std::string>& names,
                           const Description& d, Clock::time_point now) {
  auto [it, fresh] = entries_.try_emplace(unitKey(names, d.processSet));
  Entry& entry = it->second;
  if (fresh) {
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
  const auto now = now_;
  // Cached units: held by every member (the answer is the slot), or waiting for some.
  std::map<std::string, HeldWait> waits;
  for (size_t slot : setBits(held_)) {
    const Response& cached = cache.at(slot);
    if (testBit(missing_, slot)) {
      std::string key = cached.key();
      auto before = heldWaits_.find(key);
      if (before != heldWaits_.end() && before->second.slot == slot) {
        waits.emplace(std::move(key), std::move(before->second));
      } else {
        waits.emplace(std::move(key), HeldWait{now, slot, {}});
      }
      continue;
    }
    const SetRef set = setOf(cached.description.processSet);
    const bool joinedMember = std::any_of(set->ranks.begin(), set->ranks.end(),
                                          [this](int rank) { return joined_[rank]; });
    // (The key is made only where the full table has entries: the steady state has none.)
    if (joinedMember || (!entries_.empty() && entries_.count(cached.key()) != 0)) {
      materialize(slot, now);  // the full table's rules decide what that means
    } else {
      setBit(message.cacheBits, slot);
    }
  }
  heldWaits_ = std::move(waits);
  held_.clear();
  missing_.clear();
  std::vector<std::map<std::string, Entry>::iterator> ready;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (complete(it->second)) ready.push_back(it);
  }
  std::sort(ready.begin(), ready.end(),
            [](auto a, auto b) { return a->second.sequence < b->second.sequence; });
  for (auto it : ready) {
    Response response = respond(it->second);
    const int64_t slot = response.error.empty() ? cache.find(response) : -1;
    if (slot >= 0 && !testBit(message.cacheBits, size_t(slot))) {
      setBit(message.cacheBits, static_cast<size_t>(slot));
    } else {
      message.responses.push_back(std::move(response));
    }
    entries_.erase(it);
  }
  message.invalidated = std::move(invalidated_);
  invalidated_.clear();
  message.rollCall = rollCallWanted_;
  rollCallDue_ = rollCallWanted_;
  rollCallWanted_ = false;
  if (std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) {
    message.lastJoinedRank = lastJoined_;
    joined_.assign(size_, false);
    lastJoined_ = -1;
  }
  return message;
}

double NegotiationTable::longestHeldWait(Clock::time_point now) const {
  double longest = 0;
  for (const auto& [key, wait] : heldWaits_) {
    longest = std::max(longest, std::chrono::duration<double>(now - wait.since).count());
  }
  return longest;
}

std::vector<NegotiationTable::Waiting> NegotiationTable::waiting() const {
  std::vector<Waiting> out;
  for (const auto& [key, wait] : heldWaits_) {
    if (wait.holders.empty()) continue;  // which ranks lack it is known after a roll call
    const Response& cached = cache_->at(wait.slot);
    Waiting w{key, cached.names, {}, wait.since};
    for (int rank : setOf(cached.description.processSet)->ranks) {
      if (!wait.holders[rank] && !joined_[rank]) w.missingRanks.push_back(rank);
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
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    // A cached unit that some ranks hold: it fails by name on every rank.
    auto wait = heldWaits_.find(key);
    if (wait == heldWaits_.end()) return;
    const Response& cached = cache_->at(wait->second.slot);
    Entry& entry = entries_[key];
    entry.sequence = sequence_++;
    entry.firstSeen = wait->second.since;
    entry.first = Request{cached.names, cached.description};
    entry.set = setOf(cached.description.processSet);
    entry.submitted.assign(size_, false);
    it = entries_.find(key);
  }
  it->second.error = error.message;
  it->second.errorCode = error.code;
  it->second.errorPeer = error.peer;
  it->second.failNow = true;
}

int idlePaceShift(uint64_t idleCycles) {
  return int(std::min<uint64_t>(idleCycles / kIdleCycles, kMaxIdleShift));
}

bool NegotiationTable::idle() const {
  return entries_.empty() && heldWaits_.empty() && !anyBit(held_) && !shutdown_ &&
         std::none_of(joined_.begin(), joined_.end(), [](bool j) { return j; });
}

}  // namespace cerar
