// The C++ API for one all-reduce on a group of ranks.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "ops/executor.h"

namespace cerar {

// What reduces a buffer: the exact ring, CERAR, or Adasum's own schedule (ops/adasum_run.h,
// which runs it; a Communicator runs the first two).
enum class Algorithm : uint8_t { kRing, kCerar, kAdasum };
const char* algorithmName(Algorithm algorithm);  // "ring" | "cerar" | "adasum"
Algorithm parseAlgorithm(const std::string& name);  // "ring" | "cerar"

// The spec's default eps: 2^-11 for f32, 2^-25 for f64.
double defaultEps(DType dtype);

struct AllreduceOptions {
  Algorithm algorithm = Algorithm::kCerar;
  int components = 0;  // CERAR's c, a multiple of N; 0 picks 4*N
  double eps = 0;      // 0 picks defaultEps(dtype)
  ReduceOp op = ReduceOp::kSum;
  // Agree on (N, c, d, eps, dtype, op) before the counted rounds, so that ranks that disagree
  // all fail with a message naming both values. A runtime that negotiates can skip it.
  bool verifyParameters = true;
  // CERAR only: share-corrected decoding of positions j >= 2 (ops/algorithms/share_correction.h),
  // a local post-pass; off by default (docs/fidelity.md has the measurements).
  bool shareCorrection = false;
  // CERAR only: ranks agree whether any rank's buffer holds a NaN, an Inf or a value near
  // overflow (ops/codec/range.h), and if one does, every rank runs the exact ring instead, so
  // such values stay in their own elements as with the ring (cerar-protocol.md, "Non-finite
  // and near-overflow inputs"). Costs a read of the buffer; the verdict rides on the parameter
  // agreement, or without it on CERAR's first N-1 rounds. false only for data known to be
  // finite, or to measure the cost. Must be the same on every rank.
  bool exactOnNonFinite = true;
  // With exactOnNonFinite: this rank's own test result when the caller has it already (the
  // runtime tests while packing); unset, the communicator reads the buffer.
  std::optional<bool> beyondCerarRange;
  // The exact ring's sum of float32 data with fp16 or bf16 on the wire and float32 adds at
  // every hop (ops/wire_run.h, docs/wires.md); host memory only. Must be the same on every rank.
  Wire wire = Wire::kNone;
  // With an fp16 wire: ranks first OR codec::fp16GuardBits of their buffers, and unless the
  // guard passes every rank runs the float32 ring instead (RunStats::wireFallback), so that
  // no partial sum overflows to inf and no buffer goes as subnormals (the error budget's
  // fp16 bound, core/policy/error_budget.h). A one-byte exchange and a read of the buffer.
  bool fp16Guard = false;
  // Error feedback (docs/wires.md): with a lossy wire on float32 host data, `count` floats where
  // this rank's losses are written (ops/wire_run.h); zeros where no wire ran. Null: not kept.
  float* lost = nullptr;
  // Floating dtypes: the result is multiplied by this (an average's 1/N), to the bits of a
  // pass over the sum on every rank. Where the exact ring runs on the data itself, each rank
  // scales the slice it finishes before passing it on (CodecParams::finishScale): 1/N of a
  // pass, on a slice still in cache. Host memory only.
  double postscale = 1.0;
};

// Whether a run with `options` on N ranks tests CERAR's range first (exactOnNonFinite): CERAR
// with c > N on more than one rank (c = N is the ring itself; one rank has no rounds). The one
// rule: the runtime tests while packing exactly when this holds.
bool testsCerarRange(const AllreduceOptions& options, int N);

// One rank's handle on a group. Thread safety: one operation at a time.
class Communicator {
 public:
  explicit Communicator(std::shared_ptr<Transport> transport,
                        size_t segmentBytes = Executor::kDefaultSegmentBytes);
  // Runs the plans with `runner` (e.g. on device memory) instead of a host Executor.
  Communicator(std::shared_ptr<Transport> transport, std::unique_ptr<PlanRunner> runner);

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  Transport& transport() { return *transport_; }
  // How later runs stream (Pacing); the host executor takes it, a device runner keeps its own.
  void setPacing(const Pacing& pacing) { runner_->setPacing(pacing); }

  // Sums (or min/max with the ring) `count` elements at `data` across ranks, in place. An int8
  // wire also carries float16/bfloat16 host sums: over a float32 copy, rounded back once.
  RunStats allreduce(void* data, size_t count, DType dtype, const AllreduceOptions& options);
  // The exact ring's reduce-scatter (makeReduceScatterPlan) on `data`, which holds
  // sum(chunks) elements, chunk i (chunks[i] elements, in rank order) for rank i; in place:
  // afterwards this rank's chunk holds the reduction, bit-identical to the exact ring's
  // all-reduce of the same buffer there when the chunks are its own. Other chunks are scratch.
  RunStats reduceScatter(void* data, const std::vector<size_t>& chunks, DType dtype,
                         ReduceOp op);

 private:
  // allreduce's steps: the arguments (and CERAR's c and eps), the range verdict and the
  // parameter agreement, the wire's guards (and 16-bit data widened for the int8 wire).
  struct Run;
  void checkArguments(const void* data, size_t count, DType dtype,
                      const AllreduceOptions& options, Run& run) const;
  void agreeOnRange(void* data, size_t count, DType dtype, const AllreduceOptions& options,
                    Run& run);
  void guardWire(void* data, size_t count, DType dtype, const AllreduceOptions& options,
                 Run& run);
  const Plan& planFor(Algorithm algorithm, int c, size_t d);

  std::shared_ptr<Transport> transport_;
  std::unique_ptr<PlanRunner> runner_;
  static constexpr size_t kMaxCachedPlans = 64;
  std::map<std::tuple<Algorithm, int, size_t>, Plan> plans_;  // cached per (algorithm, c, d)
  std::vector<float> widened_;  // 16-bit data on the int8 wire, as float32
};

}  // namespace cerar
