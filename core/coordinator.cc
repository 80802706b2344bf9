#include "core/coordinator.h"

#include <algorithm>
#include <thread>

#include "core/config.h"
#include "core/fusion.h"
#include "core/link_probe.h"
#include "ops/collectives.h"
#include "ops/common/error.h"

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

}  // namespace

Coordinator::Coordinator(const RuntimeConfig& config, std::shared_ptr<Transport> transport,
                         Queue& queue, Timeline& timeline, const Logger& logger,
                         DeviceSlot& devices, std::function<void()> beforeRelease)
    : config_(config), transport_(transport), queue_(queue), timeline_(timeline),
      logger_(logger), cache_(config.cacheCapacity), policy_(policyOf(config)),
      beforeRelease_(std::move(beforeRelease)),
      stallInspector_(config.stallCheckSeconds, config.stallShutdownSeconds), devices_(devices),
      dispatcher_(std::move(transport), timeline, devices),
      finalizer_(timeoutOf(config)) {
  if (transport_->rank() == kCoordinatorRank) {
    table_ = std::make_unique<NegotiationTable>(transport_->size());
  }
}

void Coordinator::probe() {
  if (config_.measureLink) link_ = probeLink(*transport_);
  if (const auto& figures = config_.linkFigures) {
    link_.alpha = (*figures)[0], link_.beta = (*figures)[1], link_.gamma = (*figures)[2];
    link_.gammaWire = 0;  // twice the given gamma: a test's figures decide alone
  }
  const LinkModel& link = link_;
  logger_.log(LogLevel::kInfo, detail::concat("link model: alpha ", link.alpha * 1e6,
                                              " us, beta ", link.beta * 1e9, " ns/B, gamma ",
                                              link.gamma * 1e9, " ns/B, 16-bit wire ",
                                              link.gammaWire * 1e9, " ns/B"));
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
  published_ = working_;
}

void Coordinator::run() {
  const auto cycle = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(config_.cycleTimeMs));
  auto next = Clock::now();
  try {
    while (true) {
      queue_.sleepUntil(next);
      next = std::max(next + cycle, Clock::now());  // a late cycle does not cause a burst
      const ResponseMessage answer = negotiate(collectRequests());
      ++working_.cycles;
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
    const int64_t slot =
        cache_.capacity() > 0 ? cache_.lookup(entry->request, transport_->rank()) : -1;
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
    gatherBytes(t, encode(request), kCoordinatorRank);
    return decodeResponseMessage(broadcastBytes(t, {}, kCoordinatorRank));
  }
  std::vector<uint8_t> answer;
  try {
    auto gathered = gatherBytes(t, encode(request), kCoordinatorRank);
    const auto now = Clock::now();
    for (int rank = 0; rank < t.size(); ++rank) {
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
    decided.groups = decideGroups(unitsOf(decided), t.size(), config_.fusionThresholdBytes,
                                  link_, policy_);
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
  return decodeResponseMessage(broadcastBytes(t, answer, kCoordinatorRank));
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
      timeline_.record(name, "NEGOTIATE", it->second->enqueued, responded,
                       detail::concat("\"kind\": \"", kindName(unit.description.kind), "\""));
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
    const auto dispatched = Clock::now();
    for (size_t i = 0; i < members.size(); ++i) {
      if (entries[i] == nullptr) continue;
      for (const auto& name : members[i]->names) {
        timeline_.record(name, "WAIT", entries[i]->responded, dispatched);
      }
    }
    DeviceEvent end = dispatcher_.run(members, entries, group, working_);
    // Before any handle of the group completes: a caller that has waited sees the
    // operation's effects in stats() (runtime.h).
    publishStats();
    if (end) {
      completeOnDevice(members, std::move(end));
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
}

void Coordinator::complete(const std::string& key, const Status& status) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;  // a unit this rank never submitted (it has joined)
  std::unique_ptr<Entry> entry = std::move(it->second);
  pending_.erase(it);
  queue_.release(entry->request.names);  // before the callback, which may enqueue the name again
  entry->state->complete(status);
}

void Coordinator::completeOnDevice(const std::vector<const Response*>& members,
                                   DeviceEvent end) {
  auto done = std::make_shared<std::vector<std::unique_ptr<Entry>>>();
  for (const Response* member : members) {
    auto it = pending_.find(member->key());
    if (it == pending_.end()) continue;  // this rank has joined
    done->push_back(std::move(it->second));
    pending_.erase(it);
  }
  if (done->empty()) return;
  // The names stay in flight until the results are there: a rank that enqueues one again
  // before then is refused, as on the host.
  finalizer_.add(devices_.get(-1), std::move(end), [this, done](const Status& status) {
    for (auto& entry : *done) {
      queue_.release(entry->request.names);
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
  finalizer_.drain();  // device work already dispatched completes with its own outcome
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
