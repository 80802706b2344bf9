#include "common/status.h"

#include "common/error.h"

namespace cerar {

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kPeerLost: return "peer lost";
    case StatusCode::kMismatch: return "mismatch";
    case StatusCode::kShutDown: return "shut down";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kInternal: return "internal";
  }
  return "?";
}

void Status::raise() const {
  switch (code) {
    case StatusCode::kTimeout: throw TimeoutError(message, peer);
    case StatusCode::kPeerLost: throw PeerLostError(message, peer);
    case StatusCode::kMismatch: throw MismatchError(message, peer);
    case StatusCode::kShutDown: throw ShutDownError(message, peer);
    case StatusCode::kInvalidArgument: throw InvalidArgumentError(message, peer);
    case StatusCode::kOk:
    case StatusCode::kInternal: break;
  }
  throw InternalError(code == StatusCode::kOk ? "cerar: raise() of a success" : message, peer);
}

Status statusOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const Error*>(&e)) return error->status();
  return Status(StatusCode::kInternal, e.what());
}

Status statusOf(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& caught) {
    return statusOf(caught);
  } catch (...) {
    return Status(StatusCode::kInternal, "unknown exception");
  }
}

Status withContext(const Status& status, const std::string& prefix, const std::string& suffix) {
  return Status(status.code, prefix + status.message + suffix, status.peer);
}

}  // namespace cerar
