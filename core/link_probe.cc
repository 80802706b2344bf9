#include "core/link_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "ops/codec/codec.h"
#include "ops/codec/wire.h"
#include "ops/collectives.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

// One ring round: receive from prev while sending to next, as the plans do.
double ringRoundSeconds(Transport& t, std::vector<std::byte>& out, std::vector<std::byte>& in) {
  const auto start = Clock::now();
  t.postRecv(t.prev(), in.data(), in.size());
  t.postSend(t.next(), out.data(), out.size());
  t.waitRecv(t.prev());
  t.waitSend(t.next());
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The fastest of a few rounds: the others are delayed by scheduling noise, not the link.
double fastestRound(Transport& t, size_t bytes, int repeats) {
  std::vector<std::byte> out(bytes), in(bytes);
  ringRoundSeconds(t, out, in);  // warm-up: connections, allocations
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) best = std::min(best, ringRoundSeconds(t, out, in));
  return best;
}

double codecSecondsPerByte() {
  constexpr size_t kElements = 1 << 18;  // 1 MiB of f32
  std::vector<float> y(kElements, 1.0f), g(kElements, 2.0f), msg(kElements);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    codec::accumulate(DType::kFloat32, ReduceOp::kSum, y.data(), g.data(), msg.data(), kElements);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best / (kElements * sizeof(float));
}

// A 16-bit wire hop per float32 byte: decode, add, encode (ops/codec/wire.h).
double wireSecondsPerByte() {
  constexpr size_t kElements = 1 << 18;
  std::vector<uint16_t> y(kElements, 0x3c00), out(kElements);
  std::vector<float> g(kElements, 2.0f);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    codec::accumulateWire(Wire::kFloat16, y.data(), g.data(), out.data(), kElements);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best / (kElements * sizeof(float));
}

}  // namespace

LinkModel probeLink(Transport& t) {
  LinkModel link;
  if (t.size() == 1) return link;
  constexpr size_t kLarge = 2u << 20;
  const double small = fastestRound(t, 8, 16);
  const double large = fastestRound(t, kLarge, 3);
  link.alpha = std::max(small, 1e-7);
  link.beta = std::max((large - small) / kLarge, 1e-12);
  link.gamma = codecSecondsPerByte();
  link.gammaWire = wireSecondsPerByte();

  // Every rank adopts rank 0's figures: selection must agree bit for bit across ranks.
  const double values[4] = {link.alpha, link.beta, link.gamma, link.gammaWire};
  std::vector<uint8_t> figures(sizeof values);
  std::memcpy(figures.data(), values, sizeof values);
  figures = broadcastBytes(t, figures, 0);
  double agreed[4];
  std::memcpy(agreed, figures.data(), sizeof agreed);
  LinkModel out{agreed[0], agreed[1], agreed[2]};
  out.gammaWire = agreed[3];
  return out;
}

}  // namespace cerar
