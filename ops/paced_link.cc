#include "ops/paced_link.h"

namespace cerar {

PacedLink::PacedLink(Transport& transport, size_t windowBytes)
    : transport_(transport), window_(windowBytes) {}

void PacedLink::throttle(size_t bytes) {
  // arrived_ < sent_: only wait while some of this rank's own bytes are unanswered, so that a
  // wait is always for an earlier position than this send (a segment larger than the window
  // still goes, alone).
  while (arrived_ < sent_ && sent_ + bytes > arrived_ + window_ && waited_ < receives_.size()) {
    transport_.waitRecv(transport_.prev());
    arrived_ += receives_[waited_++];
  }
}

void PacedLink::postSend(const void* data, size_t bytes) {
  if (window_ > 0) throttle(bytes);
  transport_.postSend(transport_.next(), data, bytes);
  sent_ += bytes;
}

void PacedLink::postRecv(void* data, size_t bytes) {
  transport_.postRecv(transport_.prev(), data, bytes);
  receives_.push_back(bytes);
}

void PacedLink::waitRecv() {
  if (waited_ > 0) {
    --waited_;
  } else {
    transport_.waitRecv(transport_.prev());
    arrived_ += receives_.front();
  }
  receives_.pop_front();
}

void PacedLink::waitSend() { transport_.waitSend(transport_.next()); }

}  // namespace cerar
