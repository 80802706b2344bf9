#include "core/negotiation.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/common/error.h"
#include "ops/communicator.h"

namespace cerar {
namespace {

// Little-endian-agnostic: both ends are this build on the same architecture family, so
// fixed-size fields are copied as they are in memory.
class Writer {
 public:
  template <typename T>
  void put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void putString(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void putBytes(const std::vector<uint8_t>& b) {
    put<uint32_t>(static_cast<uint32_t>(b.size()));
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string getString() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(bytes_.data()) + at_, n);
    at_ += n;
    return s;
  }
  std::vector<uint8_t> getBytes() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::vector<uint8_t> b(bytes_.begin() + at_, bytes_.begin() + at_ + n);
    at_ += n;
    return b;
  }
  // Counts are checked against what is left, so a corrupt count cannot allocate wildly.
  uint32_t getCount(size_t minBytesEach) {
    const uint32_t n = get<uint32_t>();
    need(size_t(n) * minBytesEach);
    return n;
  }
  void finish() const {
    CERAR_ENFORCE(at_ == bytes_.size(), "malformed negotiation message: ",
                  bytes_.size() - at_, " trailing bytes");
  }

 private:
  void need(size_t n) const {
    CERAR_ENFORCE(n <= bytes_.size() - at_, "malformed negotiation message: truncated at byte ",
                  at_, " of ", bytes_.size());
  }
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
};

// Shapes come from another rank: every dimension non-negative, every product and sum
// representable, so sizes derived from them cannot wrap. (A "mismatch" code at merge.)
size_t mulChecked(size_t a, size_t b) {
  size_t product = 0;
  CERAR_ENFORCE(!__builtin_mul_overflow(a, b, &product),
                "malformed negotiation message: a size overflows");
  return product;
}
size_t addChecked(size_t a, size_t b) {
  size_t sum = 0;
  CERAR_ENFORCE(!__builtin_add_overflow(a, b, &sum),
                "malformed negotiation message: a size overflows");
  return sum;
}
size_t checkedElements(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t dim : shape) {
    CERAR_ENFORCE(dim >= 0, "malformed negotiation message: negative dimension ", dim);
    n = mulChecked(n, size_t(dim));
  }
  return n;
}

void putNames(Writer& w, const std::vector<std::string>& names) {
  w.put<uint32_t>(static_cast<uint32_t>(names.size()));
  for (const auto& name : names) w.putString(name);
}

std::vector<std::string> getNames(Reader& r) {
  std::vector<std::string> names(r.getCount(4));
  for (auto& name : names) name = r.getString();
  return names;
}

Wire getWire(Reader& r) {
  const uint8_t wire = r.get<uint8_t>();
  CERAR_ENFORCE(wire <= uint8_t(Wire::kBFloat16), "malformed negotiation message: bad wire");
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
  for (const auto& shape : d.shapes) {
    w.put<uint32_t>(static_cast<uint32_t>(shape.size()));
    for (int64_t dim : shape) w.put<int64_t>(dim);
  }
  w.put<uint32_t>(static_cast<uint32_t>(d.splits.size()));
  for (int64_t rows : d.splits) w.put<int64_t>(rows);
  w.put<uint8_t>(static_cast<uint8_t>(d.wire));
  w.put<int32_t>(d.processSet);
}

Description getDescription(Reader& r) {
  Description d;
  d.kind = static_cast<Kind>(r.get<uint8_t>());
  d.dtype = static_cast<DType>(r.get<uint8_t>());
  d.op = static_cast<Op>(r.get<uint8_t>());
  CERAR_ENFORCE(uint8_t(d.kind) <= uint8_t(Kind::kProcessSet) &&
                    uint8_t(d.dtype) <= uint8_t(DType::kUInt8) &&
                    uint8_t(d.op) <= uint8_t(Op::kAdasum),
                "malformed negotiation message: bad enum");
  d.onDevice = r.get<uint8_t>() != 0;
  d.root = r.get<int32_t>();
  d.prescale = r.get<double>();
  d.postscale = r.get<double>();
  d.shapes.resize(r.getCount(4));
  size_t total = 0;
  for (auto& shape : d.shapes) {
    shape.resize(r.getCount(8));
    for (auto& dim : shape) dim = r.get<int64_t>();
    total = addChecked(total, checkedElements(shape));
  }
  mulChecked(total, dtypeSize(d.dtype));  // the bytes must fit as well
  d.splits.resize(r.getCount(8));
  for (auto& rows : d.splits) {
    rows = r.get<int64_t>();
    checkedElements({rows});  // non-negative
  }
  d.wire = getWire(r);
  d.processSet = r.get<int32_t>();
  CERAR_ENFORCE(d.processSet >= 0, "malformed negotiation message: bad process set");
  return d;
}

}  // namespace

std::vector<uint8_t> encode(const RequestMessage& message) {
  Writer w;
  w.put<uint8_t>(uint8_t(message.shutdown) | uint8_t(message.join) << 1);
  w.putBytes(message.cacheBits);
  w.put<uint32_t>(static_cast<uint32_t>(message.requests.size()));
  for (const auto& request : message.requests) {
    putNames(w, request.names);
    putDescription(w, request.description);
  }
  return std::move(w.bytes);
}

RequestMessage decodeRequestMessage(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  RequestMessage message;
  const uint8_t flags = r.get<uint8_t>();
  message.shutdown = flags & 1;
  message.join = flags & 2;
  message.cacheBits = r.getBytes();
  message.requests.resize(r.getCount(8));
  for (auto& request : message.requests) {
    request.names = getNames(r);
    request.description = getDescription(r);
  }
  r.finish();
  return message;
}

std::vector<uint8_t> encode(const ResponseMessage& message) {
  Writer w;
  w.put<uint8_t>(uint8_t(message.shutdown));
  w.put<int32_t>(message.lastJoinedRank);
  w.put<uint8_t>(uint8_t(message.tuning.tuning) | uint8_t(message.tuning.frozen) << 1);
  w.put<uint64_t>(message.tuning.point.thresholdBytes);
  w.put<double>(message.tuning.point.cycleTimeMs);
  w.put<double>(message.tuning.point.componentsScale);
  w.putBytes(message.cacheBits);
  w.put<uint32_t>(static_cast<uint32_t>(message.responses.size()));
  for (const auto& response : message.responses) {
    putNames(w, response.names);
    putDescription(w, response.description);
    w.put<uint32_t>(static_cast<uint32_t>(response.firstDims.size()));
    for (int64_t dim : response.firstDims) w.put<int64_t>(dim);
    w.putBytes(response.placement);
    w.putString(response.error);
    w.put<uint8_t>(uint8_t(response.errorCode));
    w.put<int32_t>(response.errorPeer);
  }
  w.put<uint32_t>(static_cast<uint32_t>(message.groups.size()));
  for (const auto& group : message.groups) {
    w.put<uint32_t>(static_cast<uint32_t>(group.members.size()));
    for (uint32_t member : group.members) w.put<uint32_t>(member);
    w.put<uint8_t>(static_cast<uint8_t>(group.algorithm));
    w.put<int32_t>(group.components);
    w.put<double>(group.eps);
    w.put<uint8_t>(uint8_t(group.shareCorrection) | uint8_t(group.measureError) << 1 |
                   uint8_t(group.budgeted) << 2);
    w.put<uint8_t>(static_cast<uint8_t>(group.wire));
  }
  return std::move(w.bytes);
}

ResponseMessage decodeResponseMessage(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
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
  CERAR_ENFORCE(std::isfinite(point.cycleTimeMs) && point.cycleTimeMs > 0 &&
                    std::isfinite(point.componentsScale) && point.componentsScale > 0,
                "malformed negotiation message: bad cycle time or scale of c");
  message.cacheBits = r.getBytes();
  message.responses.resize(r.getCount(8));
  for (auto& response : message.responses) {
    response.names = getNames(r);
    response.description = getDescription(r);
    response.firstDims.resize(r.getCount(8));
    size_t rows = 0;
    for (auto& dim : response.firstDims) {
      dim = r.get<int64_t>();
      rows = addChecked(rows, checkedElements({dim}));
    }
    const auto& shapes = response.description.shapes;
    if (!shapes.empty() && response.firstDims.size() % shapes.size() == 0) {
      // Each gathered tensor: its rows over the ranks times one row's elements and bytes.
      for (size_t k = 0; k < shapes.size(); ++k) {
        if (shapes[k].empty()) continue;
        size_t tensorRows = 0;
        for (size_t i = k; i < response.firstDims.size(); i += shapes.size()) {
          tensorRows = addChecked(tensorRows, size_t(response.firstDims[i]));
        }
        std::vector<int64_t> row = shapes[k];
        row[0] = 1;
        mulChecked(mulChecked(tensorRows, checkedElements(row)),
                   dtypeSize(response.description.dtype));
      }
    }
    response.placement = r.getBytes();
    response.error = r.getString();
    response.errorCode = StatusCode(r.get<uint8_t>());
    response.errorPeer = r.get<int32_t>();
  }
  message.groups.resize(r.getCount(18));
  for (auto& group : message.groups) {
    group.members.resize(r.getCount(4));
    for (auto& member : group.members) member = r.get<uint32_t>();
    const uint8_t algorithm = r.get<uint8_t>();
    CERAR_ENFORCE(algorithm <= uint8_t(Algorithm::kCerar),
                  "malformed negotiation message: bad algorithm");
    group.algorithm = static_cast<Algorithm>(algorithm);
    group.components = r.get<int32_t>();
    group.eps = r.get<double>();
    const uint8_t flags = r.get<uint8_t>();
    group.shareCorrection = flags & 1;
    group.measureError = flags & 2;
    group.budgeted = flags & 4;
    group.wire = getWire(r);
  }
  r.finish();
  return message;
}

// --- the coordinator rank's table ---------------------------------------------------------

namespace {
std::string quoteNames(const std::vector<std::string>& names) {
  std::string out = names.size() == 1 ? "tensor " : "tensors ";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", '" : "'") + names[i] + "'";
  return out;
}
}  // namespace

NegotiationTable::NegotiationTable(int size, const ProcessSetTable* sets)
    : size_(size), sets_(sets), joined_(size, false) {}

ProcessSet NegotiationTable::setOf(int32_t id) const {
  if (sets_ != nullptr) {
    if (auto set = sets_->find(id)) return *set;
  }
  ProcessSet set;
  set.id = id;
  if (id == kGlobalProcessSet) {
    for (int rank = 0; rank < size_; ++rank) set.ranks.push_back(rank);
  }
  return set;
}

void NegotiationTable::dropSet(int32_t id) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->second.first.description.processSet == id ? entries_.erase(it) : std::next(it);
  }
}

void NegotiationTable::receive(int rank, const RequestMessage& message,
                               const ResponseCache& cache, Clock::time_point now) {
  CERAR_ENFORCE(rank >= 0 && rank < size_, "negotiation: rank ", rank, " out of range");
  shutdown_ = shutdown_ || message.shutdown;
  if (message.join) {
    joined_[rank] = true;
    lastJoined_ = rank;
  }
  for (size_t slot : setBits(message.cacheBits)) {
    const Response& cached = cache.at(slot);
    const int setRank = setOf(cached.description.processSet).rankOf(rank);
    CERAR_ENFORCE(setRank >= 0, "negotiation: rank ", rank, " sent a cached unit of a set it "
                  "is not in");
    add(rank, Request{cached.names, cached.descriptionAt(setRank)}, now);
  }
  for (const auto& request : message.requests) add(rank, request, now);
}

void NegotiationTable::add(int rank, const Request& request, Clock::time_point now) {
  const std::string key = request.key();
  auto [it, fresh] = entries_.try_emplace(key);
  Entry& entry = it->second;
  if (fresh) {
    entry.sequence = sequence_++;
    entry.firstSeen = now;
    entry.firstRank = rank;
    entry.first = request;
    entry.submitted.assign(size_, false);
    const ProcessSet set = setOf(request.description.processSet);
    entry.members = set.ranks;
    const size_t n = set.ranks.size();
    // alltoall: the n x n matrix of rows sent, row by sender
    const Kind kind = request.description.kind;
    const size_t columns = kind == Kind::kAlltoall    ? n
                           : kind == Kind::kAllgather ? request.description.shapes.size()
                                                      : 1;
    entry.firstDims.assign(n * columns, 0);
    entry.placement.assign(n, Response::kNone);
    if (n == 0) {
      // Removed before this unit was negotiated: every submitter fails it now.
      entry.error = detail::concat(quoteNames(request.names), ": process set ",
                                   request.description.processSet, " does not exist");
      entry.errorCode = StatusCode::kInvalidArgument;
      entry.failNow = true;
    }
  }
  const int setRank = ProcessSet{0, entry.members}.rankOf(rank);
  if (setRank < 0) {
    // Refused at enqueue on every rank; only a foreign or stale message gets here.
    if (entry.error.empty()) {
      entry.error = detail::concat(quoteNames(request.names), ": rank ", rank,
                                   " is not in process set ", request.description.processSet);
      entry.errorCode = StatusCode::kInvalidArgument;
      entry.errorPeer = rank;
      entry.failNow = true;
    }
    return;
  }
  if (!fresh && entry.submitted[rank]) {
    // A rank never has one name in flight twice; seeing it is a protocol error worth naming.
    entry.error = "rank " + std::to_string(rank) + " submitted " + quoteNames(request.names) +
                  " twice";
    entry.errorCode = StatusCode::kInternal;
    entry.errorPeer = rank;
  } else if (entry.error.empty() && !request.description.agrees(entry.first.description)) {
    entry.error = "mismatched " + quoteNames(request.names) + ": rank " +
                  std::to_string(entry.firstRank) + " submitted " +
                  entry.first.description.toString() + ", rank " + std::to_string(rank) +
                  " submitted " + request.description.toString();
    entry.errorCode = StatusCode::kMismatch;
    entry.errorPeer = rank;
  }
  entry.submitted[rank] = true;
  entry.placement[setRank] = request.description.onDevice ? Response::kDevice : Response::kHost;
  const Kind kind = entry.first.description.kind;
  if (kind != request.description.kind) return;  // a mismatch, recorded above
  const auto& shapes = request.description.shapes;
  const size_t n = entry.members.size();
  if (kind == Kind::kAllgather && shapes.size() == entry.first.description.shapes.size()) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      if (!shapes[k].empty()) entry.firstDims[setRank * shapes.size() + k] = shapes[k][0];
    }
  }
  if (kind == Kind::kAlltoall && request.description.splits.size() == n) {
    std::copy(request.description.splits.begin(), request.description.splits.end(),
              entry.firstDims.begin() + size_t(setRank) * n);
  } else if (kind == Kind::kAlltoall && entry.error.empty()) {
    entry.error = detail::concat("alltoall of ", quoteNames(request.names), ": rank ", rank,
                                 " gave ", request.description.splits.size(), " splits for ",
                                 n, " ranks");
    entry.errorCode = StatusCode::kInvalidArgument;
    entry.errorPeer = rank;
  }
}

bool NegotiationTable::complete(const Entry& entry) const {
  if (entry.failNow) return true;
  for (int rank : entry.members) {
    if (!entry.submitted[rank] && !joined_[rank]) return false;
  }
  return true;
}

Response NegotiationTable::respond(const Entry& entry) const {
  Response response;
  response.names = entry.first.names;
  response.description = entry.first.description;
  response.error = entry.error;
  response.errorCode = entry.errorCode;
  response.errorPeer = entry.errorPeer;
  const Description& d = response.description;
  if (d.kind == Kind::kAllgather || d.kind == Kind::kAlltoall) {
    response.firstDims = entry.firstDims;
  }
  const uint8_t first = d.onDevice ? Response::kDevice : Response::kHost;
  for (uint8_t place : entry.placement) {
    if (place != Response::kNone && place != first) response.placement = entry.placement;
  }
  // As Horovod: a joined rank takes part only in all-reduces (with the op's identity) and
  // barriers; an allgather, broadcast, alltoall or reducescatter that some rank joined instead
  // of submitting fails on every rank.
  const bool joinable = d.kind == Kind::kAllreduce || d.kind == Kind::kBarrier;
  if (response.error.empty() && !joinable) {
    for (int rank : entry.members) {
      if (entry.submitted[rank]) continue;
      response.error = detail::concat(kindName(d.kind), " of ", quoteNames(response.names),
                                      ": rank ", rank, " has joined; only all-reduces run while "
                                      "ranks have joined");
      response.errorCode = StatusCode::kInvalidArgument;
      response.errorPeer = rank;
      break;
    }
  }
  return response;
}

ResponseMessage NegotiationTable::decide(const ResponseCache& cache) {
  ResponseMessage message;
  message.shutdown = shutdown_;
  std::vector<std::map<std::string, Entry>::iterator> ready;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (complete(it->second)) ready.push_back(it);
  }
  std::sort(ready.begin(), ready.end(),
            [](auto a, auto b) { return a->second.sequence < b->second.sequence; });
  for (auto it : ready) {
    Response response = respond(it->second);
    const int64_t slot = response.error.empty() ? cache.find(response) : -1;
    if (slot >= 0) {
      setBit(message.cacheBits, static_cast<size_t>(slot));
    } else {
      message.responses.push_back(std::move(response));
    }
    entries_.erase(it);
  }
  if (std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) {
    message.lastJoinedRank = lastJoined_;
    joined_.assign(size_, false);
    lastJoined_ = -1;
  }
  return message;
}

std::vector<NegotiationTable::Waiting> NegotiationTable::waiting() const {
  std::vector<Waiting> out;
  for (const auto& [key, entry] : entries_) {
    Waiting w{key, entry.first.names, {}, entry.firstSeen};
    for (int rank : entry.members) {
      if (!entry.submitted[rank] && !joined_[rank]) w.missingRanks.push_back(rank);
    }
    if (!w.missingRanks.empty()) out.push_back(std::move(w));
  }
  return out;
}

void NegotiationTable::fail(const std::string& key, const Status& error) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  it->second.error = error.message;
  it->second.errorCode = error.code;
  it->second.errorPeer = error.peer;
  it->second.failNow = true;
}

}  // namespace cerar
