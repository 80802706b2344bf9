#include "ops/algorithms/share_correction.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace cerar {
namespace {

double unitRoundoff(DType dtype) {
  return dtype == DType::kFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
}

template <typename T>
void correctChunk(const Layout& layout, int tau, int position, double eps, T* data) {
  const int N = layout.N();
  // The scale is rounded to T once, as the codec rounds eps: same arithmetic on every rank.
  const T share = static_cast<T>(eps * (position - 1) / N);
  for (int l = layout.r() - 2; l >= 0; --l) {
    const Range slice = layout.slice(tau, l);
    const Range next = layout.slice(tau, l + 1);
    // Slices are longer first: only the first len(slice l+1) elements carry contamination.
    const size_t n = next.length < slice.length ? next.length : slice.length;
    T* out = data + slice.offset;
    const T* corrected = data + next.offset;  // already corrected (walking backwards)
    for (size_t e = 0; e < n; ++e) out[e] = out[e] - share * corrected[e];
  }
}

}  // namespace

void applyShareCorrection(const Layout& layout, int rank, double eps, DType dtype, void* data) {
  CERAR_ENFORCE(isCerarDType(dtype), "share correction needs f32 or f64, got ",
                dtypeName(dtype));
  CERAR_ENFORCE(rank >= 0 && rank < layout.N(), "rank ", rank, " out of range");
  const int N = layout.N();
  if (N <= 2 || layout.r() < 2 || layout.d() == 0) return;  // no position j >= 2 or no loop
  for (int tau = 0; tau < N; ++tau) {
    const int position = ((rank - tau) % N + N) % N;
    if (position < 2) continue;  // the home and position 1 hold the home's values
    if (dtype == DType::kFloat32) {
      correctChunk(layout, tau, position, eps, static_cast<float*>(data));
    } else {
      correctChunk(layout, tau, position, eps, static_cast<double*>(data));
    }
  }
}

double predictedErrorBound(int N, int c, double eps, DType dtype) {
  const double u = unitRoundoff(dtype);
  if (N <= 1) return 0;
  if (c <= N) return (N - 1) * u;  // r = 1 is the exact ring: its rounding only
  return eps + (N - 1) * u / eps + (N + 1) * u;
}

double modelEps(int N, DType dtype) {
  const double ideal = std::sqrt(std::max(1, N - 1) * unitRoundoff(dtype));
  return std::ldexp(1.0, static_cast<int>(std::lround(std::log2(ideal))));
}

}  // namespace cerar
