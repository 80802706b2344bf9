#include "ops/transport/hmac_sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "common/error.h"

namespace cerar {

Sha256Digest sha256(std::string_view data) {
  Sha256Digest out{};
  unsigned int length = 0;
  CERAR_ENFORCE(EVP_Digest(data.data(), data.size(), out.data(), &length, EVP_sha256(),
                           nullptr) == 1 && length == out.size(),
                "sha256: OpenSSL's digest failed");
  return out;
}

Sha256Digest hmacSha256(std::string_view key, std::string_view message) {
  Sha256Digest out{};
  unsigned int length = 0;
  const bool done = HMAC(EVP_sha256(), key.data(), int(key.size()),
                         reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                         out.data(), &length) != nullptr;
  CERAR_ENFORCE(done && length == out.size(), "hmac: OpenSSL's HMAC-SHA-256 failed");
  return out;
}

bool sameDigest(const Sha256Digest& a, const Sha256Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void randomBytes(void* out, size_t bytes) {
  CERAR_ENFORCE(RAND_bytes(static_cast<unsigned char*>(out), int(bytes)) == 1,
                "random bytes: OpenSSL's RAND_bytes failed");
}

}  // namespace cerar
