// Parameter agreement before an all-reduce (cerar-protocol.md, "Parameter agreement").
#pragma once

#include <cstdint>
#include <string>

#include "ops/transport/transport.h"

namespace cerar {

// What every rank must agree on; a fixed-size record, so that a disagreement can never make
// two ranks post transfers of different sizes.
struct ParameterRecord {
  uint32_t magic = 0x43455241;  // "CERA"
  int32_t size = 0;
  int32_t components = 0;
  uint8_t algorithm = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t exactOnNonFinite = 0;  // AllreduceOptions::exactOnNonFinite: decides what is sent
  // This rank's verdict of the non-finite check (not compared: the ranks OR it), so that the
  // engine API needs no exchange of its own for it.
  uint8_t beyondCerarRange = 0;
  uint8_t wire = 0;  // Wire: the format on the wire
  uint8_t padding[6] = {};
  uint64_t elements = 0;
  double eps = 0;
  double postscale = 1.0;  // AllreduceOptions::postscale: ranks scale each other's slices

  bool operator==(const ParameterRecord& other) const;
  std::string describe() const;
};

// Gathers every rank's record around the ring (N-1 small messages, not counted in a plan's
// rounds) and throws Error on every rank if any two differ, naming both ranks and values.
// Returns whether any rank's record has beyondCerarRange set.
bool agreeOnParameters(Transport& transport, const ParameterRecord& mine);

// The bitwise OR of every rank's byte: one byte to and from every peer (host memory).
uint8_t orAcrossRanks(Transport& transport, uint8_t mine);

}  // namespace cerar
