// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the data links' start-up proofs.
// Self-contained because no cryptography library is among the build's dependencies; the
// tests check both against the published vectors (FIPS 180-2 examples, RFC 4231).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cerar {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  void update(std::string_view text) { update(text.data(), text.size()); }
  Sha256Digest finish();  // the object is spent afterwards

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> block_{};
  size_t filled_ = 0;
  uint64_t totalBytes_ = 0;
};

Sha256Digest sha256(std::string_view data);

// HMAC-SHA-256 of `message` under `key` (any length).
Sha256Digest hmacSha256(std::string_view key, std::string_view message);

// Equal contents, compared in time independent of where they differ.
bool sameDigest(const Sha256Digest& a, const Sha256Digest& b);

}  // namespace cerar
