// A Transport whose buffers are device memory, ordered on one CUDA stream.
#pragma once

#include "ops/transport/transport.h"

namespace cerar {

// Contract on top of Transport's (posting order, equal byte counts, one driving thread):
// - postSend reads the buffer as left by all work enqueued on stream() before the post;
// - once waitRecv returns, work enqueued on stream() afterwards sees the received bytes;
// - once waitSend returns, work enqueued on stream() afterwards may overwrite the buffer.
// So a producer kernel, the send, the receive and a consumer kernel need no host
// synchronisation of their own when they share stream(). Waits never block past timeout().
class DeviceTransport : public Transport {
 public:
  // The cudaStream_t that device work touching posted buffers must be enqueued on.
  virtual void* stream() const = 0;
  // True when waitSend/waitRecv return as soon as the transfer is ordered on stream(), without
  // a host wait (NCCL): a whole plan is then enqueued at once, and only waitEvent() observes
  // that it has run. False: the waits block on the host (a staged transport).
  virtual bool streamOrdered() const { return false; }
  // Waits on the host until the device reaches `event` (a cudaEvent_t recorded after work that
  // used this transport); false when `timeout` passes first. A transport whose failures come
  // asynchronously (NCCL) watches for them meanwhile and, on one, fails as a wait does: it
  // becomes unusable and throws an Error naming this rank. Thread safety: may run beside the
  // driving thread's calls.
  virtual bool waitEvent(void* event, Duration timeout) = 0;
};

}  // namespace cerar
