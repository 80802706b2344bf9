// Gloo's own fp32-sum all-reduce (gloo::allreduce, RING or BCUBE), as the benchmarks run it.
#pragma once

#include <gloo/allreduce.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cerar::bench {

inline void sumFloats(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<float*>(out);
  auto* x = static_cast<const float*>(a);
  auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// In place on `data`. Each call takes a tag of its own: calls sharing slots with other
// algorithms on one context were seen to crawl.
inline void glooAllreduce(const std::shared_ptr<gloo::Context>& context, bool bcube,
                          float* data, size_t count, uint32_t tag) {
  gloo::AllreduceOptions options(context);
  options.setTag(tag);
  options.setAlgorithm(bcube ? gloo::AllreduceOptions::Algorithm::BCUBE
                             : gloo::AllreduceOptions::Algorithm::RING);
  options.setOutput(data, count);
  options.setReduceFunction(sumFloats);
  gloo::allreduce(options);
}

}  // namespace cerar::bench
