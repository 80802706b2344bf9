#include "ops/communicator.h"

#include <chrono>
#include <cmath>

#include "ops/agreement.h"
#include "ops/algorithms/share_correction.h"
#include "ops/common/error.h"

namespace cerar {

const char* algorithmName(Algorithm algorithm) {
  return algorithm == Algorithm::kRing ? "ring" : "cerar";
}

Algorithm parseAlgorithm(const std::string& name) {
  if (name == "ring") return Algorithm::kRing;
  if (name == "cerar") return Algorithm::kCerar;
  throw InvalidArgumentError("unknown algorithm '" + name + "' (expected ring or cerar)");
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
  if (options.verifyParameters) {
    ParameterRecord record;
    record.size = N;
    record.components = c;
    record.algorithm = static_cast<uint8_t>(options.algorithm);
    record.dtype = static_cast<uint8_t>(dtype);
    record.op = static_cast<uint8_t>(options.op);
    record.elements = count;
    record.eps = eps;
    agreeOnParameters(*transport_, record);
  }
  const Plan& plan = planFor(options.algorithm, c, count);
  CERAR_CHECK_ARGUMENT(!options.shareCorrection || runner_->hostMemory(), "rank ", rank(),
                       ": share-corrected decoding needs host memory");
  RunStats stats = runner_->run(plan, *transport_, data, CodecParams{dtype, options.op, eps});
  if (options.algorithm == Algorithm::kCerar && options.shareCorrection) {
    const auto start = std::chrono::steady_clock::now();
    applyShareCorrection(Layout(N, c, count), rank(), eps, dtype, data);
    stats.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return stats;
}

}  // namespace cerar
