#include "ops/communicator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ops/agreement.h"
#include "ops/algorithms/share_correction.h"
#include "ops/codec/int8_wire.h"
#include "ops/codec/scale.h"
#include "common/error.h"

namespace cerar {

const char* algorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kRing: return "ring";
    case Algorithm::kCerar: return "cerar";
    case Algorithm::kAdasum: return "adasum";
  }
  return "?";
}

Algorithm parseAlgorithm(const std::string& name) {
  if (name == "ring") return Algorithm::kRing;
  if (name == "cerar") return Algorithm::kCerar;
  throw InvalidArgumentError("unknown algorithm '" + name + "' (expected ring or cerar)");
}

bool testsCerarRange(const AllreduceOptions& options, int N) {
  const int c = options.components == 0 ? 4 * N : options.components;
  return options.algorithm == Algorithm::kCerar && N > 1 && c > N && options.exactOnNonFinite;
}

double defaultEps(DType dtype) {
  // Near sqrt(N*u): 2^-11 for f32, 2^-25 for f64 (cerar-protocol.md).
  return dtype == DType::kFloat64 ? std::ldexp(1.0, -25) : std::ldexp(1.0, -11);
}

Communicator::Communicator(std::shared_ptr<Transport> transport, size_t segmentBytes)
    : Communicator(std::move(transport), std::make_unique<Executor>(segmentBytes)) {}

Communicator::Communicator(std::shared_ptr<Transport> transport,
                           std::unique_ptr<PlanRunner> runner)
    : transport_(std::move(transport)), runner_(std::move(runner)) {
  CERAR_ENFORCE(transport_ != nullptr && runner_ != nullptr,
                "communicator needs a transport and a plan runner");
}

const Plan& Communicator::planFor(Algorithm algorithm, int c, size_t d) {
  const auto key = std::make_tuple(algorithm, c, d);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    // A runtime fuses buffers of many sizes; plans are cheap to rebuild, so the cache is
    // bounded by dropping it whole rather than growing without limit.
    if (plans_.size() >= kMaxCachedPlans) plans_.clear();
    Plan plan = algorithm == Algorithm::kRing ? makeRingPlan(size(), d, rank())
                                              : makeCerarPlan(size(), c, d, rank());
    it = plans_.emplace(key, std::move(plan)).first;
  }
  return it->second;
}

// What a run is made of, settled before any round: CERAR's (c, eps), the verdict on the range
// of the data, whether the ranks already agreed to take the exact ring, the wire that runs.
struct Communicator::Run {
  int c = 1;
  double eps = 0;
  bool cerar = false;
  bool check = false;     // CERAR's range is tested (testsCerarRange)
  bool mine = false;      // this rank's buffer is beyond it
  bool fallback = false;  // every rank takes the exact ring instead
  bool inBand = false;    // the verdict rides on the run itself
  Wire wire = Wire::kNone;
  bool wireFallback = false;
  void* data = nullptr;   // what the rounds reduce: the caller's, or a float32 widening of it
};

void Communicator::checkArguments(const void* data, size_t count, DType dtype,
                                  const AllreduceOptions& options, Run& run) const {
  const int N = size();
  run.c = N;
  CERAR_CHECK_ARGUMENT(options.algorithm != Algorithm::kAdasum, "rank ", rank(),
                       ": Adasum runs by AdasumRunner (ops/adasum_run.h), not a Communicator");
  if (options.algorithm == Algorithm::kCerar) {
    CERAR_CHECK_ARGUMENT(isCerarDType(dtype), "rank ", rank(),
                                ": CERAR supports f32 and f64, got ", dtypeName(dtype),
                                " (use the exact ring)");
    CERAR_CHECK_ARGUMENT(options.op == ReduceOp::kSum, "rank ", rank(),
                                ": CERAR is linear and only sums; ", reduceOpName(options.op),
                                " needs the exact ring");
    run.c = options.components == 0 ? 4 * N : options.components;
    const Status invalid = validateCerarParameters(N, run.c);
    CERAR_CHECK_ARGUMENT(invalid.ok(), "rank ", rank(), ": ", invalid.message);
    run.eps = options.eps == 0 ? defaultEps(dtype) : options.eps;
    CERAR_CHECK_ARGUMENT(std::isfinite(run.eps) && run.eps > 0, "rank ", rank(),
                                ": eps must be positive and finite, got ", run.eps);
  }
  CERAR_CHECK_ARGUMENT(data != nullptr || count == 0, "rank ", rank(), ": null buffer");
  if (options.wire != Wire::kNone) {
    CERAR_CHECK_ARGUMENT(options.algorithm == Algorithm::kRing &&
                             wireCarries(options.wire, dtype, options.op) &&
                             runner_->hostMemory(),
                         "rank ", rank(), ": a ", wireName(options.wire),
                         " wire is the exact ring's sum of float32 host data (int8: also "
                         "f16 and bf16), got ",
                         algorithmName(options.algorithm), " ", dtypeName(dtype), " ",
                         reduceOpName(options.op));
  }
  CERAR_CHECK_ARGUMENT(!options.shareCorrection || runner_->hostMemory(), "rank ", rank(),
                       ": share-corrected decoding needs host memory");
  CERAR_CHECK_ARGUMENT(options.postscale == 1.0 || (isFloatDType(dtype) &&
                                                    runner_->hostMemory()),
                       "rank ", rank(), ": a scaled result needs floating host data, got ",
                       dtypeName(dtype), " scaled by ", options.postscale);
}

void Communicator::agreeOnRange(void* data, size_t count, DType dtype,
                                const AllreduceOptions& options, Run& run) {
  // CERAR mixes each element with those at its offset in the other slices of its chunk
  // (cerar-protocol.md); a NaN or an overflow would spread to them, so such a buffer takes the
  // exact ring on every rank. c = N is the ring itself, and N = 1 has no rounds.
  run.cerar = options.algorithm == Algorithm::kCerar;
  run.check = testsCerarRange(options, size());
  run.mine = run.check && (options.beyondCerarRange.has_value()
                               ? *options.beyondCerarRange
                               : runner_->beyondCerarRange(*transport_, data, count, dtype));
  // Without a parameter agreement to ride on, the verdict rides on the run itself.
  run.inBand = run.check && !options.verifyParameters;
  if (!options.verifyParameters) return;
  ParameterRecord record;
  record.size = size();
  record.components = run.c;
  record.algorithm = static_cast<uint8_t>(options.algorithm);
  record.dtype = static_cast<uint8_t>(dtype);
  record.op = static_cast<uint8_t>(options.op);
  record.elements = count;
  record.eps = run.eps;
  // Only CERAR with r > 1 exchanges the verdict, so only there must the ranks agree on it;
  // the verdict itself rides on the record.
  record.exactOnNonFinite = run.check ? 1 : 0;
  record.beyondCerarRange = run.mine ? 1 : 0;
  record.wire = static_cast<uint8_t>(options.wire);
  record.postscale = options.postscale;
  run.fallback = agreeOnParameters(*transport_, record);
}

void Communicator::guardWire(void* data, size_t count, DType dtype,
                             const AllreduceOptions& options, Run& run) {
  const int N = size();
  run.wire = options.wire;
  run.data = data;
  // 16-bit data rides the int8 wire as float32 (the wire adds in float32 anyway); where the
  // wire falls back, the data's own exact ring runs instead.
  const bool sixteenBit = isSixteenBitFloat(dtype);
  const bool widen = sixteenBit && run.wire == Wire::kInt8 && N > 1;
  if (widen) {
    widened_.resize(count);
    codec::decodeWire(dtype == DType::kFloat16 ? Wire::kFloat16 : Wire::kBFloat16,
                      static_cast<const uint16_t*>(data), widened_.data(), count);
    run.data = widened_.data();
  }
  if (run.wire == Wire::kFloat16 && options.fp16Guard && N > 1) {
    const uint8_t bits = orAcrossRanks(
        *transport_, codec::fp16GuardBits(static_cast<const float*>(run.data), count, N));
    run.wireFallback = !codec::fp16GuardPasses(bits);
  }
  // The int8 wire cannot carry inf or NaN (its block would decode as NaN): always guarded.
  if (run.wire == Wire::kInt8 && N > 1) {
    run.wireFallback = orAcrossRanks(*transport_, codec::int8GuardBits(
                                                      static_cast<const float*>(run.data),
                                                      count, N)) != 0;
  }
  if (run.wireFallback) {
    run.wire = Wire::kNone;
    run.data = data;
  }
  if (sixteenBit && run.data == data) run.wire = Wire::kNone;  // one rank, or the fallback
}

RunStats Communicator::allreduce(void* data, size_t count, DType dtype,
                                 const AllreduceOptions& options) {
  const int N = size();
  Run run;
  checkArguments(data, count, dtype, options, run);
  const auto start = std::chrono::steady_clock::now();
  agreeOnRange(data, count, dtype, options, run);
  guardWire(data, count, dtype, options, run);
  const DType runType = run.data == data ? dtype : DType::kFloat32;
  // Error feedback: an element no lossy encoding touched lost nothing.
  if (options.lost != nullptr) std::fill(options.lost, options.lost + count, 0.0f);
  const CodecParams params{runType, options.op, run.eps, run.wire,
                           run.wire == Wire::kNone ? nullptr : options.lost};
  RunStats stats;
  if (run.inBand) {
    stats = runner_->runUnlessAnyRank(planFor(Algorithm::kCerar, run.c, count), *transport_,
                                      run.data, params, run.mine);
    run.fallback = stats.nonFiniteFallback;
  }
  if (run.fallback) {
    run.cerar = false;
    run.c = N;
  }
  // The exact ring on the data itself scales as it finishes; any other run, after.
  bool scaled = options.postscale == 1.0;
  if (!run.inBand || run.fallback) {
    // A stopped CERAR run sent its first rounds: they count.
    const RunStats stopped = stats;
    CodecParams ring = params;
    if (!scaled && !run.cerar && run.data == data && run.wire == Wire::kNone && N > 1 &&
        runner_->scalesFinishedSlices()) {
      ring.finishScale = options.postscale;
      scaled = true;
    }
    stats = runner_->run(planFor(run.cerar ? Algorithm::kCerar : Algorithm::kRing, run.c, count),
                         *transport_, run.data, ring);
    stats.bytesSent += stopped.bytesSent;
    stats.bytesReceived += stopped.bytesReceived;
  }
  if (run.data != data) {  // rounded back once
    codec::encodeWire(dtype == DType::kFloat16 ? Wire::kFloat16 : Wire::kBFloat16,
                      widened_.data(), static_cast<uint16_t*>(data), count);
  }
  stats.nonFiniteFallback = run.fallback;
  stats.wireFallback = run.wireFallback;
  if (run.cerar && options.shareCorrection) {
    applyShareCorrection(Layout(N, run.c, count), rank(), run.eps, dtype, run.data);
  }
  if (!scaled) scaledCopy(dtype, data, data, count, options.postscale);
  // The range check, the agreement and the decoding pass count as part of the all-reduce.
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

RunStats Communicator::reduceScatter(void* data, const std::vector<size_t>& chunks, DType dtype,
                                     ReduceOp op) {
  CERAR_CHECK_ARGUMENT(int(chunks.size()) == size(), "rank ", rank(), ": reduce-scatter needs ",
                       size(), " chunk lengths, got ", chunks.size());
  size_t total = 0;
  for (size_t n : chunks) total += n;
  CERAR_CHECK_ARGUMENT(data != nullptr || total == 0, "rank ", rank(), ": null buffer");
  // Plans are not cached: the chunk lengths vary with every fused layout, and building one
  // takes N-1 rounds of arithmetic.
  const Plan plan = makeReduceScatterPlan(size(), chunks, rank());
  return runner_->run(plan, *transport_, data, CodecParams{dtype, op, 0});
}

}  // namespace cerar
