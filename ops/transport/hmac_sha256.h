// HMAC-SHA-256 and random bytes for the data links' start-up proofs, from OpenSSL's libcrypto.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cerar {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest sha256(std::string_view data);

// HMAC-SHA-256 of `message` under `key` (any length).
Sha256Digest hmacSha256(std::string_view key, std::string_view message);

// Equal contents, compared in time independent of where they differ.
bool sameDigest(const Sha256Digest& a, const Sha256Digest& b);

// `bytes` bytes from the operating system's CSPRNG (through OpenSSL); throws Error on failure.
void randomBytes(void* out, size_t bytes);

}  // namespace cerar
