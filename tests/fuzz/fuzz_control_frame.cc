// libFuzzer target: the control frame parser (ops/control_frame.cc). The first byte picks the
// expected type; a frame that parses has a length within the bound it was given.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "ops/control_frame.h"

using namespace cerar::control_frame;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<uint8_t> frame(kFrameBytes, 0);
  std::memcpy(frame.data(), data + 1, std::min(size - 1, kFrameBytes));
  const Type expected = (data[0] & 1) ? Type::kBroadcast : Type::kGather;
  const uint64_t bound = data[0] & 2 ? kMaxMessageBytes : kInlineBytes;
  try {
    const Header header = parse(frame.data(), expected, bound, 0, 1);
    if (header.length > bound) std::abort();
  } catch (const cerar::Error&) {
  }
  return 0;
}
