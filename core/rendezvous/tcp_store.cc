#include "core/rendezvous/tcp_store.h"

#include <list>
#include <map>
#include <thread>

#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>
#include <gloo/common/error.h>

#include "core/rendezvous/wire.h"
#include "ops/common/error.h"

namespace cerar {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using namespace rendezvous_wire;

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
  asio::io_context io;  // first member: destroyed last, after every socket and timer
  tcp::acceptor acceptor{io};
  std::string secret;
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
  void park(std::shared_ptr<Session> session, std::vector<std::string> keys, bool isGet,
            int64_t timeoutMs);
  void finish(const std::shared_ptr<Waiter>& waiter, bool found);
  void notify();  // called after every change of the map
};

namespace {
// One client connection: reads a request, answers it, reads the next. Requests that wait for
// keys are parked on the server and answered later, so a connection never blocks the thread.
struct Session : std::enable_shared_from_this<Session> {
  Session(TcpStoreServer::Impl& server, tcp::socket socket)
      : server(server), socket(std::move(socket)) {}

  void readHeader() {
    asio::async_read(socket, asio::buffer(header), [self = shared_from_this()](error_code ec,
                                                                             size_t) {
      if (ec) return;
      uint32_t length = decodeLength(self->header);
      // A stranger gets no room before presenting the secret.
      if (length == 0 || length > (self->authenticated ? kMaxFrame : kMaxHello)) return;
      self->body.resize(length);
      asio::async_read(self->socket, asio::buffer(self->body),
                       [self](error_code ec2, size_t) {
                         if (!ec2) self->handle();
                       });
    });
  }

  void reply(ReplyStatus status, const std::vector<char>& payload = {}, bool close = false) {
    out = frame(status, payload);
    asio::async_write(socket, asio::buffer(out),
                      [self = shared_from_this(), close](error_code ec, size_t) {
                        if (!ec && !close) self->readHeader();
                      });
  }

  void handle() {
    try {
      Reader in(body);
      auto op = static_cast<Op>(in.u8());
      if (!authenticated) {
        authenticated = op == Op::kHello && sameSecret(in.str(), server.secret);
        return reply(authenticated ? ReplyStatus::kOk : ReplyStatus::kRejected, {}, !authenticated);
      }
      switch (op) {
        case Op::kSet: {
          std::string key = in.str();
          std::vector<char> value = in.bytes();
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
          if (server.has(keys)) {
            return reply(ReplyStatus::kOk, op == Op::kGet ? server.value(keys.at(0))
                                                     : std::vector<char>{});
          }
          return server.park(shared_from_this(), std::move(keys), op == Op::kGet, timeoutMs);
        }
        case Op::kAdd: {
          std::string key = in.str();
          int64_t delta = in.i64(), now = 0;
          {
            std::lock_guard<std::mutex> lock(server.mutex);
            auto& slot = server.data[key];
            now = parseCounter(slot) + delta;
            std::string text = std::to_string(now);
            slot.assign(text.begin(), text.end());
          }
          Writer result;
          result.i64(now);
          reply(ReplyStatus::kOk, result.data);
          return server.notify();
        }
        case Op::kCheck:
          return reply(ReplyStatus::kOk, {static_cast<char>(server.has(in.strs()) ? 1 : 0)});
        default:
          throw std::runtime_error("unknown request");
      }
    } catch (const std::exception& e) {
      std::string text = e.what();
      reply(ReplyStatus::kError, std::vector<char>(text.begin(), text.end()));
    }
  }

  TcpStoreServer::Impl& server;
  tcp::socket socket;
  bool authenticated = false;
  std::array<unsigned char, 4> header{};
  std::vector<char> body, out;
};
}  // namespace

void TcpStoreServer::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<Session>(*this, std::move(socket))->readHeader();
    }
    accept();
  });
}

void TcpStoreServer::Impl::park(std::shared_ptr<Session> session, std::vector<std::string> keys,
                                bool isGet, int64_t timeoutMs) {
  auto waiter = std::make_shared<Waiter>(
      Waiter{std::move(session), std::move(keys), isGet, asio::steady_timer(io)});
  waiters.push_back(waiter);
  if (timeoutMs > 0) {
    waiter->timer.expires_after(std::chrono::milliseconds(timeoutMs));
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
  if (!found) return waiter->session->reply(ReplyStatus::kTimeout);
  waiter->session->reply(ReplyStatus::kOk, waiter->isGet ? value(waiter->keys.at(0))
                                                    : std::vector<char>{});
}

void TcpStoreServer::Impl::notify() {
  std::vector<std::shared_ptr<Waiter>> ready;
  for (const auto& waiter : waiters) {
    if (has(waiter->keys)) ready.push_back(waiter);
  }
  for (const auto& waiter : ready) finish(waiter, true);
}

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port, std::string secret)
    : impl_(std::make_unique<Impl>()) {
  impl_->secret = std::move(secret);
  try {
    // A name ("localhost", the host's name) or an address; the first match is used.
    tcp::endpoint endpoint =
        *tcp::resolver(impl_->io).resolve(host, std::to_string(port)).begin();
    impl_->acceptor.open(endpoint.protocol());
    impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
    impl_->acceptor.bind(endpoint);
    impl_->acceptor.listen(asio::socket_base::max_listen_connections);
    impl_->port = impl_->acceptor.local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    throw Error(detail::concat("rendezvous store: cannot listen on ", host, ":", port, ": ",
                               e.what()));
  }
}

TcpStoreServer::~TcpStoreServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->waiters.clear();  // sessions parked there close with them
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

}  // namespace cerar
