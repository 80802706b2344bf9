// A transport over some of another transport's ranks, renumbered 0..n-1 (a process set's view
// of the job's links): peers are translated through the member list, so no link is made for
// it. Transfers of the view go over `base` as they are; give it a channel of its own
// (Transport::channel) where the base transport has them, so a set's traffic cannot be matched
// with another's.
#pragma once

#include <memory>
#include <vector>

#include "ops/transport/transport.h"

namespace cerar {

class SubsetTransport final : public Transport {
 public:
  // `members`: base ranks, ascending, including base->rank().
  SubsetTransport(std::shared_ptr<Transport> base, std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return int(members_.size()); }
  Duration timeout() const override { return base_->timeout(); }
  void postSend(int peer, const void* data, size_t bytes) override;
  void postRecv(int peer, void* data, size_t bytes) override;
  void waitSend(int peer) override;
  void waitRecv(int peer) override;
  bool registerMemory(void* base, size_t bytes) override {
    return base_->registerMemory(base, bytes);
  }
  void releaseMemory(void* base) override { base_->releaseMemory(base); }
  // The base rank of `peer`.
  int baseRank(int peer) const;

 private:
  std::shared_ptr<Transport> base_;
  std::vector<int> members_;
  int rank_ = -1;
};

}  // namespace cerar
