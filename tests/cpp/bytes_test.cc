// The byte codec of cerar's messages: little-endian fields whatever the host, checked reads,
// and a malformed message raised as the class its reader was given.
#include <gtest/gtest.h>

#include <cstring>

#include "common/bytes.h"
#include "common/error.h"

namespace cerar {
namespace {

TEST(Bytes, FieldsAreLittleEndianAndRoundTrip) {
  ByteWriter<> w;
  w.put<uint32_t>(0x01020304);
  w.put<int16_t>(-2);
  w.put<double>(1.5);
  w.str("ab");
  w.strs({"x", ""});
  const std::vector<uint8_t> expectedStart = {4, 3, 2, 1, 0xfe, 0xff};
  EXPECT_EQ(std::vector<uint8_t>(w.data.begin(), w.data.begin() + 6), expectedStart);
  // 1.5 is 0x3ff8000000000000: its high byte last.
  EXPECT_EQ(w.data[6 + 7], 0x3f);
  EXPECT_EQ(w.data[6 + 6], 0xf8);

  ByteReader r(w.data, "test message");
  EXPECT_EQ(r.get<uint32_t>(), 0x01020304u);
  EXPECT_EQ(r.get<int16_t>(), -2);
  EXPECT_EQ(r.get<double>(), 1.5);
  EXPECT_EQ(r.str(), "ab");
  EXPECT_EQ(r.strs(), (std::vector<std::string>{"x", ""}));
  EXPECT_EQ(r.left(), 0u);
  r.finish();
}

TEST(Bytes, CharBytesMatchUnsignedBytes) {
  ByteWriter<char> chars;
  ByteWriter<> bytes;
  chars.put<int64_t>(-3);
  bytes.put<int64_t>(-3);
  chars.bytes(std::vector<char>{'a', '\xff'});
  bytes.bytes(std::vector<uint8_t>{'a', 0xff});
  ASSERT_EQ(chars.data.size(), bytes.data.size());
  EXPECT_EQ(std::memcmp(chars.data.data(), bytes.data.data(), bytes.data.size()), 0);
  ByteReader r(chars.data, "test message");
  EXPECT_EQ(r.get<int64_t>(), -3);
  EXPECT_EQ(r.bytes<char>(), (std::vector<char>{'a', '\xff'}));
}

TEST(Bytes, MalformedInputRaisesTheReadersClass) {
  ByteWriter<> w;
  w.put<uint32_t>(1000);  // a string claiming 1000 bytes
  w.put<uint8_t>(7);
  {
    ByteReader r(w.data, "test message");  // internal unless told
    EXPECT_THROW(r.str(), InternalError);
  }
  {
    ByteReader r(w.data, "test message", StatusCode::kMismatch);
    try {
      r.str();
      FAIL() << "read past the end";
    } catch (const MismatchError& e) {
      EXPECT_NE(std::string(e.what()).find("malformed test message: truncated at byte 4 of 5"),
                std::string::npos)
          << e.what();
    }
  }
  {
    ByteReader r(w.data, "test message", StatusCode::kMismatch);
    EXPECT_THROW(r.count(1), MismatchError);  // 1000 items cannot fit in 1 byte
  }
  {
    ByteReader r(w.data, "test message", StatusCode::kMismatch);
    r.get<uint32_t>();
    EXPECT_THROW(r.finish(), MismatchError);  // one byte left over
    EXPECT_THROW(r.check(false, "bad field"), MismatchError);
    r.check(true, "fine");
  }
  ByteReader empty(nullptr, 0, "test message");
  EXPECT_THROW(empty.get<uint8_t>(), InternalError);
  empty.finish();
}

}  // namespace
}  // namespace cerar
