// cerar-bench-scale: the negotiation's control traffic counted with N ranks as threads of this
// process over the in-process transport (docs/scale.md, "Simulated at 64 to 4096 ranks").
//
//   cerar-bench-scale [--ranks 4,8,16,32,64] [--rounds 5] [--tensors 4] [--elements 16]
//                     [--costs]
//
// Each rank runs `rounds` rounds of `tensors` all-reduces (the same names every round, so from
// the second round on every unit is cached) and checks every element against the exact sum.
// Per N one JSON line: rank 0's and the busiest worker's control messages and bytes per cycle
// (over the whole run, and over the cached rounds alone), cycles, wall and CPU time, and the
// process's CPU per control message sent in the cached rounds (every thread's: both ends of the
// message, the cycles' work, the small all-reduces; an upper bound of a message's cost). It reads
// only Runtime::stats(), so it counts whatever shape the negotiation has; CERAR_* knobs in the
// environment apply (RuntimeConfig::fromEnvironment), e.g. the cycle time.
// --costs: one more JSON line with what a start-up costs on this machine: a rendezvous store
// request (small value), the store's cost per byte of a large value, and a loopback TCP
// connect; bench/scale_model.py takes these figures.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "core/runtime.h"
#include "ops/transport/inproc.h"
#include "rendezvous/tcp_store.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds of this process, every thread (the runtimes' coordinators included).
double processCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return double(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct Options {
  std::vector<int> ranks = {4, 8, 16, 32, 64};
  int rounds = 5;
  int tensors = 4;
  int elements = 16;
  int idleMs = 200;
  bool costs = false;
};

std::vector<int> parseList(const std::string& text) {
  std::vector<int> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) values.push_back(std::stoi(item));
  return values;
}

Options parseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("cerar-bench-scale: " + arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--ranks") {
      o.ranks = parseList(value());
    } else if (arg == "--rounds") {
      o.rounds = std::stoi(value());
    } else if (arg == "--tensors") {
      o.tensors = std::stoi(value());
    } else if (arg == "--elements") {
      o.elements = std::stoi(value());
    } else if (arg == "--idle-ms") {
      o.idleMs = std::stoi(value());
    } else if (arg == "--costs") {
      o.costs = true;
    } else {
      throw Error("cerar-bench-scale: unknown argument " + arg);
    }
  }
  if (o.rounds < 2) throw Error("cerar-bench-scale: --rounds must be at least 2");
  return o;
}

// One rank's counters: after the first round (every unit then cached), after the last, after
// an idle wait (cycles with nothing to negotiate: the messages' own cost), and after shutdown.
struct RankCounts {
  RuntimeStats warm;
  RuntimeStats last;
  RuntimeStats idle;
  RuntimeStats end;
  std::string error;
};

// The process's CPU seconds where every rank has finished its first round, its last, and its
// idle wait: the cached rounds' and the idle cycles' CPU, without the runtimes' start.
struct CpuMarks {
  std::vector<double> seconds;
  void operator()() noexcept { seconds.push_back(processCpuSeconds()); }
};
using RankBarrier = std::barrier<std::reference_wrapper<CpuMarks>>;

// Tensor i of rank r holds r + 1 + i in every element: small integers, so the float sum is
// exact and the check can ask for equality.
void runRank(int rank, int size, const Options& o, InprocHub& hub, RankBarrier& marks,
             RankCounts& out) {
  RuntimeConfig config = RuntimeConfig::fromEnvironment();
  config.measureLink = false;  // the probe's traffic is not the negotiation's
  config.timeoutSeconds = std::max(config.timeoutSeconds, 600.0);  // many threads, 2 cores
  auto rt = Runtime::startWith(config, std::shared_ptr<Transport>(hub.connect(rank)));
  std::vector<std::vector<float>> data(size_t(o.tensors));
  for (int round = 0; round < o.rounds; ++round) {
    std::vector<Handle> handles;
    for (int i = 0; i < o.tensors; ++i) {
      auto& v = data[size_t(i)];
      v.assign(size_t(o.elements), float(rank + 1 + i));
      Tensor t{v.data(), DType::kFloat32, {int64_t(v.size())}, -1};
      handles.push_back(rt->allreduce("scale." + std::to_string(i), t, t, Op::kSum));
    }
    for (Handle& h : handles) h.wait();
    for (int i = 0; i < o.tensors; ++i) {
      const float exact = float(size) * float(size + 1) / 2 + float(size) * float(i);
      for (float x : data[size_t(i)]) {
        if (x != exact) {
          throw Error(detail::concat("cerar-bench-scale: rank ", rank, " round ", round,
                                     " tensor ", i, ": ", x, " instead of ", exact));
        }
      }
    }
    if (round == 0) {
      marks.arrive_and_wait();
      out.warm = rt->stats();
    }
  }
  out.last = rt->stats();
  marks.arrive_and_wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(o.idleMs));
  out.idle = rt->stats();
  marks.arrive_and_wait();
  rt->shutdown();  // every rank has run the same cycles now
  out.end = rt->stats();
}

struct PerCycle {
  double messages = 0;  // sent and received
  double bytes = 0;
};

PerCycle perCycle(const RuntimeStats& from, const RuntimeStats& to) {
  const double cycles = double(to.cycles - from.cycles);
  if (cycles <= 0) return {};
  return {double(to.controlMessagesSent + to.controlMessagesReceived -
                 from.controlMessagesSent - from.controlMessagesReceived) / cycles,
          double(to.controlBytesSent + to.controlBytesReceived - from.controlBytesSent -
                 from.controlBytesReceived) / cycles};
}

// The worker with the most messages per cycle (then bytes): in a star every worker alike, in
// a tree an inner rank with children.
int busiestWorker(const std::vector<RankCounts>& counts) {
  int best = -1;
  PerCycle bestLoad;
  for (int r = 1; r < int(counts.size()); ++r) {
    const PerCycle load = perCycle(RuntimeStats{}, counts[size_t(r)].end);
    if (best < 0 || load.messages > bestLoad.messages ||
        (load.messages == bestLoad.messages && load.bytes > bestLoad.bytes)) {
      best = r;
      bestLoad = load;
    }
  }
  return best;
}

void runSize(int size, const Options& o) {
  InprocHub hub(size, std::chrono::seconds(600));
  std::vector<RankCounts> counts(static_cast<size_t>(size));
  CpuMarks cpuMarks;
  RankBarrier marks(size, std::ref(cpuMarks));
  const double cpu0 = processCpuSeconds();
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        runRank(rank, size, o, hub, marks, counts[size_t(rank)]);
      } catch (const std::exception& e) {
        counts[size_t(rank)].error = e.what();
        hub.kill(rank);  // the others fail fast instead of waiting out their timeout
        marks.arrive_and_drop();
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = since(start), cpu = processCpuSeconds() - cpu0;
  for (int rank = 0; rank < size; ++rank) {
    if (!counts[size_t(rank)].error.empty()) {
      throw Error(detail::concat("N = ", size, ", rank ", rank, ": ",
                                 counts[size_t(rank)].error));
    }
  }
  uint64_t messagesSent = 0, cachedSent = 0, idleSent = 0;
  for (const RankCounts& c : counts) {
    if (c.end.cycles != counts[0].end.cycles) throw Error("cerar-bench-scale: cycles differ");
    messagesSent += c.end.controlMessagesSent;
    cachedSent += c.last.controlMessagesSent - c.warm.controlMessagesSent;
    idleSent += c.idle.controlMessagesSent - c.last.controlMessagesSent;
  }
  const std::vector<double>& cpuAt = cpuMarks.seconds;
  if (cpuAt.size() != 3) throw Error("cerar-bench-scale: the ranks missed a mark");
  const double cachedCpu = cpuAt[1] - cpuAt[0], idleCpu = cpuAt[2] - cpuAt[1];
  const RankCounts& root = counts[0];
  const uint64_t idleCycles = root.idle.cycles - root.last.cycles;
  const int busiest = size > 1 ? busiestWorker(counts) : 0;
  const RankCounts& worker = counts[size_t(busiest)];
  const PerCycle rootAll = perCycle({}, root.end), rootCached = perCycle(root.warm, root.last);
  const PerCycle workerAll = perCycle({}, worker.end);
  const PerCycle workerCached = perCycle(worker.warm, worker.last);
  const uint64_t rootMessages = root.end.controlMessagesSent + root.end.controlMessagesReceived;
  const uint64_t rootBytes = root.end.controlBytesSent + root.end.controlBytesReceived;
  std::printf(
      "{\"ranks\": %d, \"rounds\": %d, \"tensors\": %d, \"elements\": %d, \"cycles\": %llu, "
      "\"cached_cycles\": %llu, \"rank0_messages_per_cycle\": %.3f, "
      "\"rank0_bytes_per_cycle\": %.1f, \"rank0_cached_messages_per_cycle\": %.3f, "
      "\"rank0_cached_bytes_per_cycle\": %.1f, \"rank0_bytes_per_message\": %.1f, "
      "\"worker_max_rank\": %d, \"worker_max_messages_per_cycle\": %.3f, "
      "\"worker_max_bytes_per_cycle\": %.1f, \"worker_max_cached_messages_per_cycle\": %.3f, "
      "\"worker_max_cached_bytes_per_cycle\": %.1f, \"messages_sent_all_ranks\": %llu, "
      "\"cache_hits_rank0\": %llu, \"wall_s\": %.3f, \"cpu_s\": %.3f, "
      "\"cpu_us_per_message\": %.2f, \"idle_cycles\": %llu, \"idle_ms_per_cycle\": %.3f, "
      "\"idle_cpu_us_per_message\": %.2f}\n",
      size, o.rounds, o.tensors, o.elements, (unsigned long long)root.end.cycles,
      (unsigned long long)(root.last.cycles - root.warm.cycles), rootAll.messages, rootAll.bytes,
      rootCached.messages, rootCached.bytes,
      rootMessages ? double(rootBytes) / double(rootMessages) : 0.0, busiest, workerAll.messages,
      workerAll.bytes, workerCached.messages, workerCached.bytes,
      (unsigned long long)messagesSent, (unsigned long long)root.end.cacheHits, wall, cpu,
      cachedSent ? cachedCpu / double(cachedSent) * 1e6 : 0.0, (unsigned long long)idleCycles,
      idleCycles ? o.idleMs / double(idleCycles) : 0.0,
      idleSent ? idleCpu / double(idleSent) * 1e6 : 0.0);
  std::fflush(stdout);
}

// --- start-up costs -----------------------------------------------------------------------

// Seconds per call of `f`, the best of three batches of `count` (the least disturbed by the
// other work on the machine).
template <typename F>
double secondsPerCall(int count, F f) {
  double best = 1e9;
  for (int batch = 0; batch < 3; ++batch) {
    const auto start = Clock::now();
    for (int i = 0; i < count; ++i) f();
    best = std::min(best, since(start) / count);
  }
  return best;
}

// A loopback TCP connect, accepted and closed: what each link's socket costs at start, before
// any handshake of its own.
double connectSeconds() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener, 64) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    throw Error(detail::concat("cerar-bench-scale: listen: ", std::strerror(errno)));
  }
  const double seconds = secondsPerCall(200, [&] {
    const int client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw Error(detail::concat("cerar-bench-scale: connect: ", std::strerror(errno)));
    }
    const int server = accept(listener, nullptr, nullptr);
    close(server);
    close(client);
  });
  close(listener);
  return seconds;
}

void printCosts() {
  TcpStoreServer server("127.0.0.1", 0, "scale");
  server.start();
  TcpStore store("127.0.0.1", server.port(), "scale", std::chrono::seconds(10));
  constexpr size_t kAddressBytes = 145;  // one pair address (docs/scale.md)
  constexpr size_t kLargeBytes = size_t{1} << 20;
  store.set("small", std::vector<char>(kAddressBytes, 'a'));
  store.set("large", std::vector<char>(kLargeBytes, 'b'));
  const double small = secondsPerCall(500, [&] { store.get("small"); });
  const double large = secondsPerCall(20, [&] { store.get("large"); });
  const double perByte = std::max(0.0, (large - small) / double(kLargeBytes - kAddressBytes));
  std::printf(
      "{\"costs\": true, \"store_request_us\": %.2f, \"store_ns_per_byte\": %.3f, "
      "\"tcp_connect_us\": %.2f}\n",
      small * 1e6, perByte * 1e9, connectSeconds() * 1e6);
  std::fflush(stdout);
}

}  // namespace
}  // namespace cerar

int main(int argc, char** argv) {
  try {
    const cerar::Options o = cerar::parseOptions(argc, argv);
    if (o.costs) cerar::printCosts();
    for (int size : o.ranks) cerar::runSize(size, o);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
