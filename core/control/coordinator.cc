#include "core/control/coordinator.h"

#include <algorithm>

#include "core/config/config.h"
#include "core/policy/fusion.h"
#include "core/policy/link_probe.h"
#include "core/policy/link_setup.h"
#include "ops/collectives.h"
#include "common/error.h"

namespace cerar {
namespace {

constexpr int kCoordinatorRank = 0;
static_assert(size_t(Kind::kProcessSet) + 1 == kKindCount, "RuntimeStats' by-kind counters");

// One unit of this rank answered: its kind, its tensors and how long it waited for the others.
void countAnswered(RuntimeStats& stats, const Response& unit, const Entry& entry,
                   Clock::time_point responded) {
  const auto kind = size_t(unit.description.kind);
  ++stats.unitsByKind[kind];
  stats.tensorsByKind[kind] += unit.names.size();
  SetCounters& set = setCounters(stats, unit.description.processSet);
  ++set.unitsByKind[kind];
  set.tensorsByKind[kind] += unit.names.size();
  stats.negotiationWait.add(std::chrono::duration<double>(responded - entry.enqueued).count());
}

// Seconds a cached unit may wait for some member before the coordinator asks every rank which
// it holds: well within the stall inspector's times, and at most a second (0: no inspector).
double rollCallAfter(const RuntimeConfig& config) {
  double limit = 0;
  for (double t : {config.stallCheckSeconds, config.stallShutdownSeconds}) {
    if (t > 0) limit = limit > 0 ? std::min(limit, t) : t;
  }
  return std::min(limit / 2, 1.0);
}

}  // namespace

Coordinator::Coordinator(const RuntimeConfig& config, std::shared_ptr<Transport> transport,
                         Queue& queue, Timeline& timeline, const Logger& logger,
                         DeviceSlot& devices, ProcessSetTable& sets,
                         std::function<void()> beforeRelease)
    : config_(config), transport_(transport), queue_(queue), sets_(sets), timeline_(timeline),
      logger_(logger), cache_(config.cacheCapacity),
      tree_{transport->rank(), transport->size(), std::max(1, config.controlFanout)},
      children_(tree_.children()), held_(cache_, sets, transport->rank()),
      rollCallAfter_(rollCallAfter(config)), policy_(selectionPolicyOf(config)),
      beforeRelease_(std::move(beforeRelease)),
      stallInspector_(config.stallCheckSeconds, config.stallShutdownSeconds), devices_(devices),
      dispatcher_(std::move(transport), timeline, devices), pending_(queue),
      tuning_(config, transport_->size(), transport_->rank() == kCoordinatorRank, timeline,
              logger),
      finalizer_(timeoutOf(config)) {
  if (transport_->rank() == kCoordinatorRank) {
    table_ = std::make_unique<NegotiationTable>(transport_->size(), &sets_);
  }
  dispatcher_.setErrorBound(parseErrorBound(config.errorBound));
  dispatcher_.setErrorFeedback(config.errorFeedback);
  tuning_.report(stats_.working());
  stats_.publish();
}

void Coordinator::probe() {
  const LinkSetup setup = setUpLink(*transport_, config_, logger_);
  link_ = setup.link;
  if (local_ && config_.measureLink) {
    probeLocalStep(local_, *transport_, link_);
    logger_.log(LogLevel::kInfo, detail::concat("host step: alpha ", link_.localAlpha * 1e6,
                                                " us, beta ", link_.localBeta * 1e9, " ns/B"));
  }
  dispatcher_.setPacing(setup.pacing);
  recordLink(stats_.working(), link_, config_, local_ != nullptr);
  stats_.publish();
}

void Coordinator::setBlameBoard(std::shared_ptr<BlameBoard> board, bool hostedByRankZero) {
  board_ = std::move(board);
  if (board_) blame_ = setUpBlame(*transport_, board_.get(), hostedByRankZero, timeoutOf(config_));
}

Clock::time_point nextCycleStart(const CycleTimes& t) {
  const Clock::time_point paced = t.start >= t.next ? std::max(t.next + t.cycle, t.start)
                                                    : std::min(t.next, t.start + t.cycle);
  return t.idleAfterWork ? std::max(paced, t.now + t.cycle) : paced;
}

void Coordinator::run() {
  auto next = Clock::now();
  try {
    while (true) {
      queue_.sleepUntil(next);
      timeline_.markCycle();
      const auto start = Clock::now();
      const ResponseMessage answer = negotiate(collectReport());
      ++stats_.working().cycles;
      tuning_.apply(answer.tuning);
      tuning_.report(stats_.working());
      // The pace is this answer's (job-wide; it may be autotuned), slower while the job is
      // idle.
      const auto cycle = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double, std::milli>(tuning_.applied().cycleTimeMs *
                                                    double(1 << answer.idleShift)));
      if (answer.shutdown) {
        farewell();
        finish(Status(StatusCode::kShutDown, "cerar has been shut down"));
        return;
      }
      process(answer);
      next = nextCycleStart({start, next, cycle, Clock::now(),
                             !answer.groups.empty() && queue_.idle()});
      stats_.publish();
      timeline_.flush();
    }
  } catch (const std::exception& e) {
    const Status observed = statusOf(e);
    const Status agreed = agreeOnFailure(observed, board_.get(), blame_);
    const bool lost = agreed.code == StatusCode::kTimeout || agreed.code == StatusCode::kPeerLost;
    finish(withContext(agreed, lost ? std::string("cerar: ")
                                    : detail::concat("cerar: rank ", transport_->rank(),
                                                     ": the runtime failed: "),
                       ""));
  }
}

UnitRefs Coordinator::unitsOf(const ResponseMessage& message) const {
  UnitRefs units;
  for (size_t slot : setBits(message.cacheBits)) units.push_back(&cache_.at(slot));
  for (const Response& response : message.responses) units.push_back(&response);
  return units;
}

void Coordinator::process(const ResponseMessage& message) {
  // Slots some rank submitted in full go first, alike everywhere (no unit of this answer is
  // one of them); their holders here submit them in full next cycle.
  for (size_t slot : setBits(message.invalidated)) {
    held_.invalidate(slot);
    cache_.erase(slot);
  }
  // The same list on every rank (the caches agree). The units point into the cache: its puts
  // (the same on every rank, in the same order) come last, once nothing reads them.
  const UnitRefs units = unitsOf(message);

  // Each unit's entry, looked up once (its key is built from its names).
  std::vector<Entry*> entries;
  entries.reserve(units.size());
  for (const Response* unit : units) entries.push_back(pending_.find(unit->key()));
  const auto responded = Clock::now();
  for (size_t i = 0; i < units.size(); ++i) {
    const Response& unit = *units[i];
    Entry* entry = entries[i];
    if (entry == nullptr) continue;
    held_.release(entry->key);  // answered: no longer held
    entry->responded = responded;
    countAnswered(stats_.working(), unit, *entry, responded);
    if (!timeline_.active()) continue;
    const int32_t set = unit.description.processSet;
    const std::string activity = negotiateActivity(unit.description);
    JsonObject args;
    if (set != 0) args.add("process_set", set);
    for (const auto& name : unit.names) {
      timeline_.record(tensorRow(unit.description, name), activity, entry->enqueued, responded,
                       args);
    }
  }

  for (const FusedGroup& group : message.groups) runGroup(units, entries, group);

  if (message.lastJoinedRank >= 0) {
    joined_ = false;
    if (auto join = queue_.takeJoin()) {
      join->lastJoinedRank = message.lastJoinedRank;
      join->complete({});
    }
  }
  tuning_.feed(units, message.groups);
  for (const Response* unit : units) cache_.put(*unit);
}

void Coordinator::runGroup(const UnitRefs& units,
                           const std::vector<Entry*>& unitEntries, const FusedGroup& group) {
  std::vector<const Response*> members;
  std::vector<Entry*> entries;
  CERAR_ENFORCE(!group.members.empty(), "malformed response: an empty fusion group");
  for (uint32_t index : group.members) {
    CERAR_ENFORCE(index < units.size(), "malformed response: fusion group member ", index,
                  " of ", units.size(), " units");
    members.push_back(units[index]);
    entries.push_back(unitEntries[index]);
  }
  if (!members.front()->error.empty()) {  // errors are never fused
    pending_.complete(members.front()->key(), members.front()->status());
    return;
  }
  if (members.front()->description.kind == Kind::kProcessSet) {
    changeSets(*members.front());
    return;
  }
  const int32_t id = members.front()->description.processSet;
  const auto set = sets_.find(id);
  if (!set) {  // removed earlier in this answer: its members fail it alike
    for (const Response* member : members) {
      pending_.complete(member->key(), Status(StatusCode::kInvalidArgument,
                                              detail::concat("cerar: '", member->names.front(),
                                                             "': process set ", id,
                                                             " has been removed")));
    }
    return;
  }
  if (!set->contains(transport_->rank())) return;  // another set's work
  const auto dispatched = Clock::now();
  for (size_t i = 0; i < members.size() && timeline_.active(); ++i) {
    if (entries[i] == nullptr) continue;
    for (const auto& name : members[i]->names) {
      timeline_.record(tensorRow(members[i]->description, name), kQueueActivity,
                       entries[i]->responded, dispatched);
    }
  }
  DeviceUnit unit = dispatcher_.run(members, entries, group, stats_.working(), *set);
  // Before any handle of the group completes: a caller that has waited sees the operation's
  // effects in stats() (runtime.h).
  stats_.publish();
  if (!unit.mark) {
    pending_.complete(entries, {});
    return;
  }
  // A joined rank (no entries) counts its run too.
  auto finish = std::move(unit.finish);
  pending_.completeOnDevice(members, finalizer_, devices_.get(-1), std::move(unit.mark),
                            [this, finish](const Status& status) {
                              if (status.ok() && finish) stats_.countLate(finish);
                            });
}

void Coordinator::changeSets(const Response& unit) {
  const Description& d = unit.description;
  const SetChange change =
      applySetChange(sets_, d.root, std::vector<int>(d.splits.begin(), d.splits.end()));
  held_.setsChanged();
  if (change.removed) {
    held_.dropSet(change.id);
    dispatcher_.forget(change.id);
    if (table_) table_->dropSet(change.id);
    // Operations of the set still pending here can no longer run.
    pending_.completeSet(change.id, Status(StatusCode::kInvalidArgument,
                                           detail::concat("cerar: process set ", change.id,
                                                          " was removed while this operation "
                                                          "waited")));
  }
  Entry* entry = pending_.find(unit.key());
  if (entry != nullptr && change.outcome.ok()) entry->state->processSetId = change.id;
  pending_.complete(unit.key(), change.outcome);
}

void Coordinator::finish(const Status& why) {
  // Device work already dispatched runs to its end (no device work touches a tensor after
  // shutdown) and completes with its own outcome.
  devices_.drain();
  finalizer_.drain();
  logger_.log(why.code == StatusCode::kShutDown ? LogLevel::kDebug : LogLevel::kError,
              why.message);
  std::shared_ptr<OperationState> join;
  auto undrained = queue_.close(why, join);
  pending_.completeAll(why);
  for (auto& entry : undrained) entry->state->complete(why);
  if (join) join->complete(why);
  stats_.publish();
}

}  // namespace cerar
