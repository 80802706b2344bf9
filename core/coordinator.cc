#include "core/coordinator.h"

#include <algorithm>
#include <thread>

#include "core/config.h"
#include "core/fusion.h"
#include "core/link_probe.h"
#include "ops/collectives.h"
#include "ops/common/error.h"
#include "ops/paced_link.h"

namespace cerar {
namespace {

constexpr int kCoordinatorRank = 0;

SelectionPolicy policyOf(const RuntimeConfig& config) {
  SelectionPolicy policy;
  policy.algorithm = config.algorithm;
  policy.components = config.components;
  policy.eps = config.eps;
  policy.shareCorrection = config.shareCorrection;
  policy.measureError = config.debugError;
  // CERAR_COMPRESSION: without a budget fp16/bf16 force that wire; with one they, or allow
  // (both), name the wires the budget may choose.
  policy.maxError = config.maxError;
  const bool budget = config.maxError > 0 && config.algorithm == "auto";
  const std::string& lossy = config.compression;
  if (budget) {
    policy.allowFp16 = lossy == "allow" || lossy == "fp16";
    policy.allowBf16 = lossy == "allow" || lossy == "bf16";
  } else if (lossy != "allow") {
    policy.wire = parseWire(lossy);
  }
  return policy;
}

AutotuneOptions autotuneOptionsOf(const RuntimeConfig& config) {
  AutotuneOptions options;
  options.warmupSamples = config.autotuneWarmupSamples;
  options.stepsPerSample = config.autotuneStepsPerSample;
  // c is the user's where forced, and does not exist on the ring alone.
  if (config.components > 0 || config.algorithm == "ring" || config.size <= 2) {
    options.componentsScales.clear();
  }
  return options;
}

std::string describe(const TuningPoint& p) {
  return detail::concat("fusion threshold ", p.thresholdBytes, " B, cycle time ", p.cycleTimeMs,
                        " ms, c scale ", p.componentsScale);
}

std::string timelineArgs(const TuningPoint& p) {
  return detail::concat("\"fusion_threshold_bytes\": ", p.thresholdBytes,
                        ", \"cycle_time_ms\": ", p.cycleTimeMs, ", \"components_scale\": ",
                        p.componentsScale);
}

constexpr const char* kTuningRow = "cerar.autotune";

}  // namespace

Coordinator::Coordinator(const RuntimeConfig& config, std::shared_ptr<Transport> transport,
                         Queue& queue, Timeline& timeline, const Logger& logger,
                         DeviceSlot& devices, ProcessSetTable& sets,
                         std::function<void()> beforeRelease)
    : config_(config), transport_(transport), queue_(queue), sets_(sets), timeline_(timeline),
      logger_(logger), cache_(config.cacheCapacity), policy_(policyOf(config)),
      beforeRelease_(std::move(beforeRelease)),
      stallInspector_(config.stallCheckSeconds, config.stallShutdownSeconds), devices_(devices),
      dispatcher_(std::move(transport), timeline, devices),
      finalizer_(timeoutOf(config)) {
  const TuningPoint start{config.fusionThresholdBytes, config.cycleTimeMs, config.componentsScale};
  tuning_.point = applied_.point = start;
  if (transport_->rank() == kCoordinatorRank) {
    table_ = std::make_unique<NegotiationTable>(transport_->size(), &sets_);
    if (config.autotune) {
      RuntimeConfig sized = config;
      sized.size = transport_->size();
      tuner_ = std::make_unique<Autotuner>(autotuneOptionsOf(sized), start);
      if (!config.autotuneLog.empty()) {
        tuneLog_.open(config.autotuneLog, std::ios::out | std::ios::trunc);
        if (tuneLog_) {
          tuneLog_ << autotuneCsvHeader() << std::endl;
        } else {
          logger_.log(LogLevel::kWarning, "CERAR_AUTOTUNE_LOG: cannot write '" +
                                              config.autotuneLog + "'; tuning without a log");
        }
      }
    }
  }
  applied_.tuning = config.autotune;  // until the first response says otherwise
  appliedSince_ = Clock::now();
  working_.fusionThresholdBytes = start.thresholdBytes;
  working_.cycleTimeMs = start.cycleTimeMs;
  working_.componentsScale = start.componentsScale;
  working_.autotuning = config.autotune;
  published_ = working_;
}

void Coordinator::probe() {
  if (config_.measureLink) link_ = probeLink(*transport_);
  if (const auto& figures = config_.linkFigures) {
    link_.alpha = (*figures)[0], link_.beta = (*figures)[1], link_.gamma = (*figures)[2];
    link_.gammaWire = 0;  // twice the given gamma: a test's figures decide alone
  }
  // The model charges rounds by the segments the executor will stream.
  const Pacing pacing = pacingFor(size_t(link_.windowBytes));
  link_.segmentBytes = double(pacing.segmentBytes);
  const LinkModel& link = link_;
  dispatcher_.setPacing(pacing);
  logger_.log(LogLevel::kInfo, detail::concat("link model: alpha ", link.alpha * 1e6,
                                              " us, beta ", link.beta * 1e9, " ns/B, gamma ",
                                              link.gamma * 1e9, " ns/B, 16-bit wire ",
                                              link.gammaWire * 1e9, " ns/B, send window ",
                                              link.windowBytes / 1024, " KiB"));
}

void Coordinator::setBlameBoard(std::shared_ptr<BlameBoard> board, bool hostedByRankZero) {
  board_ = std::move(board);
  if (!board_) return;
  const std::string mine = transport_->rank() == kCoordinatorRank ? newBlameScope() : "";
  const auto scope = broadcastBytes(*transport_, {mine.begin(), mine.end()}, kCoordinatorRank);
  blame_.scope.assign(scope.begin(), scope.end());
  blame_.rank = transport_->rank();
  blame_.size = transport_->size();
  blame_.hostedByRankZero = hostedByRankZero;
  // Survivors fail within moments of each other (core/blame.h); the window only matters when
  // more than one rank is missing, and must stay short next to the timeout.
  blame_.window = std::clamp(timeoutOf(config_) / 2, std::chrono::milliseconds(200),
                             std::chrono::milliseconds(5000));
  leaveLossMark(board_.get(), blame_, timeoutOf(config_));
}

RuntimeStats Coordinator::stats() const {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return published_;
}

void Coordinator::publishStats() {
  std::lock_guard<std::mutex> lock(statsMutex_);
  for (const auto& count : late_) count(working_);
  late_.clear();
  published_ = working_;
}

void Coordinator::countLate(std::function<void(RuntimeStats&)> count) {
  std::lock_guard<std::mutex> lock(statsMutex_);
  count(published_);
  late_.push_back(std::move(count));
}

void Coordinator::run() {
  auto next = Clock::now();
  try {
    while (true) {
      queue_.sleepUntil(next);
      // The pace is the coordinator rank's last answer's (job-wide; it may be autotuned).
      const auto cycle = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double, std::milli>(applied_.point.cycleTimeMs));
      next = std::max(next + cycle, Clock::now());  // a late cycle does not cause a burst
      const ResponseMessage answer = negotiate(collectRequests());
      ++working_.cycles;
      applyTuning(answer.tuning);
      if (answer.shutdown) {
        farewell();
        finish(Status(StatusCode::kShutDown, "cerar has been shut down"));
        return;
      }
      process(answer);
      publishStats();
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

RequestMessage Coordinator::collectRequests() {
  RequestMessage message;
  message.shutdown = queue_.shutdownRequested();
  auto fresh = queue_.drain(message.join);
  const auto now = Clock::now();
  for (auto& entry : fresh) {
    entry->requested = now;
    const int32_t id = entry->request.description.processSet;
    const auto set = sets_.find(id);
    if (!set) {  // removed since it was enqueued: never sent
      const std::vector<std::string> names = entry->request.names;
      queue_.release(entry->request);
      entry->state->complete(Status(StatusCode::kInvalidArgument,
                                    detail::concat("cerar: '", names.front(), "': process set ",
                                                   id, " has been removed")));
      continue;
    }
    const int64_t slot = cache_.capacity() > 0
                             ? cache_.lookup(entry->request, set->rankOf(transport_->rank()))
                             : -1;
    if (slot >= 0) {
      setBit(message.cacheBits, static_cast<size_t>(slot));
      ++working_.cacheHits;
    } else {
      message.requests.push_back(entry->request);
      if (cache_.capacity() > 0) ++working_.cacheMisses;
    }
    pending_[entry->request.key()] = std::move(entry);
  }
  return message;
}

ResponseMessage Coordinator::negotiate(const RequestMessage& request) {
  Transport& t = *transport_;
  if (t.rank() != kCoordinatorRank) {
    const std::vector<uint8_t> mine = encode(request);
    gatherBytes(t, mine, kCoordinatorRank);
    countControl(mine.size(), true);
    const std::vector<uint8_t> answer = broadcastBytes(t, {}, kCoordinatorRank);
    countControl(answer.size(), false);
    return decodeResponseMessage(answer);
  }
  std::vector<uint8_t> answer;
  try {
    auto gathered = gatherBytes(t, encode(request), kCoordinatorRank);
    const auto now = Clock::now();
    for (int rank = 0; rank < t.size(); ++rank) {
      if (rank != kCoordinatorRank) countControl(gathered[rank].size(), false);
      table_->receive(rank, decodeRequestMessage(gathered[rank]), cache_, now);
    }
    // The table can be long; a stall is judged in seconds, so a glance every 50 ms suffices.
    if (now - lastInspection_ >= std::chrono::milliseconds(50)) {
      lastInspection_ = now;
      auto report = stallInspector_.inspect(table_->waiting(), now);
      if (!report.warning.empty()) logger_.log(LogLevel::kWarning, report.warning);
      for (const auto& [key, error] : report.failures) {
        logger_.log(LogLevel::kError, error.message);
        table_->fail(key, error);
      }
    }
    ResponseMessage decided = table_->decide(cache_);
    decided.tuning = tuner_ ? tuner_->state() : tuning_;
    SelectionPolicy policy = policy_;
    policy.componentsScale = decided.tuning.point.componentsScale;
    const auto setSize = [this](int32_t id) {
      const auto set = sets_.find(id);
      return set ? set->size() : 1;  // a removed set's units fail when processed
    };
    decided.groups = decideGroups(unitsOf(decided), setSize,
                                  size_t(decided.tuning.point.thresholdBytes), link_, policy);
    answer = encode(decided);
  } catch (const TimeoutError&) {
    throw;  // a silent peer: the others time out as well
  } catch (const Error& e) {
    // A corrupt or foreign message from some rank: every rank fails with the same reason
    // instead of waiting out its timeout.
    try {
      broadcastAbort(t, e.what(), kCoordinatorRank);
    } catch (const std::exception&) {
      // Some rank is gone too; the original reason is the one to report.
    }
    throw;
  }
  broadcastBytes(t, answer, kCoordinatorRank);
  for (int peer = 1; peer < t.size(); ++peer) countControl(answer.size(), true);  // each but root
  return decodeResponseMessage(answer);
}

void Coordinator::countControl(size_t messageBytes, bool sent) {
  const uint64_t onWire = control_frame::wireBytes(messageBytes);
  if (sent) {
    ++working_.controlMessagesSent;
    working_.controlBytesSent += onWire;
  } else {
    ++working_.controlMessagesReceived;
    working_.controlBytesReceived += onWire;
  }
}

std::vector<Response> Coordinator::unitsOf(const ResponseMessage& message) const {
  std::vector<Response> units;
  for (size_t slot : setBits(message.cacheBits)) units.push_back(cache_.at(slot));
  units.insert(units.end(), message.responses.begin(), message.responses.end());
  return units;
}

void Coordinator::process(const ResponseMessage& message) {
  // The same list on every rank (the caches agree), then the same puts in the same order.
  const std::vector<Response> units = unitsOf(message);
  for (const Response& unit : units) cache_.put(unit);

  const auto responded = Clock::now();
  for (const Response& unit : units) {
    auto it = pending_.find(unit.key());
    if (it == pending_.end()) continue;
    it->second->responded = responded;
    for (const auto& name : unit.names) {
      const int32_t set = unit.description.processSet;
      timeline_.record(name, "NEGOTIATE", it->second->enqueued, responded,
                       detail::concat("\"kind\": \"", kindName(unit.description.kind), "\"",
                                      set == 0 ? "" : ", \"process_set\": ",
                                      set == 0 ? "" : std::to_string(set)));
    }
  }

  for (const FusedGroup& group : message.groups) {
    std::vector<const Response*> members;
    std::vector<Entry*> entries;
    CERAR_ENFORCE(!group.members.empty(), "malformed response: an empty fusion group");
    for (uint32_t index : group.members) {
      CERAR_ENFORCE(index < units.size(), "malformed response: fusion group member ", index,
                    " of ", units.size(), " units");
      members.push_back(&units[index]);
      auto it = pending_.find(units[index].key());
      entries.push_back(it == pending_.end() ? nullptr : it->second.get());
    }
    if (!members.front()->error.empty()) {  // errors are never fused
      complete(members.front()->key(), members.front()->status());
      continue;
    }
    if (members.front()->description.kind == Kind::kProcessSet) {
      changeSets(*members.front());
      continue;
    }
    const int32_t id = members.front()->description.processSet;
    const auto set = sets_.find(id);
    if (!set) {  // removed earlier in this answer: its members fail it alike
      for (const Response* member : members) {
        complete(member->key(), Status(StatusCode::kInvalidArgument,
                                       detail::concat("cerar: '", member->names.front(),
                                                      "': process set ", id,
                                                      " has been removed")));
      }
      continue;
    }
    if (!set->contains(transport_->rank())) continue;  // another set's work
    const auto dispatched = Clock::now();
    for (size_t i = 0; i < members.size(); ++i) {
      if (entries[i] == nullptr) continue;
      for (const auto& name : members[i]->names) {
        timeline_.record(name, "WAIT", entries[i]->responded, dispatched);
      }
    }
    DeviceUnit unit = dispatcher_.run(members, entries, group, working_, *set);
    // Before any handle of the group completes: a caller that has waited sees the
    // operation's effects in stats() (runtime.h).
    publishStats();
    if (unit.mark) {
      completeOnDevice(members, std::move(unit));
    } else {
      for (const Response* member : members) complete(member->key(), {});
    }
  }

  if (message.lastJoinedRank >= 0) {
    if (auto join = queue_.takeJoin()) {
      join->lastJoinedRank = message.lastJoinedRank;
      join->complete({});
    }
  }
  feedTuner(units, message.groups);
}

void Coordinator::feedTuner(const std::vector<Response>& units,
                            const std::vector<FusedGroup>& groups) {
  if (!tuner_ || tuner_->frozen()) return;
  std::vector<std::string> names;
  double bytes = 0;
  for (const Response& unit : units) {
    const Kind kind = unit.description.kind;
    const bool reduces =
        kind == Kind::kAllreduce || kind == Kind::kReducescatter || kind == Kind::kAllgather;
    if (!reduces || !unit.error.empty()) continue;
    names.insert(names.end(), unit.names.begin(), unit.names.end());
    bytes += double(unit.description.bytes());
  }
  const bool cerarRan = std::any_of(groups.begin(), groups.end(), [](const FusedGroup& g) {
    return g.algorithm == Algorithm::kCerar;
  });
  const double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  const auto sample = tuner_->record(names, bytes, cerarRan, now);
  if (!sample) return;
  logger_.log(LogLevel::kInfo, detail::concat("autotune: sample ", sample->index,
                                              sample->warmup ? " (warm-up) " : " ",
                                              describe(sample->point), ": ",
                                              sample->score / 1e6, " MB/s"));
  if (tuneLog_) tuneLog_ << autotuneCsvLine(*sample) << std::endl;
  if (sample->frozeAfter) {
    logger_.log(LogLevel::kInfo, detail::concat("autotune: frozen after ", tuner_->steps(),
                                                " steps at ", describe(tuner_->best()), " (",
                                                tuner_->bestScore() / 1e6, " MB/s)"));
    if (tuneLog_) tuneLog_ << autotuneCsvBest(tuner_->best(), tuner_->bestScore()) << std::endl;
  }
}

void Coordinator::applyTuning(const TuningState& tuning) {
  const auto now = Clock::now();
  if (!(tuning.point == applied_.point)) {
    // The period the old parameters were in force, as one event on the timeline's own row.
    timeline_.record(kTuningRow, "PARAMETERS", appliedSince_, now, timelineArgs(applied_.point));
    appliedSince_ = now;
  }
  if (tuning.frozen && !applied_.frozen) {
    timeline_.record(kTuningRow, "FROZEN", now, now, timelineArgs(tuning.point));
  }
  applied_ = tuning;
  working_.fusionThresholdBytes = tuning.point.thresholdBytes;
  working_.cycleTimeMs = tuning.point.cycleTimeMs;
  working_.componentsScale = tuning.point.componentsScale;
  working_.autotuning = tuning.tuning;
  working_.autotuneFrozen = tuning.frozen;
}

void Coordinator::complete(const std::string& key, const Status& status) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;  // a unit this rank never submitted (it has joined)
  std::unique_ptr<Entry> entry = std::move(it->second);
  pending_.erase(it);
  queue_.release(entry->request);  // before the callback, which may enqueue the name again
  entry->state->complete(status);
}

void Coordinator::changeSets(const Response& unit) {
  const Description& d = unit.description;
  Status outcome;
  int32_t id = d.root;
  if (d.root > 0) {
    if (sets_.remove(id)) {
      dispatcher_.forget(id);
      if (table_) table_->dropSet(id);
      // Operations of the set still pending here can no longer run.
      std::vector<std::string> orphans;
      for (const auto& [key, entry] : pending_) {
        if (entry->request.description.processSet == id) orphans.push_back(key);
      }
      for (const auto& key : orphans) {
        complete(key, Status(StatusCode::kInvalidArgument,
                             detail::concat("cerar: process set ", id,
                                            " was removed while this operation waited")));
      }
    } else {
      outcome = Status(StatusCode::kInvalidArgument,
                       detail::concat("cerar: there is no process set ", id, " to remove"));
    }
  } else {
    std::vector<int> ranks(d.splits.begin(), d.splits.end());
    std::sort(ranks.begin(), ranks.end());
    const auto existing = sets_.idOf(ranks);
    const Status valid = checkSetRanks(ranks, transport_->size());
    if (!valid.ok()) {
      outcome = withContext(valid, "cerar: ", "");
    } else if (existing) {
      outcome = Status(StatusCode::kInvalidArgument,
                       detail::concat("cerar: a process set with these ranks exists already "
                                      "(id ", *existing, ")"));
    } else {
      id = sets_.add(ranks);
    }
  }
  auto it = pending_.find(unit.key());
  if (it != pending_.end() && outcome.ok()) it->second->state->processSetId = id;
  complete(unit.key(), outcome);
}

void Coordinator::completeOnDevice(const std::vector<const Response*>& members,
                                   DeviceUnit unit) {
  auto done = std::make_shared<std::vector<std::unique_ptr<Entry>>>();
  for (const Response* member : members) {
    auto it = pending_.find(member->key());
    if (it == pending_.end()) continue;  // this rank has joined
    done->push_back(std::move(it->second));
    pending_.erase(it);
  }
  // The names stay in flight until the results are there: a rank that enqueues one again
  // before then is refused, as on the host. A joined rank (no entries) counts its run too.
  auto finish = std::move(unit.finish);
  finalizer_.add(devices_.get(-1), std::move(unit.mark),
                 [this, done, finish](const Status& status) {
    if (status.ok() && finish) countLate(finish);
    for (auto& entry : *done) {
      queue_.release(entry->request);
      entry->state->complete(status);
    }
  });
}

void Coordinator::farewell() {
  // Nobody closes its links before everyone has the shutdown answer: a link closed early
  // could reset a peer's last transfer.
  try {
    gatherBytes(*transport_, {}, kCoordinatorRank);
    if (transport_->rank() == kCoordinatorRank && beforeRelease_) beforeRelease_();
    broadcastBytes(*transport_, {}, kCoordinatorRank);
  } catch (const std::exception& e) {
    logger_.log(LogLevel::kDebug, std::string("shutdown handshake: ") + e.what());
  }
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
  for (auto& [key, entry] : pending_) entry->state->complete(why);
  pending_.clear();
  for (auto& entry : undrained) entry->state->complete(why);
  if (join) join->complete(why);
  publishStats();
}

}  // namespace cerar
