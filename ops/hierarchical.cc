#include "ops/hierarchical.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "ops/agreement.h"
#include "ops/collectives.h"

namespace cerar {

std::vector<size_t> hierarchicalSlices(size_t count, int localSize) {
  std::vector<size_t> slices(size_t(localSize), count / size_t(localSize));
  slices.back() += count % size_t(localSize);
  return slices;
}

namespace {

class RingHostLevel final : public HostLevel {
 public:
  explicit RingHostLevel(std::shared_ptr<Transport> links)
      : ring_(links), links_(std::move(links)) {}
  int rank() const override { return ring_.rank(); }
  int size() const override { return ring_.size(); }
  void setPacing(const Pacing& pacing) override { ring_.setPacing(pacing); }
  RunStats reduceScatter(void* data, const std::vector<size_t>& slices, DType dtype,
                         ReduceOp op) override {
    return ring_.reduceScatter(data, slices, dtype, op);
  }
  RunStats allGather(void* data, const std::vector<size_t>& slices, DType dtype) override {
    std::vector<size_t> blockBytes(slices.size());
    for (size_t i = 0; i < slices.size(); ++i) blockBytes[i] = slices[i] * dtypeSize(dtype);
    ringAllgather(*links_, data, blockBytes);
    return ringLevelFigures(slices, rank(), dtype);
  }

 private:
  Communicator ring_;
  std::shared_ptr<Transport> links_;
};

}  // namespace

bool everyRankAgrees(bool mine, const std::shared_ptr<Transport>& local,
                     const std::shared_ptr<Transport>& cross) {
  const uint8_t someHostNot = orAcrossRanks(*local, mine ? 0 : 1);
  return orAcrossRanks(*cross, someHostNot) == 0;
}

RunStats ringLevelFigures(const std::vector<size_t>& slices, int rank, DType dtype) {
  size_t total = 0;
  for (size_t n : slices) total += n;
  const int size = int(slices.size()), next = (rank + 1) % size;
  RunStats stats;
  stats.rounds = size - 1;
  stats.bytesSent = (total - slices[size_t(next)]) * dtypeSize(dtype);
  stats.bytesReceived = (total - slices[size_t(rank)]) * dtypeSize(dtype);
  return stats;
}

std::shared_ptr<HostLevel> ringHostLevel(std::shared_ptr<Transport> local) {
  return std::make_shared<RingHostLevel>(std::move(local));
}

HierarchicalAllreduce::HierarchicalAllreduce(std::shared_ptr<Transport> local,
                                             std::shared_ptr<Transport> cross)
    : HierarchicalAllreduce(ringHostLevel(std::move(local)),
                            std::make_unique<Communicator>(std::move(cross))) {}

HierarchicalAllreduce::HierarchicalAllreduce(std::shared_ptr<HostLevel> local,
                                             std::unique_ptr<Communicator> cross)
    : local_(std::move(local)), cross_(std::move(cross)) {}

void HierarchicalAllreduce::setPacing(const Pacing& pacing) {
  local_->setPacing(pacing);
  cross_->setPacing(pacing);
}

RunStats HierarchicalAllreduce::allreduce(void* data, size_t count, DType dtype,
                                          const AllreduceOptions& options) {
  CERAR_CHECK_ARGUMENT(data != nullptr || count == 0, "rank ", local_->rank(), ": null buffer");
  const auto start = std::chrono::steady_clock::now();
  const std::vector<size_t> slices = hierarchicalSlices(count, local_->size());
  const int mine = local_->rank();
  const size_t offset = slices.front() * size_t(mine);
  RunStats stats = local_->reduceScatter(data, slices, dtype, options.op);
  // The slice's partial sums are tested again across hosts: the packing's verdict was on this
  // rank's own values.
  AllreduceOptions across = options;
  across.beyondCerarRange.reset();
  if (options.lost != nullptr) {
    std::fill(options.lost, options.lost + count, 0.0f);
    across.lost = options.lost + offset;
  }
  const RunStats crossed = cross_->allreduce(static_cast<std::byte*>(data) +
                                                 offset * dtypeSize(dtype),
                                             slices[size_t(mine)], dtype, across);
  const RunStats gathered = local_->allGather(data, slices, dtype);
  stats.rounds += crossed.rounds + gathered.rounds;
  stats.bytesSent += crossed.bytesSent + gathered.bytesSent;
  stats.bytesReceived += crossed.bytesReceived + gathered.bytesReceived;
  stats.nonFiniteFallback = crossed.nonFiniteFallback;
  stats.wireFallback = crossed.wireFallback;
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace cerar
