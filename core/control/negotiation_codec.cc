#include "core/control/negotiation_codec.h"

#include <cmath>

#include "common/bytes.h"
#include "common/dtype.h"
#include "ops/communicator.h"

namespace cerar {
namespace {

using Writer = ByteWriter<>;

ByteReader readerOf(const std::vector<uint8_t>& bytes) {
  return ByteReader(bytes, "negotiation message", StatusCode::kMismatch);
}

// Shapes come from another rank: every dimension non-negative, every product and sum
// representable, so sizes derived from them cannot wrap.
size_t mulChecked(const ByteReader& r, size_t a, size_t b) {
  size_t product = 0;
  r.check(!__builtin_mul_overflow(a, b, &product), "a size overflows");
  return product;
}
size_t addChecked(const ByteReader& r, size_t a, size_t b) {
  size_t sum = 0;
  r.check(!__builtin_add_overflow(a, b, &sum), "a size overflows");
  return sum;
}
size_t checkedElements(const ByteReader& r, const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t dim : shape) {
    if (dim < 0) r.fail("negative dimension " + std::to_string(dim));
    n = mulChecked(r, n, size_t(dim));
  }
  return n;
}

// A u32 count, then the values.
template <typename T>
void putList(Writer& w, const std::vector<T>& values) {
  w.put<uint32_t>(static_cast<uint32_t>(values.size()));
  for (T value : values) w.put<T>(value);
}
template <typename T>
std::vector<T> getList(ByteReader& r) {
  std::vector<T> values(r.count(sizeof(T)));
  for (auto& value : values) value = r.get<T>();
  return values;
}

Wire getWire(ByteReader& r) {
  const uint8_t wire = r.get<uint8_t>();
  r.check(wire <= uint8_t(Wire::kInt8), "bad wire");
  return static_cast<Wire>(wire);
}

void putDescription(Writer& w, const Description& d) {
  w.put<uint8_t>(static_cast<uint8_t>(d.kind));
  w.put<uint8_t>(static_cast<uint8_t>(d.dtype));
  w.put<uint8_t>(static_cast<uint8_t>(d.op));
  w.put<uint8_t>(d.onDevice ? 1 : 0);
  w.put<int32_t>(d.root);
  w.put<double>(d.prescale);
  w.put<double>(d.postscale);
  w.put<uint32_t>(static_cast<uint32_t>(d.shapes.size()));
  for (const auto& shape : d.shapes) putList(w, shape);
  putList(w, d.splits);
  w.put<uint8_t>(static_cast<uint8_t>(d.wire));
  w.put<int32_t>(d.processSet);
}

Description getDescription(ByteReader& r) {
  Description d;
  d.kind = static_cast<Kind>(r.get<uint8_t>());
  d.dtype = static_cast<DType>(r.get<uint8_t>());
  d.op = static_cast<Op>(r.get<uint8_t>());
  r.check(uint8_t(d.kind) <= uint8_t(Kind::kProcessSet) &&
              uint8_t(d.dtype) <= uint8_t(DType::kUInt8) && uint8_t(d.op) <= uint8_t(Op::kAdasum),
          "bad enum");
  d.onDevice = r.get<uint8_t>() != 0;
  d.root = r.get<int32_t>();
  d.prescale = r.get<double>();
  d.postscale = r.get<double>();
  d.shapes.resize(r.count(4));
  size_t total = 0;
  for (auto& shape : d.shapes) {
    shape = getList<int64_t>(r);
    total = addChecked(r, total, checkedElements(r, shape));
  }
  mulChecked(r, total, dtypeSize(d.dtype));  // the bytes must fit as well
  d.splits = getList<int64_t>(r);
  for (int64_t rows : d.splits) checkedElements(r, {rows});  // non-negative
  d.wire = getWire(r);
  d.processSet = r.get<int32_t>();
  r.check(d.processSet >= 0, "bad process set");
  return d;
}

// An allgather's rows per tensor and rank (firstDims) with its shapes: each gathered tensor,
// its rows over the ranks times one row's elements and bytes, must fit.
void checkGatheredSizes(const ByteReader& r, const Response& response) {
  size_t rows = 0;
  for (int64_t dim : response.firstDims) rows = addChecked(r, rows, checkedElements(r, {dim}));
  const auto& shapes = response.description.shapes;
  if (shapes.empty() || response.firstDims.size() % shapes.size() != 0) return;
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (shapes[k].empty()) continue;
    size_t tensorRows = 0;
    for (size_t i = k; i < response.firstDims.size(); i += shapes.size()) {
      tensorRows = addChecked(r, tensorRows, size_t(response.firstDims[i]));
    }
    std::vector<int64_t> row = shapes[k];
    row[0] = 1;
    mulChecked(r, mulChecked(r, tensorRows, checkedElements(r, row)),
               dtypeSize(response.description.dtype));
  }
}

void putResponse(Writer& w, const Response& response) {
  w.strs(response.names);
  putDescription(w, response.description);
  putList(w, response.firstDims);
  w.bytes(response.placement);
  w.str(response.error);
  w.put<uint8_t>(uint8_t(response.errorCode));
  w.put<int32_t>(response.errorPeer);
}

Response getResponse(ByteReader& r) {
  Response response;
  response.names = r.strs();
  response.description = getDescription(r);
  response.firstDims = getList<int64_t>(r);
  checkGatheredSizes(r, response);
  response.placement = r.bytes();
  response.error = r.str();
  response.errorCode = StatusCode(r.get<uint8_t>());
  response.errorPeer = r.get<int32_t>();
  return response;
}

void putGroup(Writer& w, const FusedGroup& group) {
  putList(w, group.members);
  w.put<uint8_t>(static_cast<uint8_t>(group.algorithm));
  w.put<int32_t>(group.components);
  w.put<double>(group.eps);
  w.put<uint8_t>(uint8_t(group.shareCorrection) | uint8_t(group.measureError) << 1 |
                 uint8_t(group.budgeted) << 2 | uint8_t(group.hierarchical) << 3);
  w.put<uint8_t>(static_cast<uint8_t>(group.wire));
}

FusedGroup getGroup(ByteReader& r) {
  FusedGroup group;
  group.members = getList<uint32_t>(r);
  const uint8_t algorithm = r.get<uint8_t>();
  r.check(algorithm <= uint8_t(Algorithm::kAdasum), "bad algorithm");
  group.algorithm = static_cast<Algorithm>(algorithm);
  group.components = r.get<int32_t>();
  group.eps = r.get<double>();
  const uint8_t flags = r.get<uint8_t>();
  group.shareCorrection = flags & 1;
  group.measureError = flags & 2;
  group.budgeted = flags & 4;
  group.hierarchical = flags & 8;
  group.wire = getWire(r);
  return group;
}

void putRequests(Writer& w, const RequestMessage& message) {
  w.put<uint8_t>(uint8_t(message.shutdown) | uint8_t(message.join) << 1);
  w.bytes(message.cacheBits);
  w.put<uint32_t>(static_cast<uint32_t>(message.requests.size()));
  for (const auto& request : message.requests) {
    w.strs(request.names);
    putDescription(w, request.description);
  }
}

RequestMessage getRequests(ByteReader& r) {
  RequestMessage message;
  const uint8_t flags = r.get<uint8_t>();
  message.shutdown = flags & 1;
  message.join = flags & 2;
  message.cacheBits = r.bytes();
  message.requests.resize(r.count(8));
  for (auto& request : message.requests) {
    request.names = r.strs();
    request.description = getDescription(r);
  }
  return message;
}

}  // namespace

std::vector<uint8_t> encode(const RequestMessage& message) {
  Writer w;
  putRequests(w, message);
  return std::move(w.data);
}

RequestMessage decodeRequestMessage(const std::vector<uint8_t>& bytes) {
  ByteReader r = readerOf(bytes);
  RequestMessage message = getRequests(r);
  r.finish();
  return message;
}

std::vector<uint8_t> encode(const CycleReport& report) {
  Writer w;
  w.bytes(report.held);
  w.bytes(report.missing);
  w.put<uint32_t>(static_cast<uint32_t>(report.parts.size()));
  for (const RankPart& part : report.parts) {
    w.put<int32_t>(part.rank);
    putRequests(w, part.message);
  }
  return std::move(w.data);
}

CycleReport decodeCycleReport(const std::vector<uint8_t>& bytes, int size) {
  ByteReader r = readerOf(bytes);
  CycleReport report;
  report.held = r.bytes();
  report.missing = r.bytes();
  report.parts.resize(r.count(10));
  int32_t last = -1;
  for (RankPart& part : report.parts) {
    part.rank = r.get<int32_t>();
    r.check(part.rank > last && part.rank < size, "a part's rank out of order or range");
    last = part.rank;
    part.message = getRequests(r);
  }
  r.finish();
  return report;
}

std::vector<uint8_t> encode(const ResponseMessage& message) {
  Writer w;
  w.put<uint8_t>(uint8_t(message.shutdown));
  w.put<int32_t>(message.lastJoinedRank);
  w.put<uint8_t>(uint8_t(message.tuning.tuning) | uint8_t(message.tuning.frozen) << 1);
  w.put<uint64_t>(message.tuning.point.thresholdBytes);
  w.put<double>(message.tuning.point.cycleTimeMs);
  w.put<double>(message.tuning.point.componentsScale);
  w.bytes(message.cacheBits);
  w.put<uint32_t>(static_cast<uint32_t>(message.responses.size()));
  for (const auto& response : message.responses) putResponse(w, response);
  w.put<uint32_t>(static_cast<uint32_t>(message.groups.size()));
  for (const auto& group : message.groups) putGroup(w, group);
  w.bytes(message.invalidated);
  w.put<uint8_t>(uint8_t(message.rollCall) | uint8_t(message.idleShift & 7) << 1);
  return std::move(w.data);
}

ResponseMessage decodeResponseMessage(const std::vector<uint8_t>& bytes) {
  ByteReader r = readerOf(bytes);
  ResponseMessage message;
  message.shutdown = r.get<uint8_t>() & 1;
  message.lastJoinedRank = r.get<int32_t>();
  const uint8_t tuningFlags = r.get<uint8_t>();
  message.tuning.tuning = tuningFlags & 1;
  message.tuning.frozen = tuningFlags & 2;
  TuningPoint& point = message.tuning.point;
  point.thresholdBytes = r.get<uint64_t>();
  point.cycleTimeMs = r.get<double>();
  point.componentsScale = r.get<double>();
  r.check(std::isfinite(point.cycleTimeMs) && point.cycleTimeMs > 0 &&
              std::isfinite(point.componentsScale) && point.componentsScale > 0,
          "bad cycle time or scale of c");
  message.cacheBits = r.bytes();
  message.responses.resize(r.count(8));
  for (auto& response : message.responses) response = getResponse(r);
  message.groups.resize(r.count(18));
  for (auto& group : message.groups) group = getGroup(r);
  message.invalidated = r.bytes();
  const uint8_t last = r.get<uint8_t>();
  message.rollCall = last & 1;
  message.idleShift = (last >> 1) & 7;
  r.finish();
  return message;
}

}  // namespace cerar
