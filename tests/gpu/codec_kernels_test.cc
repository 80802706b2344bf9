// The CUDA codec against the CPU codec, bit for bit: every action, dtype and op, odd lengths
// and misaligned pointers (which take the scalar path), and the batched copy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "ops/codec/codec.h"
#include "ops/codec/half.h"
#include "tests/gpu/gpu_test_util.h"

namespace cerar {
namespace {

using testing::DeviceBuffer;

enum class Kind { kAccumulate, kFinishFirst, kFinishDecode, kStoreAndEncode, kStore };
const char* kindName(Kind k) {
  const char* names[] = {"accumulate", "finishFirst", "finishDecode", "storeAndEncode", "store"};
  return names[static_cast<int>(k)];
}

// Normal values with signed zeros and subnormals mixed in; NaN and infinities only where the
// result does not depend on NaN payloads (min/max select, they do not compute).
template <typename T>
T randomValue(std::mt19937_64& rng, bool nans) {
  const uint64_t pick = rng() % 64;
  if (pick == 0) return T(-0.0);
  if (pick == 1) return std::numeric_limits<T>::denorm_min() * T(rng() % 1000);
  if (nans && pick == 2) return std::numeric_limits<T>::quiet_NaN();
  if (nans && pick == 3) return -std::numeric_limits<T>::infinity();
  return T(std::normal_distribution<double>(0, 8)(rng));
}

void fill(std::vector<std::byte>& bytes, DType dtype, std::mt19937_64& rng, bool nans) {
  const size_t n = bytes.size() / dtypeSize(dtype);
  for (size_t i = 0; i < n; ++i) {
    std::byte* p = bytes.data() + i * dtypeSize(dtype);
    auto put = [&](auto v) { std::memcpy(p, &v, sizeof v); };
    switch (dtype) {
      case DType::kFloat32: put(randomValue<float>(rng, nans)); break;
      case DType::kFloat64: put(randomValue<double>(rng, nans)); break;
      case DType::kFloat16: put(codec::fromFloat<codec::Half>(randomValue<float>(rng, nans))); break;
      case DType::kBFloat16:
        put(codec::fromFloat<codec::BFloat16>(randomValue<float>(rng, nans)));
        break;
      default:  // integers: any bits (sums wrap the same way on both sides)
        for (size_t b = 0; b < dtypeSize(dtype); ++b) p[b] = std::byte(rng() & 0xff);
    }
  }
}

// Runs one action on the CPU and on the device over four buffers (y, g or previous, out or
// msg, store) at the given element offsets, then compares the whole buffers.
void checkAction(Kind kind, DType dtype, ReduceOp op, size_t n, const size_t (&offset)[4],
                 size_t gLength, bool withStore, double eps, unsigned seed) {
  const size_t es = dtypeSize(dtype), bytes = (n + 8) * es;
  std::mt19937_64 rng(seed);
  const bool nans = op != ReduceOp::kSum && kind != Kind::kFinishDecode &&
                    kind != Kind::kStoreAndEncode;
  std::vector<std::byte> host[4];
  DeviceBuffer device[4] = {DeviceBuffer(bytes), DeviceBuffer(bytes), DeviceBuffer(bytes),
                            DeviceBuffer(bytes)};
  std::byte* h[4];
  std::byte* d[4];
  for (int i = 0; i < 4; ++i) {
    host[i].resize(bytes);
    fill(host[i], dtype, rng, nans);
    device[i].upload(host[i].data(), bytes);
    h[i] = host[i].data() + offset[i] * es;
    d[i] = device[i].data() + offset[i] * es;
  }
  void* stream = nullptr;  // the legacy default stream
  switch (kind) {
    case Kind::kAccumulate:
      codec::accumulate(dtype, op, h[0], h[1], h[2], n);
      cuda::accumulate(dtype, op, d[0], d[1], d[2], n, stream);
      break;
    case Kind::kFinishFirst:
      codec::finishFirst(dtype, op, h[0], h[2], n);
      cuda::finishFirst(dtype, op, d[0], d[2], n, stream);
      break;
    case Kind::kFinishDecode:
      codec::finishDecode(dtype, eps, h[0], h[1], h[2], n);
      cuda::finishDecode(dtype, eps, d[0], d[1], d[2], n, stream);
      break;
    case Kind::kStoreAndEncode:
      codec::storeAndEncode(dtype, eps, h[0], h[1], gLength, withStore ? h[3] : nullptr, h[2], n);
      cuda::storeAndEncode(dtype, eps, d[0], d[1], gLength, withStore ? d[3] : nullptr, d[2], n,
                           stream);
      break;
    case Kind::kStore:
      codec::store(dtype, h[0], h[2], n);
      cuda::store(dtype, d[0], d[2], n, stream);
      break;
  }
  cuda::check(cudaDeviceSynchronize(), "kernel");
  for (int i = 0; i < 4; ++i) {
    std::vector<std::byte> got(bytes);
    device[i].download(got.data(), bytes);
    const long at = testing::firstDifference(got.data(), host[i].data(), bytes);
    EXPECT_EQ(at, -1) << kindName(kind) << " " << dtypeName(dtype) << " " << reduceOpName(op)
                      << " n=" << n << " offsets " << offset[0] << "," << offset[1] << ","
                      << offset[2] << "," << offset[3] << " gLength=" << gLength
                      << ": buffer " << i << " differs at element " << at / long(es);
  }
}

const size_t kLengths[] = {0, 1, 7, 33, 1000, 4097, 100003};
const size_t kOffsets[][4] = {{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 3, 1, 2}, {5, 5, 5, 5}};

TEST(CudaCodec, EncodeAndDecodeMatchTheCpuBitForBit) {
  CERAR_REQUIRE_GPU();
  unsigned seed = 1;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (double eps : {std::ldexp(1.0, -11), 1e-3}) {
      for (size_t n : kLengths) {
        for (const auto& offset : kOffsets) {
          checkAction(Kind::kFinishDecode, dtype, ReduceOp::kSum, n, offset, 0, false, eps,
                      seed++);
          for (size_t gLength : {size_t(0), n / 2, n}) {
            for (bool withStore : {false, true})
              checkAction(Kind::kStoreAndEncode, dtype, ReduceOp::kSum, n, offset, gLength,
                          withStore, eps, seed++);
          }
        }
      }
    }
  }
}

TEST(CudaCodec, CombineActionsMatchTheCpuForEveryDtypeAndOp) {
  CERAR_REQUIRE_GPU();
  unsigned seed = 1000;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                      DType::kInt32, DType::kInt64, DType::kUInt8}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      for (size_t n : kLengths) {
        for (const auto& offset : kOffsets) {
          checkAction(Kind::kAccumulate, dtype, op, n, offset, 0, false, 0, seed++);
          checkAction(Kind::kFinishFirst, dtype, op, n, offset, 0, false, 0, seed++);
        }
      }
    }
    checkAction(Kind::kStore, dtype, ReduceOp::kSum, 4097, kOffsets[2], 0, false, 0, seed++);
  }
}

TEST(CudaCodec, BatchedCopyMovesEverySegment) {
  CERAR_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  const size_t total = 8 << 20;
  std::vector<unsigned char> source(total), expected(total, 0);
  for (auto& b : source) b = static_cast<unsigned char>(rng());
  DeviceBuffer src(total), dst(total);
  src.upload(source.data(), total);
  cuda::check(cudaMemset(dst.data(), 0, total), "cudaMemset");
  // Segments of odd sizes and alignments, packed without overlap into the destination.
  std::vector<cuda::CopySegment> segments;
  size_t in = 0, out = 0, longest = 0;
  for (int s = 0; s < 300 && in < total / 2; ++s) {
    const size_t bytes = s % 7 == 0 ? 0 : (rng() % (s % 3 == 0 ? 100000 : 300)) + 1;
    in += rng() % 17;
    out += rng() % 5;
    if (in + bytes > total / 2 || out + bytes > total) break;
    segments.push_back({src.data() + in, dst.data() + out, bytes});
    std::memcpy(expected.data() + out, source.data() + in, bytes);
    longest = std::max(longest, bytes);
    in += bytes;
    out += bytes;
  }
  DeviceBuffer descriptors(segments.size() * sizeof(cuda::CopySegment));
  descriptors.upload(segments.data(), segments.size() * sizeof(cuda::CopySegment));
  cuda::batchedCopy(reinterpret_cast<const cuda::CopySegment*>(descriptors.data()),
                    static_cast<int>(segments.size()), longest, nullptr);
  cuda::check(cudaDeviceSynchronize(), "batchedCopy");
  const auto got = dst.read<unsigned char>(total);
  EXPECT_EQ(testing::firstDifference(got.data(), expected.data(), total), -1)
      << segments.size() << " segments";
}

TEST(CudaCodec, DeviceCountNeverThrows) {
  std::string why;
  const int count = cuda::deviceCount(&why);
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(why.empty());
  }
}

}  // namespace
}  // namespace cerar
