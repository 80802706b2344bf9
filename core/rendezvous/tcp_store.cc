#include "core/rendezvous/tcp_store.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <list>
#include <map>
#include <thread>

#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>
#include <gloo/common/error.h>

#include "ops/common/env.h"
#include "core/rendezvous/wire.h"
#include "ops/common/error.h"

namespace cerar {

namespace asio = boost::asio;
using asio::ip::tcp;
using Protocol = asio::generic::stream_protocol;  // TCP or a Unix-domain socket
using boost::system::error_code;
using namespace rendezvous_wire;

// ---------------------------------------------------------------------------------- limits --
StoreLimits StoreLimits::fromEnvironment() {
  StoreLimits limits;
  const Env env(processEnvironment());
  auto read = [&env](const char* name, long long fallback, long long low, long long high) {
    return env.integer(name, fallback, low, high);
  };
  limits.maxConnections = size_t(
      read("CERAR_STORE_MAX_CONNECTIONS", (long long)limits.maxConnections, 1, 1 << 20));
  limits.helloTimeout = std::chrono::seconds(read("CERAR_STORE_HELLO_TIMEOUT_SECONDS",
                                                  limits.helloTimeout.count() / 1000, 1, 3600));
  limits.connectionQuotaBytes = size_t(read("CERAR_STORE_CONNECTION_QUOTA_BYTES",
                                            (long long)limits.connectionQuotaBytes, 4096,
                                            kMaxFrame));
  limits.maxKeyBytes =
      size_t(read("CERAR_STORE_MAX_KEY_BYTES", (long long)limits.maxKeyBytes, 1, 1 << 20));
  limits.maxValueBytes = size_t(
      read("CERAR_STORE_MAX_VALUE_BYTES", (long long)limits.maxValueBytes, 1, kMaxFrame));
  return limits;
}

// ---------------------------------------------------------------------------------- server --
// All connection state lives on the io thread; only the key map is shared with tryGet().
namespace {
struct Session;
struct Waiter {
  std::shared_ptr<Session> session;
  std::vector<std::string> keys;
  bool isGet;
  asio::steady_timer timer;
  bool done = false;
};
}  // namespace

struct TcpStoreServer::Impl {
  // Declared before io: sessions leave this list from their destructors, which may run while
  // io is destroyed. Oldest first; read by the io thread only, except the count.
  std::list<Session*> sessions;
  std::atomic<size_t> open{0};  // sessions whose socket is open: what the cap counts
  asio::io_context io;  // destroyed after every socket and timer below
  asio::basic_socket_acceptor<Protocol> acceptor{io};
  asio::steady_timer acceptBackoff{io};
  StoreLimits limits;
  std::string secret;
  std::string unixSocket;  // the path to remove at the end, if any
  uint16_t port = 0;  // cached: the acceptor belongs to the io thread once serving
  std::thread thread;
  mutable std::mutex mutex;
  std::map<std::string, std::vector<char>> data;  // guarded by mutex
  std::list<std::shared_ptr<Waiter>> waiters;     // requests parked until their keys exist

  bool has(const std::vector<std::string>& keys) const {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& key : keys) {
      if (!data.count(key)) return false;
    }
    return true;
  }
  std::vector<char> value(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex);
    return data.at(key);
  }
  void accept();
  void admit(Protocol::socket socket);
  void park(std::shared_ptr<Session> session, std::vector<std::string> keys, bool isGet,
            int64_t timeoutMs);
  void finish(const std::shared_ptr<Waiter>& waiter, bool found);
  void unpark(const Session* session);
  void notify();  // called after every change of the map
};

namespace {
// One client connection: reads a request, answers it, reads the next. Requests that wait for
// keys are parked on the server and answered later, so a connection never blocks the thread.
// While parked the next header is already being read: a client only sends after its answer,
// so that read ends only when the client goes away, which frees the connection at once.
struct Session : std::enable_shared_from_this<Session> {
  Session(TcpStoreServer::Impl& server, Protocol::socket socket)
      : server(server), socket(std::move(socket)), helloTimer(server.io) {
    entry = server.sessions.insert(server.sessions.end(), this);
    ++server.open;
  }
  ~Session() {
    server.sessions.erase(entry);
    if (!closed) --server.open;
  }

  void start() {
    helloTimer.expires_after(server.limits.helloTimeout);
    helloTimer.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && !self->authenticated) self->close();
    });
    readHeader();
  }

  // `peerGone`: the client's side ended (end of stream, reset), not a rule of this server; the
  // key it left with kOnLoss is then set, unless it said goodbye.
  void close(bool peerGone = false) {
    if (closed) return;
    closed = true;
    error_code ignored;
    socket.close(ignored);
    helloTimer.cancel();
    server.unpark(this);
    if (peerGone && onLoss) {
      {
        std::lock_guard<std::mutex> lock(server.mutex);
        server.data[onLoss->first] = std::move(onLoss->second);
      }
      server.notify();
    }
    onLoss.reset();
    --server.open;  // last: once the count drops, the key above is set (tests wait on it)
  }

  void readHeader() {
    asio::async_read(socket, asio::buffer(header), [self = shared_from_this()](error_code ec,
                                                                             size_t) {
      // A request while parked breaks the protocol; end of stream is the usual case.
      if (ec) return self->close(true);
      if (self->parked) return self->close();
      const uint32_t length = decodeLength(self->header);
      // A stranger gets no room before presenting the secret; a client no more than its quota
      // per request (what a request stores is charged to the quota as well, see charge()).
      const size_t room =
          self->authenticated ? self->server.limits.connectionQuotaBytes : kMaxHello;
      if (length == 0 || length > kMaxFrame || length > room) return self->close();
      self->length = length;
      self->body.clear();
      self->readBody();
    });
  }

  // Grows the body by what arrives, so a claimed length costs nothing until it is sent.
  void readBody() {
    const size_t have = body.size();
    const size_t next = std::min(kReadChunk, length - have);
    body.resize(have + next);
    asio::async_read(socket, asio::buffer(body.data() + have, next),
                     [self = shared_from_this()](error_code ec, size_t) {
                       if (ec) return self->close(true);
                       if (self->body.size() < self->length) return self->readBody();
                       self->handle();
                     });
  }

  enum class Then { kRead, kNothing, kClose };
  void reply(ReplyStatus status, const std::vector<char>& payload = {}, Then then = Then::kRead) {
    out = frame(status, payload);
    asio::async_write(socket, asio::buffer(out),
                      [self = shared_from_this(), then](error_code ec, size_t) {
                        if (ec || then == Then::kClose) return self->close(bool(ec));
                        if (then == Then::kRead) self->readHeader();
                      });
  }

  void checkKey(const std::string& key) const {
    if (key.size() > server.limits.maxKeyBytes) {
      throw std::runtime_error(detail::concat("key of ", key.size(), " bytes exceeds the limit of ",
                                              server.limits.maxKeyBytes,
                                              " (CERAR_STORE_MAX_KEY_BYTES)"));
    }
  }
  // Counts what this connection adds to the map against its quota.
  void charge(size_t bytes) {
    if (bytes > server.limits.connectionQuotaBytes - stored) {
      throw std::runtime_error(
          detail::concat("this connection's quota of ", server.limits.connectionQuotaBytes,
                         " bytes is spent (CERAR_STORE_CONNECTION_QUOTA_BYTES)"));
    }
    stored += bytes;
  }

  void handle() {
    try {
      Reader in(body);
      auto op = static_cast<Op>(in.u8());
      if (!authenticated) {
        authenticated = op == Op::kHello && sameSecret(in.str(), server.secret);
        if (!authenticated) return reply(ReplyStatus::kRejected, {}, Then::kClose);
        helloTimer.cancel();
        return reply(ReplyStatus::kOk);
      }
      switch (op) {
        case Op::kSet: {
          std::string key = in.str();
          std::vector<char> value = in.bytes();
          checkKey(key);
          if (value.size() > server.limits.maxValueBytes) {
            throw std::runtime_error(detail::concat(
                "value of ", value.size(), " bytes exceeds the limit of ",
                server.limits.maxValueBytes, " (CERAR_STORE_MAX_VALUE_BYTES)"));
          }
          charge(key.size() + value.size());
          {
            std::lock_guard<std::mutex> lock(server.mutex);
            server.data[key] = std::move(value);
          }
          reply(ReplyStatus::kOk);
          return server.notify();
        }
        case Op::kGet:
        case Op::kWait: {
          int64_t timeoutMs = in.i64();
          std::vector<std::string> keys = in.strs();
          for (const auto& key : keys) checkKey(key);
          if (op == Op::kGet && keys.size() != 1) throw std::runtime_error("get needs one key");
          if (timeoutMs < 0) throw std::runtime_error("negative timeout");
          if (server.has(keys)) {
            return reply(ReplyStatus::kOk, op == Op::kGet ? server.value(keys.at(0))
                                                     : std::vector<char>{});
          }
          server.park(shared_from_this(), std::move(keys), op == Op::kGet, timeoutMs);
          parked = true;
          return readHeader();
        }
        case Op::kAdd: {
          std::string key = in.str();
          checkKey(key);
          int64_t delta = in.i64(), now = 0;
          {
            std::lock_guard<std::mutex> lock(server.mutex);
            auto found = server.data.find(key);
            now = addCounter(found == server.data.end() ? 0 : parseCounter(found->second),
                             delta);
            if (found == server.data.end()) charge(key.size() + 20);
            std::string text = std::to_string(now);
            server.data[key].assign(text.begin(), text.end());
          }
          Writer result;
          result.i64(now);
          reply(ReplyStatus::kOk, result.data);
          return server.notify();
        }
        case Op::kCheck: {
          std::vector<std::string> keys = in.strs();
          for (const auto& key : keys) checkKey(key);
          return reply(ReplyStatus::kOk, {static_cast<char>(server.has(keys) ? 1 : 0)});
        }
        case Op::kOnLoss: {
          std::string key = in.str();
          std::vector<char> value = in.bytes();
          checkKey(key);
          if (value.size() > server.limits.maxValueBytes) {
            throw std::runtime_error("value exceeds the limit (CERAR_STORE_MAX_VALUE_BYTES)");
          }
          charge(key.size() + value.size());
          onLoss.emplace(std::move(key), std::move(value));
          return reply(ReplyStatus::kOk);
        }
        case Op::kGoodbye:
          onLoss.reset();
          return close();  // no reply: the client closes its side at once
        default:
          throw std::runtime_error("unknown request");
      }
    } catch (const std::exception& e) {
      std::string text = e.what();
      reply(ReplyStatus::kError, std::vector<char>(text.begin(), text.end()));
    }
  }

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
};
}  // namespace

void TcpStoreServer::Impl::accept() {
  acceptor.async_accept([this](error_code ec, Protocol::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    const int code = ec.value();
    const bool clientLeft = code == ECONNABORTED || code == EPROTO || code == EINTR;
    if (ec && !clientLeft) {
      // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ...): the connection stays in
      // the backlog and accept would fail again at once; wait instead of spinning.
      acceptBackoff.expires_after(std::chrono::milliseconds(100));
      return acceptBackoff.async_wait([this](error_code e) {
        if (!e) accept();
      });
    }
    if (!ec) admit(std::move(socket));  // else the client went away first: next one
    accept();
  });
}

void TcpStoreServer::Impl::admit(Protocol::socket socket) {
  if (open >= limits.maxConnections) {
    // Strangers must not lock ranks out: the oldest unauthenticated connection gives way (a
    // rank says hello within milliseconds of connecting, so it is rarely the oldest).
    Session* evict = nullptr;
    for (Session* s : sessions) {
      if (!s->authenticated && !s->closed) {
        evict = s;
        break;
      }
    }
    if (evict == nullptr) return;  // the new socket closes here
    evict->close();
  }
  error_code ignored;
  if (socket.local_endpoint(ignored).protocol().family() != AF_UNIX) {
    socket.set_option(tcp::no_delay(true), ignored);
  }
  std::make_shared<Session>(*this, std::move(socket))->start();
}

void TcpStoreServer::Impl::park(std::shared_ptr<Session> session, std::vector<std::string> keys,
                                bool isGet, int64_t timeoutMs) {
  auto waiter = std::make_shared<Waiter>(
      Waiter{std::move(session), std::move(keys), isGet, asio::steady_timer(io)});
  waiters.push_back(waiter);
  if (timeoutMs > 0) {
    waiter->timer.expires_after(std::chrono::milliseconds(clampTimeoutMs(timeoutMs)));
    waiter->timer.async_wait([this, waiter](error_code ec) {
      if (!ec) finish(waiter, false);
    });
  }
}

void TcpStoreServer::Impl::finish(const std::shared_ptr<Waiter>& waiter, bool found) {
  if (waiter->done) return;
  waiter->done = true;
  waiter->timer.cancel();
  waiters.remove(waiter);
  Session& session = *waiter->session;
  session.parked = false;
  // The next header is being read already (see Session).
  using Then = Session::Then;
  if (!found) return session.reply(ReplyStatus::kTimeout, {}, Then::kNothing);
  session.reply(ReplyStatus::kOk, waiter->isGet ? value(waiter->keys.at(0)) : std::vector<char>{},
                Then::kNothing);
}

void TcpStoreServer::Impl::unpark(const Session* session) {
  for (auto it = waiters.begin(); it != waiters.end();) {
    if ((*it)->session.get() == session) {
      (*it)->done = true;
      (*it)->timer.cancel();
      it = waiters.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpStoreServer::Impl::notify() {
  std::vector<std::shared_ptr<Waiter>> ready;
  for (const auto& waiter : waiters) {
    if (has(waiter->keys)) ready.push_back(waiter);
  }
  for (const auto& waiter : ready) finish(waiter, true);
}

namespace {
// A socket file that nobody listens on is left from a job that died: remove it, as a TCP port
// frees itself. One that answers belongs to a live store; binding then fails as for a port.
void removeStaleSocket(const std::string& path) {
  asio::io_context io;
  asio::local::stream_protocol::socket probe(io);
  error_code ec;
  probe.connect(asio::local::stream_protocol::endpoint(path), ec);
  if (ec == asio::error::connection_refused) ::unlink(path.c_str());
}
}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port, std::string secret,
                               StoreLimits limits)
    : impl_(std::make_unique<Impl>()) {
  impl_->secret = std::move(secret);
  impl_->limits = limits;
  try {
    Protocol::endpoint endpoint;
    if (isUnixAddress(host)) {
      removeStaleSocket(unixPath(host));
      endpoint = asio::local::stream_protocol::endpoint(unixPath(host));
    } else {
      // A name ("localhost", the host's name) or an address; the first match is used.
      endpoint = tcp::resolver(impl_->io).resolve(host, std::to_string(port)).begin()->endpoint();
    }
    impl_->acceptor.open(endpoint.protocol());
    if (!isUnixAddress(host)) impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
    impl_->acceptor.bind(endpoint);
    if (isUnixAddress(host)) impl_->unixSocket = unixPath(host);
    impl_->acceptor.listen(asio::socket_base::max_listen_connections);
    if (!isUnixAddress(host)) {
      const Protocol::endpoint local = impl_->acceptor.local_endpoint();
      tcp::endpoint bound;
      std::memcpy(bound.data(), local.data(), local.size());
      impl_->port = bound.port();
    }
  } catch (const boost::system::system_error& e) {
    throw Error(detail::concat("rendezvous store: cannot listen on ", host, ":", port, ": ",
                               e.what()));
  }
}

TcpStoreServer::~TcpStoreServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->waiters.clear();  // sessions parked there close with them
  if (!impl_->unixSocket.empty()) ::unlink(impl_->unixSocket.c_str());
}

uint16_t TcpStoreServer::port() const { return impl_->port; }

void TcpStoreServer::start() {
  CERAR_ENFORCE(!impl_->thread.joinable(), "TcpStoreServer::start called twice");
  impl_->accept();
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

std::optional<std::vector<char>> TcpStoreServer::tryGet(const std::string& key) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->data.find(key);
  if (it == impl_->data.end()) return std::nullopt;
  return it->second;
}

size_t TcpStoreServer::connections() const { return impl_->open; }

}  // namespace cerar
