// The fixed-size frame that starts every control-plane message between ranks (gatherBytes,
// broadcastBytes): magic, version, type and length, then the message's first bytes inline.
// The parser is pure, so it is unit-tested and fuzzed directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cerar::control_frame {

constexpr size_t kFrameBytes = 256;
constexpr size_t kHeaderBytes = 16;  // magic u32, version u8, type u8, reserved u16, length u64
constexpr size_t kInlineBytes = kFrameBytes - kHeaderBytes;
constexpr uint32_t kMagic = 0x46524543;  // "CERF" in little-endian bytes
// A new version changes the layout or the bound below; ranks of different versions refuse
// each other's frames instead of guessing.
constexpr uint8_t kVersion = 1;
// The bound every rank of this version agrees on: far above any negotiation (a response of
// 100,000 tensors is a few MiB), far below memory trouble.
constexpr uint64_t kMaxMessageBytes = uint64_t{64} << 20;

enum class Type : uint8_t { kGather = 1, kBroadcast = 2, kAbort = 3 };

// Bytes on the link for a message of `length` bytes: its frame, and the rest if longer.
constexpr uint64_t wireBytes(uint64_t length) {
  return kFrameBytes + (length > kInlineBytes ? length - kInlineBytes : 0);
}

// A frame holding `message`'s length and its first kInlineBytes bytes.
std::vector<uint8_t> encode(Type type, const std::vector<uint8_t>& message);

struct Header {
  Type type;
  uint64_t length;
};
// Checks magic, version, type and length against `expected` (kAbort is accepted wherever
// any type is) and `maxBytes`; throws cerar::Error naming `peer` and what was wrong.
Header parse(const uint8_t* frame, Type expected, uint64_t maxBytes, int rank, int peer);

}  // namespace cerar::control_frame
