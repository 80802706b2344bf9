#include "ops/transport/staged.h"

#include <cuda_runtime.h>

#include "ops/codec/cuda/cuda_util.h"
#include "common/error.h"

namespace cerar {

StagedTransport::StagedTransport(std::shared_ptr<Transport> inner, int device)
    : device_(device), inner_(std::move(inner)) {
  CERAR_ENFORCE(inner_ != nullptr, "StagedTransport: no inner transport");
  sends_.resize(inner_->size());
  recvs_.resize(inner_->size());
  cudaStream_t stream = nullptr;
  cuda(cudaSetDevice(device_), "cudaSetDevice", -1);
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate", -1);
  stream_ = stream;
}

StagedTransport::~StagedTransport() {
  // The inner transport may still write into pinned blocks (transfers never waited for), and
  // it may outlive this one (shared): then the blocks are left to it, never freed under it.
  bool pending = false;
  for (const auto& queue : sends_) pending = pending || !queue.empty();
  for (const auto& queue : recvs_) pending = pending || !queue.empty();
  const bool lastOwner = inner_.use_count() == 1;
  inner_.reset();
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  for (auto& block : blocks_) {
    if (block->event) cudaEventDestroy(static_cast<cudaEvent_t>(block->event));
    if (!pending || lastOwner) cudaFreeHost(block->host);
  }
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

// The host transport's failures surface in its own waits; the device's here.
bool StagedTransport::waitEvent(void* event, Duration timeout) {
  return cuda::waitEvent(event, timeout);
}

size_t StagedTransport::pinnedBytes() const {
  size_t total = 0;
  for (const auto& block : blocks_) total += block->capacity;
  return total;
}

void StagedTransport::checkUsable() const {
  if (!failure_.empty())
    throw Error(detail::concat("rank ", rank(), ": staged transport unusable after an earlier "
                               "failure (", failure_, ")"));
}

void StagedTransport::cuda(int status, const char* what, int peer) {
  if (status == cudaSuccess) return;
  failure_ = detail::concat(what, ": ", cudaGetErrorString(static_cast<cudaError_t>(status)));
  throw Error(detail::concat("rank ", rank(), ": staging a transfer with rank ", peer,
                             " failed: ", failure_));
}

// The smallest free block that fits, once its last copy is done; else a new one.
StagedTransport::Block* StagedTransport::acquire(size_t bytes) {
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if ((*it)->capacity >= bytes && (best == free_.end() || (*it)->capacity < (*best)->capacity))
      best = it;
  }
  if (best != free_.end()) {
    Block* block = *best;
    free_.erase(best);
    if (!cuda::waitEvent(block->event, timeout())) {
      failure_ = "a pinned-memory copy did not finish in time";
      throw TimeoutError(detail::concat("rank ", rank(), ": ", failure_, " (",
                                        timeout().count(), " ms)"), rank());
    }
    return block;
  }
  auto block = std::make_unique<Block>();
  // Round up so that slightly different segment sizes share blocks.
  block->capacity = (bytes + 4095) / 4096 * 4096;
  cuda(cudaMallocHost(&block->host, block->capacity), "cudaMallocHost", -1);
  cudaEvent_t event = nullptr;
  cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate", -1);
  block->event = event;
  blocks_.push_back(std::move(block));
  return blocks_.back().get();
}

void StagedTransport::postSend(int peer, const void* data, size_t bytes) {
  checkUsable();
  CERAR_ENFORCE(peer >= 0 && peer < size(), "rank ", rank(), ": cannot send to rank ", peer);
  cuda(cudaSetDevice(device_), "cudaSetDevice", peer);
  Block* block = acquire(bytes);
  auto stream = static_cast<cudaStream_t>(stream_);
  auto event = static_cast<cudaEvent_t>(block->event);
  cuda(cudaMemcpyAsync(block->host, data, bytes, cudaMemcpyDeviceToHost, stream),
       "copy to pinned memory", peer);
  cuda(cudaEventRecord(event, stream), "cudaEventRecord", peer);
  // The host transport reads the pinned bytes as soon as it has them: they must be complete.
  if (!cuda::waitEvent(event, timeout())) {
    failure_ = "the device-to-host copy did not finish in time";
    throw TimeoutError(detail::concat("rank ", rank(), ": ", failure_, " before sending to rank ",
                                      peer), peer);
  }
  inner_->postSend(peer, block->host, bytes);
  sends_[peer].push_back({block, nullptr, bytes});
}

void StagedTransport::postRecv(int peer, void* data, size_t bytes) {
  checkUsable();
  CERAR_ENFORCE(peer >= 0 && peer < size(), "rank ", rank(), ": cannot receive from rank ",
                peer);
  cuda(cudaSetDevice(device_), "cudaSetDevice", peer);
  Block* block = acquire(bytes);
  inner_->postRecv(peer, block->host, bytes);
  recvs_[peer].push_back({block, data, bytes});
}

void StagedTransport::waitSend(int peer) {
  checkUsable();
  CERAR_ENFORCE(peer >= 0 && peer < size() && !sends_[peer].empty(), "rank ", rank(),
                ": nothing pending to send to rank ", peer);
  const Pending pending = sends_[peer].front();
  sends_[peer].pop_front();
  inner_->waitSend(peer);
  release(pending.block);
}

void StagedTransport::waitRecv(int peer) {
  checkUsable();
  CERAR_ENFORCE(peer >= 0 && peer < size() && !recvs_[peer].empty(), "rank ", rank(),
                ": nothing pending to receive from rank ", peer);
  const Pending pending = recvs_[peer].front();
  recvs_[peer].pop_front();
  inner_->waitRecv(peer);
  cuda(cudaSetDevice(device_), "cudaSetDevice", peer);
  auto stream = static_cast<cudaStream_t>(stream_);
  cuda(cudaMemcpyAsync(pending.device, pending.block->host, pending.bytes,
                       cudaMemcpyHostToDevice, stream),
       "copy from pinned memory", peer);
  // The block is reused only after this copy (acquire waits for the event).
  cuda(cudaEventRecord(static_cast<cudaEvent_t>(pending.block->event), stream),
       "cudaEventRecord", peer);
  release(pending.block);
}

}  // namespace cerar
