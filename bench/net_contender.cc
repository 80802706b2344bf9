// One rank of the cross-namespace benchmark: cerar's exact ring and CERAR (a fixed grid of c and
// the c of the cost model) against Gloo's all-reduces, all over Gloo TCP on the rank's link.
// Launched once per rank by bench/runner.py (CERAR_RANK, CERAR_SIZE, CERAR_RENDEZVOUS_ADDR,
// CERAR_RENDEZVOUS_PORT, CERAR_NETNS_IFACE; CERAR_SECRET optional). Rank 0 hosts the store and
// prints one JSON line per (size, contender): per run the slowest rank's seconds, best, median.
//
// usage: cerar-bench-net [--sizes 1M,64M] [--repeats R] [--only NAME,PREFIX...]
//                        [--timeout-s S] [--segment-bytes B] [--window-bytes W]
// (--only cerar-c<c>: any multiple of N, on the grid or not)
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/policy/link_probe.h"
#include "rendezvous/tcp_store.h"
#include "core/policy/selection.h"
#include "bench/gloo_allreduce.h"
#include "ops/communicator.h"
#include "ops/paced_link.h"
#include "ops/transport/gloo_tcp.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  std::vector<size_t> sizes{size_t(1) << 20, size_t(64) << 20};
  int repeats = 3;
  std::vector<std::string> only;
  int timeoutS = 300;
  // Unset: the probe's pacing (ops/paced_link.h); either flag fixes both.
  std::optional<cerar::Pacing> pacing;
};

size_t parseBytes(const std::string& text) {
  const char unit = text.empty() ? 0 : char(std::toupper(text.back()));
  const size_t mult = unit == 'K' ? 1u << 10 : unit == 'M' ? 1u << 20 : unit == 'G' ? 1u << 30 : 1;
  return size_t(std::stod(mult > 1 ? text.substr(0, text.size() - 1) : text) * double(mult));
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

// The c grid of the fixed contenders, then the auto one, then Gloo's; old-style Gloo last.
// `--only cerar-c<c>` with c a multiple of N off the grid adds that c to it.
std::vector<std::string> contenders(int n, const std::vector<std::string>& only) {
  std::set<int> grid;
  for (int k : {1, 2, 4, 8, 16, 32, 64, 128}) grid.insert(k * n);
  for (const auto& name : only) {
    const bool digits = name.size() > 7 && name.rfind("cerar-c", 0) == 0 &&
                        name.find_first_not_of("0123456789", 7) == std::string::npos;
    const int c = digits && name.size() < 13 ? std::atoi(name.c_str() + 7) : 0;
    if (c > 0 && c % n == 0) grid.insert(c);
  }
  std::vector<std::string> all = {"ring"};
  for (int c : grid) all.push_back("cerar-c" + std::to_string(c));
  for (const char* name : {"cerar-auto", "gloo-ring", "gloo-bcube", "gloo-ringchunked", "gloo-hd"})
    all.push_back(name);
  if (only.empty()) return all;
  std::vector<std::string> chosen;
  for (const auto& name : all)
    for (const auto& prefix : only)
      if (name.rfind(prefix, 0) == 0) {
        chosen.push_back(name);
        break;
      }
  return chosen;
}

// Input of rank r at element i: small integers, so every exact contender's sum is exact and
// the expected value depends on i % 13 only.
float inputValue(size_t i, int rank) { return float((i * 7 + size_t(rank)) % 13) - 6; }

// One contender on its own Gloo context: the old-style Gloo algorithms leave a context on which
// later gloo::allreduce calls run ~100x slower, so nothing shares a context with another.
struct Contender {
  std::string name;
  std::unique_ptr<cerar::GlooTransport> transport;  // its links
  std::unique_ptr<cerar::Communicator> communicator;  // cerar contenders
  std::unique_ptr<gloo::Algorithm> oldStyle;          // built per size, outside the timing
  uint32_t tag = 0;
  int components = 0;  // c used at the current size (0: not CERAR)

  void prepare(float* data, size_t count, int n, const cerar::LinkModel& link) {
    auto context = transport->context();
    components = 0;
    if (name.rfind("cerar-c", 0) == 0) components = std::atoi(name.c_str() + 7);
    if (name == "cerar-auto") {  // as the runtime decides: the ring where CERAR does not pay
      const cerar::Selection choice = cerar::selectAlgorithm(
          n, cerar::DType::kFloat32, cerar::ReduceOp::kSum, count, link, cerar::SelectionPolicy{});
      components = choice.algorithm == cerar::Algorithm::kCerar ? choice.components : 0;
    }
    oldStyle.reset();
    if (name == "gloo-ringchunked") {
      oldStyle = std::make_unique<gloo::AllreduceRingChunked<float>>(
          context, std::vector<float*>{data}, int(count));
    } else if (name == "gloo-hd") {
      oldStyle = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(
          context, std::vector<float*>{data}, int(count));
    }
  }

  void run(float* data, size_t count) {
    if (oldStyle) return oldStyle->run();
    if (name == "ring" || name == "cerar-auto" || components > 0) {
      cerar::AllreduceOptions options;
      options.algorithm = components > 0 ? cerar::Algorithm::kCerar : cerar::Algorithm::kRing;
      options.components = components;
      options.verifyParameters = false;  // as the runtime runs it: sizes already agreed
      communicator->allreduce(data, count, cerar::DType::kFloat32, options);
      return;
    }
    cerar::bench::glooAllreduce(transport->context(), name == "gloo-bcube", data, count, ++tag);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Gathers every rank's times through the store; rank 0 prints the slowest per run.
void report(cerar::TcpStore& store, const Contender& c, const std::string& key, int rank, int n,
            size_t bytes, double error, const std::vector<double>& times) {
  std::ostringstream mine;
  mine.precision(9);
  mine << error;
  for (double t : times) mine << ' ' << t;
  const std::string text = mine.str();
  store.set(key + std::to_string(rank), std::vector<char>(text.begin(), text.end()));
  if (rank != 0) return;
  std::vector<double> slowest(times.size(), 0);
  double worstError = 0;
  for (int r = 0; r < n; ++r) {
    const auto got = store.get(key + std::to_string(r));
    std::istringstream in(std::string(got.begin(), got.end()));
    double e = 0, t = 0;
    in >> e;
    worstError = std::max(worstError, e);
    for (size_t k = 0; k < slowest.size() && in >> t; ++k) slowest[k] = std::max(slowest[k], t);
  }
  std::ostringstream line;
  line.precision(6);
  line << "{\"contender\": \"" << c.name << "\", \"impl\": \"cerar-bench-net\", \"n\": " << n
       << ", \"bytes\": " << bytes << ", \"c\": ";
  if (c.components > 0) line << c.components; else line << "null";
  line << ", \"runs_s\": [";
  for (size_t k = 0; k < slowest.size(); ++k) line << (k ? ", " : "") << slowest[k];
  line << "], \"best_s\": " << *std::min_element(slowest.begin(), slowest.end())
       << ", \"median_s\": " << median(slowest) << ", \"max_rel_err\": " << worstError << "}";
  std::printf("%s\n", line.str().c_str());
  std::fflush(stdout);
}

// The pacing the flags fix (from the executor's defaults).
cerar::Pacing& fixed(Settings& s) {
  if (!s.pacing) s.pacing = cerar::Pacing{};
  return *s.pacing;
}

int usage(const char* why) {
  std::fprintf(stderr, "cerar-bench-net: %s\nusage: cerar-bench-net [--sizes 1M,64M] "
               "[--repeats R] [--only NAME,PREFIX...] [--timeout-s S] [--segment-bytes B] "
               "[--window-bytes W]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  try {
    for (int i = 1; i < argc; i += 2) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) return usage(("missing value of " + flag).c_str());
      const std::string value = argv[i + 1];
      if (flag == "--sizes") {
        s.sizes.clear();
        for (const auto& item : split(value)) s.sizes.push_back(parseBytes(item));
      } else if (flag == "--repeats") s.repeats = std::stoi(value);
      else if (flag == "--only") s.only = split(value);
      else if (flag == "--timeout-s") s.timeoutS = std::stoi(value);
      else if (flag == "--segment-bytes") fixed(s) = {parseBytes(value), fixed(s).windowBytes};
      else if (flag == "--window-bytes") fixed(s).windowBytes = parseBytes(value);
      else return usage(("unknown argument " + flag).c_str());
    }
  } catch (const std::exception&) {
    return usage("bad number");
  }
  if (s.sizes.empty() || s.repeats < 1 || s.timeoutS < 1) return usage("need sizes, repeats >= 1");
  for (size_t bytes : s.sizes)
    if (bytes < 4 * 64 || bytes % 4) return usage("sizes must be multiples of 4 bytes, >= 256");
  const char* rankText = std::getenv("CERAR_RANK");
  const char* sizeText = std::getenv("CERAR_SIZE");
  if (!rankText || !sizeText) return usage("CERAR_RANK and CERAR_SIZE must be set (bench/runner.py)");
  const int rank = std::atoi(rankText), n = std::atoi(sizeText);
  const std::string addr = env("CERAR_RENDEZVOUS_ADDR", "127.0.0.1");
  const auto port = uint16_t(std::atoi(env("CERAR_RENDEZVOUS_PORT", "29500").c_str()));
  const std::string secret = env("CERAR_SECRET", "cerar-bench-net");
  const auto timeout = std::chrono::milliseconds(int64_t(s.timeoutS) * 1000);

  try {
    std::unique_ptr<cerar::TcpStoreServer> server;
    if (rank == 0) {
      server = std::make_unique<cerar::TcpStoreServer>(addr, port, secret);
      server->start();
    }
    cerar::TcpStore store(addr, port, secret, timeout);
    cerar::GlooOptions gloo;
    gloo.iface = env("CERAR_NETNS_IFACE", "lo");
    gloo.timeout = timeout;
    // The main links: barriers and the link probe. Then one context per contender.
    gloo.prefix = "bench/main";
    auto main = cerar::connectGloo(store, rank, n, gloo);
    const std::vector<std::string> names = contenders(n, s.only);
    std::vector<Contender> all;
    for (const auto& name : names) {
      Contender c;
      c.name = name;
      gloo.prefix = "bench/" + name;
      c.transport = cerar::connectGloo(store, rank, n, gloo);
      c.communicator = std::make_unique<cerar::Communicator>(
          std::shared_ptr<cerar::Transport>(c.transport.get(), [](cerar::Transport*) {}),
          std::make_unique<cerar::Executor>());
      all.push_back(std::move(c));
    }
    // alpha, beta of small/large ring exchanges on these links, gamma of the codec (rank 0's).
    // --segment-bytes and --window-bytes set the executor's pacing, and the model charges its
    // segments (core/policy/selection.h, wholeSegmentBytes).
    const auto probeStart = Clock::now();
    double ownRounds = 0;  // of which the rings' own rounds (this rank's)
    // As the runtime probes without an error budget: cerar-auto chooses without one.
    cerar::LinkModel link = cerar::probeLink(*main, &ownRounds, false);
    const double probeSeconds = std::chrono::duration<double>(Clock::now() - probeStart).count();
    const cerar::Pacing pacing = s.pacing.value_or(
        cerar::pacingFor(size_t(link.windowBytes), link.cpuBound));
    link.segmentBytes = double(pacing.segmentBytes);  // as the runtime's coordinator does
    for (auto& c : all) c.communicator->setPacing(pacing);
    if (rank == 0) {
      // Each choice's curve: CERAR's, the exact ring's, the fp16 wire ring's.
      std::string rounds[3];
      const std::vector<cerar::LinkModel::RoundPoint>* curves[3] = {
          &link.rounds, &link.ringRounds, &link.wireRounds};
      for (int k = 0; k < 3; ++k)
        for (const auto& point : *curves[k])
          rounds[k] += (rounds[k].empty() ? "[" : ", [") + std::to_string(size_t(point.bytes)) +
                       ", " + std::to_string(point.seconds) + "]";
      std::printf("{\"probe\": {\"n\": %d, \"alpha_s\": %.9g, \"beta_s_per_byte\": %.9g, "
                  "\"gamma_s_per_byte\": %.9g, \"window_bytes\": %zu, "
                  "\"segment_bytes\": %zu, \"receives_in_step\": %s, \"rounds\": [%s], "
                  "\"ring_rounds\": [%s], "
                  "\"wire_rounds\": [%s], \"seconds\": %.3f, \"own_rounds_s\": %.3f}}\n",
                  n, link.alpha, link.beta, link.gamma, pacing.windowBytes, pacing.segmentBytes,
                  pacing.receivesInStep ? "true" : "false",
                  rounds[0].c_str(), rounds[1].c_str(), rounds[2].c_str(), probeSeconds,
                  ownRounds);
    }
    std::fflush(stdout);

    const size_t maxCount = *std::max_element(s.sizes.begin(), s.sizes.end()) / sizeof(float);
    std::vector<float> input(maxCount), data(maxCount);
    for (size_t i = 0; i < maxCount; ++i) input[i] = inputValue(i, rank);
    float expected[13] = {}, scale = 0;  // the exact sum at i depends on i % 13 only
    for (size_t i = 0; i < 13; ++i) {
      for (int r = 0; r < n; ++r) expected[i] += inputValue(i, r);
      scale = std::max(scale, std::fabs(expected[i]));
    }
    int item = 0;
    for (size_t bytes : s.sizes) {
      const size_t count = bytes / sizeof(float);
      const size_t K = all.size();
      std::vector<std::vector<double>> times(K);
      std::vector<double> errors(K, 0);
      for (auto& c : all) c.prepare(data.data(), count, n, link);
      // Repeats interleaved (every contender once per pass), so that a drift of the machine or
      // the links spreads over all contenders instead of landing on one; pass 0 warms up and
      // is checked.
      for (int rep = 0; rep <= s.repeats; ++rep) {
        for (size_t i = 0; i < K; ++i) {
          std::memcpy(data.data(), input.data(), bytes);
          gloo::BarrierOptions barrier(main->context());
          gloo::barrier(barrier);
          const auto start = Clock::now();
          all[i].run(data.data(), count);
          const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
          if (rep > 0) times[i].push_back(seconds);
          if (rep == 0)
            for (size_t e = 0; e < count; ++e)
              errors[i] = std::max(errors[i], double(std::fabs(data[e] - expected[e % 13])) / scale);
        }
      }
      for (size_t i = 0; i < K; ++i) report(store, all[i], "bench/" + std::to_string(item++) + "/",
                                            rank, n, bytes, errors[i], times[i]);
    }
    // Nobody leaves (closing links, or rank 0 the store) before everyone is done.
    gloo::BarrierOptions barrier(main->context());
    gloo::barrier(barrier);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cerar-bench-net: rank %d: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
