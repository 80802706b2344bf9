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

// Seconds per round of back-to-back rounds of `bytes`-byte messages: at least two rounds and
// 2 MiB in all, after one warm-up round. A lock-step stream is what a CERAR or ring run puts
// on the links, and links that drop bursts show it only there. (With 1 and 4 MiB timed as
// single rounds, auto chose c = 64 for 64 MiB at N = 8 on the emulated cluster, 1.18x the
// time of the best c.)
double streamedRound(Transport& t, size_t bytes) {
  const int rounds = int(std::max<size_t>(2, (size_t(2) << 20) / bytes));
  std::vector<std::byte> out(bytes), in(bytes);
  ringRoundSeconds(t, out, in);
  const auto start = Clock::now();
  for (int r = 0; r < rounds; ++r) ringRoundSeconds(t, out, in);
  return std::chrono::duration<double>(Clock::now() - start).count() / rounds;
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
  link.alpha = std::max(fastestRound(t, 8, 16), 1e-7);
  // 16 KiB to 4 MiB, the messages of c from a few N to thousands at the sizes CERAR runs.
  double floor = link.alpha;  // rounds of longer messages take no less time
  for (size_t bytes = 16u << 10; bytes <= (4u << 20); bytes *= 4) {
    floor = std::max(floor, streamedRound(t, bytes));
    link.rounds.push_back({double(bytes), floor});
  }
  const auto& last = link.rounds.back();
  link.beta = std::max((last.seconds - link.alpha) / last.bytes, 1e-12);
  link.gamma = codecSecondsPerByte();
  link.gammaWire = wireSecondsPerByte();

  // Every rank adopts rank 0's figures: selection must agree bit for bit across ranks.
  std::vector<double> values = {link.alpha, link.beta, link.gamma, link.gammaWire};
  for (const auto& point : link.rounds) values.push_back(point.seconds);
  std::vector<uint8_t> figures(values.size() * sizeof(double));
  std::memcpy(figures.data(), values.data(), figures.size());
  figures = broadcastBytes(t, figures, 0);
  std::memcpy(values.data(), figures.data(), figures.size());
  link.alpha = values[0];
  link.beta = values[1];
  link.gamma = values[2];
  link.gammaWire = values[3];
  for (size_t i = 0; i < link.rounds.size(); ++i) link.rounds[i].seconds = values[4 + i];
  return link;
}

}  // namespace cerar
