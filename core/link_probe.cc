#include "core/link_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <vector>

#include "ops/codec/codec.h"
#include "ops/codec/wire.h"
#include "ops/algorithms/plan.h"
#include "ops/collectives.h"
#include "ops/common/error.h"
#include "ops/communicator.h"
#include "ops/executor.h"
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
constexpr size_t kLastRoundBytes = 1u << 20;
constexpr double kBytesBound = 1.2;

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

// Seconds per round of a CERAR run whose messages are `bytes` long, as the executor streams
// it: the fastest of two runs of c + N - 2 rounds (c = rN, r from 2 to 64/N, about 1 MiB of
// data), arithmetic included. Round t+1 of a segment waits for its round t only, so a stream
// of short messages costs a per-round floor that one lock-step round does not show (N=4 and 8
// on 2 cores at 200 Mbit/s: 200-430 us per round up to 4 KiB messages, against 60-145 us for
// an 8-byte lock-step round; with that alpha, auto chose c = 344 for 64 MiB at N=8 where 1024
// was faster).
double cerarRoundSeconds(Transport& t, Executor& executor, size_t bytes) {
  const int N = t.size();
  const int r = std::clamp(int((size_t(1) << 20) / (bytes * N)), 2, std::max(2, 64 / N));
  const int c = r * N;
  std::vector<float> data(bytes / sizeof(float) * c);
  const Plan plan = makeCerarPlan(N, c, data.size(), t.rank());
  const CodecParams params{DType::kFloat32, ReduceOp::kSum, defaultEps(DType::kFloat32)};
  double best = 1e30;
  for (int run = 0; run < 2; ++run) {
    std::fill(data.begin(), data.end(), 0.0f);
    const auto start = Clock::now();
    executor.run(plan, t, data.data(), params);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best / (c + N - 2);
}

// Rank 0's choice, on every rank: all take the same branch.
uint8_t rankZeroChoice(Transport& t, uint8_t mine) {
  return broadcastBytes(t, {mine}, 0).at(0);
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
  size_t fastest = size_t(std::min_element(trial + 1, trial + kWindows + 1) - trial);
  if (trial[fastest] > (1 + kWindowTolerance) * trial[0]) fastest = 0;  // none
  fastest = rankZeroChoice(t, uint8_t(fastest));
  const double longRound = trial[fastest];
  if (fastest > 0) link.windowBytes = double(kProbedWindows[fastest - 1]);
  link.beta = std::max((longRound - link.alpha) / kTrialBytes, 1e-12);
  // CERAR rounds of 1 KiB messages up, as the runtime will stream them, until they cost no
  // more than 1.2 times their bytes at the long round's rate (beyond, the last point's rate
  // holds) or 1 MiB: where the per-round floor gives way to the bytes, c is best.
  Executor executor(link.windowBytes > 0 ? pacingFor(size_t(link.windowBytes)) : Pacing{});
  cerarRoundSeconds(t, executor, 1u << 10);  // warm-up: the executor's buffers
  for (size_t bytes = 1u << 10; bytes <= kLastRoundBytes; bytes *= 4) {
    const double seconds = cerarRoundSeconds(t, executor, bytes);
    link.rounds.push_back({double(bytes), seconds});
    if (rankZeroChoice(t, seconds <= kBytesBound * bytes * link.beta)) break;
  }
  // A shorter message never costs more, and noise only adds time: a point above a later one
  // was delayed, and takes the later one's time.
  for (size_t i = link.rounds.size() - 1; i-- > 0;)
    link.rounds[i].seconds = std::min(link.rounds[i].seconds, link.rounds[i + 1].seconds);
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


LinkSetup setUpLink(Transport& transport, const RuntimeConfig& config, const Logger& logger) {
  LinkSetup setup;
  LinkModel& link = setup.link;
  if (config.measureLink) link = probeLink(transport);
  if (const auto& figures = config.linkFigures) {
    link.alpha = (*figures)[0], link.beta = (*figures)[1], link.gamma = (*figures)[2];
    link.gammaWire = 0;  // twice the given gamma: a test's figures decide alone
  }
  // The model charges rounds by the segments the executor will stream.
  setup.pacing = pacingFor(size_t(link.windowBytes));
  link.segmentBytes = double(setup.pacing.segmentBytes);
  logger.log(LogLevel::kInfo, detail::concat("link model: alpha ", link.alpha * 1e6,
                                             " us, beta ", link.beta * 1e9, " ns/B, gamma ",
                                             link.gamma * 1e9, " ns/B, 16-bit wire ",
                                             link.gammaWire * 1e9, " ns/B, send window ",
                                             link.windowBytes / 1024, " KiB"));
  return setup;
}

}  // namespace cerar
