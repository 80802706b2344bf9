#include "tools/error_sample.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>

#include "ops/algorithms/plan.h"
#include "ops/codec/codec.h"
#include "ops/codec/int8_wire.h"
#include "common/error.h"

namespace cerar::errors {
namespace {

constexpr DataKind kKinds[] = {DataKind::kGaussian, DataKind::kMeanNoise,
                               DataKind::kHeavyTailed, DataKind::kSparse, DataKind::kGradients};

// A window of n elements of distinct rows (rows repeat only where N exceeds them).
std::vector<std::vector<float>> gradientWindows(const GradientSet& real, int N, size_t n,
                                                std::mt19937_64& rng) {
  CERAR_CHECK_ARGUMENT(real.rows > 0 && n <= real.length, "a gradient window of ", n,
                       " elements needs a stored set at least that long, have ", real.length);
  std::vector<size_t> rows(real.rows);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  const size_t offset = std::uniform_int_distribution<size_t>(0, real.length - n)(rng);
  std::vector<std::vector<float>> out(N);
  for (int i = 0; i < N; ++i) {
    const float* row = real.values.data() + rows[i % real.rows] * real.length + offset;
    out[i].assign(row, row + n);
  }
  return out;
}

// Messages of one round per rank: float32 values, or 16-bit wire values.
template <typename M>
using Messages = std::vector<std::vector<M>>;

void runCerarRound(const Round& round, double eps, const float* y, float* data,
                   std::vector<float>& msg) {
  msg.resize(round.message);
  const size_t n = round.message;
  const DType f32 = DType::kFloat32;
  switch (round.action) {
    case Action::kSendGradient:
      std::memcpy(msg.data(), data + round.grad.offset, n * sizeof(float));
      break;
    case Action::kAccumulate:
      codec::accumulate(f32, ReduceOp::kSum, y, data + round.grad.offset, msg.data(), n);
      break;
    case Action::kFinishFirst:
      codec::finishFirst(f32, ReduceOp::kSum, y, data + round.store.offset, n);
      std::memcpy(msg.data(), data + round.store.offset, n * sizeof(float));
      break;
    case Action::kFinishDecode:
      codec::finishDecode(f32, eps, y, data + round.previous.offset, data + round.store.offset,
                          n);
      std::memcpy(msg.data(), data + round.store.offset, n * sizeof(float));
      break;
    case Action::kStoreAndEncode:
      codec::storeAndEncode(f32, eps, y, data + round.grad.offset, std::min(n, round.grad.length),
                            data + round.store.offset, msg.data(), n);
      break;
    case Action::kStoreAndForward:
      codec::store(f32, y, data + round.store.offset, n);
      msg.assign(y, y + n);
      break;
  }
}

// The exact ring with 16-bit messages, as ops/wire_run.cc's codec: casts at every send, adds in
// float32, the owner keeping the decoded value of what it sends.
void runWireRound(const Round& round, Wire wire, const uint16_t* y, float* data,
                  std::vector<uint16_t>& msg, std::vector<float>& scratch) {
  const size_t n = round.message;
  msg.resize(n);
  switch (round.action) {
    case Action::kSendGradient:
      codec::encodeWire(wire, data + round.grad.offset, msg.data(), n);
      break;
    case Action::kAccumulate:
      codec::accumulateWire(wire, y, data + round.grad.offset, msg.data(), n);
      break;
    case Action::kFinishFirst: {
      float* sum = data + round.store.offset;
      scratch.resize(n);
      codec::decodeWire(wire, y, scratch.data(), n);
      for (size_t i = 0; i < n; ++i) sum[i] = scratch[i] + sum[i];
      codec::encodeWire(wire, sum, msg.data(), n);
      codec::decodeWire(wire, msg.data(), sum, n);
      break;
    }
    case Action::kStoreAndForward:
      codec::decodeWire(wire, y, data + round.store.offset, n);
      msg.assign(y, y + n);
      break;
    default:
      CERAR_ENFORCE(false, "a 16-bit wire runs the exact ring only, not ",
                    actionName(round.action));
  }
}

// The same with int8 messages (a scale per block, then the codes), as ops/wire_run.cc's codec.
void runInt8Round(const Round& round, const std::byte* y, float* data, std::vector<std::byte>& msg,
                  std::vector<float>& scratch) {
  const size_t n = round.message;
  msg.resize(codec::int8MessageBytes(n));
  switch (round.action) {
    case Action::kSendGradient:
      codec::encodeInt8(data + round.grad.offset, msg.data(), n);
      break;
    case Action::kAccumulate:
      codec::accumulateInt8(y, data + round.grad.offset, msg.data(), n);
      break;
    case Action::kFinishFirst: {
      float* sum = data + round.store.offset;
      scratch.resize(n);
      codec::decodeInt8(y, scratch.data(), n);
      for (size_t i = 0; i < n; ++i) sum[i] = scratch[i] + sum[i];
      codec::encodeInt8(sum, msg.data(), n);
      codec::decodeInt8(msg.data(), sum, n);
      break;
    }
    case Action::kStoreAndForward:
      codec::decodeInt8(y, data + round.store.offset, n);
      msg.assign(y, y + codec::int8MessageBytes(n));
      break;
    default:
      CERAR_ENFORCE(false, "the int8 wire runs the exact ring only, not ",
                    actionName(round.action));
  }
}

template <typename M, typename RunRound, typename StoreFinal>
void lockstep(const std::vector<Plan>& plans, std::vector<std::vector<float>>& buffers,
              RunRound runRound, StoreFinal storeFinal) {
  const int N = static_cast<int>(plans.size());
  Messages<M> arrived(N), sent(N);
  for (int t = 0; t < plans[0].numRounds(); ++t) {
    for (int rank = 0; rank < N; ++rank)
      runRound(plans[rank].rounds[t], arrived[rank].data(), buffers[rank].data(), sent[rank]);
    for (int rank = 0; rank < N; ++rank) std::swap(arrived[(rank + 1) % N], sent[rank]);
  }
  for (int rank = 0; rank < N; ++rank)
    storeFinal(arrived[rank].data(), buffers[rank].data() + plans[rank].finalStore.offset,
               plans[rank].finalStore.length);
}

}  // namespace

const char* dataKindName(DataKind kind) {
  switch (kind) {
    case DataKind::kGaussian: return "gaussian";
    case DataKind::kMeanNoise: return "mean+noise";
    case DataKind::kHeavyTailed: return "heavy-tailed";
    case DataKind::kSparse: return "sparse";
    case DataKind::kGradients: return "gradients";
  }
  return "?";
}

DataKind parseDataKind(const std::string& name) {
  for (DataKind kind : kKinds)
    if (name == dataKindName(kind)) return kind;
  CERAR_CHECK_ARGUMENT(false, "unknown data kind '", name,
                       "' (gaussian, mean+noise, heavy-tailed, sparse, gradients)");
  return DataKind::kGaussian;
}

GradientSet loadGradients(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CERAR_CHECK_ARGUMENT(in.good(), "cannot read gradients from ", path);
  char magic[8];
  in.read(magic, 8);
  CERAR_CHECK_ARGUMENT(in.good() && std::memcmp(magic, "\x93NUMPY", 6) == 0 && magic[6] == 1,
                       path, " is not a version 1 .npy file");
  uint16_t headerLength = 0;
  in.read(reinterpret_cast<char*>(&headerLength), 2);
  std::string header(headerLength, ' ');
  in.read(header.data(), headerLength);
  CERAR_CHECK_ARGUMENT(header.find("'<f4'") != std::string::npos &&
                           header.find("'fortran_order': False") != std::string::npos,
                       path, " must hold little-endian float32 in C order: ", header);
  GradientSet set;
  const size_t shape = header.find("'shape': (");
  CERAR_CHECK_ARGUMENT(shape != std::string::npos &&
                           std::sscanf(header.c_str() + shape, "'shape': (%zu, %zu)", &set.rows,
                                       &set.length) == 2,
                       path, " must hold a 2-D array: ", header);
  set.values.resize(set.rows * set.length);
  in.read(reinterpret_cast<char*>(set.values.data()), set.values.size() * sizeof(float));
  CERAR_CHECK_ARGUMENT(in.gcount() == std::streamsize(set.values.size() * sizeof(float)), path,
                       " is shorter than its shape");
  return set;
}

std::vector<std::vector<float>> sampleInputs(DataKind kind, int N, size_t n, uint64_t seed,
                                             const GradientSet* real) {
  std::mt19937_64 rng(seed);
  if (kind == DataKind::kGradients) {
    CERAR_CHECK_ARGUMENT(real != nullptr, "the gradients data kind needs a stored set");
    return gradientWindows(*real, N, n, rng);
  }
  std::normal_distribution<double> normal;
  std::student_t_distribution<double> student(2.5);  // finite mean, infinite fourth moment
  std::bernoulli_distribution present(0.1);
  std::vector<double> mean(n);
  if (kind == DataKind::kMeanNoise)
    for (auto& m : mean) m = normal(rng);
  std::vector<std::vector<float>> g(N, std::vector<float>(n));
  for (auto& rank : g) {
    for (size_t e = 0; e < n; ++e) {
      switch (kind) {
        case DataKind::kHeavyTailed: rank[e] = float(student(rng)); break;
        case DataKind::kSparse: rank[e] = present(rng) ? float(normal(rng)) : 0.0f; break;
        default: rank[e] = float(mean[e] + normal(rng)); break;
      }
    }
  }
  return g;
}

void runLockstep(std::vector<std::vector<float>>& buffers, const Choice& choice) {
  const int N = static_cast<int>(buffers.size());
  const size_t d = buffers[0].size();
  Wire wire = choice.wire;
  if (wire == Wire::kFloat16) {  // the budget's guard: data fp16 cannot carry takes float32
    uint8_t bits = 0;
    for (const auto& b : buffers) bits |= codec::fp16GuardBits(b.data(), d, N);
    if (!codec::fp16GuardPasses(bits)) wire = Wire::kNone;
  }
  if (wire == Wire::kInt8) {  // its guard: data int8 cannot carry takes float32
    uint8_t bits = 0;
    for (const auto& b : buffers) bits |= codec::int8GuardBits(b.data(), d, N);
    if (bits != 0) wire = Wire::kNone;
  }
  const bool ring = choice.c == N || choice.wire != Wire::kNone;
  std::vector<Plan> plans;
  for (int rank = 0; rank < N; ++rank)
    plans.push_back(ring ? makeRingPlan(N, d, rank) : makeCerarPlan(N, choice.c, d, rank));
  if (wire == Wire::kNone) {
    lockstep<float>(
        plans, buffers,
        [&](const Round& r, const float* y, float* data, std::vector<float>& msg) {
          runCerarRound(r, choice.eps, y, data, msg);
        },
        [](const float* y, float* out, size_t n) { std::copy(y, y + n, out); });
    return;
  }
  std::vector<float> scratch;
  if (wire == Wire::kInt8) {
    lockstep<std::byte>(
        plans, buffers,
        [&](const Round& r, const std::byte* y, float* data, std::vector<std::byte>& msg) {
          runInt8Round(r, y, data, msg, scratch);
        },
        [&](const std::byte* y, float* out, size_t n) { codec::decodeInt8(y, out, n); });
    return;
  }
  lockstep<uint16_t>(
      plans, buffers,
      [&](const Round& r, const uint16_t* y, float* data, std::vector<uint16_t>& msg) {
        runWireRound(r, wire, y, data, msg, scratch);
      },
      [&](const uint16_t* y, float* out, size_t n) { codec::decodeWire(wire, y, out, n); });
}

double relativeError(const std::vector<std::vector<float>>& inputs,
                     const std::vector<std::vector<float>>& results) {
  const size_t n = inputs[0].size();
  long double scale = 0, worst = 0;
  for (size_t e = 0; e < n; ++e) {
    long double sum = 0, magnitude = 0;
    for (const auto& g : inputs) {
      sum += g[e];
      magnitude += std::fabs(static_cast<long double>(g[e]));
    }
    scale = std::max(scale, magnitude);
    for (const auto& r : results) worst = std::max(worst, std::fabs(r[e] - sum));
  }
  return scale > 0 ? double(worst / scale) : 0.0;
}

double measureOnce(DataKind kind, int N, size_t n, const Choice& choice, uint64_t seed,
                   const GradientSet* real) {
  const auto inputs = sampleInputs(kind, N, n, seed, real);
  auto results = inputs;
  runLockstep(results, choice);
  return relativeError(inputs, results);
}

}  // namespace cerar::errors
