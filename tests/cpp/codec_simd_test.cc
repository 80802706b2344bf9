// The codec's loops of every instruction set this CPU runs (ops/codec/codec_simd.h) against
// element-by-element references written here (the spec's expressions, half.h's casts): bit for
// bit on random data and on special values (+-0, subnormals, inf, NaN, overflow on the way to
// a 16-bit type, every half pattern), at lengths around the vector widths, from unaligned
// pointers. Where both operands of an add are NaN, which NaN comes out is the compiler's pick
// (the baseline's vector body and its scalar tail differ), so there only NaN is asked for.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops/codec/codec.h"
#include "ops/codec/codec_simd.h"
#include "ops/codec/half.h"
#include "ops/codec/wire.h"
#include "ops/codec/int8_wire.h"
#include "common/error.h"

namespace cerar::codec {
namespace {

constexpr Isa kIsas[] = {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512};
// Lengths around 4, 8 and 16 lanes and their multiples, and one long run.
constexpr size_t kLengths[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 1000};
constexpr size_t kLongest = 1000;
constexpr size_t kOffsets = 3;  // each buffer also starts 1 and 2 elements in

template <typename T>
auto bitsOf(T x) {
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t,
                                  std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  Bits bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// The same bits, or NaN both where the reference's operands were both NaN.
template <typename T>
bool agree(T got, T want, bool bothOperandsNaN) {
  if (bitsOf(got) == bitsOf(want)) return true;
  return bothOperandsNaN && std::isnan(got) && std::isnan(want);
}
bool halfIsNaN(uint16_t bits) { return (bits & 0x7fff) > 0x7c00; }
bool bf16IsNaN(uint16_t bits) { return (bits & 0x7fff) > 0x7f80; }

template <typename T>
std::vector<T> specialValues() {
  using L = std::numeric_limits<T>;
  std::vector<T> v = {T(0), -T(0), L::denorm_min(), -L::denorm_min(), L::min(), -L::min(),
                      L::min() / T(3), L::max(), -L::max(), L::infinity(), -L::infinity(),
                      L::quiet_NaN(), -L::quiet_NaN(), L::signaling_NaN(), T(1), T(-1),
                      L::epsilon(), T(1) + L::epsilon(), T(65504), T(65519), T(65520),
                      T(-65520), T(65536), T(0x1p-14), T(0x1p-24), T(0x1p-25), T(0x1.8p-25),
                      T(0x1.ffcp-15), T(0x1p-11), T(3e38)};
  v.push_back(std::bit_cast<T>(bitsOf(L::quiet_NaN()) | 0x123));  // a NaN with a payload
  return v;
}

// n random values: mostly normal of varied scales, some special.
template <typename T>
std::vector<T> randomValues(std::mt19937& rng, size_t n) {
  const std::vector<T> special = specialValues<T>();
  std::normal_distribution<T> normal(0, 1);
  std::uniform_int_distribution<int> scale(-30, 30), pick(0, 15);
  std::uniform_int_distribution<size_t> which(0, special.size() - 1);
  std::vector<T> v(n);
  for (T& x : v) x = pick(rng) == 0 ? special[which(rng)] : std::ldexp(normal(rng), scale(rng));
  return v;
}

// Runs check(table, length, offset) for every supported table, length and offset.
template <typename Check>
void forEachCase(Check check) {
  for (Isa isa : kIsas) {
    if (!isaSupported(isa)) continue;
    SCOPED_TRACE(isaName(isa));
    for (size_t n : kLengths) {
      for (size_t offset = 0; offset < kOffsets; ++offset) check(kernelsFor(isa), n, offset);
    }
  }
}

template <typename T>
const FloatKernels<T>& floatTable(const Kernels& k) {
  if constexpr (sizeof(T) == 4) return k.f32;
  else return k.f64;
}

template <typename T>
void checkAdds() {
  std::mt19937 rng(1);
  const auto y = randomValues<T>(rng, kLongest + kOffsets),
             g = randomValues<T>(rng, kLongest + kOffsets);
  forEachCase([&](const Kernels& k, size_t n, size_t offset) {
    std::vector<T> out(n + kOffsets), inPlace = g;
    floatTable<T>(k).add(y.data() + offset, g.data() + 2 * offset % kOffsets,
                         out.data() + offset, n);
    floatTable<T>(k).addInPlace(y.data() + offset, inPlace.data() + offset, n);
    for (size_t e = 0; e < n; ++e) {
      const T a = y[offset + e], b = g[2 * offset % kOffsets + e], c = g[offset + e];
      ASSERT_TRUE(agree(out[offset + e], T(a + b), std::isnan(a) && std::isnan(b)))
          << "add, n " << n << " element " << e << ": " << a << " + " << b;
      ASSERT_TRUE(agree(inPlace[offset + e], T(a + c), std::isnan(a) && std::isnan(c)))
          << "addInPlace, n " << n << " element " << e << ": " << a << " + " << c;
    }
  });
}

TEST(CodecSimd, AddsMatchTheReference) {
  checkAdds<float>();
  checkAdds<double>();
}

// Powers of two (the decode multiplies by the reciprocal), others (it divides), and powers
// whose reciprocal overflows or is subnormal.
template <typename T>
std::vector<T> epsValues() {
  using L = std::numeric_limits<T>;
  return {T(0x1p-11), T(0x1p-25), T(1e-3), T(3), -T(0x1p-11), L::min(), L::denorm_min(),
          std::ldexp(T(1), L::max_exponent - 1), T(0.1)};
}

template <typename T>
void checkEncodeDecode() {
  std::mt19937 rng(2);
  const size_t size = kLongest + kOffsets;
  const auto y = randomValues<T>(rng, size), g = randomValues<T>(rng, size),
             previous = randomValues<T>(rng, size), start = randomValues<T>(rng, size);
  for (T eps : epsValues<T>()) {
    SCOPED_TRACE(testing::Message() << "eps " << eps);
    forEachCase([&](const Kernels& k, size_t n, size_t offset) {
      const size_t gLength = n / 2 + offset;  // the rest is zero padding
      std::vector<T> store(size), msg(size), noStore(size), out = start;
      floatTable<T>(k).encode(eps, y.data() + offset, g.data(), gLength, store.data(),
                              msg.data() + offset, n);
      floatTable<T>(k).encode(eps, y.data(), g.data(), gLength, nullptr, noStore.data(), n);
      floatTable<T>(k).decode(eps, y.data() + offset, previous.data(), out.data() + offset, n);
      for (size_t e = 0; e < n; ++e) {
        const T a = y[offset + e], wantMsg = e < gLength ? T(a + eps * g[e]) : T(a + T(0));
        ASSERT_EQ(bitsOf(store[e]), bitsOf(a)) << "store, n " << n << " element " << e;
        // eps * g is never NaN with a NaN y unless g is NaN.
        ASSERT_TRUE(agree(msg[offset + e], wantMsg, std::isnan(a) && e < gLength &&
                                                        std::isnan(g[e])))
            << "encode, n " << n << " element " << e << ": " << a << " + eps * " << g[e];
        const T wantNoStore = e < gLength ? T(y[e] + eps * g[e]) : T(y[e] + T(0));
        ASSERT_TRUE(agree(noStore[e], wantNoStore, std::isnan(y[e]) && e < gLength &&
                                                       std::isnan(g[e])));
        const T d = (a - previous[e]) / eps, o = start[offset + e];
        ASSERT_TRUE(agree(out[offset + e], T(d + o), std::isnan(d) && std::isnan(o)))
            << "decode, n " << n << " element " << e << ": (" << a << " - " << previous[e]
            << ") / eps + " << o;
      }
    });
  }
}

TEST(CodecSimd, EncodeAndDecodeMatchTheReferenceForEveryEps) {
  checkEncodeDecode<float>();
  checkEncodeDecode<double>();
}

// Every upper half of a float with low halves at the rounding boundaries of fp16 (13 dropped
// bits) and bfloat16 (16): all 65536 sign/exponent/high-mantissa patterns, each rounding case.
std::vector<float> castInputs() {
  constexpr uint32_t kLow[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000,
                               0x7fff, 0x8000, 0x8001, 0xffff, 0x5a5a};
  std::vector<float> v;
  for (uint32_t high = 0; high < 65536; ++high) {
    for (uint32_t low : kLow) v.push_back(bitsToFloat(high << 16 | low));
  }
  return v;
}

struct WireCase {
  const char* name;
  const WireKernels Kernels::*table;
  uint16_t (*cast)(float);
  float (*widen)(uint16_t);
  bool (*isNaN)(uint16_t);
};
const WireCase kWires[] = {
    {"fp16", &Kernels::fp16, [](float f) { return fromFloat<Half>(f).bits; },
     [](uint16_t h) { return toFloat(Half{h}); }, halfIsNaN},
    {"bf16", &Kernels::bf16, [](float f) { return fromFloat<BFloat16>(f).bits; },
     [](uint16_t h) { return toFloat(BFloat16{h}); }, bf16IsNaN},
};

// Runs check(wire case, table) for both wires and every supported table.
template <typename Check>
void forEachWireTable(Check check) {
  for (const WireCase& w : kWires) {
    SCOPED_TRACE(w.name);
    for (Isa isa : kIsas) {
      if (!isaSupported(isa)) continue;
      SCOPED_TRACE(isaName(isa));
      check(w, kernelsFor(isa).*w.table);
    }
  }
}

TEST(CodecSimd, WireCastsMatchHalfHOnEveryPattern) {
  const std::vector<float> inputs = castInputs();
  std::vector<uint16_t> everyHalf(65536);
  for (uint32_t h = 0; h < 65536; ++h) everyHalf[h] = uint16_t(h);
  forEachWireTable([&](const WireCase& w, const WireKernels& k) {
    // Input and output each start 0, 1 or 2 elements in, not by the same amount.
    for (size_t offset = 0; offset < kOffsets; ++offset) {
      const size_t outOffset = 2 * offset % kOffsets, n = inputs.size() - kOffsets;
      std::vector<uint16_t> encoded(inputs.size());
      k.encode(inputs.data() + offset, encoded.data() + outOffset, n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(encoded[outOffset + i], w.cast(inputs[offset + i]))
            << "encode of float bits " << std::hex << floatToBits(inputs[offset + i]);
      }
      std::vector<float> decoded(65536 + kOffsets);
      k.decode(everyHalf.data() + offset, decoded.data() + outOffset, 65536 - offset);
      for (uint32_t h = uint32_t(offset); h < 65536; ++h) {
        ASSERT_EQ(floatToBits(decoded[outOffset + h - offset]),
                  floatToBits(w.widen(uint16_t(h))))
            << "decode of " << std::hex << h;
      }
    }
  });
}

// accumulate: every half pattern as y, against random and special g; lengths and offsets.
TEST(CodecSimd, WireAccumulateMatchesHalfHOnEveryPattern) {
  std::mt19937 rng(3);
  const std::vector<float> g = randomValues<float>(rng, 65536 + kOffsets);
  std::vector<uint16_t> everyHalf(65536 + kOffsets);
  for (uint32_t h = 0; h < everyHalf.size(); ++h) everyHalf[h] = uint16_t(h * 40503u);
  forEachWireTable([&](const WireCase& w, const WireKernels& k) {
    auto check = [&](size_t n, size_t offset) {
      std::vector<uint16_t> out(n + kOffsets);
      k.accumulate(everyHalf.data() + offset, g.data() + 2 * offset % kOffsets,
                   out.data() + offset, n);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t y = everyHalf[offset + i];
        const float b = g[2 * offset % kOffsets + i];
        const uint16_t want = w.cast(w.widen(y) + b);
        const bool bothNaN = w.isNaN(y) && std::isnan(b);
        ASSERT_TRUE(out[offset + i] == want || (bothNaN && w.isNaN(out[offset + i])))
            << "n " << n << " element " << i << ": " << std::hex << y << " + " << b;
      }
    };
    for (size_t n : kLengths) {
      for (size_t offset = 0; offset < kOffsets; ++offset) check(n, offset);
    }
    check(65536, 0);  // every pattern (40503 is odd: h * 40503 runs through all of them)
  });
}

// The int8 wire's messages as int8_wire.h specifies them, element by element: a block's scale
// is its largest magnitude / 127 (NaN if it holds inf or NaN), a code nearest-even(x / scale)
// within [-127, 127] (0 where the scale is 0 or NaN).
std::vector<std::byte> int8Reference(const float* x, size_t n) {
  const size_t blocks = (n + kInt8Block - 1) / kInt8Block;
  std::vector<std::byte> msg(int8MessageBytes(n));
  for (size_t b = 0; b < blocks; ++b) {
    const size_t at = b * kInt8Block, m = std::min(kInt8Block, n - at);
    float largest = 0;
    bool finite = true;
    for (size_t i = 0; i < m; ++i) {
      finite = finite && std::isfinite(x[at + i]);
      if (std::isfinite(x[at + i])) largest = std::max(largest, std::fabs(x[at + i]));
    }
    const float scale = finite ? largest / 127.0f : std::numeric_limits<float>::quiet_NaN();
    std::memcpy(msg.data() + b * 4, &scale, 4);
    for (size_t i = 0; i < m; ++i) {
      const float q = finite && scale != 0 ? std::nearbyint(x[at + i] / scale) : 0.0f;
      msg[blocks * 4 + at + i] = std::byte(uint8_t(int8_t(std::clamp(q, -127.0f, 127.0f))));
    }
  }
  return msg;
}

// Every table's int8 loops give the reference's bytes, and decode and a hop (decode, add in
// float32, encode) the reference's values, over blocks of ordinary, tiny, huge and special values.
TEST(CodecSimd, Int8LoopsMatchTheReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 1);
  std::uniform_int_distribution<int> scale(-140, 120), pick(0, 200);
  const std::vector<float> special = specialValues<float>();
  std::uniform_int_distribution<size_t> which(0, special.size() - 1);
  for (Isa isa : kIsas) {
    if (!isaSupported(isa)) continue;
    SCOPED_TRACE(isaName(isa));
    const Int8Kernels& k = kernelsFor(isa).int8;
    for (size_t n : {size_t(0), size_t(1), size_t(17), size_t(1023), size_t(1024), size_t(1025),
                     size_t(5000)}) {
      std::vector<float> x(n), g(n);
      const int blockScale = scale(rng);  // per case: from subnormal to near-overflow blocks
      for (size_t i = 0; i < n; ++i) {
        x[i] = pick(rng) == 0 ? special[which(rng)] : std::ldexp(normal(rng), blockScale);
        g[i] = std::ldexp(normal(rng), blockScale);
      }
      const auto want = int8Reference(x.data(), n);
      std::vector<std::byte> msg(want.size()), hop(want.size());
      k.encode(x.data(), msg.data(), n);
      ASSERT_TRUE(msg == want) << "encode, n " << n;
      std::vector<float> decoded(n), sum(n);
      k.decode(msg.data(), decoded.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const float s = std::bit_cast<float>(
            std::to_integer<uint32_t>(want[i / kInt8Block * 4]) |
            std::to_integer<uint32_t>(want[i / kInt8Block * 4 + 1]) << 8 |
            std::to_integer<uint32_t>(want[i / kInt8Block * 4 + 2]) << 16 |
            std::to_integer<uint32_t>(want[i / kInt8Block * 4 + 3]) << 24);
        const size_t codes = (n + kInt8Block - 1) / kInt8Block * 4;
        const float value = float(int8_t(std::to_integer<uint8_t>(want[codes + i]))) * s;
        ASSERT_TRUE(agree(decoded[i], value, true)) << "decode, n " << n << " element " << i;
        sum[i] = value + g[i];
      }
      k.accumulate(msg.data(), g.data(), hop.data(), n);
      const auto hopWant = int8Reference(sum.data(), n);
      ASSERT_TRUE(hop == hopWant) << "hop, n " << n;
    }
  }
}

TEST(CodecSimd, EntryPointsRunTheWidestSupportedTable) {
  EXPECT_TRUE(isaSupported(Isa::kBaseline));
  EXPECT_EQ(&kernels(), &kernelsFor(activeIsa()));
  for (Isa isa : kIsas) {
    if (isaSupported(isa)) {
      EXPECT_GE(int(activeIsa()), int(isa)) << isaName(isa);
    } else {
      EXPECT_THROW(kernelsFor(isa), InvalidArgumentError) << isaName(isa);
    }
  }
  // Through the entry points: a half hop over a length that is no multiple of the width.
  std::vector<uint16_t> y(37, 0x3c00), out(37);  // 1.0
  std::vector<float> g(37, 0.5f);
  accumulateWire(Wire::kFloat16, y.data(), g.data(), out.data(), 37);
  for (uint16_t h : out) ASSERT_EQ(h, 0x3e00);  // 1.5
  std::vector<float> a(37, 1.0f), b(37, 0x1p-24f), sum(37);
  accumulate(DType::kFloat32, ReduceOp::kSum, a.data(), b.data(), sum.data(), 37);
  for (float s : sum) ASSERT_EQ(s, 1.0f);  // 1 + 2^-24 rounds to even
}

}  // namespace
}  // namespace cerar::codec
