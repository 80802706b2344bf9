// The stall inspector (coordinator rank): units that some ranks submitted and others did not,
// for longer than the check time, are reported by missing rank; past the shutdown time they
// are failed on every rank. Pure apart from the clock it is given.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "core/control/negotiation.h"

namespace cerar {

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;

  // checkSeconds == 0 disables warnings; shutdownSeconds == 0 never fails a unit.
  StallInspector(double checkSeconds, double shutdownSeconds);

  struct Report {
    std::string warning;  // empty: nothing to say now
    std::vector<std::pair<std::string, Status>> failures;  // (unit key, timeout error)
  };
  // Warns at most once per check time.
  Report inspect(const std::vector<NegotiationTable::Waiting>& waiting, Clock::time_point now);

 private:
  double checkSeconds_;
  double shutdownSeconds_;
  Clock::time_point lastWarning_{};
};

}  // namespace cerar
