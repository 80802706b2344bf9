#include "ops/hierarchical.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "ops/collectives.h"

namespace cerar {

std::vector<size_t> hierarchicalSlices(size_t count, int localSize) {
  std::vector<size_t> slices(size_t(localSize), count / size_t(localSize));
  for (size_t i = 0; i < count % size_t(localSize); ++i) ++slices[i];
  return slices;
}

HierarchicalAllreduce::HierarchicalAllreduce(std::shared_ptr<Transport> local,
                                             std::shared_ptr<Transport> cross)
    : local_(local), cross_(std::move(cross)), localLinks_(std::move(local)) {}

void HierarchicalAllreduce::setPacing(const Pacing& pacing) {
  local_.setPacing(pacing);
  cross_.setPacing(pacing);
}

RunStats HierarchicalAllreduce::allreduce(void* data, size_t count, DType dtype,
                                          const AllreduceOptions& options) {
  CERAR_CHECK_ARGUMENT(data != nullptr || count == 0, "rank ", local_.rank(), ": null buffer");
  const auto start = std::chrono::steady_clock::now();
  const std::vector<size_t> slices = hierarchicalSlices(count, local_.size());
  const int mine = local_.rank();
  size_t offset = 0;
  for (int i = 0; i < mine; ++i) offset += slices[size_t(i)];
  const size_t width = dtypeSize(dtype);
  RunStats stats = local_.reduceScatter(data, slices, dtype, options.op);
  // The slice's partial sums are tested again across hosts: the packing's verdict was on this
  // rank's own values.
  AllreduceOptions across = options;
  across.beyondCerarRange.reset();
  if (options.lost != nullptr) {
    std::fill(options.lost, options.lost + count, 0.0f);
    across.lost = options.lost + offset;
  }
  const RunStats crossed = cross_.allreduce(static_cast<std::byte*>(data) + offset * width,
                                            slices[size_t(mine)], dtype, across);
  std::vector<size_t> blockBytes(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) blockBytes[i] = slices[i] * width;
  ringAllgather(*localLinks_, data, blockBytes);
  stats.rounds += crossed.rounds + 2 * (local_.size() - 1);
  // The all-gather's ring sends every block but the next rank's and receives all but its own.
  const int next = (mine + 1) % local_.size();
  stats.bytesSent += crossed.bytesSent + (count - slices[size_t(next)]) * width;
  stats.bytesReceived += crossed.bytesReceived + (count - slices[size_t(mine)]) * width;
  stats.nonFiniteFallback = crossed.nonFiniteFallback;
  stats.wireFallback = crossed.wireFallback;
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace cerar
