// Errors of cerar: one exception class per StatusCode, all derived from cerar::Error, each
// carrying the Status (code, peer, message) that says what the rank saw.
#pragma once

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/status.h"

namespace cerar {

// The base of every failure; catch it to catch them all.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.message), status_(std::move(status)) {}
  // An internal error (a failure no other code describes).
  explicit Error(const std::string& what) : Error(Status(StatusCode::kInternal, what)) {}
  const Status& status() const { return status_; }
  StatusCode code() const { return status_.code; }
  int peer() const { return status_.peer; }

 private:
  Status status_;
};

#define CERAR_ERROR_CLASS(Name, Code)                                               \
  class Name : public Error {                                                       \
   public:                                                                          \
    explicit Name(const std::string& what, int peer = -1)                           \
        : Error(Status(StatusCode::Code, what, peer)) {}                            \
  };
CERAR_ERROR_CLASS(TimeoutError, kTimeout)            // a silent peer; peer() is the rank
CERAR_ERROR_CLASS(PeerLostError, kPeerLost)          // a dead or failed peer; peer() is the rank
CERAR_ERROR_CLASS(MismatchError, kMismatch)          // ranks disagree; peer() is one of them
CERAR_ERROR_CLASS(ShutDownError, kShutDown)          // the runtime is shut down
CERAR_ERROR_CLASS(InvalidArgumentError, kInvalidArgument)
CERAR_ERROR_CLASS(InternalError, kInternal)
#undef CERAR_ERROR_CLASS

// The Status of a caught exception: an Error's own, anything else internal.
Status statusOf(const std::exception& e);
Status statusOf(std::exception_ptr e);
// The same failure with more context in its message (code and peer kept).
Status withContext(const Status& status, const std::string& prefix, const std::string& suffix);

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
// "core/x.cc" -> "x.cc": messages name the source file, not the build machine's path.
constexpr const char* sourceTag(const char* path) {
  const char* tag = path;
  for (const char* p = path; *p; ++p) {
    if (*p == '/' || *p == '\\') tag = p + 1;
  }
  return tag;
}
}  // namespace detail

}  // namespace cerar

// Checks an invariant; throws cerar::InternalError with the message and "[file.cc:line]".
#define CERAR_ENFORCE(cond, ...)                                                       \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      throw ::cerar::InternalError(::cerar::detail::concat(                            \
          __VA_ARGS__, " [", ::cerar::detail::sourceTag(__FILE__), ":", __LINE__, "]")); \
    }                                                                                  \
  } while (0)

// Checks a caller's argument; throws cerar::InvalidArgumentError with the message.
#define CERAR_CHECK_ARGUMENT(cond, ...)                                                \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      throw ::cerar::InvalidArgumentError(::cerar::detail::concat(__VA_ARGS__));       \
    }                                                                                  \
  } while (0)
