// The plain types of one all-reduce run (its arithmetic, its streaming, what it measured),
// shared by the executors, the transports and the runtime without the executors' headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/codec/wire.h"
#include "common/dtype.h"

namespace cerar {

// Arithmetic parameters of one all-reduce.
struct CodecParams {
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double eps = 0;  // only used by CERAR's encode/decode actions
  // A lossy wire (ops/wire_run.h): the exact ring's sum only.
  Wire wire = Wire::kNone;
  // With a lossy wire, host memory only: where this rank writes, per element, what its own
  // encodings lost (error feedback, docs/wires.md); null: not kept.
  float* lost = nullptr;
  // The exact ring's plan only, with a runner that scalesFinishedSlices() (ops/executor.h):
  // each rank multiplies the slice it finishes by this before passing it on (scaledCopy), so
  // every element is scaled once, to the bits a pass over the sum would give on every rank.
  double finishScale = 1.0;
};

struct RunStats {
  int rounds = 0;
  uint64_t bytesSent = 0;      // payload bytes sent by this rank
  uint64_t bytesReceived = 0;  // payload bytes received by this rank
  double seconds = 0;
  // CERAR was asked for, but some rank's input was non-finite or near overflow, so every rank
  // ran the exact ring (cerar-protocol.md, "Non-finite and near-overflow inputs").
  bool nonFiniteFallback = false;
  // A guarded fp16 wire (AllreduceOptions::fp16Guard), or the int8 wire, refused: every rank
  // ran the float32 ring.
  bool wireFallback = false;
  // Host by host was decided, but some host cannot run its own level (a device all-reduce
  // without NCCL inside a host): every rank ran the exact ring over all ranks instead.
  bool flatFallback = false;
};

// How a run streams its rounds: in segments of segmentBytes, with at most about windowBytes
// in flight to the next rank (0: no window; ops/paced_link.h). Never changes a result.
struct Pacing {
  size_t segmentBytes = 256 * 1024;
  size_t windowBytes = 0;
  // Without a window, segments may grow up to this for long messages (ops/plan_run.cc,
  // freeSegmentBytes); 0 keeps segmentBytes.
  size_t longSegmentBytes = 0;
  // Without a window, a round's receives of two segments or more are posted in its own step
  // rather than a step ahead (ops/plan_run.cc, postInStep): for links the CPU, not a queue,
  // bounds (the link probe's verdict, docs/pacing.md).
  bool receivesInStep = false;
};

}  // namespace cerar
