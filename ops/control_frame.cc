#include "ops/control_frame.h"

#include <algorithm>

#include "common/bytes.h"
#include "common/error.h"

namespace cerar::control_frame {

std::vector<uint8_t> encode(Type type, const std::vector<uint8_t>& message) {
  ByteWriter<> frame;
  frame.data.reserve(kFrameBytes);
  frame.put<uint32_t>(kMagic);
  frame.put<uint8_t>(kVersion);
  frame.put<uint8_t>(uint8_t(type));
  frame.put<uint16_t>(0);  // reserved
  frame.put<uint64_t>(message.size());
  frame.raw(message.data(), std::min(message.size(), kInlineBytes));
  frame.data.resize(kFrameBytes, 0);
  return std::move(frame.data);
}

Header parse(const uint8_t* frame, Type expected, uint64_t maxBytes, int rank, int peer) {
  // The peer does not speak this rank's protocol: a mismatch naming it.
  auto fail = [&](const std::string& what) {
    return MismatchError(detail::concat("rank ", rank, ": corrupt control frame from rank ",
                                        peer, ": ", what),
                         peer);
  };
  // A whole frame is always there: the reader cannot run past its end.
  ByteReader in(frame, kHeaderBytes, "control frame", StatusCode::kMismatch);
  if (in.get<uint32_t>() != kMagic) throw fail("bad magic (not a cerar peer?)");
  const uint8_t version = in.get<uint8_t>();
  if (version != kVersion) {
    throw fail(detail::concat("protocol version ", int(version), ", this rank speaks ",
                              int(kVersion), " (mixed cerar builds?)"));
  }
  const auto type = in.get<Type>();
  const bool allowed = type == expected || type == Type::kAbort;
  if (!allowed) throw fail(detail::concat("message type ", int(type), ", expected ",
                                          int(expected)));
  in.get<uint16_t>();  // reserved
  const uint64_t length = in.get<uint64_t>();
  if (length > maxBytes) {
    throw fail(detail::concat("a message of ", length, " bytes, past the limit of ", maxBytes));
  }
  return Header{type, length};
}

}  // namespace cerar::control_frame
