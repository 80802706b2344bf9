// Algorithm selection per fused buffer: the exact ring or CERAR, and CERAR's c, from the
// alpha-beta cost model of cerar-protocol.md ("Choosing c"). Pure.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ops/communicator.h"

namespace cerar {

// Per-round costs of the links: latency alpha (s), wire time beta (s/byte), local arithmetic
// gamma (s/byte). The defaults are a 10 Gbit/s Ethernet guess, used until measured.
struct LinkModel {
  double alpha = 50e-6;
  double beta = 0.8e-9;
  double gamma = 0.2e-9;
  // The executor streams rounds in segments of this size (the pacing in force). Without
  // measured rounds a round's message of one to two segments is charged an idle segment, one
  // well under a segment its length (streamedRoundBytes); with them, a message longer than a
  // segment its segments whole (wholeSegmentBytes). 0 gives the spec's plain model.
  double segmentBytes = double(Executor::kDefaultSegmentBytes);
  // Per float32 byte, a 16-bit wire hop's decode, add and encode (the probe times it);
  // 0: twice gamma.
  double gammaWire = 0;
  // Per byte, the exact ring's add; 0: gamma. gamma is CERAR's codec (encode, decode, add):
  // where the CPU and not the link bounds a round, the ring's cheaper rounds win although it
  // sends about twice the bytes.
  double gammaRing = 0;
  // Seconds per round of CERAR runs of `bytes`-byte messages as the executor streamed them at
  // the probe (increasing bytes; arithmetic included). Where present it replaces alpha, beta
  // and the segment term: a stream of short messages costs a per-round floor that no lock-step
  // round shows (on the emulated cluster at 200 Mbit/s, 2 cores: 200-430 us per round at N=4
  // and 8 up to 4 KiB messages, then their bytes), which one alpha and one beta cannot
  // describe.
  struct RoundPoint {
    double bytes = 0;
    double seconds = 0;
  };
  std::vector<RoundPoint> rounds = {};
  // The exact ring's rounds, and the fp16 wire ring's (bytes: its 16-bit message), streamed
  // by the executor as CERAR's above: each choice's own curve, its own arithmetic included.
  // Where present, each replaces its choice's alpha, beta and gamma terms.
  std::vector<RoundPoint> ringRounds = {};
  std::vector<RoundPoint> wireRounds = {};
  // The send window the probe found to stream faster than none (ops/paced_link.h), 0 for
  // none; the rounds above were streamed through it.
  double windowBytes = 0;
  // The probe's free stream was faster than a queue-bound link carries: the CPU bounds these
  // links (link_probe.h, cpuBoundStream). The executor then posts receives in step.
  bool cpuBound = false;
  // Inside a host of a hierarchical job (ops/hierarchical.h): a local round's latency (s) and
  // per-byte cost of moving and adding (s/byte) over the host's links, shared memory where it
  // has them. The defaults are the shared-memory ring's on a small CPU host.
  double localAlpha = 5e-6;
  double localBeta = 0.3e-9;
};

struct SelectionPolicy {
  std::string algorithm = "auto";  // auto | ring | cerar
  int components = 0;              // forces c when > 0
  // Scales the model's c (autotuning, core/policy/autotune.h); the result is a multiple of N.
  double componentsScale = 1.0;
  double eps = 0;                  // 0: the spec's default per dtype
  // CERAR is approximate; take it only when it pays: buffers of at least this size, and a
  // predicted saving of at least minGain (a near tie is not worth the error).
  size_t minCerarBytes = 1u << 20;
  double minGain = 0.10;
  // Not selection but how a CERAR buffer is decoded and checked, carried with the policy to
  // the dispatcher: share-corrected decoding (CERAR_SHARE_CORRECTION), and a debug mode that
  // also runs the exact ring on a copy and records the measured error of CERAR and lossy wires.
  bool shareCorrection = false;
  bool measureError = false;
  // The lossy wire of float32 host sums that ask for none (CERAR_COMPRESSION=fp16|bf16|int8
  // without a budget).
  Wire wire = Wire::kNone;
  // CERAR_MAX_ERROR: > 0 makes auto choose within this error budget (core/policy/error_budget.h),
  // with the wires allowed below (CERAR_COMPRESSION=allow: both 16-bit ones, or those it lists).
  double maxError = 0;
  bool strictErrorBound = false;  // CERAR_ERROR_BOUND=strict: worst-case bounds, not calibrated
  bool allowFp16 = false;
  bool allowBf16 = false;
  bool allowInt8 = false;
  // CERAR_HIERARCHICAL_ALLREDUCE: "0" | "1" | "auto". Where the job is layered (more than one
  // host, as many ranks on each, more than one: core/config/host_topology.h), the host sums of
  // the whole job may run host by host (ops/hierarchical.h): "1" always, "auto" where the cost
  // model predicts it faster. `hosts` 1: the job is not layered.
  std::string hierarchical = "auto";
  int hosts = 1;
  int ranksPerHost = 1;
};

struct Selection {
  Algorithm algorithm = Algorithm::kRing;
  int components = 0;  // c (N for the ring)
  double eps = 0;      // 0 for the ring
  double predictedSeconds = 0;
  Wire wire = Wire::kNone;  // a lossy wire on the ring (the error budget's choice)
  bool budgeted = false;    // chosen within CERAR_MAX_ERROR
  double predictedError = 0;  // the bound of the choice (error budget only)
  // Host by host: algorithm, components and wire are the step across hosts (ops/hierarchical.h).
  bool hierarchical = false;
};

// The bytes a streamed round of an m-byte message costs on the wire, s the segment:
// m (1 + m/s) up to one segment, then max(m, 2s); m without segments.
double streamedRoundBytes(double m, const LinkModel& link);
// An m-byte message longer than a segment charged its segments whole (the last, partial one as
// a full one); m otherwise. transferSeconds applies it where rounds were measured.
double wholeSegmentBytes(double m, const LinkModel& link);
// Measured rounds (increasing bytes) interpolated linearly in wholeSegmentBytes(m): from
// alpha at 0 below the first, at the last's rate above the last.
double measuredRoundSeconds(double m, const std::vector<LinkModel::RoundPoint>& points,
                            const LinkModel& link);
// A round's transfer of an m-byte message: the probe's CERAR rounds (their arithmetic in them)
// by measuredRoundSeconds where measured, else alpha + streamedRoundBytes(m) beta.
double transferSeconds(double m, const LinkModel& link);
// The bytes a round's arithmetic is charged for: m with measured rounds, else
// streamedRoundBytes(m) (the spec's model with the streamed pipeline's idle link).
double arithmeticBytes(double m, const LinkModel& link);
// A round of an m-byte message, each choice by its own cost: its measured rounds where
// present (arithmetic included; the ring without its own takes CERAR's); else
// transferSeconds(m) + arithmeticBytes(m) times its per-byte CPU cost (gammaRing for the
// ring, gamma for CERAR).
double ringRoundSeconds(double m, const LinkModel& link);
double cerarRoundSeconds(double m, const LinkModel& link);
// T = 2(N-1) * ringRoundSeconds(m) with m = d/N, d in bytes.
double ringSeconds(int N, double bytes, const LinkModel& link);
// T(c) = (c+N-2) * cerarRoundSeconds(m) with m = d/c.
double cerarSeconds(int N, int c, double bytes, const LinkModel& link);
// With measured rounds, how far above the fastest modelled c bestComponents may go for fewer
// components.
constexpr double kComponentsTolerance = 0.005;
// The smallest multiple of N (>= N, <= min(max(N, elements), 16384)) with the lowest modelled
// time, within kComponentsTolerance of it where rounds were measured (without segments: next
// to sqrt((N-2) d (beta+gamma) / alpha)).
int bestComponents(int N, double bytes, size_t elements, const LinkModel& link);

// bestComponents' c times `scale`, rounded to a multiple of N within [N, max(N, elements)].
int scaledComponents(int N, int best, double scale, size_t elements);

// The choice for one buffer: the ring for N <= 2, min/max, and dtypes other than f32/f64, and
// for small buffers; CERAR where the model predicts a clear saving. A forced algorithm wins
// where CERAR can run at all (min/max and integer/half always take the ring).
Selection selectAlgorithm(int N, DType dtype, ReduceOp op, size_t elements,
                          const LinkModel& link, const SelectionPolicy& policy);

// The hierarchical all-reduce's step across hosts as the cost model sees it: the L rings of a
// host (one per local rank) share its link, so a round of m bytes on each costs what a round
// of L m bytes costs one ring.
LinkModel sharedHostLink(const LinkModel& link, int ranksPerHost);
// Its steps inside a host: a reduce-scatter and an all-gather of `bytes` among L ranks,
// 2(L-1) rounds of bytes/L.
double localSeconds(double bytes, int ranksPerHost, const LinkModel& link);

}  // namespace cerar
