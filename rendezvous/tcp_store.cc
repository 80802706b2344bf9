#include "rendezvous/tcp_store.h"

#include <unistd.h>

#include <cstring>

#include "rendezvous/store_server.h"
#include "common/env.h"
#include "common/error.h"

namespace cerar {

namespace asio = boost::asio;
using asio::ip::tcp;
using Protocol = asio::generic::stream_protocol;  // TCP or a Unix-domain socket
using boost::system::error_code;
using namespace store_framing;

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
using Session = store_server::Session;
using Waiter = store_server::Waiter;

bool TcpStoreServer::Impl::has(const std::vector<std::string>& keys) const {
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& key : keys) {
    if (!data.count(key)) return false;
  }
  return true;
}

std::vector<char> TcpStoreServer::Impl::value(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex);
  return data.at(key);
}

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
                               StoreLimits limits, std::string jobId)
    : impl_(std::make_unique<Impl>()) {
  impl_->secret = std::move(secret);
  impl_->jobId = std::move(jobId);
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
    const std::string what =
        detail::concat("rendezvous store: cannot listen on ", host, ":", port, ": ", e.what());
    // In use: the caller's environment (another server there), not a fault of the store.
    if (e.code() == asio::error::address_in_use) throw StoreAddressInUseError(what);
    throw Error(what);
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
