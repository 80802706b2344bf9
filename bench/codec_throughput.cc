// cerar-bench-codec: the codec's hot loops in bytes per second against memcpy on the same
// buffers, on cache-resident (L2-sized) and on memory-sized buffers.
//
// Each routine covers n float32 elements; its "bytes" are those 4n bytes, memcpy's the 4n it
// copies between two of the same buffers. Every repeat times each routine once, in an order
// rotated by one each repeat; the table gives the median bytes/s and the median of per-repeat
// ratios to memcpy (runs of one repeat are close in time, so a drift of the machine cancels).
// Routines run through the codec's entry points (the widest instruction set this CPU has) and,
// with --variants, through each instruction set's loops side by side.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/quantile.h"
#include "ops/codec/codec.h"
#include "ops/codec/codec_simd.h"
#include "ops/codec/half.h"
#include "ops/codec/int8_wire.h"
#include "ops/codec/wire.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  size_t smallBytes = 256 << 10;  // per buffer: four of them fit the L2 of this CPU
  size_t largeBytes = 64 << 20;
  int repeats = 15;
  bool variants = false;  // each instruction set's loops too
};

struct Buffers {
  explicit Buffers(size_t n) : y(n), g(n), previous(n), out(n), store(n), msg(n), half(n),
                               wire(n), int8In(codec::int8MessageBytes(n)),
                               int8Out(codec::int8MessageBytes(n)) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0, 1);
    for (size_t i = 0; i < n; ++i) {
      g[i] = normal(rng);
      previous[i] = normal(rng);
      // What CERAR decodes: a message eps * g away from the value stored before.
      y[i] = previous[i] + 0x1p-11f * g[i];
      out[i] = normal(rng);
      half[i] = codec::fromFloat<codec::Half>(normal(rng)).bits;
    }
    codec::encodeInt8(out.data(), int8In.data(), n);
  }
  std::vector<float> y, g, previous, out, store, msg;
  std::vector<uint16_t> half, wire;
  std::vector<std::byte> int8In, int8Out;  // int8 messages of n elements
};

struct Routine {
  std::string name;
  std::function<void()> run;
};

constexpr double kEps = 0x1p-11;  // the default eps of float32 (a power of two)

// The routines of one kernel table (or the codec's entry points when `table` is null).
void addRoutines(std::vector<Routine>& to, Buffers& b, const codec::Kernels* table,
                 const std::string& suffix) {
  const size_t n = b.y.size();
  auto name = [&](const char* what) { return std::string(what) + suffix; };
  if (table == nullptr) {
    to.push_back({name("accumulate f32 sum"), [&b, n] {
      codec::accumulate(DType::kFloat32, ReduceOp::kSum, b.y.data(), b.g.data(), b.msg.data(), n);
    }});
    to.push_back({name("finishFirst f32 sum"), [&b, n] {
      codec::finishFirst(DType::kFloat32, ReduceOp::kSum, b.y.data(), b.out.data(), n);
    }});
    to.push_back({name("storeAndEncode f32"), [&b, n] {
      codec::storeAndEncode(DType::kFloat32, kEps, b.y.data(), b.g.data(), n, b.store.data(),
                            b.msg.data(), n);
    }});
    to.push_back({name("finishDecode f32"), [&b, n] {
      codec::finishDecode(DType::kFloat32, kEps, b.y.data(), b.previous.data(), b.out.data(), n);
    }});
    for (Wire wire : {Wire::kFloat16, Wire::kBFloat16}) {
      const std::string w = wireName(wire);
      to.push_back({name(("encodeWire " + w).c_str()), [&b, n, wire] {
        codec::encodeWire(wire, b.g.data(), b.wire.data(), n);
      }});
      to.push_back({name(("decodeWire " + w).c_str()), [&b, n, wire] {
        codec::decodeWire(wire, b.half.data(), b.msg.data(), n);
      }});
      to.push_back({name(("accumulateWire " + w).c_str()), [&b, n, wire] {
        codec::accumulateWire(wire, b.half.data(), b.g.data(), b.wire.data(), n);
      }});
    }
    to.push_back({name("encodeInt8"), [&b, n] {
      codec::encodeInt8(b.g.data(), b.int8Out.data(), n);
    }});
    to.push_back({name("decodeInt8"), [&b, n] {
      codec::decodeInt8(b.int8In.data(), b.msg.data(), n);
    }});
    to.push_back({name("accumulateInt8"), [&b, n] {
      codec::accumulateInt8(b.int8In.data(), b.g.data(), b.int8Out.data(), n);
    }});
    return;
  }
  const codec::Kernels& k = *table;
  to.push_back({name("accumulate f32 sum"), [&b, &k, n] {
    k.f32.add(b.y.data(), b.g.data(), b.msg.data(), n);
  }});
  to.push_back({name("storeAndEncode f32"), [&b, &k, n] {
    k.f32.encode(float(kEps), b.y.data(), b.g.data(), n, b.store.data(), b.msg.data(), n);
  }});
  to.push_back({name("finishDecode f32"), [&b, &k, n] {
    k.f32.decode(float(kEps), b.y.data(), b.previous.data(), b.out.data(), n);
  }});
  for (const auto& [w, wk] : {std::pair{"fp16", &k.fp16}, std::pair{"bf16", &k.bf16}}) {
    const codec::WireKernels& wire = *wk;
    to.push_back({name((std::string("encodeWire ") + w).c_str()), [&b, &wire, n] {
      wire.encode(b.g.data(), b.wire.data(), n);
    }});
    to.push_back({name((std::string("decodeWire ") + w).c_str()), [&b, &wire, n] {
      wire.decode(b.half.data(), b.msg.data(), n);
    }});
    to.push_back({name((std::string("accumulateWire ") + w).c_str()), [&b, &wire, n] {
      wire.accumulate(b.half.data(), b.g.data(), b.wire.data(), n);
    }});
  }
  to.push_back({name("encodeInt8"), [&b, &k, n] { k.int8.encode(b.g.data(), b.int8Out.data(), n); }});
  to.push_back({name("decodeInt8"), [&b, &k, n] { k.int8.decode(b.int8In.data(), b.msg.data(), n); }});
  to.push_back({name("accumulateInt8"), [&b, &k, n] {
    k.int8.accumulate(b.int8In.data(), b.g.data(), b.int8Out.data(), n);
  }});
}

using bench::quantile;

// Seconds per call, over enough calls to take about 2 ms.
double timeCalls(const std::function<void()>& run, int calls) {
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) run();
  return std::chrono::duration<double>(Clock::now() - start).count() / calls;
}

void measure(const Settings& s, size_t bufferBytes, const char* label) {
  Buffers b(bufferBytes / sizeof(float));
  std::vector<Routine> routines;
  routines.push_back({"memcpy", [&b] {
    std::memcpy(b.msg.data(), b.y.data(), b.y.size() * sizeof(float));
  }});
  addRoutines(routines, b, nullptr, "");
  if (s.variants) {
    for (codec::Isa isa : {codec::Isa::kBaseline, codec::Isa::kAvx2, codec::Isa::kAvx512}) {
      if (codec::isaSupported(isa)) {
        addRoutines(routines, b, &codec::kernelsFor(isa),
                    std::string(" [") + codec::isaName(isa) + "]");
      }
    }
  }
  const size_t count = routines.size();
  // Calls per sample: about 2 ms of memcpy-speed work, at least one call.
  const int calls = std::max(1, int((size_t(8) << 20) / bufferBytes));
  for (auto& r : routines) timeCalls(r.run, calls);  // warm-up: page faults, caches
  std::vector<std::vector<double>> seconds(count);
  for (int rep = 0; rep < s.repeats; ++rep) {
    for (size_t k = 0; k < count; ++k) {
      const size_t i = (k + size_t(rep)) % count;
      seconds[i].push_back(timeCalls(routines[i].run, calls));
    }
  }
  std::printf("\n%s: %zu KiB per buffer, %d calls per sample, %d repeats\n\n", label,
              bufferBytes >> 10, calls, s.repeats);
  std::printf("| routine | GB/s | x memcpy (median [q1, q3]) |\n|---|---|---|\n");
  for (size_t i = 0; i < count; ++i) {
    std::vector<double> ratio;
    for (int rep = 0; rep < s.repeats; ++rep) ratio.push_back(seconds[0][rep] / seconds[i][rep]);
    std::printf("| %s | %.2f | %.3f [%.3f, %.3f] |\n", routines[i].name.c_str(),
                double(bufferBytes) / quantile(seconds[i], 0.5) / 1e9, quantile(ratio, 0.5),
                quantile(ratio, 0.25), quantile(ratio, 0.75));
  }
}

}  // namespace
}  // namespace cerar

int main(int argc, char** argv) {
  using namespace cerar;
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--variants") {
      s.variants = true;
    } else if (i + 1 < argc && flag == "--repeats") {
      s.repeats = std::max(1, std::atoi(argv[++i]));
    } else if (i + 1 < argc && flag == "--small-kib") {
      s.smallBytes = size_t(std::max(1, std::atoi(argv[++i]))) << 10;
    } else if (i + 1 < argc && flag == "--large-mib") {
      s.largeBytes = size_t(std::max(1, std::atoi(argv[++i]))) << 20;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--repeats R] [--small-kib K] [--large-mib M] [--variants]\n",
                   argv[0]);
      return 2;
    }
  }
  std::printf("codec entry points run the %s loops\n", codec::isaName(codec::activeIsa()));
  measure(s, s.smallBytes, "cache-resident");
  measure(s, s.largeBytes, "memory-sized");
  return 0;
}
