// Collectives besides the all-reduce, over any Transport: ring allgather with per-rank sizes,
// pipelined broadcast, and the small variable-length messages of a control plane.
// Each is called by every rank of the group with matching arguments; one thread per transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops/control_frame.h"
#include "ops/control_tree.h"
#include "ops/transport/transport.h"

namespace cerar {

// `buffer` holds the blocks of all ranks in rank order, blockBytes[i] bytes for rank i; this
// rank's block must be in place. After N-1 ring steps every rank holds every block. Empty
// blocks are skipped on both ends (zero-byte posts are not allowed).
void ringAllgather(Transport& transport, void* buffer, const std::vector<size_t>& blockBytes);

// `send` holds this rank's blocks for every rank in rank order (sendBytes[j] bytes for rank j),
// `recv` receives every rank's block for this one in rank order (recvBytes[i] bytes from rank
// i). The own block is copied; the others travel directly between each pair of ranks, all
// posted at once (receives first), so the exchange takes one hop of latency. Empty blocks are
// skipped on both ends; recvBytes[i] must equal rank i's sendBytes[this rank].
void pairwiseAlltoall(Transport& transport, const void* send, const std::vector<size_t>& sendBytes,
                      void* recv, const std::vector<size_t>& recvBytes);

// Every rank ends with root's `bytes` bytes at `data`. A chain root -> root+1 -> ... in
// segments, so a long buffer streams through the ring instead of the root sending N-1 copies.
void chainBroadcast(Transport& transport, void* data, size_t bytes, int root,
                    size_t segmentBytes = 256 * 1024);

// Control-plane messages of any length (including empty) up to `maxBytes`. A message travels
// as one fixed-size frame (magic, version, type, length and the first bytes; ops/control_frame.h)
// and, if longer, one more transfer for the rest, so short messages cost one transfer. A frame
// that is foreign, of another version or type, or longer than `maxBytes` throws Error before
// anything of the claimed size is allocated.
// gatherBytes: every rank's `mine` to root; root gets them indexed by rank, others nothing.
std::vector<std::vector<uint8_t>> gatherBytes(
    Transport& transport, const std::vector<uint8_t>& mine, int root,
    uint64_t maxBytes = control_frame::kMaxMessageBytes);
// broadcastBytes: root's `message` to every rank (star: messages are small). A rank that gets
// root's abort instead throws Error with root's reason.
std::vector<uint8_t> broadcastBytes(Transport& transport, const std::vector<uint8_t>& message,
                                    int root,
                                    uint64_t maxBytes = control_frame::kMaxMessageBytes);
// Root's alternative to broadcastBytes when it cannot go on (e.g. a peer's message was
// corrupt): every other rank's broadcastBytes throws Error with `why`, so all fail alike.
void broadcastAbort(Transport& transport, const std::string& why, int root);

// The control tree's halves (ops/control_tree.h names parent and children), in the
// same frames. Up: a rank receives its children's messages (all posted at once, checked as
// gatherBytes checks), then sends its own, merged, to its parent; a child's abort throws
// Error with the child's reason. A rank that cannot report sends an abort up instead.
std::vector<std::vector<uint8_t>> gatherFromChildren(
    Transport& transport, const std::vector<int>& children,
    uint64_t maxBytes = control_frame::kMaxMessageBytes);
void sendToParent(Transport& transport, int parent, const std::vector<uint8_t>& message);
void abortToParent(Transport& transport, int parent, const std::string& why);
// Down: the root (parent < 0) sends `message` to its children; any other rank receives the
// root's message from its parent, passes it on to its children and returns it. An abort is
// passed on likewise, then thrown as Error with its reason, so every rank fails alike.
std::vector<uint8_t> relayDown(Transport& transport, int parent, const std::vector<int>& children,
                               const std::vector<uint8_t>& message = {},
                               uint64_t maxBytes = control_frame::kMaxMessageBytes);
// The root's alternative to relayDown when it cannot go on.
void abortDown(Transport& transport, const std::vector<int>& children, const std::string& why);

// Rank 0's `message` to every rank down the control tree of `fanout` (no rank sends more than
// `fanout` copies: links made on demand stay those of the tree).
std::vector<uint8_t> treeBroadcastBytes(Transport& transport, const std::vector<uint8_t>& message,
                                        int fanout);
// Every rank's `mine` combined up the tree (`combine(into, child's)`), then rank 0's result
// down to every rank.
std::vector<uint8_t> treeAllreduceBytes(
    Transport& transport, std::vector<uint8_t> mine, int fanout,
    const std::function<void(std::vector<uint8_t>&, const std::vector<uint8_t>&)>& combine);

}  // namespace cerar
