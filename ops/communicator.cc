#include "ops/communicator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ops/agreement.h"
#include "ops/algorithms/share_correction.h"
#include "ops/codec/int8_wire.h"
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

RunStats Communicator::allreduce(void* data, size_t count, DType dtype,
                                 const AllreduceOptions& options) {
  const int N = size();
  int c = N;
  double eps = 0;
  CERAR_CHECK_ARGUMENT(options.algorithm != Algorithm::kAdasum, "rank ", rank(),
                       ": Adasum runs by AdasumRunner (ops/adasum_run.h), not a Communicator");
  if (options.algorithm == Algorithm::kCerar) {
    CERAR_CHECK_ARGUMENT(isCerarDType(dtype), "rank ", rank(),
                                ": CERAR supports f32 and f64, got ", dtypeName(dtype),
                                " (use the exact ring)");
    CERAR_CHECK_ARGUMENT(options.op == ReduceOp::kSum, "rank ", rank(),
                                ": CERAR is linear and only sums; ", reduceOpName(options.op),
                                " needs the exact ring");
    c = options.components == 0 ? 4 * N : options.components;
    const Status invalid = validateCerarParameters(N, c);
    CERAR_CHECK_ARGUMENT(invalid.ok(), "rank ", rank(), ": ", invalid.message);
    eps = options.eps == 0 ? defaultEps(dtype) : options.eps;
    CERAR_CHECK_ARGUMENT(std::isfinite(eps) && eps > 0, "rank ", rank(),
                                ": eps must be positive and finite, got ", eps);
  }
  CERAR_CHECK_ARGUMENT(data != nullptr || count == 0, "rank ", rank(), ": null buffer");
  const bool sixteenBit = isSixteenBitFloat(dtype);
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
  // CERAR mixes each element with those at its offset in the other slices of its chunk
  // (cerar-protocol.md); a NaN or an overflow would spread to them, so such a buffer takes the
  // exact ring on every rank. c = N is the ring itself, and N = 1 has no rounds.
  const auto start = std::chrono::steady_clock::now();
  bool cerar = options.algorithm == Algorithm::kCerar;
  const bool check = testsCerarRange(options, N);
  const bool mine = check && (options.beyondCerarRange.has_value()
                                  ? *options.beyondCerarRange
                                  : runner_->beyondCerarRange(*transport_, data, count, dtype));
  bool fallback = false;
  // Without a parameter agreement to ride on, the verdict rides on the run itself.
  const bool inBand = check && !options.verifyParameters;
  if (options.verifyParameters) {
    ParameterRecord record;
    record.size = N;
    record.components = c;
    record.algorithm = static_cast<uint8_t>(options.algorithm);
    record.dtype = static_cast<uint8_t>(dtype);
    record.op = static_cast<uint8_t>(options.op);
    record.elements = count;
    record.eps = eps;
    // Only CERAR with r > 1 exchanges the verdict, so only there must the ranks agree on it;
    // the verdict itself rides on the record.
    record.exactOnNonFinite = check ? 1 : 0;
    record.beyondCerarRange = mine ? 1 : 0;
    record.wire = static_cast<uint8_t>(options.wire);
    fallback = agreeOnParameters(*transport_, record);
  }
  Wire wire = options.wire;
  bool wireFallback = false;
  // 16-bit data rides the int8 wire as float32 (the wire adds in float32 anyway); where the
  // wire falls back, the data's own exact ring runs instead.
  void* const original = data;
  const Wire cast = dtype == DType::kFloat16 ? Wire::kFloat16 : Wire::kBFloat16;
  const bool widen = sixteenBit && wire == Wire::kInt8 && N > 1;
  if (widen) {
    widened_.resize(count);
    codec::decodeWire(cast, static_cast<const uint16_t*>(data), widened_.data(), count);
    data = widened_.data();
  }
  if (wire == Wire::kFloat16 && options.fp16Guard && N > 1) {
    const uint8_t bits =
        orAcrossRanks(*transport_, codec::fp16GuardBits(static_cast<const float*>(data), count, N));
    wireFallback = !codec::fp16GuardPasses(bits);
    if (wireFallback) wire = Wire::kNone;
  }
  // The int8 wire cannot carry inf or NaN (its block would decode as NaN): always guarded.
  if (wire == Wire::kInt8 && N > 1) {
    wireFallback = orAcrossRanks(*transport_, codec::int8GuardBits(static_cast<const float*>(data),
                                                                   count, N)) != 0;
    if (wireFallback) wire = Wire::kNone;
  }
  if (widen && wireFallback) data = original;
  if (sixteenBit && data == original) wire = Wire::kNone;  // one rank, or the fallback
  const DType runType = data == original ? dtype : DType::kFloat32;
  // Error feedback: an element no lossy encoding touched lost nothing.
  if (options.lost != nullptr) std::fill(options.lost, options.lost + count, 0.0f);
  const CodecParams params{runType, options.op, eps, wire,
                           wire == Wire::kNone ? nullptr : options.lost};
  RunStats stats;
  if (inBand) {
    stats = runner_->runUnlessAnyRank(planFor(Algorithm::kCerar, c, count), *transport_, data,
                                      params, mine);
    fallback = stats.nonFiniteFallback;
  }
  if (fallback) {
    cerar = false;
    c = N;
  }
  if (!inBand || fallback) {
    // A stopped CERAR run sent its first rounds: they count.
    const RunStats stopped = stats;
    stats = runner_->run(planFor(cerar ? Algorithm::kCerar : Algorithm::kRing, c, count),
                         *transport_, data, params);
    stats.bytesSent += stopped.bytesSent;
    stats.bytesReceived += stopped.bytesReceived;
  }
  if (data != original) {
    codec::encodeWire(cast, widened_.data(), static_cast<uint16_t*>(original), count);
  }
  stats.nonFiniteFallback = fallback;
  stats.wireFallback = wireFallback;
  if (cerar && options.shareCorrection) {
    applyShareCorrection(Layout(N, c, count), rank(), eps, dtype, data);
  }
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
