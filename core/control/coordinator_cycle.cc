// The coordinator's cycle on the wire: this rank's report, its way up the control tree and
// rank 0's answer on its way down (ops/control_tree.h, docs/scale.md); rank 0's decision; the
// shutdown handshake over the same links. The answer's processing is in coordinator.cc.
#include <iterator>

#include "core/control/coordinator.h"
#include "core/control/negotiation_codec.h"
#include "core/policy/fusion.h"
#include "ops/collectives.h"
#include "common/error.h"

namespace cerar {
namespace {

// Horovod's readiness ticks, on the coordinator rank's timeline: an instant named after `rank`
// on the row of each tensor it submitted in full, at the cycle its part arrived (cached units
// travel as bits merged over the ranks, so they have no tick per rank).
void recordReadiness(Timeline& timeline, int rank, const RequestMessage& message,
                     Clock::time_point arrived) {
  const std::string tick = std::to_string(rank);
  for (const Request& request : message.requests) {
    for (const auto& name : request.names) {
      timeline.record(tensorRow(request.description, name), tick, arrived, arrived);
    }
  }
}

}  // namespace

CycleReport Coordinator::collectReport() {
  RequestMessage message;
  message.shutdown = queue_.shutdownRequested();
  auto fresh = queue_.drain(message.join);
  joined_ = joined_ || message.join;
  const auto now = Clock::now();
  for (auto& entry : fresh) {
    entry->requested = now;
    const int32_t id = entry->request.description.processSet;
    const auto set = sets_.find(id);
    if (!set) {  // removed since it was enqueued: never sent
      completeEntry(queue_, *entry,
                    Status(StatusCode::kInvalidArgument,
                           detail::concat("cerar: '", entry->request.names.front(),
                                          "': process set ", id, " has been removed")));
      continue;
    }
    const int64_t slot = cache_.capacity() > 0
                             ? cache_.lookup(entry->request, entry->key,
                                             set->rankOf(transport_->rank()))
                             : -1;
    if (slot >= 0) {
      held_.hold(entry.get(), size_t(slot));
      ++stats_.working().cacheHits;
    } else {
      message.requests.push_back(entry->request);
      if (cache_.capacity() > 0) ++stats_.working().cacheMisses;
    }
    pending_.add(std::move(entry));
  }
  CycleReport report;
  held_.report(report, joined_);
  std::vector<Request> again = held_.takeResubmissions();
  message.requests.insert(message.requests.begin(), std::make_move_iterator(again.begin()),
                          std::make_move_iterator(again.end()));
  if (rollCall_) message.cacheBits = report.held;
  rollCall_ = false;
  if (message.shutdown || message.join || !message.requests.empty() ||
      !message.cacheBits.empty()) {
    report.parts.push_back({transport_->rank(), std::move(message)});
  }
  return report;
}

ResponseMessage Coordinator::negotiate(CycleReport report) {
  Transport& t = *transport_;
  const int parent = tree_.parent();
  try {
    for (auto& bytes : gatherFromChildren(t, children_)) {
      countControl(stats_.working(), bytes.size(), false);
      mergeReport(report, decodeCycleReport(bytes, t.size()));
    }
  } catch (const TimeoutError&) {
    throw;  // a silent peer: the others time out as well
  } catch (const Error& e) {
    // A corrupt or foreign message from some rank: every rank fails with the same reason
    // instead of waiting out its timeout (the abort goes up to rank 0, then down to all).
    try {
      if (parent < 0) {
        abortDown(t, children_, e.what());
      } else {
        abortToParent(t, parent, e.what());
        relayDown(t, parent, children_);
      }
    } catch (const std::exception&) {
      // The abort itself (as it comes back down), or some rank is gone too: the original
      // reason is the one to report.
    }
    throw;
  }
  std::vector<uint8_t> answer;
  if (parent >= 0) {
    const std::vector<uint8_t> mine = encode(report);
    sendToParent(t, parent, mine);
    countControl(stats_.working(), mine.size(), true);
    answer = relayDown(t, parent, children_);
    countControl(stats_.working(), answer.size(), false);
  } else {
    answer = decide(report);
    relayDown(t, -1, children_, answer);
  }
  for (size_t i = 0; i < children_.size(); ++i) {
    countControl(stats_.working(), answer.size(), true);
  }
  ResponseMessage decoded = decodeResponseMessage(answer);
  rollCall_ = decoded.rollCall;
  return decoded;
}

std::vector<uint8_t> Coordinator::decide(const CycleReport& report) {
  try {
    const auto now = Clock::now();
    table_->receive(report, cache_, now);  // checks the parts first
    if (timeline_.active()) {
      for (const RankPart& part : report.parts) {
        recordReadiness(timeline_, part.rank, part.message, now);
      }
    }
    // The table can be long; a stall is judged in seconds, so a glance every 50 ms suffices.
    if (now - lastInspection_ >= std::chrono::milliseconds(50)) {
      lastInspection_ = now;
      if (rollCallAfter_ > 0 && table_->longestHeldWait(now) > rollCallAfter_) {
        table_->callRoll();
      }
      auto report = stallInspector_.inspect(table_->waiting(), now);
      if (!report.warning.empty()) {
        logger_.log(LogLevel::kWarning, report.warning);
        ++stats_.working().stallWarnings;
      }
      for (const auto& [key, error] : report.failures) {
        logger_.log(LogLevel::kError, error.message);
        table_->fail(key, error);
      }
    }
    ResponseMessage decided = table_->decide(cache_);
    decided.tuning = tuning_.decided();
    const bool answered = !decided.responses.empty() || anyBit(decided.cacheBits);
    idleCycles_ = table_->idle() && !answered ? idleCycles_ + 1 : 0;
    decided.idleShift = uint8_t(idlePaceShift(idleCycles_));
    SelectionPolicy policy = policy_;
    policy.componentsScale = decided.tuning.point.componentsScale;
    const auto setSize = [this](int32_t id) {
      const auto set = sets_.find(id);
      return set ? set->size() : 1;  // a removed set's units fail when processed
    };
    decided.groups = decideGroups(unitsOf(decided), setSize,
                                  size_t(decided.tuning.point.thresholdBytes), link_, policy);
    return encode(decided);
  } catch (const TimeoutError&) {
    throw;
  } catch (const Error& e) {
    try {
      abortDown(*transport_, children_, e.what());
    } catch (const std::exception&) {
    }
    throw;
  }
}

void Coordinator::farewell() {
  // Nobody closes its links before everyone has the shutdown answer: a link closed early
  // could reset a peer's last transfer.
  // Up the control tree and back down, as a cycle: no rank handles more than its tree links.
  try {
    Transport& t = *transport_;
    gatherFromChildren(t, children_);
    if (tree_.parent() >= 0) sendToParent(t, tree_.parent(), {});
    if (tree_.parent() < 0 && beforeRelease_) beforeRelease_();
    relayDown(t, tree_.parent(), children_);
  } catch (const std::exception& e) {
    logger_.log(LogLevel::kDebug, std::string("shutdown handshake: ") + e.what());
  }
}

}  // namespace cerar
