// The outcome of an operation as it travels from a transport or the coordinator to a handle:
// a code that callers branch on, the peer it concerns and a message for people.
#pragma once

#include <cstdint>
#include <string>

namespace cerar {

enum class StatusCode : uint8_t {
  kOk = 0,
  kTimeout,          // a peer stayed silent past CERAR_TIMEOUT_SECONDS (or a stall limit)
  kPeerLost,         // a peer's links closed: it died or failed
  kMismatch,         // ranks submitted different things under one name
  kShutDown,         // the runtime was shut down (or failed earlier) before the operation ran
  kInvalidArgument,  // this rank's arguments or settings are wrong
  kInternal,         // anything else
};
const char* statusCodeName(StatusCode code);

struct Status {
  StatusCode code = StatusCode::kOk;
  int peer = -1;  // the rank the failure concerns, -1 when unknown or none
  std::string message;

  Status() = default;
  Status(StatusCode c, std::string m, int p = -1) : code(c), peer(p), message(std::move(m)) {}
  bool ok() const { return code == StatusCode::kOk; }
  // Throws the cerar::Error subclass of `code` (common/error.h); must not be ok().
  [[noreturn]] void raise() const;
};

}  // namespace cerar
