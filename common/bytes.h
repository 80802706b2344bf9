// The one byte codec of cerar's messages (negotiation, job settings, control frames, the
// rendezvous store): fixed-size fields little-endian, strings and byte strings after a u32
// length. Reading is checked: a field past the end, or a count larger than the bytes left could
// hold, is a malformed message, raised as one error class chosen by the reader's owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"

namespace cerar {

namespace bytes_detail {
// The unsigned integer of a field's bits: doubles travel as their IEEE-754 bits.
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 1, uint8_t,
             std::conditional_t<sizeof(T) == 2, uint16_t,
             std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
template <typename T>
constexpr bool kField =
    (std::is_arithmetic_v<T> || std::is_enum_v<T>) && !std::is_same_v<T, bool>;  // bool: u8
}  // namespace bytes_detail

// Writes little-endian into `data`: Byte is uint8_t (cerar's messages) or char (Gloo's store).
template <typename Byte = uint8_t>
class ByteWriter {
 public:
  std::vector<Byte> data;

  template <typename T>
  void put(T value) {
    static_assert(bytes_detail::kField<T>, "a fixed-size field");
    bytes_detail::Bits<T> bits;
    std::memcpy(&bits, &value, sizeof bits);
    for (size_t i = 0; i < sizeof bits; ++i) data.push_back(Byte(uint8_t(bits >> (8 * i))));
  }
  // A length (u32), then the bytes.
  void bytes(const void* p, size_t n) {
    put<uint32_t>(static_cast<uint32_t>(n));
    raw(p, n);
  }
  template <typename B>
  void bytes(const std::vector<B>& b) { bytes(b.data(), b.size()); }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  // A count (u32), then each string.
  void strs(const std::vector<std::string>& v) {
    put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const auto& s : v) str(s);
  }
  // Bytes with no length in front (a body after its own header).
  void raw(const void* p, size_t n) {
    const auto* from = static_cast<const Byte*>(p);
    if (n > 0) data.insert(data.end(), from, from + n);  // p may be null when n is 0
  }
};

// Reads what ByteWriter wrote, from memory that outlives the reader. Every failure throws the
// Error of `onMalformed`, its message naming `what` ("negotiation message", ...).
class ByteReader {
 public:
  ByteReader(const void* data, size_t size, const char* what,
             StatusCode onMalformed = StatusCode::kInternal)
      : data_(static_cast<const uint8_t*>(data)), size_(size), what_(what),
        onMalformed_(onMalformed) {}
  template <typename B>
  ByteReader(const std::vector<B>& bytes, const char* what,
             StatusCode onMalformed = StatusCode::kInternal)
      : ByteReader(bytes.data(), bytes.size(), what, onMalformed) {}

  template <typename T>
  T get() {
    static_assert(bytes_detail::kField<T>, "a fixed-size field");
    const uint8_t* p = take(sizeof(T));
    bytes_detail::Bits<T> bits = 0;
    for (size_t i = 0; i < sizeof bits; ++i) bits |= bytes_detail::Bits<T>(p[i]) << (8 * i);
    T value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  template <typename B = uint8_t>
  std::vector<B> bytes() {
    const uint32_t n = get<uint32_t>();
    const auto* p = reinterpret_cast<const B*>(take(n));
    return std::vector<B>(p, p + n);
  }
  std::string str();
  std::vector<std::string> strs();
  // A count of items of at least `minBytesEach` bytes each, checked against what is left, so
  // a corrupt count cannot allocate wildly.
  uint32_t count(size_t minBytesEach);
  // `n` bytes in place (valid while the memory is).
  const uint8_t* take(size_t n);
  // The message must end here.
  void finish() const;
  size_t left() const { return size_ - at_; }

  // Refuses the message unless `ok`: for a field that is readable but not valid.
  void check(bool ok, const char* why) const {
    if (!ok) fail(why);
  }
  [[noreturn]] void fail(const std::string& why) const;

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
  const char* what_;  // a literal
  StatusCode onMalformed_;
};

}  // namespace cerar
