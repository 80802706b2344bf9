// Rendezvous over TCP: a small key-value store that needs no shared file system and no Redis.
//
// One process (the launcher, or rank 0) hosts a TcpStoreServer; every rank connects a TcpStore
// client, which implements Gloo's Store interface so it can be handed to connectFullMesh.
// Every connection must first present the job secret, which keeps other jobs and strangers on
// the same host out of this job's keys. A host of the form "unix:/path" names a Unix-domain
// socket instead of a TCP address (the port is then ignored): the file's directory guards it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/system/error_code.hpp>
#include <gloo/rendezvous/store.h>

#include "common/error.h"

namespace cerar {

// What one server allows its clients; a request past a limit is answered with an error, a
// connection past one is closed. Knobs: the CERAR_STORE_* variables (docs/rendezvous.md).
struct StoreLimits {
  // Open connections; at the cap a new one evicts the oldest unauthenticated one, or is closed.
  size_t maxConnections = 1024;
  // How long a connection may stay without presenting the secret.
  std::chrono::milliseconds helloTimeout{10000};
  // Bytes of one request, and of all the keys and values one connection may store.
  size_t connectionQuotaBytes = size_t{64} << 20;
  size_t maxKeyBytes = 4096;
  size_t maxValueBytes = size_t{16} << 20;

  // The defaults overridden by CERAR_STORE_MAX_CONNECTIONS, _HELLO_TIMEOUT_SECONDS,
  // _CONNECTION_QUOTA_BYTES, _MAX_KEY_BYTES, _MAX_VALUE_BYTES; throws Error on a bad value.
  static StoreLimits fromEnvironment();
};

// Two jobs on one rendezvous address (the caller's environment, so InvalidArgumentErrors):
// a server cannot listen where another listens; a client's job identity is not the store's.
class StoreAddressInUseError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};
class ForeignJobError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};

// The store's server. Keys map to byte strings; a set of an existing key overwrites it (Gloo
// never does that; counters made by add() are updated in place). Counters are stored as
// decimal ASCII, so get() and wait() work on them too.
//
// Fork: the constructor only binds and listens; start() launches the io thread. A launcher
// constructs the server, fork()s its children (which inherit no thread and never touch the
// server), then calls start(); connections made before start() wait in the listen backlog.
// Thread safety: tryGet() and port() may be called from any thread.
class TcpStoreServer {
 public:
  // Binds host:port (port 0 picks an ephemeral port). Throws cerar::Error when it cannot.
  // `jobId`: the job's identity (docs/rendezvous.md); a client presenting another is refused.
  TcpStoreServer(const std::string& host, uint16_t port, std::string secret,
                 StoreLimits limits = {}, std::string jobId = {});
  ~TcpStoreServer();  // stops the io thread and closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const;
  // Starts serving on a thread of its own. Call at most once.
  void start();
  // Reads a key locally, without a connection (e.g. results that children put).
  std::optional<std::vector<char>> tryGet(const std::string& key) const;
  // Connections open now (for tests and diagnostics).
  size_t connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A client connection. Every failure of the server or the link, timeouts included, throws
// gloo::IoException (the type Gloo's rendezvous expects) with a message naming host:port and
// the key; a malformed reply throws InternalError, an address no socket can take
// InvalidArgumentError.
// Thread safety: all calls may be made from any thread; they are serialised on one socket.
class TcpStore : public gloo::rendezvous::Store {
 public:
  // Connects, retrying until `timeout` passes (the server may start a little later), and
  // presents `secret`. `timeout` is also the limit of get() and wait(keys).
  // `jobId`: this client's job identity; a store with another (or any, for an empty one)
  // refuses it at once with ForeignJobError naming both.
  TcpStore(const std::string& host, uint16_t port, const std::string& secret,
           std::chrono::milliseconds timeout = kDefaultTimeout, const std::string& jobId = {});
  ~TcpStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until the key exists (Gloo calls get without waiting first).
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  // A zero timeout waits without limit.
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  // Adds `delta` to the counter `key` (created at 0) and returns the new value; atomic.
  int64_t add(const std::string& key, int64_t delta);
  // True when every key exists; does not block.
  bool check(const std::vector<std::string>& keys);
  // set(), get() and check() that give up after `limit` instead of the constructor's timeout.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds limit);
  void set(const std::string& key, const std::vector<char>& data,
           std::chrono::milliseconds limit);
  bool check(const std::vector<std::string>& keys, std::chrono::milliseconds limit);

  // Leaves the server `key` to set to `value` should this connection end without goodbye():
  // the kernel closes a dead process's socket at once, so the key is the store's evidence that
  // this process is gone (a frozen one keeps its socket open, and the key stays unset). A
  // connection broken by a failed request (a timeout closes it) counts as ended. One key per
  // connection; a later call replaces it.
  void setOnLoss(const std::string& key, const std::vector<char>& value,
                 std::chrono::milliseconds limit);
  // The clean close, which the destructor does: the server forgets the key of setOnLoss(), and
  // the connection ends. Waits for nothing (no reply); never throws.
  void goodbye();

  std::string address() const;  // "host:port"

  // What this connection has exchanged with the server: requests sent (the hello included, the
  // goodbye not) and the bytes of their frames each way. Cheap counters for the scale checks
  // (docs/scale.md); atomics, so reading them never waits behind a blocking get.
  struct Traffic {
    uint64_t requests = 0;
    uint64_t bytesSent = 0;
    uint64_t bytesReceived = 0;
  };
  Traffic traffic() const;

  struct Conn;

 private:
  std::vector<char> request(const std::vector<char>& body, std::chrono::milliseconds limit,
                            const std::string& what);
  boost::system::error_code connect(std::chrono::milliseconds limit);

  std::mutex mutex_;
  std::unique_ptr<Conn> conn_;
  std::atomic<uint64_t> requests_{0}, bytesSent_{0}, bytesReceived_{0};
  std::string host_;
  std::string jobId_;
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  bool rejected_ = false;
};

}  // namespace cerar
