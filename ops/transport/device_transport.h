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
};

}  // namespace cerar
