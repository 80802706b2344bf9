#include "ops/transport/subset.h"

#include <algorithm>

#include "common/error.h"

namespace cerar {

SubsetTransport::SubsetTransport(std::shared_ptr<Transport> base, std::vector<int> members)
    : base_(std::move(base)), members_(std::move(members)) {
  CERAR_ENFORCE(base_ != nullptr, "SubsetTransport: no base transport");
  CERAR_ENFORCE(std::is_sorted(members_.begin(), members_.end()),
                "SubsetTransport: members must be ascending");
  const auto it = std::find(members_.begin(), members_.end(), base_->rank());
  CERAR_ENFORCE(it != members_.end(), "SubsetTransport: rank ", base_->rank(),
                " is not a member");
  rank_ = int(it - members_.begin());
}

int SubsetTransport::baseRank(int peer) const {
  CERAR_ENFORCE(peer >= 0 && peer < size(), "SubsetTransport: peer ", peer, " out of range for ",
                size(), " ranks");
  return members_[size_t(peer)];
}

void SubsetTransport::postSend(int peer, const void* data, size_t bytes) {
  base_->postSend(baseRank(peer), data, bytes);
}
void SubsetTransport::postRecv(int peer, void* data, size_t bytes) {
  base_->postRecv(baseRank(peer), data, bytes);
}
void SubsetTransport::waitSend(int peer) { base_->waitSend(baseRank(peer)); }
void SubsetTransport::waitRecv(int peer) { base_->waitRecv(baseRank(peer)); }

}  // namespace cerar
