// The rendezvous store server's insides (internal to core/rendezvous): the server state
// (tcp_store.cc) and one client connection (store_session.cc; its requests in
// store_requests.cc). All connection state lives on the io thread; only the key map is shared
// with tryGet().
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it
#include <vector>

#include <boost/asio.hpp>

#include "rendezvous/tcp_store.h"
#include "rendezvous/framing.h"

namespace cerar {
namespace store_server {

namespace asio = boost::asio;
using Protocol = asio::generic::stream_protocol;  // TCP or a Unix-domain socket
using boost::system::error_code;

struct Session;

// A get or wait parked until its keys exist or its timer fires.
struct Waiter {
  std::shared_ptr<Session> session;
  std::vector<std::string> keys;
  bool isGet;
  asio::steady_timer timer;
  bool done = false;
};

}  // namespace store_server

struct TcpStoreServer::Impl {
  using Session = store_server::Session;
  using Waiter = store_server::Waiter;
  using Protocol = store_server::Protocol;

  // Declared before io: sessions leave this list from their destructors, which may run while
  // io is destroyed. Oldest first; read by the io thread only, except the count.
  std::list<Session*> sessions;
  std::atomic<size_t> open{0};  // sessions whose socket is open: what the cap counts
  store_server::asio::io_context io;  // destroyed after every socket and timer below
  store_server::asio::basic_socket_acceptor<Protocol> acceptor{io};
  store_server::asio::steady_timer acceptBackoff{io};
  StoreLimits limits;
  std::string secret;
  std::string jobId;  // admits clients of this identity only; empty: any client
  std::string unixSocket;  // the path to remove at the end, if any
  uint16_t port = 0;  // cached: the acceptor belongs to the io thread once serving
  std::thread thread;
  mutable std::mutex mutex;
  std::map<std::string, std::vector<char>> data;  // guarded by mutex
  std::list<std::shared_ptr<Waiter>> waiters;     // requests parked until their keys exist

  bool has(const std::vector<std::string>& keys) const;
  std::vector<char> value(const std::string& key) const;
  void accept();
  void admit(Protocol::socket socket);
  void park(std::shared_ptr<Session> session, std::vector<std::string> keys, bool isGet,
            int64_t timeoutMs);
  void finish(const std::shared_ptr<Waiter>& waiter, bool found);
  void unpark(const Session* session);
  void notify();  // called after every change of the map
};

namespace store_server {

// One client connection: reads a request, answers it, reads the next. Requests that wait for
// keys are parked on the server and answered later, so a connection never blocks the thread.
// While parked the next header is already being read: a client only sends after its answer,
// so that read ends only when the client goes away, which frees the connection at once.
struct Session : std::enable_shared_from_this<Session> {
  Session(TcpStoreServer::Impl& server, Protocol::socket socket);
  ~Session();

  void start();
  // `peerGone`: the client's side ended (end of stream, reset), not a rule of this server; the
  // key it left with kOnLoss is then set, unless it said goodbye.
  void close(bool peerGone = false);
  void readHeader();
  // Grows the body by what arrives, so a claimed length costs nothing until it is sent.
  void readBody();
  enum class Then { kRead, kNothing, kClose };
  void reply(store_framing::ReplyStatus status, const std::vector<char>& payload = {},
             Then then = Then::kRead);

  // The request in `body` (store_requests.cc): a refused one is answered with its reason.
  void handle();

  TcpStoreServer::Impl& server;
  std::list<Session*>::iterator entry;
  Protocol::socket socket;
  asio::steady_timer helloTimer;
  bool authenticated = false;
  bool parked = false;
  bool closed = false;
  std::optional<std::pair<std::string, std::vector<char>>> onLoss;  // see kOnLoss in wire.h
  size_t stored = 0;  // bytes of keys and values this connection put in the map
  size_t length = 0;  // of the body being read
  std::array<unsigned char, 4> header{};
  std::vector<char> body, out;

 private:
  void dispatch(store_framing::Op op, ByteReader& in);
  void set(ByteReader& in);
  void getOrWait(store_framing::Op op, ByteReader& in);
  void add(ByteReader& in);
  void leaveOnLoss(ByteReader& in);
  void checkKey(const std::string& key) const;
  // A key and value to keep (set, on loss): read, checked against the limits and charged.
  std::pair<std::string, std::vector<char>> entryToKeep(ByteReader& in);
  // Counts what this connection adds to the map against its quota.
  void charge(size_t bytes);
};

}  // namespace store_server
}  // namespace cerar
