// A rank's ring links (send to next, receive from prev) with an optional send window, so that
// a run never has more than about `window` bytes in flight on a link. On links with shallow
// queues a free-running stream overfills them and loses packets; lock-step traffic of the same
// rate does not (docs/pacing.md has the measurements). The window changes when transfers are
// posted, never what they carry: results stay bit-identical.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>

#include "ops/run_types.h"
#include "ops/transport/transport.h"

namespace cerar {

// The executor's pacing for a window: segments of half of it, so that one segment is in
// flight while the next is posted; without a window, the default segments, longer for long
// messages (up to 1 MiB, as Gloo's own ring), and on links the CPU bounds (`cpuBound`)
// receives posted in their round's step.
inline Pacing pacingFor(size_t windowBytes, bool cpuBound = false) {
  return windowBytes > 0 ? Pacing{std::max<size_t>(1, windowBytes / 2), windowBytes}
                         : Pacing{Pacing{}.segmentBytes, 0, size_t(1) << 20, cpuBound};
}

class PacedLink {
 public:
  // window 0: no window, every call goes straight to the transport.
  PacedLink(Transport& transport, size_t windowBytes);

  // Before posting, waits (oldest first) for posted receives from prev while this rank has
  // sent more than `window` bytes beyond what arrived, and some of its sends are unanswered.
  // Each such wait is for a transfer that prev posted before this one's position in the
  // ring's byte order, so the waits add no cycle: no deadlock where the plan had none.
  void postSend(const void* data, size_t bytes);
  void postRecv(void* data, size_t bytes);
  // The oldest posted receive from prev (returns at once when the window waited for it).
  void waitRecv();
  void waitSend();

 private:
  void throttle(size_t bytes);

  Transport& transport_;
  size_t window_;
  uint64_t sent_ = 0;     // bytes posted to next
  uint64_t arrived_ = 0;  // bytes of receives from prev waited for
  std::deque<size_t> receives_;  // posted receives not yet returned by waitRecv, oldest first
  size_t waited_ = 0;            // how many of them, from the front, have arrived
};

}  // namespace cerar
