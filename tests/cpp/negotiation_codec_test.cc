// Negotiation's wire form: its layout is fixed little-endian, and a corrupt body is a
// mismatch (ranks disagree on the bytes), as a corrupt control frame is.
#include <gtest/gtest.h>

#include "core/control/negotiation_codec.h"
#include "common/error.h"

namespace cerar {
namespace {

RequestMessage oneRequest() {
  RequestMessage m;
  Request r;
  r.names = {"t"};
  r.description.shapes = {{2, 3}};
  m.requests = {r};
  return m;
}

TEST(NegotiationCodec, RequestLayoutIsLittleEndian) {
  RequestMessage m = oneRequest();
  m.join = true;
  m.cacheBits = {5};
  const std::vector<uint8_t> bytes = encode(m);
  // flags, then cacheBits (u32 length 1, the byte), then the request count (u32 1), then the
  // names (count 1, length 1, 't').
  const std::vector<uint8_t> start = {2, 1, 0, 0, 0, 5, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 't'};
  ASSERT_GE(bytes.size(), start.size());
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + start.size()), start);
  EXPECT_EQ(decodeRequestMessage(bytes).requests, m.requests);
}

TEST(NegotiationCodec, CorruptBodiesAreMismatches) {
  std::vector<uint8_t> bytes = encode(oneRequest());
  auto truncated = bytes;
  truncated.pop_back();
  EXPECT_THROW(decodeRequestMessage(truncated), MismatchError);
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_THROW(decodeRequestMessage(longer), MismatchError);
  auto badCount = bytes;
  badCount[6] = 0xff;  // the request count: far more than the bytes could hold
  EXPECT_THROW(decodeRequestMessage(badCount), MismatchError);

  RequestMessage negative = oneRequest();
  negative.requests[0].description.shapes = {{2, -3}};
  EXPECT_THROW(decodeRequestMessage(encode(negative)), MismatchError);

  ResponseMessage response;
  std::vector<uint8_t> answer = encode(response);
  EXPECT_NO_THROW(decodeResponseMessage(answer));
  answer.resize(answer.size() - 1);
  EXPECT_THROW(decodeResponseMessage(answer), MismatchError);
  response.tuning.point.cycleTimeMs = -1;
  EXPECT_THROW(decodeResponseMessage(encode(response)), MismatchError);
}

}  // namespace
}  // namespace cerar
