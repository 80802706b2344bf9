#include "ops/algorithms/adasum.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "ops/codec/half.h"
#include "common/error.h"

namespace cerar {

Status validateAdasumSize(int N) {
  if (N >= 1 && (N & (N - 1)) == 0) return {};
  return Status(StatusCode::kInvalidArgument,
                "Adasum needs a power-of-two number of ranks (1, 2, 4, 8, ...), this job has " +
                    std::to_string(N));
}

AdasumPlan makeAdasumPlan(int N, size_t d, int rank) {
  AdasumPlan plan;
  plan.N = N;
  plan.rank = rank;
  plan.d = d;
  Range held{0, d};
  for (int D = 1; D < N; D <<= 1) {
    AdasumLevel level;
    level.distance = D;
    level.partner = rank ^ D;
    level.lower = (rank & D) == 0;
    level.groupFirst = rank & ~(2 * D - 1);
    // Both ranks of the pair hold the same range here, so they split it alike.
    const Range first{held.offset, held.length / 2};
    const Range second{held.offset + first.length, held.length - first.length};
    level.keep = level.lower ? first : second;
    level.give = level.lower ? second : first;
    held = level.keep;
    plan.levels.push_back(level);
  }
  plan.owned = held;
  return plan;
}

std::vector<TensorPiece> tensorPieces(const std::vector<size_t>& sizes, Range range) {
  std::vector<TensorPiece> pieces;
  const size_t end = range.offset + range.length;
  size_t start = 0;
  for (size_t t = 0; t < sizes.size() && start < end; ++t) {
    const size_t lo = std::max(start, range.offset);
    const size_t hi = std::min(start + sizes[t], end);
    if (lo < hi) pieces.push_back(TensorPiece{t, Range{lo, hi - lo}});
    start += sizes[t];
  }
  return pieces;
}

AdasumCoefficients adasumCoefficients(double dot, double aNormSq, double bNormSq) {
  // |a.b| <= |a||b|, so dot / |a|^2 * a stays within |b|: no blow-up for a tiny nonzero a.
  AdasumCoefficients c;
  if (aNormSq > 0) c.a = 1.0 - dot / (2.0 * aNormSq);
  if (bNormSq > 0) c.b = 1.0 - dot / (2.0 * bNormSq);
  return c;
}

namespace {

template <typename T>
double load(const T* p, size_t i) {
  if constexpr (std::is_same_v<T, codec::Half> || std::is_same_v<T, codec::BFloat16>) {
    return codec::toFloat(p[i]);
  } else {
    return static_cast<double>(p[i]);
  }
}

template <typename T>
void store(T* p, size_t i, double v) {
  if constexpr (std::is_same_v<T, codec::Half> || std::is_same_v<T, codec::BFloat16>) {
    // Through float: the 16-bit value nearest the float nearest v (a double rounding that is
    // at most one 16-bit ulp away, well inside Adasum's own tolerance).
    p[i] = codec::fromFloat<T>(static_cast<float>(v));
  } else {
    p[i] = static_cast<T>(v);
  }
}

template <typename T>
void dots(const void* a, const void* b, size_t n, double* sums) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    const double u = load(x, i), v = load(y, i);
    dot += u * v;
    aa += u * u;
    bb += v * v;
  }
  sums[0] += dot;
  sums[1] += aa;
  sums[2] += bb;
}

template <typename T>
void combine(const void* a, const void* b, void* out, size_t n, const AdasumCoefficients& c) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) store(z, i, c.a * load(x, i) + c.b * load(y, i));
}

template <template <typename> class F, typename... Args>
void onDType(DType dtype, Args&&... args) {
  switch (dtype) {
    case DType::kFloat32: return F<float>::run(args...);
    case DType::kFloat64: return F<double>::run(args...);
    case DType::kFloat16: return F<codec::Half>::run(args...);
    case DType::kBFloat16: return F<codec::BFloat16>::run(args...);
    default:
      throw InvalidArgumentError(std::string("Adasum needs a floating-point dtype, got ") +
                                 dtypeName(dtype));
  }
}

template <typename T>
struct Dots {
  static void run(const void* a, const void* b, size_t n, double* sums) { dots<T>(a, b, n, sums); }
};
template <typename T>
struct Combine {
  static void run(const void* a, const void* b, void* out, size_t n,
                  const AdasumCoefficients& c) {
    combine<T>(a, b, out, n, c);
  }
};

}  // namespace

bool isAdasumDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

void addDotAndNorms(DType dtype, const void* a, const void* b, size_t n, double* sums) {
  onDType<Dots>(dtype, a, b, n, sums);
}

void adasumCombine(DType dtype, const void* a, const void* b, void* out, size_t n,
                   const AdasumCoefficients& c) {
  onDType<Combine>(dtype, a, b, out, n, c);
}

}  // namespace cerar
