#include "core/control/message.h"

#include <algorithm>
#include <iterator>
#include <sstream>

namespace cerar {

const char* kindName(Kind kind) {
  switch (kind) {
    case Kind::kAllreduce: return "allreduce";
    case Kind::kAllgather: return "allgather";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kBarrier: return "barrier";
    case Kind::kReducescatter: return "reducescatter";
    case Kind::kAlltoall: return "alltoall";
    case Kind::kProcessSet: return "process set change";
  }
  return "?";
}

// Declared in core/types.h (the public Op); defined here, where descriptions print it.
const char* opName(Op op) {
  switch (op) {
    case Op::kSum: return "sum";
    case Op::kAverage: return "average";
    case Op::kMin: return "min";
    case Op::kMax: return "max";
    case Op::kAdasum: return "adasum";
  }
  return "?";
}

bool Description::agrees(const Description& other) const {
  if (kind != Kind::kAllgather && kind != Kind::kAlltoall) {
    if (onDevice == other.onDevice) return *this == other;  // the common case, without a copy
    Description same = other;
    same.onDevice = onDevice;
    return *this == same;
  }
  if (kind != other.kind || dtype != other.dtype || op != other.op ||
      root != other.root || prescale != other.prescale || postscale != other.postscale ||
      wire != other.wire || processSet != other.processSet ||
      shapes.size() != other.shapes.size()) {
    return false;
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& a = shapes[i];
    const auto& b = other.shapes[i];
    if (a.size() != b.size() || a.empty()) return false;
    if (!std::equal(a.begin() + 1, a.end(), b.begin() + 1)) return false;
  }
  return true;
}

bool Response::onDeviceAt(int rank) const {
  if (placement.empty()) return description.onDevice;
  return size_t(rank) < placement.size() && placement[rank] == kDevice;
}

Description Response::descriptionAt(int rank) const {
  Description mine = description;
  mine.onDevice = onDeviceAt(rank);
  const size_t tensors = mine.shapes.size();
  if (mine.kind == Kind::kAllgather && (size_t(rank) + 1) * tensors <= firstDims.size()) {
    for (size_t k = 0; k < tensors; ++k) {
      if (!mine.shapes[k].empty()) mine.shapes[k][0] = firstDims[rank * tensors + k];
    }
  }
  return mine;
}

bool Response::describes(const Description& asked, int rank) const {
  if (description.kind != Kind::kAllgather && description.onDevice == onDeviceAt(rank)) {
    return asked == description;
  }
  return asked == descriptionAt(rank);
}

size_t shapeElements(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t dim : shape) n *= static_cast<size_t>(dim);
  return n;
}

int64_t scatterRows(int64_t rows, int rank, int size) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

int64_t scatterOffset(int64_t rows, int rank, int size) {
  return int64_t(rank) * (rows / size) + std::min<int64_t>(rank, rows % size);
}

size_t Description::elements() const {
  size_t total = 0;
  for (const auto& shape : shapes) total += shapeElements(shape);
  return total;
}

size_t Description::bytes() const { return elements() * dtypeSize(dtype); }

std::string Description::toString() const {
  std::ostringstream out;
  out << kindName(kind) << " " << dtypeName(dtype);
  if (kind == Kind::kAllreduce || kind == Kind::kReducescatter) out << " " << opName(op);
  for (const auto& shape : shapes) {
    out << " shape [";
    for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
    out << "]";
  }
  if (kind == Kind::kBroadcast) out << " root " << root;
  if (kind == Kind::kProcessSet && root > 0) out << " removing set " << root;
  if (kind == Kind::kProcessSet && root == 0) {
    out << " adding ranks [";
    for (size_t i = 0; i < splits.size(); ++i) out << (i ? ", " : "") << splits[i];
    out << "]";
  }
  if (processSet != 0) out << " in process set " << processSet;
  if (kind == Kind::kAlltoall && !splits.empty()) {
    out << " splits [";
    for (size_t i = 0; i < splits.size(); ++i) out << (i ? ", " : "") << splits[i];
    out << "]";
  }
  if (prescale != 1.0) out << " prescale " << prescale;
  if (postscale != 1.0) out << " postscale " << postscale;
  if (wire != Wire::kNone) out << " wire " << wireName(wire);
  out << (onDevice ? " on cuda" : " on host");
  return out.str();
}

namespace {
// Names are never empty and never hold 0x1f, so a leading 0x1f cannot start a plain key.
std::string joinNames(const std::vector<std::string>& names, int32_t processSet) {
  if (processSet == 0 && names.size() == 1) return names.front();
  std::string key = processSet == 0 ? "" : "\x1f" + std::to_string(processSet) + "\x1f";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) key += '\x1f';  // a separator no sane tensor name contains
    key += names[i];
  }
  return key;
}
}  // namespace

std::string unitKey(const std::vector<std::string>& names, int32_t processSet) {
  return joinNames(names, processSet);
}
std::string Request::key() const { return joinNames(names, description.processSet); }
std::string Response::key() const { return joinNames(names, description.processSet); }

void setBit(std::vector<uint8_t>& bits, size_t index) {
  if (bits.size() <= index / 8) bits.resize(index / 8 + 1, 0);
  bits[index / 8] |= uint8_t(1u << (index % 8));
}

bool testBit(const std::vector<uint8_t>& bits, size_t index) {
  return index / 8 < bits.size() && (bits[index / 8] >> (index % 8)) & 1u;
}

bool anyBit(const std::vector<uint8_t>& bits) {
  return std::any_of(bits.begin(), bits.end(), [](uint8_t b) { return b != 0; });
}

std::vector<size_t> setBits(const std::vector<uint8_t>& bits) {
  std::vector<size_t> indices;
  for (size_t i = 0; i < bits.size() * 8; ++i) {
    if (testBit(bits, i)) indices.push_back(i);
  }
  return indices;
}

}  // namespace cerar

namespace cerar {

void orBits(std::vector<uint8_t>& bits, const std::vector<uint8_t>& other) {
  if (other.size() > bits.size()) bits.resize(other.size(), 0);
  for (size_t i = 0; i < other.size(); ++i) bits[i] |= other[i];
}

void mergeReport(CycleReport& into, CycleReport&& child) {
  orBits(into.held, child.held);
  orBits(into.missing, child.missing);
  if (child.parts.empty()) return;
  std::vector<RankPart> merged;
  merged.reserve(into.parts.size() + child.parts.size());
  std::merge(std::make_move_iterator(into.parts.begin()), std::make_move_iterator(into.parts.end()),
             std::make_move_iterator(child.parts.begin()),
             std::make_move_iterator(child.parts.end()), std::back_inserter(merged),
             [](const RankPart& a, const RankPart& b) { return a.rank < b.rank; });
  into.parts = std::move(merged);
}

}  // namespace cerar
