// The rendezvous store's framing (its messages on the socket), shared by its server and client
// (internal). "Wire" in cerar means a lossy encoding of the data (ops/codec/wire.h); this is not one.
//
// Every message is a frame: a 4-byte little-endian length, then the body. A request body is
// an op byte and its fields; a response body is a status byte and its payload. Integers are
// little-endian, strings and byte strings carry a 4-byte length. The first request of a
// connection must be kHello with the job secret and the client's job identity (empty: none).
// A server with an identity answers a right secret with another identity (or none) kForeignJob,
// with its own, and closes the connection: a rank of one job never joins another's store.
//
// kOnLoss (key, value) leaves the server a key to set should this connection end without a
// goodbye: when the client's process dies the kernel closes its socket, so the key is
// independent evidence of death (a frozen process keeps its socket open). kGoodbye, the last
// request of a clean close, gets no reply: the client sends it and closes.
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <string>
#include <vector>

#include "common/bytes.h"
#include "common/error.h"

namespace cerar::store_framing {

enum class Op : uint8_t { kHello = 1, kSet, kGet, kWait, kAdd, kCheck, kOnLoss, kGoodbye };
enum class ReplyStatus : uint8_t { kOk = 0, kTimeout, kRejected, kError, kForeignJob };

constexpr uint32_t kMaxHello = 4096;        // before the secret is checked
constexpr uint32_t kMaxFrame = 1u << 30;    // after (the server's per-connection quota is less)
constexpr size_t kReadChunk = 64 * 1024;    // a body grows as it arrives, never by its claim

// Timeouts travel as int64 milliseconds; anything past a century means "no limit" in effect,
// and clamping there keeps `now + timeout` from overflowing the clock.
constexpr int64_t kMaxTimeoutMs = int64_t{100} * 365 * 24 * 3600 * 1000;
inline int64_t clampTimeoutMs(int64_t ms) { return ms < kMaxTimeoutMs ? ms : kMaxTimeoutMs; }

// "unix:/path" names a Unix-domain socket; anything else is a TCP host.
inline bool isUnixAddress(const std::string& host) { return host.rfind("unix:", 0) == 0; }
inline std::string unixPath(const std::string& host) { return host.substr(5); }

// The store speaks Gloo's byte type; a malformed body is an InternalError (the server answers
// it as a refused request, the client lets it out as it is).
using Writer = ByteWriter<char>;
inline ByteReader reader(const std::vector<char>& body) {
  return ByteReader(body, "rendezvous message");
}

inline uint32_t decodeLength(const std::array<unsigned char, 4>& h) {
  return ByteReader(h.data(), h.size(), "rendezvous frame").get<uint32_t>();
}

// A frame holding `body`, itself prefixed by one leading byte (op or status).
inline std::vector<char> frame(uint8_t lead, const std::vector<char>& body) {
  Writer w;
  w.put<uint32_t>(static_cast<uint32_t>(body.size() + 1));
  w.put<uint8_t>(lead);
  w.raw(body.data(), body.size());
  return w.data;
}
inline std::vector<char> frame(ReplyStatus s, const std::vector<char>& body) {
  return frame(static_cast<uint8_t>(s), body);
}

// Compares in time independent of where the strings differ (the length is not secret).
inline bool sameSecret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Counters are decimal ASCII; a missing key counts as 0. add() refuses to wrap.
inline int64_t addCounter(int64_t value, int64_t delta) {
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    throw InvalidArgumentError("add() would overflow the counter");
  }
  return sum;
}
inline int64_t parseCounter(const std::vector<char>& v) {
  int64_t n = 0;
  if (v.empty()) return 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size()) {
    throw InvalidArgumentError("add() on a key that does not hold a counter");
  }
  return n;
}

}  // namespace cerar::store_framing
