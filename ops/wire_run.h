// The exact ring with a lossy wire (docs/wires.md): runs a ring plan (makeRingPlan) on float32
// data whose messages travel as fp16, bf16 or int8 blocks. Each reduce-scatter hop decodes what
// arrived, adds its own float32 slice and encodes the sum for the next; the owner of a chunk
// adds its slice last, encodes the total once and keeps the decoded value, and the allgather
// forwards those same bytes, so every rank ends with bit-identical results. PlanRun streams
// the rounds in segments, as for the float32 ring, so the casts overlap the transfers.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/algorithms/plan.h"
#include "ops/codec/wire.h"
#include "ops/run_types.h"
#include "ops/transport/transport.h"

namespace cerar {

// Runs `plan` (a ring plan: no CERAR actions, no reduce-scatter finish) in place on plan.d
// floats at `data`, summing, in segments of about `segmentBytes` on the wire (whole int8
// blocks), with the send window of ops/paced_link.h (0: none). bytesSent counts the wire's
// bytes. A failure is rethrown with "in round t of L" added.
// `lost` (plan.d floats, or null): for error feedback, each element's loss in the one encoding
// this rank made of it (the value it encoded minus the value its message decodes to; every
// element of the buffer is encoded by this rank exactly once: its first send, a hop's sum, or
// the owner's total). Summed over ranks, the losses are the result's error, up to the float32
// rounding of the hops' adds.
RunStats runWireRing(const Plan& plan, Transport& transport, float* data, Wire wire,
                     WireBuffers& buffers, size_t segmentBytes, size_t windowBytes = 0,
                     float* lost = nullptr);

}  // namespace cerar
