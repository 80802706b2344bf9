// Gloo TCP transport: point-to-point transfers over a Gloo context's pairs (UnboundBuffers).
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "ops/transport/transport.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace cerar {

struct GlooOptions {
  std::string iface = "lo";  // interface whose address the ranks publish
  std::string hostname;      // overrides iface when set (an address or a resolvable name)
  std::chrono::milliseconds timeout{30000};  // rendezvous limit and default limit of a wait
  // Key prefix of the context in the store. Gloo never overwrites keys, so each context made
  // on one store needs a prefix of its own, the same on every rank (e.g. "<name>/<epoch>").
  std::string prefix = "cerar";
  // The job's link key. Set: every link proves it before connectGloo returns (link_auth.h).
  // Empty: links are taken as connected (tests and tools on a store of their own).
  std::string linkKey;
  // How long one link made at start may take: a pair's connect waits up to 2 times it, each
  // step of the proof up to it, so that a stray connection fails the start-up in seconds. A
  // link made on demand waits the timeout instead (lazy_links.h).
  std::chrono::milliseconds startLimit{1000};
  // Takes this rank's start-up outcome (ok, or the link that failed) and returns the job's,
  // so that every rank fails alike (core/config/bootstrap.cc agrees through the store). Unset: this
  // rank's own outcome decides.
  std::function<Status(const Status&)> agreeOnStart;
  // The peers whose links connect before connectGloo returns; empty, or every peer: the full
  // mesh. Otherwise any other link connects on its first use (links made on demand,
  // lazy_links.h), through the store given to connectGloo, which must then outlive the
  // transport. Every rank's set must mirror its peers' (planPeers() does).
  std::vector<int> eagerPeers;
  // Whether a key is in the store, without waiting (TcpStore::check). Set, a link made on
  // demand polls for its peer's address, so the store's other users never queue behind one
  // long wait. Unset, it waits on the store (up to the timeout).
  std::function<bool(const std::string&)> storeHas;
};

// The peers that the job's plans use from the start: the ring's neighbours (rank +- 1 mod
// size) and the control tree's links (a `fanout`-ary tree rooted at rank 0: parent
// (rank-1)/fanout, children fanout*rank+1 .. fanout*rank+fanout). Ascending, without `rank`;
// q is in planPeers(p) exactly when p is in planPeers(q).
std::vector<int> planPeers(int rank, int size, int fanout = 8);

// The store key under which rank `from` publishes the address of its link to rank `to`.
std::string pairKey(const std::string& prefix, int from, int to);

class LazyLinks;

// One rank's link to every other rank of a Gloo context. A post inside a registered region
// (registerMemory) goes through the region's UnboundBuffer at an offset; any other post creates
// an UnboundBuffer over exactly the caller's bytes. Posts are queued per peer, so waits
// complete them in order: Gloo counts the completed sends and receives of a buffer, and those
// of one (peer, slot) complete in posting order, so the oldest pending one is the one done.
//
// Failure: Gloo closes every pair of the context after any error or timeout, so the first
// failure makes the transport unusable; later calls throw at once, repeating the first error.
// A wait that outlives the timeout is a TimeoutError; a link that breaks first (the peer died,
// or failed and closed its links) is a PeerLostError; both name the peer waited on.
// Limits of Gloo that the plans must respect: both ends post equal byte counts (a longer send
// aborts the receiving process inside Gloo), and no transfer to oneself.
class GlooTransport : public Transport {
 public:
  // `context` must be connected (connectFullMesh done), or `links` makes its missing links;
  // `timeout` limits each wait. `tag` picks the slot of the transfers (channel()); 0 is the
  // job's.
  GlooTransport(std::shared_ptr<gloo::Context> context, Duration timeout, uint32_t tag = 0,
                std::shared_ptr<LazyLinks> links = nullptr);
  ~GlooTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Duration timeout() const override { return timeout_; }

  void postSend(int peer, const void* data, size_t bytes) override;
  void postRecv(int peer, void* data, size_t bytes) override;
  void waitSend(int peer) override;
  void waitRecv(int peer) override;
  // Another slot on the same context: no new sockets.
  std::shared_ptr<Transport> channel(uint32_t tag) override;
  // Refuses (false) a region that overlaps a registered one.
  bool registerMemory(void* base, size_t bytes) override;
  void releaseMemory(void* base) override;

  // The underlying context, e.g. to run Gloo's own collectives over the same links. Gloo's
  // collectives use other slots, so they do not interfere with this transport's transfers.
  std::shared_ptr<gloo::Context> context() const { return context_; }
  // UnboundBuffers created so far (one per registered region, one per other transfer).
  uint64_t buffersCreated() const { return buffersCreated_; }
  // This rank's links that are connected now (size - 1 for a full mesh): the sockets it holds.
  int linksConnected() const;
  // How a failure closes the links instead of the default (every link of the context, under
  // the lazy links' lock where there are any): a link's proof on a context whose other links
  // are made on demand closes them under that lock.
  void closeWith(std::function<void()> close) { close_ = std::move(close); }
  // From the owning thread, before any wait: lets abort() end this transport's waits.
  void allowAbort() { abortable_ = true; }
  // From another thread, once allowAbort() was called: ends the wait in progress, and fails
  // every later one, at once (a link made on demand stops its proof so when its owner goes).
  void abort();

 private:
  struct Region {
    std::byte* base;
    size_t bytes;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  };
  struct Pending {
    gloo::transport::UnboundBuffer* buffer;
    std::unique_ptr<gloo::transport::UnboundBuffer> owned;  // null: a region's buffer
    size_t bytes;
  };
  bool pendingOn(const gloo::transport::UnboundBuffer* buffer) const;
  void closeConnections();
  void checkUsable(int peer, const char* op) const;
  void post(bool send, int peer, void* data, size_t bytes);
  void wait(bool send, int peer);
  bool watch(gloo::transport::UnboundBuffer* buffer, bool send);
  [[noreturn]] void fail(Status failure);

  std::shared_ptr<gloo::Context> context_;  // first member: outlives the buffers below
  std::shared_ptr<LazyLinks> links_;        // null: every link is connected
  std::function<void()> close_;             // unset: the default (closeConnections())
  std::mutex abortMutex_;                    // guards the three below
  gloo::transport::UnboundBuffer* waitingOn_ = nullptr;  // the buffer of the wait in progress
  bool waitingSend_ = false;
  bool aborted_ = false;
  bool abortable_ = false;  // set once, before the transport is shared (allowAbort)
  int rank_;
  int size_;
  Duration timeout_;
  uint64_t slot_;
  std::vector<Region> regions_;
  // Regions released with transfers still pending (after a failure): Gloo may still hold them.
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> retired_;
  std::vector<std::deque<Pending>> sends_;  // per peer, oldest first
  std::vector<std::deque<Pending>> recvs_;
  Status failure_;  // the first error; not ok means unusable
  uint64_t buffersCreated_ = 0;
};

// The exit status of a process that Gloo's network thread would have aborted while its links
// started: a stranger's message broke one of Gloo's checks there (docs/rendezvous.md).
constexpr int kStrangerExitStatus = 70;

// Connects rank `rank` of `size` through `store` over Gloo's TCP transport, under the keys
// options.prefix + "/...", which must be fresh on this store (see GlooOptions::prefix): each
// link's end under pairKey(), so a rank reads only the addresses made for it. Connects the
// links to options.eagerPeers (every peer where empty) and, with a link key, proves them; the
// others are made on demand (lazy_links.h).
// Throws cerar::Error naming the rank when the rendezvous fails or times out, and naming the
// rank pair when a link fails its start-up (options.agreeOnStart's verdict). Gloo's messages
// are repeated with the ports it prints byte-swapped (Gloo 0.5.0) put right.
std::unique_ptr<GlooTransport> connectGloo(gloo::rendezvous::Store& store, int rank, int size,
                                           const GlooOptions& options = {});

}  // namespace cerar
