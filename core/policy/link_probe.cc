#include "core/policy/link_probe.h"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

#include "ops/codec/codec.h"
#include "ops/codec/wire.h"
#include "ops/algorithms/plan.h"
#include "ops/collectives.h"
#include "common/error.h"
#include "ops/communicator.h"
#include "ops/executor.h"
#include "ops/hierarchical.h"
#include "ops/paced_link.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

// Windows tried against the free stream. 32-64 KiB keep a ring link's traffic within a few
// milliseconds' queue at 100-200 Mbit/s.
constexpr size_t kProbedWindows[] = {32u << 10, 64u << 10};
constexpr size_t kTrialBytes = 2u << 20;
constexpr size_t kFirstRoundBytes = 1u << 10;
constexpr size_t kLastRoundBytes = 1u << 20;
constexpr double kBytesBound = 1.2;

// One ring round of out.size() bytes: receive from prev while sending to next, as the plans
// do. Whole (the default) or as the executor streams it: in segments, through the window.
double rawRoundSeconds(Transport& t, std::vector<std::byte>& out, std::vector<std::byte>& in,
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

// TCP segments this process's sockets have retransmitted so far (Linux's tcpi_total_retrans
// of every TCP socket it holds; 0 where it holds none, as over shared memory).
uint64_t retransmittedSegments() {
  uint64_t total = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  while (const dirent* entry = readdir(dir)) {
    const int fd = std::atoi(entry->d_name);
    tcp_info info{};
    socklen_t length = sizeof(info);
    if (fd > 2 && getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) == 0)
      total += info.tcpi_total_retrans;
  }
  closedir(dir);
  return total;
}

// The fastest of a few rounds: the others are delayed by scheduling noise, not the link.
double fastestRound(Transport& t, size_t bytes, int repeats) {
  std::vector<std::byte> out(bytes), in(bytes);
  rawRoundSeconds(t, out, in);  // warm-up: connections, allocations
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) best = std::min(best, rawRoundSeconds(t, out, in));
  return best;
}

// One choice's runs at a probe point: `runs` runs of `plan` back to back per timing.
struct Trial {
  Plan plan;
  CodecParams params;
  std::vector<float> data;
  int runs = 1;
  int rounds = 1;  // per run
  double best = 1e30;  // seconds per round, the fastest timing
};

void timeTrial(Transport& t, Executor& executor, Trial& trial) {
  std::fill(trial.data.begin(), trial.data.end(), 0.0f);
  const auto start = Clock::now();
  for (int run = 0; run < trial.runs; ++run)
    executor.run(trial.plan, t, trial.data.data(), trial.params);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  trial.best = std::min(trial.best, seconds / (trial.runs * trial.rounds));
}

// CERAR's trial of `bytes`-byte messages: c + N - 2 rounds, c = rN, r from 2 to 64/N (about
// 1 MiB of data). Round t+1 of a segment waits for its round t only, so a stream of short
// messages costs a per-round floor that one lock-step round does not show (N=4 and 8 on 2
// cores at 200 Mbit/s: 200-430 us per round up to 4 KiB messages, against 60-145 us for an
// 8-byte lock-step round; with that alpha, auto chose c = 344 for 64 MiB at N=8 where 1024 was
// faster).
Trial cerarTrial(int N, int rank, size_t bytes) {
  const int r = std::clamp(int((size_t(1) << 20) / (bytes * N)), 2, std::max(2, 64 / N));
  const int c = r * N;
  const size_t elements = bytes / sizeof(float) * c;
  return {makeCerarPlan(N, c, elements, rank),
          {DType::kFloat32, ReduceOp::kSum, defaultEps(DType::kFloat32)},
          std::vector<float>(elements), 1, c + N - 2};
}

// The exact ring's trial of `bytes`-byte messages (float32, or fp16 on the wire: then `bytes`
// is the 16-bit message): its adds, casts and packing as they run, runs of 2(N-1) rounds back
// to back, as many as fit in `rounds` (CERAR's trial's), at least one: short messages then see
// the machine about as long as CERAR's trial, and long ones send no more than it (matching
// its rounds instead took 7 of a 10.7 s probe at N=8 on loaded 1 Gbit/s links).
Trial ringTrial(int N, int rank, size_t bytes, Wire wire, int rounds) {
  const size_t elements = bytes / (wire == Wire::kNone ? sizeof(float) : 2) * size_t(N);
  const int perRun = 2 * (N - 1);
  return {makeRingPlan(N, elements, rank), {DType::kFloat32, ReduceOp::kSum, 0, wire},
          std::vector<float>(elements), std::max(1, rounds / perRun), perRun};
}

// Times CERAR's trial twice back to back (so that CERAR's points, c and where the sizes stop
// do not depend on the rings' trials), then each ring's (the fp16 wire's only with `wires`)
// twice; the fastest of each. Interleaving them instead left each
// CERAR timing behind a ring's, slower than back to back: on loaded 1 Gbit/s links at N=8
// the sizes ran on to 1 MiB where they had stopped at 16 KiB. `ringTime` adds the rings'
// share of the time.
void timeTrials(Transport& t, Executor& executor, Trial (&trials)[3], bool wires,
                double& ringTime) {
  for (int rep = 0; rep < 2; ++rep) timeTrial(t, executor, trials[0]);
  const auto start = Clock::now();
  for (int k = 1; k < (wires ? 3 : 2); ++k)
    for (int rep = 0; rep < 2; ++rep) timeTrial(t, executor, trials[k]);
  ringTime += std::chrono::duration<double>(Clock::now() - start).count();
}

// Seconds per round of CERAR, the exact ring and the fp16 wire ring (with `wires`, else 0) at
// one message size.
std::array<double, 3> probePoint(Transport& t, Executor& executor, size_t bytes, bool wires,
                                 double& ringTime) {
  const int N = t.size();
  Trial trials[3] = {cerarTrial(N, t.rank(), bytes), {}, {}};
  trials[1] = ringTrial(N, t.rank(), bytes, Wire::kNone, trials[0].rounds);
  if (wires) trials[2] = ringTrial(N, t.rank(), bytes, Wire::kFloat16, trials[0].rounds);
  timeTrials(t, executor, trials, wires, ringTime);
  return {trials[0].best, trials[1].best, wires ? trials[2].best : 0};
}

// A shorter message never costs more, and noise only adds time: a point above a later one
// was delayed, and takes the later one's time.
void makeMonotone(std::vector<LinkModel::RoundPoint>& points) {
  for (size_t i = points.size(); i-- > 1;)
    points[i - 1].seconds = std::min(points[i - 1].seconds, points[i].seconds);
}

// Rank 0's choice, on every rank: all take the same branch.
uint8_t rankZeroChoice(Transport& t, uint8_t mine) {
  return treeBroadcastBytes(t, {mine}, kDefaultControlFanout).at(0);
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

std::vector<size_t> probeMessageSizes(size_t segmentBytes) {
  std::vector<size_t> sizes;
  for (size_t bytes = kFirstRoundBytes; bytes <= kLastRoundBytes; bytes *= 4)
    sizes.push_back(bytes);
  if (segmentBytes > kFirstRoundBytes && segmentBytes < kLastRoundBytes &&
      !std::binary_search(sizes.begin(), sizes.end(), segmentBytes)) {
    sizes.insert(std::upper_bound(sizes.begin(), sizes.end(), segmentBytes), segmentBytes);
  }
  return sizes;
}

std::vector<double> slowestOverRanks(Transport& t, std::vector<double> values) {
  std::vector<uint8_t> mine(values.size() * sizeof(double));
  std::memcpy(mine.data(), values.data(), mine.size());
  const auto slowest = [&](std::vector<uint8_t>& into, const std::vector<uint8_t>& theirs) {
    CERAR_ENFORCE(theirs.size() == into.size(), "link probe: ranks disagree on the figures");
    for (size_t i = 0; i < values.size(); ++i) {
      double a, b;
      std::memcpy(&a, into.data() + i * sizeof(double), sizeof(double));
      std::memcpy(&b, theirs.data() + i * sizeof(double), sizeof(double));
      a = std::max(a, b);
      std::memcpy(into.data() + i * sizeof(double), &a, sizeof(double));
    }
  };
  mine = treeAllreduceBytes(t, std::move(mine), kDefaultControlFanout, slowest);
  std::memcpy(values.data(), mine.data(), mine.size());
  return values;
}

bool cpuBoundStream(const WindowTrial& trial) {
  // Past 100 MB/s (0.8 Gbit/s). Free trials on 4 one-rank namespaces on unshaped veth, 2
  // cores: 136-176 MB/s; at 1 Gbit/s (tbf): 54-62 MB/s (docs/pacing.md, "Who chooses").
  return double(trial.bytes) / trial.freeSeconds > 100e6;
}

bool windowWorthIt(const WindowTrial& trial) {
  // Measurably slower than none: a free stream's losses grow with its length beyond what a
  // short trial shows (N=8 at 200 Mbit/s: 2 MiB trials within 3 %, 64 MiB runs 20-30 % slower
  // free; with a 2 % tolerance one probe in three kept none), while a window too small for the
  // links shows at once.
  constexpr double kTolerance = 0.05;
  // Fewer retransmitted segments than this: the free stream overfilled no queue (unshaped veth,
  // 8 ranks on 2 cores, under 100 MB/s for the CPU: 0-1; tbf at 200 Mbit/s and
  // 1 Gbit/s: 29-298 over the two free trials).
  constexpr uint64_t kLostSegments = 8;
  return trial.windowSeconds <= (1 + kTolerance) * trial.freeSeconds &&
         !cpuBoundStream(trial) && trial.freeRetransmitted >= kLostSegments;
}

LinkModel probeLink(Transport& t, double* ownRoundsSeconds, bool wires) {
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
  uint64_t freeLost = 0;  // segments the free trials retransmitted
  for (int rep = 0; rep < 2; ++rep) {
    for (size_t i = 0; i <= kWindows; ++i) {
      const Pacing pacing = i == 0 ? Pacing{} : pacingFor(kProbedWindows[i - 1]);
      const uint64_t before = i == 0 ? retransmittedSegments() : 0;
      trial[i] = std::min(trial[i], rawRoundSeconds(t, out, in, pacing));
      if (i == 0) freeLost += retransmittedSegments() - before;
    }
  }
  size_t fastest = size_t(std::min_element(trial + 1, trial + kWindows + 1) - trial);
  const WindowTrial measured{kTrialBytes, trial[0], trial[fastest], freeLost};
  if (!windowWorthIt(measured)) fastest = 0;  // none
  // Rank 0's window, and its verdict on what bounds the links (the top bit), in one byte.
  const uint8_t choice = rankZeroChoice(t, uint8_t(fastest | cpuBoundStream(measured) << 7));
  fastest = choice & 0x7f;
  link.cpuBound = (choice & 0x80) != 0;
  const double longRound = trial[fastest];
  if (fastest > 0) link.windowBytes = double(kProbedWindows[fastest - 1]);
  link.beta = std::max((longRound - link.alpha) / kTrialBytes, 1e-12);
  // CERAR rounds of 1 KiB messages up, as the runtime will stream them, until they cost no
  // more than 1.2 times their bytes at the long round's rate (beyond, the last point's rate
  // holds) or 1 MiB: where the per-round floor gives way to the bytes, c is best.
  const Pacing pacing = pacingFor(size_t(link.windowBytes), link.cpuBound);
  Executor executor(pacing);
  double choices = 0;  // seconds spent on the rings' own rounds
  probePoint(t, executor, kFirstRoundBytes, wires, choices);  // warm-up: the executor's buffers
  choices = 0;
  for (size_t bytes : probeMessageSizes(pacing.segmentBytes)) {
    // The same messages on CERAR, the exact ring and the fp16 wire ring: each choice's own cost.
    const auto [cerar, ring, wire] = probePoint(t, executor, bytes, wires, choices);
    link.rounds.push_back({double(bytes), cerar});
    link.ringRounds.push_back({double(bytes), ring});
    if (wires) link.wireRounds.push_back({double(bytes), wire});
    if (rankZeroChoice(t, cerar <= kBytesBound * bytes * link.beta)) break;
  }
  link.gamma = codecSecondsPerByte();
  link.gammaWire = wireSecondsPerByte();

  // Every rank adopts the slowest rank's figures (rank 0's window).
  std::vector<double> values = {link.alpha, link.beta, link.gamma, link.gammaWire};
  for (const auto* curve : {&link.rounds, &link.ringRounds, &link.wireRounds})
    for (const auto& point : *curve) values.push_back(point.seconds);
  values = slowestOverRanks(t, values);
  link.alpha = values[0];
  link.beta = values[1];
  link.gamma = values[2];
  link.gammaWire = values[3];
  size_t next = 4;
  for (auto* curve : {&link.rounds, &link.ringRounds, &link.wireRounds}) {
    for (auto& point : *curve) point.seconds = values[next++];
    makeMonotone(*curve);
  }
  if (ownRoundsSeconds) *ownRoundsSeconds = choices;
  return link;
}

void probeLocalStep(const std::shared_ptr<Transport>& local, Transport& job, LinkModel& link) {
  const int L = local->size();
  Communicator communicator(local);
  const auto seconds = [&](size_t bytes) {
    std::vector<float> buffer(bytes / sizeof(float), 1.0f);
    const std::vector<size_t> slices = hierarchicalSlices(buffer.size(), L);
    std::vector<size_t> blockBytes;
    for (size_t slice : slices) blockBytes.push_back(slice * sizeof(float));
    double best = 1e9;
    for (int trial = 0; trial < 3; ++trial) {
      const auto start = Clock::now();
      communicator.reduceScatter(buffer.data(), slices, DType::kFloat32, ReduceOp::kSum);
      ringAllgather(*local, buffer.data(), blockBytes);
      best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    }
    return best;
  };
  const double small = 16 << 10, large = 4 << 20;
  const double tSmall = seconds(size_t(small)), tLarge = seconds(size_t(large));
  // t(d) = 2(L-1) (alpha + d/L beta), from the two sizes.
  const double rounds = 2.0 * (L - 1);
  const double beta = std::max(0.0, (tLarge - tSmall) / (rounds * (large - small) / L));
  const double alpha = std::max(0.0, tSmall / rounds - small / L * beta);
  const std::vector<double> slowest = slowestOverRanks(job, {alpha, beta});
  link.localAlpha = slowest[0];
  link.localBeta = slowest[1];
}

}  // namespace cerar
