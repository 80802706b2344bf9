#include "ops/collectives.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "ops/control_frame.h"

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

void pairwiseAlltoall(Transport& t, const void* send, const std::vector<size_t>& sendBytes,
                      void* recv, const std::vector<size_t>& recvBytes) {
  const int N = t.size(), rank = t.rank();
  CERAR_ENFORCE(int(sendBytes.size()) == N && int(recvBytes.size()) == N, "rank ", rank,
                ": alltoall needs ", N, " block sizes each way, got ", sendBytes.size(), " and ",
                recvBytes.size());
  CERAR_ENFORCE(sendBytes[rank] == recvBytes[rank], "rank ", rank, ": alltoall sends itself ",
                sendBytes[rank], " bytes but expects ", recvBytes[rank]);
  auto offsets = [N](const std::vector<size_t>& bytes) {
    std::vector<size_t> at(N + 1, 0);
    for (int i = 0; i < N; ++i) at[i + 1] = at[i] + bytes[i];
    return at;
  };
  const std::vector<size_t> sendAt = offsets(sendBytes), recvAt = offsets(recvBytes);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (sendBytes[rank] > 0) std::memcpy(out + recvAt[rank], in + sendAt[rank], sendBytes[rank]);
  // Peers in the order rank+1, rank+2, ...: every rank starts with a different partner.
  for (int s = 1; s < N; ++s) {
    const int from = (rank - s + N) % N;
    if (recvBytes[from] > 0) t.postRecv(from, out + recvAt[from], recvBytes[from]);
  }
  for (int s = 1; s < N; ++s) {
    const int to = (rank + s) % N;
    if (sendBytes[to] > 0) t.postSend(to, in + sendAt[to], sendBytes[to]);
  }
  for (int s = 1; s < N; ++s) {
    const int from = (rank - s + N) % N, to = (rank + s) % N;
    if (recvBytes[from] > 0) t.waitRecv(from);
    if (sendBytes[to] > 0) t.waitSend(to);
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

using namespace control_frame;

void sendMessage(Transport& t, int peer, Type type, const std::vector<uint8_t>& message) {
  const std::vector<uint8_t> frame = encode(type, message);
  t.postSend(peer, frame.data(), kFrameBytes);
  if (message.size() > kInlineBytes) {
    t.postSend(peer, message.data() + kInlineBytes, message.size() - kInlineBytes);
    t.waitSend(peer);
  }
  t.waitSend(peer);
}

// Completes a message whose frame has arrived; the frame is checked before anything is
// allocated, so a corrupt length costs nothing. `type` gets the frame's type (an abort is
// accepted wherever `expected` is).
std::vector<uint8_t> receiveRest(Transport& t, int peer, const std::vector<uint8_t>& frame,
                                 Type expected, uint64_t maxBytes, Type& type) {
  const Header header = parse(frame.data(), expected, maxBytes, t.rank(), peer);
  std::vector<uint8_t> message(header.length);
  if (header.length > 0)
    std::memcpy(message.data(), frame.data() + kHeaderBytes,
                std::min<size_t>(header.length, kInlineBytes));
  if (header.length > kInlineBytes) {
    t.postRecv(peer, message.data() + kInlineBytes, header.length - kInlineBytes);
    t.waitRecv(peer);
  }
  type = header.type;
  return message;
}

Error abortError(const Transport& t, int peer, const std::vector<uint8_t>& why) {
  return Error(detail::concat("rank ", t.rank(), ": rank ", peer, " stopped the job: ",
                              std::string(why.begin(), why.end())));
}

// receiveRest, an abort thrown as Error with its reason.
std::vector<uint8_t> finishMessage(Transport& t, int peer, const std::vector<uint8_t>& frame,
                                   Type expected, uint64_t maxBytes) {
  Type type;
  std::vector<uint8_t> message = receiveRest(t, peer, frame, expected, maxBytes, type);
  if (type == Type::kAbort) throw abortError(t, peer, message);
  return message;
}

std::vector<uint8_t> abortText(const std::string& why) {
  return std::vector<uint8_t>(why.begin(), why.begin() + std::min<size_t>(why.size(), 4096));
}

void sendToAll(Transport& t, Type type, const std::vector<uint8_t>& message, int root) {
  const std::vector<uint8_t> frame = encode(type, message);
  const bool tail = message.size() > kInlineBytes;
  for (int peer = 0; peer < t.size(); ++peer) {
    if (peer == root) continue;
    t.postSend(peer, frame.data(), kFrameBytes);
    if (tail) t.postSend(peer, message.data() + kInlineBytes, message.size() - kInlineBytes);
  }
  for (int peer = 0; peer < t.size(); ++peer) {
    if (peer == root) continue;
    t.waitSend(peer);
    if (tail) t.waitSend(peer);
  }
}

}  // namespace

std::vector<std::vector<uint8_t>> gatherBytes(Transport& t, const std::vector<uint8_t>& mine,
                                              int root, uint64_t maxBytes) {
  const int N = t.size();
  CERAR_ENFORCE(mine.size() <= maxBytes, "rank ", t.rank(), ": a control message of ",
                mine.size(), " bytes, past the limit of ", maxBytes);
  if (t.rank() != root) {
    sendMessage(t, root, Type::kGather, mine);
    return {};
  }
  std::vector<std::vector<uint8_t>> all(N);
  std::vector<std::vector<uint8_t>> frames(N, std::vector<uint8_t>(kFrameBytes));
  for (int peer = 0; peer < N; ++peer) {
    if (peer != root) t.postRecv(peer, frames[peer].data(), kFrameBytes);
  }
  // Every frame first, so that no receive into `frames` is left posted when one is refused;
  // then every valid tail, so that healthy senders are not left waiting on theirs.
  for (int peer = 0; peer < N; ++peer) {
    if (peer != root) t.waitRecv(peer);
  }
  std::string refused;
  for (int peer = 0; peer < N; ++peer) {
    if (peer == root) {
      all[peer] = mine;
      continue;
    }
    try {
      all[peer] = finishMessage(t, peer, frames[peer], Type::kGather, maxBytes);
    } catch (const Error& e) {
      if (refused.empty()) refused = e.what();
    }
  }
  if (!refused.empty()) throw Error(refused);
  return all;
}

std::vector<uint8_t> broadcastBytes(Transport& t, const std::vector<uint8_t>& message, int root,
                                    uint64_t maxBytes) {
  if (t.rank() == root) {
    CERAR_ENFORCE(message.size() <= maxBytes, "rank ", t.rank(), ": a control message of ",
                  message.size(), " bytes, past the limit of ", maxBytes);
    sendToAll(t, Type::kBroadcast, message, root);
    return message;
  }
  std::vector<uint8_t> frame(kFrameBytes);
  t.postRecv(root, frame.data(), kFrameBytes);
  t.waitRecv(root);
  return finishMessage(t, root, frame, Type::kBroadcast, maxBytes);
}

void broadcastAbort(Transport& t, const std::string& why, int root) {
  sendToAll(t, Type::kAbort, abortText(why), root);
}

std::vector<std::vector<uint8_t>> gatherFromChildren(Transport& t,
                                                     const std::vector<int>& children,
                                                     uint64_t maxBytes) {
  std::vector<std::vector<uint8_t>> frames(children.size(), std::vector<uint8_t>(kFrameBytes));
  for (size_t i = 0; i < children.size(); ++i) {
    t.postRecv(children[i], frames[i].data(), kFrameBytes);
  }
  for (int child : children) t.waitRecv(child);
  // As gatherBytes: every valid tail is taken before a refusal is thrown.
  std::vector<std::vector<uint8_t>> messages(children.size());
  std::string refused;
  for (size_t i = 0; i < children.size(); ++i) {
    try {
      messages[i] = finishMessage(t, children[i], frames[i], Type::kGather, maxBytes);
    } catch (const Error& e) {
      if (refused.empty()) refused = e.what();
    }
  }
  if (!refused.empty()) throw Error(refused);
  return messages;
}

void sendToParent(Transport& t, int parent, const std::vector<uint8_t>& message) {
  sendMessage(t, parent, Type::kGather, message);
}

void abortToParent(Transport& t, int parent, const std::string& why) {
  sendMessage(t, parent, Type::kAbort, abortText(why));
}

std::vector<uint8_t> relayDown(Transport& t, int parent, const std::vector<int>& children,
                               const std::vector<uint8_t>& message, uint64_t maxBytes) {
  Type type = Type::kBroadcast;
  std::vector<uint8_t> bytes;
  if (parent < 0) {
    CERAR_ENFORCE(message.size() <= maxBytes, "rank ", t.rank(), ": a control message of ",
                  message.size(), " bytes, past the limit of ", maxBytes);
    bytes = message;
  } else {
    std::vector<uint8_t> frame(kFrameBytes);
    t.postRecv(parent, frame.data(), kFrameBytes);
    t.waitRecv(parent);
    bytes = receiveRest(t, parent, frame, Type::kBroadcast, maxBytes, type);
  }
  for (int child : children) sendMessage(t, child, type, bytes);
  if (type == Type::kAbort) throw abortError(t, parent, bytes);
  return bytes;
}

void abortDown(Transport& t, const std::vector<int>& children, const std::string& why) {
  for (int child : children) sendMessage(t, child, Type::kAbort, abortText(why));
}

std::vector<uint8_t> treeBroadcastBytes(Transport& t, const std::vector<uint8_t>& message,
                                        int fanout) {
  const ControlTree tree{t.rank(), t.size(), fanout};
  return relayDown(t, tree.parent(), tree.children(), message);
}

std::vector<uint8_t> treeAllreduceBytes(
    Transport& t, std::vector<uint8_t> mine, int fanout,
    const std::function<void(std::vector<uint8_t>&, const std::vector<uint8_t>&)>& combine) {
  const ControlTree tree{t.rank(), t.size(), fanout};
  for (const auto& theirs : gatherFromChildren(t, tree.children())) combine(mine, theirs);
  if (tree.parent() >= 0) sendToParent(t, tree.parent(), mine);
  return relayDown(t, tree.parent(), tree.children(), mine);
}

}  // namespace cerar
