// libFuzzer target: the negotiation decoders (core/control/negotiation_codec.cc). The first byte picks the
// request, the response or the cycle report decoder; what decodes must have sizes that fit
// (checked shapes) and, for a report, parts by rank within the job.
#include <cstdint>
#include <vector>

#include "core/control/negotiation_codec.h"
#include "common/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  try {
    if (data[0] % 3 == 2) {
      constexpr int kSize = 64;
      cerar::CycleReport report = cerar::decodeCycleReport(bytes, kSize);
      int last = -1;
      for (const auto& part : report.parts) {
        if (part.rank <= last || part.rank >= kSize) __builtin_trap();
        last = part.rank;
      }
      cerar::CycleReport copy = report;
      cerar::mergeReport(report, std::move(copy));
      (void)cerar::encode(report);
    } else if (data[0] & 1) {
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
