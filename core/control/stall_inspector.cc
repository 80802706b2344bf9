#include "core/control/stall_inspector.h"

#include <map>
#include <sstream>

namespace cerar {

StallInspector::StallInspector(double checkSeconds, double shutdownSeconds)
    : checkSeconds_(checkSeconds), shutdownSeconds_(shutdownSeconds) {}

namespace {
std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}
std::string nameList(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", '" : "'") + names[i] + "'";
  return out;
}
}  // namespace

StallInspector::Report StallInspector::inspect(
    const std::vector<NegotiationTable::Waiting>& waiting, Clock::time_point now) {
  Report report;
  const auto seconds = [&](Clock::time_point since) {
    return std::chrono::duration<double>(now - since).count();
  };
  std::map<int, std::vector<std::string>> missingByRank;
  for (const auto& unit : waiting) {
    const double waited = seconds(unit.firstSeen);
    if (shutdownSeconds_ > 0 && waited > shutdownSeconds_) {
      std::ostringstream error;
      error << (unit.names.size() == 1 ? "tensor " : "tensors ") << nameList(unit.names)
            << " stalled for " << waited << " s (past CERAR_STALL_SHUTDOWN_TIME_SECONDS="
            << shutdownSeconds_ << "): ranks " << rankList(unit.missingRanks)
            << " have not submitted it";
      // The first rank missing is the peer this failure concerns.
      report.failures.emplace_back(
          unit.key, Status(StatusCode::kTimeout, error.str(), unit.missingRanks.front()));
      continue;
    }
    if (checkSeconds_ > 0 && waited > checkSeconds_) {
      for (int rank : unit.missingRanks) {
        auto& names = missingByRank[rank];
        names.insert(names.end(), unit.names.begin(), unit.names.end());
      }
    }
  }
  if (!missingByRank.empty() &&
      (lastWarning_ == Clock::time_point{} || seconds(lastWarning_) >= checkSeconds_)) {
    lastWarning_ = now;
    std::ostringstream out;
    out << "stalled collectives: some ranks submitted them more than " << checkSeconds_
        << " s ago (CERAR_STALL_CHECK_TIME_SECONDS) and others did not";
    constexpr size_t kShown = 10;
    for (const auto& [rank, names] : missingByRank) {
      std::vector<std::string> shown(names.begin(),
                                     names.begin() + std::min(names.size(), kShown));
      out << "; rank " << rank << " is missing " << nameList(shown);
      if (names.size() > kShown) out << " and " << names.size() - kShown << " more";
    }
    report.warning = out.str();
  }
  return report;
}

}  // namespace cerar
