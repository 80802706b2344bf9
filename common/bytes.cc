#include "common/bytes.h"

namespace cerar {

std::string ByteReader::str() {
  const uint32_t n = get<uint32_t>();
  return std::string(reinterpret_cast<const char*>(take(n)), n);
}

std::vector<std::string> ByteReader::strs() {
  std::vector<std::string> v(count(4));
  for (auto& s : v) s = str();
  return v;
}

uint32_t ByteReader::count(size_t minBytesEach) {
  const uint32_t n = get<uint32_t>();
  if (minBytesEach > 0 && n > left() / minBytesEach) {
    fail("a count of " + std::to_string(n) + " past the end");
  }
  return n;
}

const uint8_t* ByteReader::take(size_t n) {
  if (n > left()) {
    fail("truncated at byte " + std::to_string(at_) + " of " + std::to_string(size_));
  }
  at_ += n;
  return data_ + at_ - n;
}

void ByteReader::finish() const {
  if (at_ != size_) fail(std::to_string(size_ - at_) + " trailing bytes");
}

void ByteReader::fail(const std::string& why) const {
  Status(onMalformed_, std::string("malformed ") + what_ + ": " + why).raise();
}

}  // namespace cerar
