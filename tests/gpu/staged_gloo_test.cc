// CERAR on device buffers over Gloo TCP (the "Gloo fallback for device tensors"): ranks are
// threads of one process sharing one GPU, each with a Gloo transport staged through pinned
// memory; every rank's result equals the host run's bit for bit.
#include <gtest/gtest.h>

#include <gloo/rendezvous/hash_store.h>

#include <cmath>

#include "ops/transport/gloo_tcp.h"
#include "tests/gpu/run_plans.h"

namespace cerar {
namespace {

using namespace testing;

TEST(StagedGloo, CerarOnDeviceBuffersMatchesTheHostRun) {
  CERAR_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const int N = 3, c = 6;
    const size_t d = 200003;
    const CodecParams params{dtype, ReduceOp::kSum,
                             std::ldexp(1.0, dtype == DType::kFloat32 ? -11 : -25)};
    const PlanFor planFor = [&](int rank) { return makeCerarPlan(N, c, d, rank); };
    const auto inputs = randomInputs(N, d, dtype, 42);
    const auto host = runOnHost(inputs, planFor, params);
    gloo::rendezvous::HashStore store;
    GlooOptions options;
    options.timeout = std::chrono::seconds(30);
    const auto device = runOnDevice(
        inputs, planFor, params,
        [&](int rank) -> std::unique_ptr<Transport> {
          return connectGloo(store, rank, N, options);
        },
        64 << 10);
    for (int rank = 0; rank < N; ++rank) {
      EXPECT_EQ(firstDifference(device[rank].data(), host[rank].data(), host[rank].size()), -1)
          << dtypeName(dtype) << " rank " << rank;
    }
  }
}

}  // namespace
}  // namespace cerar
