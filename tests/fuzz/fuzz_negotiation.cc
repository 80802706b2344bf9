// libFuzzer target: the negotiation decoders (core/control/negotiation_codec.cc). The first byte picks the
// request or the response decoder; what decodes must have sizes that fit (checked shapes).
#include <cstdint>
#include <vector>

#include "core/control/negotiation_codec.h"
#include "common/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  try {
    if (data[0] & 1) {
      const cerar::ResponseMessage message = cerar::decodeResponseMessage(bytes);
      for (const auto& response : message.responses) (void)response.description.bytes();
      (void)cerar::encode(message);
    } else {
      const cerar::RequestMessage message = cerar::decodeRequestMessage(bytes);
      for (const auto& request : message.requests) (void)request.description.bytes();
      (void)cerar::encode(message);
    }
  } catch (const cerar::Error&) {
    // Refused: the expected outcome for most inputs.
  }
  return 0;
}
