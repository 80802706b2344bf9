// Runtime scenarios that every rank of a job runs, over threads (InprocHub) or forked
// processes (Gloo on loopback). A scenario returns a string summarising its rank's outcome
// (compared across ranks by the tests) and throws cerar::Error on a failed check.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "core/runtime.h"
#include "json_check.h"
#include "common/error.h"

namespace cerar::scenarios {

using namespace std::chrono_literals;
// Starts this rank's runtime with a config (the transport is the runner's).
using Starter = std::function<std::unique_ptr<Runtime>(RuntimeConfig)>;
using Scenario = std::function<std::string(int rank, const Starter& start)>;

template <typename... Parts>
void check(bool ok, const Parts&... parts) {
  if (!ok) throw Error(detail::concat(parts...));
}

// The status of a handle that must fail (ok if it did not).
inline Status outcome(const Handle& h) {
  try {
    h.wait();
  } catch (const Error& e) {
    return e.status();
  }
  return {};
}

// The error of a handle that must fail ("" if it did not).
inline std::string failure(const Handle& h) { return outcome(h).message; }

inline RuntimeConfig testConfig() {
  RuntimeConfig c;
  c.cycleTimeMs = 1;
  c.measureLink = false;
  c.timeoutSeconds = 20;
  return c;
}

template <typename T>
Tensor view(std::vector<T>& data, std::vector<int64_t> shape, DType dtype) {
  return Tensor{data.data(), dtype, std::move(shape), -1};
}
inline Tensor f32(std::vector<float>& v) { return view(v, {int64_t(v.size())}, DType::kFloat32); }

// Collects log lines (the stall inspector's warnings).
struct LogCapture {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(line);
    };
  }
  std::string find(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& line : lines) {
      if (line.find(needle) != std::string::npos) return line;
    }
    return "";
  }
};

// Every op kind, dtype family, scale factor, group, allgather with a zero-row rank,
// broadcast over several segments, barrier and an in-place reduce; all in flight at once.
inline std::string opsAndScales(int rank, const Starter& start) {
  auto rt = start(testConfig());
  const int N = rt->size();
  const float r1 = float(rank + 1);
  std::vector<float> sumIn(7, r1), sumOut(7), avgIn(5, 2 * r1), avgOut(5), minIn(3, r1),
      minOut(3), maxIn(3, r1), maxOut(3), scaled(4, r1), inPlace(6, r1);
  std::vector<double> f64In(9, r1), f64Out(9);
  std::vector<int32_t> i32In(4, rank), i32Out(4);
  std::vector<uint16_t> halfIn(5, 0x3c00), halfOut(5);  // f16 1.0
  std::vector<float> g1(3, r1), g2(5, 10 * r1);
  std::vector<Handle> handles = {
      rt->allreduce("sum", f32(sumIn), f32(sumOut), Op::kSum),
      rt->allreduce("avg", f32(avgIn), f32(avgOut), Op::kAverage),
      rt->allreduce("min", f32(minIn), f32(minOut), Op::kMin),
      rt->allreduce("max", f32(maxIn), f32(maxOut), Op::kMax),
      rt->allreduce("scaled", f32(scaled), f32(scaled), Op::kSum, 2.0, 0.5),
      rt->allreduce("inplace", f32(inPlace), f32(inPlace), Op::kSum),
      rt->allreduce("f64", view(f64In, {3, 3}, DType::kFloat64),
                    view(f64Out, {3, 3}, DType::kFloat64), Op::kAverage),
      rt->allreduce("i32", view(i32In, {4}, DType::kInt32), view(i32Out, {4}, DType::kInt32),
                    Op::kSum),
      rt->allreduce("f16", view(halfIn, {5}, DType::kFloat16),
                    view(halfOut, {5}, DType::kFloat16), Op::kSum),
      rt->groupedAllreduce({"g1", "g2"}, {f32(g1), f32(g2)}, {f32(g1), f32(g2)}, Op::kSum)};
  const int rows = rank == 1 ? 0 : rank + 1;
  std::vector<float> gatherIn(size_t(rows) * 2, float(rank));
  Handle gathered = rt->allgather("gather", view(gatherIn, {rows, 2}, DType::kFloat32));
  std::vector<float> small(1000, float(rank)), large(300000, float(rank));
  Handle b1 = rt->broadcast("bcast", f32(small), N - 1);
  Handle b2 = rt->broadcast("bcast-large", f32(large), 0);
  Handle barrier = rt->barrier();
  for (auto& h : handles) h.wait();
  gathered.wait();
  b1.wait();
  b2.wait();
  barrier.wait();

  const float total = float(N * (N + 1) / 2);
  check(sumOut[6] == total, "sum: ", sumOut[6], " != ", total);
  check(avgOut[0] == float(N + 1), "average: ", avgOut[0]);
  check(minOut[2] == 1 && maxOut[0] == float(N), "min/max: ", minOut[2], " ", maxOut[0]);
  check(scaled[3] == total, "pre/postscale: ", scaled[3]);
  check(inPlace[0] == total, "in place: ", inPlace[0]);
  check(f64Out[8] == double(N + 1) / 2, "f64 average: ", f64Out[8]);
  check(i32Out[1] == N * (N - 1) / 2, "i32: ", i32Out[1]);
  check(halfOut[4] == 0x4400 || N != 4, "f16 sum of 4 ones: bits ", halfOut[4]);
  check(g1[0] == total && g2[4] == 10 * total, "group: ", g1[0], " ", g2[4]);
  int64_t allRows = 0;
  for (int r = 0; r < N; ++r) allRows += r == 1 ? 0 : r + 1;
  check(gathered.outputShape() == std::vector<int64_t>{allRows, 2}, "allgather shape");
  const auto* out = reinterpret_cast<const float*>(gathered.output().data());
  size_t at = 0;
  for (int r = 0; r < N; ++r) {
    for (int i = 0; i < (r == 1 ? 0 : r + 1) * 2; ++i, ++at) {
      check(out[at] == float(r), "allgather row of rank ", r, ": ", out[at]);
    }
  }
  check(small[999] == float(N - 1) && large[299999] == 0, "broadcast");
  const RuntimeStats stats = rt->stats();
  rt->barrier().wait();
  rt->shutdown();
  return detail::concat("ok fused=", stats.fusedBuffers > 0);
}

// Each rank enqueues the same names in its own order, from two threads; results must match.
inline std::string outOfOrderMultiThreaded(int rank, const Starter& start) {
  auto rt = start(testConfig());
  const int N = rt->size(), kTensors = 64;
  std::vector<std::vector<float>> data(kTensors);
  std::vector<Handle> handles(kTensors);
  std::vector<int> order(kTensors);
  for (int i = 0; i < kTensors; ++i) order[i] = i, data[i].assign(17 + i, float(i + rank));
  std::shuffle(order.begin(), order.end(), std::mt19937(rank * 7919 + 1));
  auto submit = [&](int parity) {
    for (int k = parity; k < kTensors; k += 2) {
      const int i = order[k];
      handles[i] = rt->allreduce(detail::concat("t", i), f32(data[i]), f32(data[i]), Op::kSum);
      if (k % 8 == parity) std::this_thread::sleep_for(std::chrono::microseconds(300 * rank));
    }
  };
  std::thread other(submit, 1);
  submit(0);
  other.join();
  for (int i = 0; i < kTensors; ++i) {
    handles[i].wait();
    const float expected = float(N * i + N * (N - 1) / 2);
    check(data[i].back() == expected, "tensor ", i, ": ", data[i].back(), " != ", expected);
  }
  rt->barrier().wait();
  return "ok";
}

// The inputs of tensor `index` on `rank`: 1..64 elements, normally distributed.
inline std::vector<float> smallTensor(int rank, int index) {
  std::mt19937 gen(rank * 100003 + index);
  std::normal_distribution<float> normal(0.5f, 1.0f);
  std::vector<float> v(1 + index % 64);
  for (auto& x : v) x = normal(gen);
  return v;
}

// 1000 small tensors, fused and then unfused (a second runtime on the same links): both within
// the ring's rounding bound of an fp64 sum; returns a digest of the fused results, which must
// be bit-identical on every rank.
inline std::string fusedEqualsUnfused(int rank, const Starter& start) {
  constexpr int kTensors = 1000;
  int N = 0;
  auto reduceAll = [&](size_t threshold, RuntimeStats& stats) {
    RuntimeConfig config = testConfig();
    config.fusionThresholdBytes = threshold;
    config.algorithm = "ring";
    auto rt = start(config);
    N = rt->size();
    std::vector<std::vector<float>> data(kTensors);
    std::vector<Handle> handles;
    for (int i = 0; i < kTensors; ++i) {
      data[i] = smallTensor(rank, i);
      handles.push_back(rt->allreduce(detail::concat("s", i), f32(data[i]), f32(data[i]),
                                      Op::kSum));
    }
    for (auto& h : handles) h.wait();
    rt->barrier().wait();
    stats = rt->stats();
    rt->shutdown();
    return data;
  };
  RuntimeStats fusedStats, unfusedStats;
  auto fused = reduceAll(64u << 20, fusedStats);
  auto unfused = reduceAll(0, unfusedStats);
  check(fusedStats.fusedBuffers < 50, "fused run used ", fusedStats.fusedBuffers, " buffers");
  check(unfusedStats.fusedBuffers == kTensors, "unfused run used ", unfusedStats.fusedBuffers);
  const double u = std::ldexp(1.0, -24);
  uint64_t digest = 1469598103934665603ull;
  for (int i = 0; i < kTensors; ++i) {
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < N; ++r) inputs.push_back(smallTensor(r, i));
    for (size_t k = 0; k < fused[i].size(); ++k) {
      double exact = 0, magnitude = 0;
      for (int r = 0; r < N; ++r) exact += inputs[r][k], magnitude += std::fabs(inputs[r][k]);
      const double bound = (N - 1) * u * magnitude;
      check(std::fabs(fused[i][k] - exact) <= bound && std::fabs(unfused[i][k] - exact) <= bound,
            "tensor ", i, "[", k, "]: fused ", fused[i][k], ", unfused ", unfused[i][k],
            ", exact ", exact, ", bound ", bound);
      uint32_t bits;
      std::memcpy(&bits, &fused[i][k], 4);
      digest = (digest ^ bits) * 1099511628211ull;
    }
  }
  return detail::concat("digest ", digest);
}

// A steady loop: after the first step every unit is a cache hit.
inline std::string cacheHits(int rank, const Starter& start) {
  auto rt = start(testConfig());
  constexpr int kSteps = 10, kTensors = 20;
  std::vector<std::vector<float>> data(kTensors, std::vector<float>(8));
  for (int step = 0; step < kSteps; ++step) {
    std::vector<Handle> handles;
    for (int i = 0; i < kTensors; ++i) {
      std::fill(data[i].begin(), data[i].end(), float(rank + step));
      handles.push_back(rt->allreduce(detail::concat("c", i), f32(data[i]), f32(data[i]),
                                      Op::kSum));
    }
    for (auto& h : handles) h.wait();
  }
  rt->barrier().wait();  // counters are published after each cycle: read after a later one
  const RuntimeStats s = rt->stats();
  check(s.cacheMisses <= kTensors + 2, "misses ", s.cacheMisses);
  check(s.cacheHits >= (kSteps - 1) * kTensors, "hits ", s.cacheHits);
  rt->barrier().wait();
  return detail::concat("hits>=", (kSteps - 1) * kTensors);
}

// Rank r runs r + 2 steps, then joins: the others' collectives complete with the joined ranks
// contributing identities; average still divides by the full size.
inline std::string joinUneven(int rank, const Starter& start) {
  auto rt = start(testConfig());
  const int N = rt->size();
  for (int step = 0; step < rank + 2; ++step) {
    std::vector<float> ones(4, 1.0f), avgIn(4, 1.0f), avg(4), mins(4, float(rank + 1)), maxs(4, float(rank));
    Handle h1 = rt->allreduce("ones", f32(ones), f32(ones), Op::kSum);
    Handle h2 = rt->allreduce("avg", f32(avgIn), f32(avg), Op::kAverage);
    Handle h3 = rt->allreduce("min", f32(mins), f32(mins), Op::kMin);
    Handle h4 = rt->allreduce("max", f32(maxs), f32(maxs), Op::kMax);
    h1.wait(), h2.wait(), h3.wait(), h4.wait();
    const int active = N - std::max(0, step - 1);  // ranks r with r + 2 > step
    check(ones[0] == float(active), "step ", step, ": sum ", ones[0], " != ", active);
    check(avg[0] == float(active) / float(N), "step ", step, ": average ", avg[0]);
    check(mins[0] == float(std::max(step - 1, 0) + 1), "step ", step, ": min ", mins[0]);
    check(maxs[0] == float(N - 1), "step ", step, ": max ", maxs[0]);
  }
  Handle joined = rt->join();
  joined.wait();
  check(joined.lastJoinedRank() == N - 1, "last joined ", joined.lastJoinedRank());
  std::vector<float> after(3, 1.0f);
  rt->allreduce("after", f32(after), f32(after), Op::kSum).wait();
  check(after[0] == float(N), "after join: ", after[0]);
  rt->barrier().wait();
  return "last joined " + std::to_string(joined.lastJoinedRank());
}

// The timeline of a few operations parses as JSON and holds every phase.
inline std::string timeline(int rank, const Starter& start, const std::string& pattern) {
  auto rt = start(testConfig());
  rt->startTimeline(pattern);
  std::vector<float> a(100, 1), b(50, 2), rowsIn(3, 1);
  Handle h1 = rt->allreduce("grad/a", f32(a), f32(a), Op::kSum);
  Handle h2 = rt->allreduce("grad/b", f32(b), f32(b), Op::kSum);
  Handle h3 = rt->broadcast("weights", f32(b), 0);
  h1.wait(), h2.wait(), h3.wait();
  rt->allgather("rows", f32(rowsIn)).wait();
  rt->barrier().wait();
  rt->shutdown();
  std::string path = pattern;
  path.replace(path.find("{rank}"), 6, std::to_string(rank));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  testing::Json doc = testing::JsonParser(text.str()).parse();
  check(doc.type == testing::Json::kArray, "timeline is not an array");
  std::set<std::string> phases;
  bool algorithmArg = false;
  for (const auto& event : doc.items) {
    const auto* name = event.field("name");
    check(name && name->type == testing::Json::kString, "event without a name");
    if (event.field("ph")->text != "X") continue;
    phases.insert(name->text);
    if (name->text == "ALLREDUCE") {
      const auto* args = event.field("args");
      algorithmArg = args && args->field("algorithm") && args->field("c") &&
                     args->field("eps") && args->field("bytes");
    }
  }
  for (const char* phase :
       {"NEGOTIATE_ALLREDUCE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "ALLREDUCE",
        "MEMCPY_OUT_FUSION_BUFFER", "NEGOTIATE_BROADCAST", "BROADCAST", "CHAIN_BROADCAST",
        "ALLGATHER", "RING_ALLGATHER", "NEGOTIATE_BARRIER", "BARRIER"}) {
    check(phases.count(phase), "timeline lacks ", phase);
  }
  check(algorithmArg, "ALLREDUCE events lack algorithm, c, eps, bytes");
  return "ok";
}

// The last rank never submits `name`: rank 0 logs that it is missing, and past the shutdown
// time every submitter's handle fails naming it. With `cached`, every rank first runs the name
// twice: its holders then name it by held bits only (no rank by rank), so rank 0 calls the
// roll to learn who lacks it, and the job goes on after the stall.
inline std::string stallScenario(int rank, const Starter& start, const std::string& name,
                                 bool cached) {
  RuntimeConfig config = testConfig();
  config.stallCheckSeconds = 0.2;
  config.stallShutdownSeconds = 0.8;
  LogCapture log;
  config.logSink = log.sink();
  auto rt = start(config);
  const int N = rt->size();
  std::vector<float> v(2, 1);
  for (int step = 0; cached && step < 2; ++step) {
    check(outcome(rt->allreduce(name, f32(v), f32(v), Op::kSum)).ok(), "step ", step);
  }
  std::string result = "missing";
  if (rank == N - 1) {
    // Enter the barrier while the others still wait for `name`, but not so early that the
    // barrier itself would stall.
    std::this_thread::sleep_for(std::chrono::duration<double>(config.stallShutdownSeconds / 2 + 0.1));
  } else {
    const Status status = outcome(rt->allreduce(name, f32(v), f32(v), Op::kSum));
    const std::string& error = status.message;
    check(status.code == StatusCode::kTimeout && status.peer == N - 1, "stall status ",
          statusCodeName(status.code), " peer ", status.peer, ": ", error);
    check(error.find("'" + name + "' stalled") != std::string::npos &&
              error.find("ranks " + std::to_string(N - 1) + " have not submitted") !=
                  std::string::npos,
          "stall error: '", error, "'");
    check(!cached || rt->stats().cacheHits >= 1, "'", name, "' was not held by its slot");
    result = "failed";
  }
  rt->barrier().wait();
  if (rank == 0) {
    const std::string line = log.find("rank " + std::to_string(N - 1) + " is missing '" + name + "'");
    check(!line.empty(), "no stall warning naming rank ", N - 1);
    check(rt->stats().stallWarnings >= 1, "stall warnings not counted");
  }
  if (cached) {
    check(outcome(rt->allreduce(name, f32(v), f32(v), Op::kSum)).ok(), "after the stall");
  }
  rt->barrier().wait();
  return result;
}

inline std::string stallReport(int rank, const Starter& start) {
  return stallScenario(rank, start, "lonely", false);
}

inline std::string cachedStallReport(int rank, const Starter& start) {
  return stallScenario(rank, start, "steady", true);
}

// The same name with another shape on the last rank fails on every rank, at negotiation.
inline std::string mismatch(int rank, const Starter& start) {
  auto rt = start(testConfig());
  const int N = rt->size();
  rt->barrier().wait();  // start together, so the time below is the negotiation's
  std::vector<float> v(rank == N - 1 ? 5 : 4, 1.0f);
  const auto begin = std::chrono::steady_clock::now();
  const Status status = outcome(rt->allreduce("w", f32(v), f32(v), Op::kSum));
  const std::string& error = status.message;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  // The peer is the first rank seen to disagree with the first submitter: either side.
  check(status.code == StatusCode::kMismatch && status.peer >= 0 && status.peer < N,
        "mismatch status ", statusCodeName(status.code), " peer ", status.peer);
  check(error.find("mismatched tensor 'w'") != std::string::npos &&
            error.find("shape [4]") != std::string::npos &&
            error.find("shape [5]") != std::string::npos &&
            error.find("rank " + std::to_string(N - 1) + " submitted") != std::string::npos,
        "mismatch error: '", error, "'");
  check(seconds < 2.0, "mismatch took ", seconds, " s");
  // The runtime goes on.
  std::vector<float> ok(2, 1.0f);
  rt->allreduce("w", f32(ok), f32(ok), Op::kSum).wait();
  rt->barrier().wait();
  return error.substr(error.find("mismatched"));
}

// Rank 0 shuts down with an operation nobody else submitted: every rank's pending operation
// fails with the shut-down message, later ones at once; shutdown is idempotent.
inline std::string shutdownPending(int rank, const Starter& start) {
  auto rt = start(testConfig());
  rt->barrier().wait();
  std::vector<float> v(3, 1.0f);
  Handle pending = rt->allreduce("only-" + std::to_string(rank), f32(v), f32(v), Op::kSum);
  if (rank == 0) {
    std::this_thread::sleep_for(50ms);
    rt->shutdown();
  }
  const Status error = outcome(pending);
  check(error.code == StatusCode::kShutDown &&
            error.message.find("cerar has been shut down") != std::string::npos,
        "pending: '", error.message, "'");
  rt->shutdown();
  rt->shutdown();
  const Status later = outcome(rt->allreduce("later", f32(v), f32(v), Op::kSum));
  check(later.code == StatusCode::kShutDown, "later: '", later.message, "'");
  return "shut down";
}

}  // namespace cerar::scenarios
