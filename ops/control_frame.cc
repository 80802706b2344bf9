#include "ops/control_frame.h"

#include <algorithm>
#include <cstring>

#include "ops/common/error.h"

namespace cerar::control_frame {
namespace {
template <typename T>
void put(uint8_t* at, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) at[i] = uint8_t(uint64_t(value) >> (8 * i));
}
template <typename T>
T get(const uint8_t* at) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= uint64_t(at[i]) << (8 * i);
  return T(value);
}
}  // namespace

std::vector<uint8_t> encode(Type type, const std::vector<uint8_t>& message) {
  std::vector<uint8_t> frame(kFrameBytes, 0);
  put<uint32_t>(frame.data(), kMagic);
  frame[4] = kVersion;
  frame[5] = uint8_t(type);
  put<uint64_t>(frame.data() + 8, message.size());
  if (!message.empty())  // an empty vector's data() may be null, which memcpy forbids
    std::memcpy(frame.data() + kHeaderBytes, message.data(),
                std::min(message.size(), kInlineBytes));
  return frame;
}

Header parse(const uint8_t* frame, Type expected, uint64_t maxBytes, int rank, int peer) {
  // The peer does not speak this rank's protocol: a mismatch naming it.
  auto fail = [&](const std::string& what) {
    return MismatchError(detail::concat("rank ", rank, ": corrupt control frame from rank ",
                                        peer, ": ", what),
                         peer);
  };
  if (get<uint32_t>(frame) != kMagic) throw fail("bad magic (not a cerar peer?)");
  if (frame[4] != kVersion) {
    throw fail(detail::concat("protocol version ", int(frame[4]), ", this rank speaks ",
                              int(kVersion), " (mixed cerar builds?)"));
  }
  const auto type = Type(frame[5]);
  const bool allowed = type == expected || (expected == Type::kBroadcast && type == Type::kAbort);
  if (!allowed) throw fail(detail::concat("message type ", int(frame[5]), ", expected ",
                                          int(expected)));
  const uint64_t length = get<uint64_t>(frame + 8);
  if (length > maxBytes) {
    throw fail(detail::concat("a message of ", length, " bytes, past the limit of ", maxBytes));
  }
  return Header{type, length};
}

}  // namespace cerar::control_frame
