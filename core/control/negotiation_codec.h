// Negotiation's wire form: the request every rank sends the coordinator rank each cycle and
// the response it broadcasts. Pure, so it is unit-tested and fuzzed directly.
#pragma once

#include <cstdint>
#include <vector>

#include "core/control/message.h"

namespace cerar {

std::vector<uint8_t> encode(const RequestMessage& message);
std::vector<uint8_t> encode(const ResponseMessage& message);
std::vector<uint8_t> encode(const CycleReport& report);
// Throw MismatchError on malformed input (a truncated or foreign message, or sizes that do
// not fit): the ranks disagree on the bytes, as with a corrupt control frame.
RequestMessage decodeRequestMessage(const std::vector<uint8_t>& bytes);
ResponseMessage decodeResponseMessage(const std::vector<uint8_t>& bytes);
// Parts must name ranks in [0, size), ascending.
CycleReport decodeCycleReport(const std::vector<uint8_t>& bytes, int size);

}  // namespace cerar
