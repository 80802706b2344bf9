#include "core/link_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <vector>

#include "ops/codec/codec.h"
#include "ops/codec/wire.h"
#include "ops/collectives.h"
#include "ops/paced_link.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

// Windows tried against the free stream. 32-64 KiB keep a ring link's traffic within a few
// milliseconds' queue at 100-200 Mbit/s. The fastest window is kept unless it streams
// measurably slower than none: a free stream's losses grow with its length beyond what a short
// trial shows (N=8 at 200 Mbit/s: 2 MiB trials within 3 %, 64 MiB runs 20-30 % slower free;
// with a 2 % tolerance one runtime probe in three kept none), while a window too small for the
// links shows at once (on loopback none was kept at 5 %).
constexpr size_t kProbedWindows[] = {32u << 10, 64u << 10};
constexpr double kWindowTolerance = 0.05;
constexpr size_t kTrialBytes = 2u << 20;

// One ring round of out.size() bytes: receive from prev while sending to next, as the plans
// do. Whole (the default) or as the executor streams it: in segments, through the window.
double ringRoundSeconds(Transport& t, std::vector<std::byte>& out, std::vector<std::byte>& in,
                        const Pacing& pacing = {~size_t(0), 0}) {
  const size_t bytes = out.size(), segment = std::min(pacing.segmentBytes, bytes);
  const size_t segments = (bytes + segment - 1) / segment;
  PacedLink link(t, pacing.windowBytes);
  const auto start = Clock::now();
  for (size_t k = 0; k < segments; ++k)
    link.postRecv(in.data() + k * segment, std::min(segment, bytes - k * segment));
  for (size_t k = 0; k < segments; ++k)
    link.postSend(out.data() + k * segment, std::min(segment, bytes - k * segment));
  for (size_t k = 0; k < segments; ++k) link.waitRecv();
  for (size_t k = 0; k < segments; ++k) link.waitSend();
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
  // 16 KiB to 1 MiB, the messages of c from a few N to thousands at the sizes CERAR runs.
  double floor = link.alpha;  // rounds of longer messages take no less time
  for (size_t bytes = 16u << 10; bytes <= (1u << 20); bytes *= 4) {
    floor = std::max(floor, streamedRound(t, bytes));
    link.rounds.push_back({double(bytes), floor});
  }
  // A long round as the executor streams it, free and paced by each candidate window,
  // interleaved twice; the fastest of each. On links whose queues a free stream overfills, a
  // window streams faster (docs/pacing.md).
  constexpr size_t kWindows = std::size(kProbedWindows);
  double trial[kWindows + 1];
  std::fill(std::begin(trial), std::end(trial), 1e30);
  std::vector<std::byte> out(kTrialBytes), in(kTrialBytes);
  for (int rep = 0; rep < 2; ++rep) {
    for (size_t i = 0; i <= kWindows; ++i) {
      const Pacing pacing = i == 0 ? Pacing{} : pacingFor(kProbedWindows[i - 1]);
      trial[i] = std::min(trial[i], ringRoundSeconds(t, out, in, pacing));
    }
  }
  const size_t fastest = size_t(std::min_element(trial + 1, trial + kWindows + 1) - trial);
  double longRound = trial[0];
  if (trial[fastest] <= (1 + kWindowTolerance) * trial[0]) {
    longRound = trial[fastest];
    link.windowBytes = double(kProbedWindows[fastest - 1]);
  }
  const double perByte = std::max((longRound - link.alpha) / kTrialBytes, 1e-12);
  if (link.windowBytes > 0) {
    // Rounds longer than the window stream at the paced rate (at most their own measured time).
    for (auto& point : link.rounds) {
      if (point.bytes > link.windowBytes)
        point.seconds = std::min(point.seconds, link.alpha + point.bytes * perByte);
    }
  }
  link.rounds.push_back({double(kTrialBytes), std::max(link.rounds.back().seconds, longRound)});
  link.beta = perByte;
  link.gamma = codecSecondsPerByte();
  link.gammaWire = wireSecondsPerByte();

  // Every rank adopts rank 0's figures: selection must agree bit for bit across ranks.
  std::vector<double> values = {link.alpha, link.beta, link.gamma, link.gammaWire,
                                link.windowBytes};
  for (const auto& point : link.rounds) values.push_back(point.seconds);
  std::vector<uint8_t> figures(values.size() * sizeof(double));
  std::memcpy(figures.data(), values.data(), figures.size());
  figures = broadcastBytes(t, figures, 0);
  std::memcpy(values.data(), figures.data(), figures.size());
  link.alpha = values[0];
  link.beta = values[1];
  link.gamma = values[2];
  link.gammaWire = values[3];
  link.windowBytes = values[4];
  for (size_t i = 0; i < link.rounds.size(); ++i) link.rounds[i].seconds = values[5 + i];
  return link;
}

}  // namespace cerar
