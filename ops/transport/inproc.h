// In-process transport: the ranks of a group are threads of one process (tests, simulation).
#pragma once

#include <memory>

#include "ops/transport/transport.h"

namespace cerar {

// Connects the threads of one in-process group. Create one hub, then one transport per rank.
// Thread safety: connect() and abort() may be called from any thread.
class InprocHub {
 public:
  InprocHub(int size, Transport::Duration timeout);
  ~InprocHub();
  InprocHub(const InprocHub&) = delete;
  InprocHub& operator=(const InprocHub&) = delete;

  int size() const;
  // The transport of `rank`; it shares the hub's state and may outlive the hub object.
  std::unique_ptr<Transport> connect(int rank);
  // Simulates the death of `rank`: its pending and future transfers never complete.
  void kill(int rank);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace cerar
