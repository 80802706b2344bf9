#include "core/control/held_units.h"

namespace cerar {

void HeldUnits::dropSet(int32_t id) {
  for (auto it = held_.begin(); it != held_.end();) {
    it = it->second.entry->request.description.processSet == id ? held_.erase(it)
                                                                : std::next(it);
  }
}

void HeldUnits::invalidate(size_t slot) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->second.slot != slot) {
      ++it;
      continue;
    }
    resubmit_.push_back(it->second.entry->request);
    it = held_.erase(it);
  }
}

std::vector<Request> HeldUnits::takeResubmissions() {
  std::vector<Request> out = std::move(resubmit_);
  resubmit_.clear();
  return out;
}

void HeldUnits::report(CycleReport& report, bool joined) {
  if (!held_.empty() && heldGeneration_ != cache_.generation()) revalidate();
  heldGeneration_ = cache_.generation();
  for (const auto& [key, held] : held_) setBit(report.held, held.slot);
  if (joined || cache_.slotCount() == 0) return;
  // Every slot of this rank's sets that it does not hold.
  report.missing = memberSlots();
  for (size_t i = 0; i < report.missing.size(); ++i) {
    report.missing[i] &= uint8_t(i < report.held.size() ? ~report.held[i] : 0xff);
  }
}

const std::vector<uint8_t>& HeldUnits::memberSlots() {
  if (memberGeneration_ == cache_.generation()) return memberSlots_;
  memberGeneration_ = cache_.generation();
  memberSlots_.assign((cache_.slotCount() + 7) / 8, 0);
  for (size_t slot = 0; slot < cache_.slotCount(); ++slot) {
    if (!cache_.used(slot)) continue;
    const int32_t id = cache_.at(slot).description.processSet;
    if (id == kGlobalProcessSet) {
      setBit(memberSlots_, slot);
    } else if (const auto set = sets_.find(id); set && set->contains(rank_)) {
      setBit(memberSlots_, slot);
    }
  }
  return memberSlots_;
}

void HeldUnits::revalidate() {
  for (auto it = held_.begin(); it != held_.end();) {
    Held& held = it->second;
    if (cache_.used(held.slot) && cache_.slotOf(std::string(it->first)) == int64_t(held.slot)) {
      ++it;
      continue;
    }
    const Request& request = held.entry->request;
    const auto set = sets_.find(request.description.processSet);
    const int64_t slot =
        set ? cache_.lookup(request, held.entry->key, set->rankOf(rank_)) : int64_t{-1};
    if (slot >= 0) {
      held.slot = size_t(slot);
      ++it;
    } else {
      resubmit_.push_back(request);
      it = held_.erase(it);
    }
  }
}

}  // namespace cerar
