#include "ops/collectives.h"

#include <algorithm>
#include <cstring>

#include "ops/common/error.h"

namespace cerar {

void ringAllgather(Transport& t, void* buffer, const std::vector<size_t>& blockBytes) {
  const int N = t.size();
  CERAR_ENFORCE(int(blockBytes.size()) == N, "rank ", t.rank(), ": allgather needs ", N,
                " block sizes, got ", blockBytes.size());
  std::vector<size_t> offsets(N + 1, 0);
  for (int i = 0; i < N; ++i) offsets[i + 1] = offsets[i] + blockBytes[i];
  auto* bytes = static_cast<std::byte*>(buffer);
  // Step s: send block (rank - s) to next, receive block (rank - s - 1) from prev.
  for (int s = 0; s < N - 1; ++s) {
    const int sendBlock = (t.rank() - s + N) % N;
    const int recvBlock = (t.rank() - s - 1 + 2 * N) % N;
    const bool receiving = blockBytes[recvBlock] > 0;
    const bool sending = blockBytes[sendBlock] > 0;
    if (receiving) t.postRecv(t.prev(), bytes + offsets[recvBlock], blockBytes[recvBlock]);
    if (sending) t.postSend(t.next(), bytes + offsets[sendBlock], blockBytes[sendBlock]);
    if (receiving) t.waitRecv(t.prev());
    if (sending) t.waitSend(t.next());
  }
}

void chainBroadcast(Transport& t, void* data, size_t bytes, int root, size_t segmentBytes) {
  const int N = t.size();
  CERAR_ENFORCE(root >= 0 && root < N, "rank ", t.rank(), ": broadcast root ", root,
                " out of range for ", N, " ranks");
  if (N == 1 || bytes == 0) return;
  const int position = (t.rank() - root + N) % N;
  const bool receives = position > 0;
  const bool forwards = position < N - 1;
  auto* base = static_cast<std::byte*>(data);
  const size_t segments = (bytes + segmentBytes - 1) / segmentBytes;
  auto length = [&](size_t k) { return std::min(segmentBytes, bytes - k * segmentBytes); };
  if (receives) {
    for (size_t k = 0; k < segments; ++k) t.postRecv(t.prev(), base + k * segmentBytes, length(k));
  }
  for (size_t k = 0; k < segments; ++k) {
    if (receives) t.waitRecv(t.prev());
    if (forwards) t.postSend(t.next(), base + k * segmentBytes, length(k));
  }
  if (forwards) {
    for (size_t k = 0; k < segments; ++k) t.waitSend(t.next());
  }
}

namespace {

constexpr size_t kFrameBytes = 256;
constexpr size_t kInlineBytes = kFrameBytes - sizeof(uint64_t);

struct Frame {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(kFrameBytes, 0);
  static Frame of(const std::vector<uint8_t>& message) {
    Frame frame;
    const uint64_t length = message.size();
    std::memcpy(frame.bytes.data(), &length, sizeof length);
    if (!message.empty())  // an empty vector's data() may be null, which memcpy forbids
      std::memcpy(frame.bytes.data() + sizeof length, message.data(),
                  std::min(message.size(), kInlineBytes));
    return frame;
  }
  uint64_t length() const {
    uint64_t length;
    std::memcpy(&length, bytes.data(), sizeof length);
    return length;
  }
};

void sendMessage(Transport& t, int peer, const std::vector<uint8_t>& message) {
  Frame frame = Frame::of(message);
  t.postSend(peer, frame.bytes.data(), kFrameBytes);
  if (message.size() > kInlineBytes) {
    t.postSend(peer, message.data() + kInlineBytes, message.size() - kInlineBytes);
    t.waitSend(peer);
  }
  t.waitSend(peer);
}

// Completes a message whose frame has arrived.
std::vector<uint8_t> finishMessage(Transport& t, int peer, const Frame& frame) {
  const uint64_t length = frame.length();
  CERAR_ENFORCE(length < (uint64_t(1) << 40), "rank ", t.rank(), ": control message of ",
                length, " bytes from rank ", peer, " (corrupt frame)");
  std::vector<uint8_t> message(length);
  if (length > 0)
    std::memcpy(message.data(), frame.bytes.data() + sizeof(uint64_t),
                std::min<size_t>(length, kInlineBytes));
  if (length > kInlineBytes) {
    t.postRecv(peer, message.data() + kInlineBytes, length - kInlineBytes);
    t.waitRecv(peer);
  }
  return message;
}

}  // namespace

std::vector<std::vector<uint8_t>> gatherBytes(Transport& t, const std::vector<uint8_t>& mine,
                                              int root) {
  const int N = t.size();
  if (t.rank() != root) {
    sendMessage(t, root, mine);
    return {};
  }
  std::vector<std::vector<uint8_t>> all(N);
  std::vector<Frame> frames(N);
  for (int peer = 0; peer < N; ++peer) {
    if (peer != root) t.postRecv(peer, frames[peer].bytes.data(), kFrameBytes);
  }
  for (int peer = 0; peer < N; ++peer) {
    if (peer == root) {
      all[peer] = mine;
      continue;
    }
    t.waitRecv(peer);
    all[peer] = finishMessage(t, peer, frames[peer]);
  }
  return all;
}

std::vector<uint8_t> broadcastBytes(Transport& t, const std::vector<uint8_t>& message, int root) {
  const int N = t.size();
  if (t.rank() == root) {
    Frame frame = Frame::of(message);
    const bool tail = message.size() > kInlineBytes;
    for (int peer = 0; peer < N; ++peer) {
      if (peer == root) continue;
      t.postSend(peer, frame.bytes.data(), kFrameBytes);
      if (tail) t.postSend(peer, message.data() + kInlineBytes, message.size() - kInlineBytes);
    }
    for (int peer = 0; peer < N; ++peer) {
      if (peer == root) continue;
      t.waitSend(peer);
      if (tail) t.waitSend(peer);
    }
    return message;
  }
  Frame frame;
  t.postRecv(root, frame.bytes.data(), kFrameBytes);
  t.waitRecv(root);
  return finishMessage(t, root, frame);
}

}  // namespace cerar
