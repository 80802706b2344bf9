// Links made on demand: a Gloo context whose start connected only some pairs (the plans'
// ring and tree, GlooOptions::eagerPeers) connects any other on its first use.
//
// Both ends of a transfer post it, so both reach the link's first use: each publishes the
// address of its end under the link's own store key (pairKey), reads the other's and
// connects, then, with the job's link key, the link proves itself (link_auth.h) before it
// carries data. A transfer posted before its link is up waits in a queue and goes out, in
// posting order, once it is.
//
// Each link is made on a thread of its own, never on the thread that posts: a rank may
// block in a wait on one peer while another peer needs this rank's end of their link, and a
// post that blocked until its link was up could close a cycle of such waits (in a pairwise
// all-to-all every rank first posts to a different peer).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
namespace transport {
class Context;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace cerar {

class GlooTransport;

// The slot of the links' proofs: past any channel's tag (process sets count up from 0).
constexpr uint32_t kLinkProofTag = 0xffffffffu;

// "127.0.0.1:41795" (or "[::1]:41795") from a Gloo TCP address's bytes.
std::string addressText(const std::vector<char>& bytes);

// While links start, a stranger's well-formed Gloo message (a connection taken for a peer's)
// can break an invariant that Gloo checks on its network thread (its TCP pair's reader),
// where nothing catches the exception: std::terminate would abort the process. Cerar cannot
// stop that thread from reading; it can end the process with its own message and status
// (kStrangerExitStatus) instead of SIGABRT, so the other ranks fail the link with the pair
// named. Held while any link of the process starts (at start, and while a link is made on
// demand): the first holder installs the handler, the last restores the one before.
class StrangerExitGuard {
 public:
  explicit StrangerExitGuard(int rank);
  ~StrangerExitGuard();
  StrangerExitGuard(const StrangerExitGuard&) = delete;
  StrangerExitGuard& operator=(const StrangerExitGuard&) = delete;

 private:
  static void onTerminate();
};

class LazyLinks {
 public:
  struct Setup {
    gloo::rendezvous::Store* store = nullptr;  // outlives this object
    std::function<bool(const std::string&)> storeHas;  // GlooOptions::storeHas
    std::string prefix;     // of the store keys, GlooOptions::prefix
    // How long a peer may take to come (from the latest post or wait on the link), then to
    // connect, then each step of the proof: the job's timeout, so that a network outage
    // shorter than it delays a link made on demand as it delays a link made at start.
    std::chrono::milliseconds timeout{30000};
    std::string linkKey;    // empty: links are taken as connected
  };

  // `connected[p]`: whether the link to p connected at start.
  LazyLinks(std::shared_ptr<gloo::Context> context,
            std::shared_ptr<gloo::transport::Context> links, Setup setup,
            std::vector<bool> connected);
  ~LazyLinks();  // fails the links still being made at once, then waits for their threads
  LazyLinks(const LazyLinks&) = delete;
  LazyLinks& operator=(const LazyLinks&) = delete;

  // A transfer of `owner` on `buffer`: posted at once where the link to `peer` is up, else
  // queued until it is (and the link started). Throws the link's failure once it failed.
  void post(const void* owner, bool send, int peer, gloo::transport::UnboundBuffer* buffer,
            uint64_t slot, size_t offset, size_t bytes);
  // A wait on a transfer to or from `peer` begins: a link still being made gives its peer
  // the timeout from now, as the wait does.
  void waiting(int peer);
  // Drops `owner`'s queued transfers (it fails or ends: its buffers go).
  void forget(const void* owner);
  // Closes every link of the context, apart from a link being created.
  void closeConnections();
  bool connected(int peer) const;
  // Ok, or why the link to `peer` could not be made.
  Status failureOf(int peer) const;
  int linksConnected() const;

 private:
  struct Queued {
    const void* owner;
    bool send;
    gloo::transport::UnboundBuffer* buffer;
    uint64_t slot;
    size_t offset, bytes;
  };
  enum class State { kNone, kMaking, kUp, kFailed };

  void make(int peer);  // a link's thread
  void need(int peer);  // under the lock
  std::vector<char> peerAddress(int peer, const std::string& key);
  Status connectAndProve(int peer);
  Status closing(int peer) const;  // the failure of a link that stopped as this object goes
  void finish(int peer, Status outcome);
  static void postNow(const Queued& op, int peer);

  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<gloo::transport::Context> links_;
  Setup setup_;
  int rank_, size_;
  mutable std::mutex mutex_;
  std::condition_variable stopped_;
  bool stopping_ = false;
  std::vector<State> state_;
  // Per link being made: when it was last needed (a post or a wait on it).
  std::vector<std::chrono::steady_clock::time_point> neededAt_;
  std::vector<GlooTransport*> proving_;  // per link: the transport of its proof, while it runs
  std::vector<Status> failure_;
  std::vector<std::vector<Queued>> queued_;
  std::vector<std::thread> threads_;
  int connected_ = 0;
};

}  // namespace cerar
