// Errors of cerar: one exception type whose message says what the rank saw.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace cerar {

// Thrown for every failure: bad parameters, disagreeing ranks, timeouts, dead peers.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A transfer did not complete in time; `peer()` is the rank that was waited on.
class TimeoutError : public Error {
 public:
  TimeoutError(const std::string& what, int peer) : Error(what), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

}  // namespace cerar

// Checks an invariant or an argument; throws cerar::Error with file:line and the message.
#define CERAR_ENFORCE(cond, ...)                                                      \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      throw ::cerar::Error(::cerar::detail::concat(__VA_ARGS__, " [", __FILE__, ":", \
                                                   __LINE__, "]"));                   \
    }                                                                                 \
  } while (0)
