// The rendezvous store's client (the server: tcp_store.cc, store_session.cc, store_requests.cc).
#include <thread>

#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>
#include <gloo/common/error.h>

#include "rendezvous/tcp_store.h"
#include "rendezvous/framing.h"
#include "common/error.h"

namespace cerar {

namespace asio = boost::asio;
using asio::ip::tcp;
using Protocol = asio::generic::stream_protocol;  // TCP or a Unix-domain socket
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using namespace store_framing;

namespace {
// Extra time the client allows a server-side wait before it gives up on the connection.
constexpr std::chrono::milliseconds kGrace{5000};
std::chrono::milliseconds withGrace(std::chrono::milliseconds timeout) {
  return timeout.count() > 0 ? timeout + kGrace : timeout;  // clamped: no overflow
}
}  // namespace

// The client's socket runs on a private io_context driven by the calling thread, so that every
// socket operation has a deadline (blocking Asio calls have none) and no thread is needed.
struct TcpStore::Conn {
  asio::io_context io;
  Protocol::socket socket{io};
  bool broken = false;

  // Starts one async operation and runs it until it completes or `limit` passes (0: no
  // limit). On expiry the socket is closed, since the stream position is then unknown.
  template <typename Start>
  error_code run(std::chrono::milliseconds limit, Start start) {
    bool done = false;
    error_code result;
    start([&](const error_code& ec, auto&&...) {
      done = true;
      result = ec;
    });
    io.restart();
    if (limit.count() > 0) {
      io.run_for(limit);
    } else {
      io.run();
    }
    if (done) return result;
    error_code ignored;
    socket.close(ignored);
    io.restart();
    io.run();  // lets the cancelled operation finish
    return asio::error::timed_out;
  }
};

TcpStore::TcpStore(const std::string& host, uint16_t port, const std::string& secret,
                   std::chrono::milliseconds timeout, const std::string& jobId)
    : conn_(std::make_unique<Conn>()), host_(host), jobId_(jobId), port_(port),
      timeout_(timeout) {
  timeout_ = std::chrono::milliseconds(clampTimeoutMs(timeout.count()));
  const auto deadline = Clock::now() + timeout_;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  Writer hello;
  hello.put<uint8_t>(static_cast<uint8_t>(Op::kHello));
  hello.str(secret);
  hello.str(jobId);
  for (;;) {
    error_code ec = connect(left());
    if (!ec) {
      try {
        request(hello.data, left(), "hello");
        return;
      } catch (const gloo::IoException&) {
        // A wrong secret is final; a connection that a crowded server closed is retried.
        if (!conn_->broken || rejected_) throw;
        ec = asio::error::connection_reset;
      }
    }
    // The server may not be listening yet: retry until the deadline.
    if (Clock::now() >= deadline) {
      throw gloo::IoException(detail::concat("cannot connect to the rendezvous store at ",
                                             address(), " within ", timeout.count(),
                                             " ms: ", ec.message()));
    }
    error_code ignored;
    conn_->socket.close(ignored);
    conn_->broken = false;
    std::this_thread::sleep_for(std::min(std::chrono::milliseconds(50), left()));
  }
}

error_code TcpStore::connect(std::chrono::milliseconds limit) {
  if (isUnixAddress(host_)) {
    Protocol::endpoint endpoint;
    try {
      endpoint = asio::local::stream_protocol::endpoint(unixPath(host_));
    } catch (const boost::system::system_error& e) {  // a path too long for a socket
      throw InvalidArgumentError(detail::concat("rendezvous store address ", address(), ": ",
                                                e.code().message()));
    }
    return conn_->run(limit, [&](auto handler) { conn_->socket.async_connect(endpoint, handler); });
  }
  error_code ec;
  tcp::resolver resolver(conn_->io);
  auto resolved = resolver.resolve(host_, std::to_string(port_), ec);
  if (ec) return ec;
  std::vector<Protocol::endpoint> endpoints;
  for (const auto& entry : resolved) endpoints.emplace_back(entry.endpoint());
  ec = conn_->run(limit, [&](auto handler) {
    asio::async_connect(conn_->socket, endpoints, handler);
  });
  if (!ec) conn_->socket.set_option(tcp::no_delay(true), ec);
  return ec;
}

TcpStore::~TcpStore() { goodbye(); }

void TcpStore::goodbye() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (conn_->broken) return;
  conn_->broken = true;  // no request follows
  Writer w;
  w.put<uint32_t>(1);
  w.put<uint8_t>(static_cast<uint8_t>(Op::kGoodbye));
  // Five bytes into an idle socket's buffer: done at once, unless the server is gone.
  conn_->run(std::chrono::milliseconds(1000), [&](auto handler) {
    asio::async_write(conn_->socket, asio::buffer(w.data), handler);
  });
  error_code ignored;
  conn_->socket.close(ignored);
}

TcpStore::Traffic TcpStore::traffic() const {
  Traffic traffic;
  traffic.requests = requests_.load(std::memory_order_relaxed);
  traffic.bytesSent = bytesSent_.load(std::memory_order_relaxed);
  traffic.bytesReceived = bytesReceived_.load(std::memory_order_relaxed);
  return traffic;
}

std::string TcpStore::address() const {
  return isUnixAddress(host_) ? host_ : detail::concat(host_, ":", port_);
}

std::vector<char> TcpStore::request(const std::vector<char>& body,
                                    std::chrono::milliseconds limit, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto fail = [&](const std::string& why) {
    return gloo::IoException(
        detail::concat("rendezvous store ", address(), ": ", what, ": ", why));
  };
  if (conn_->broken) throw fail("the connection was lost by an earlier request");
  const auto deadline = Clock::now() + limit;
  auto left = [&] {
    if (limit.count() <= 0) return std::chrono::milliseconds(0);
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  Writer w;
  w.put<uint32_t>(static_cast<uint32_t>(body.size()));
  w.raw(body.data(), body.size());
  std::array<unsigned char, 4> header{};
  std::vector<char> reply;
  error_code ec = conn_->run(left(), [&](auto handler) {
    asio::async_write(conn_->socket, asio::buffer(w.data), handler);
  });
  requests_.fetch_add(1, std::memory_order_relaxed);
  bytesSent_.fetch_add(w.data.size(), std::memory_order_relaxed);
  if (!ec) {
    ec = conn_->run(left(), [&](auto handler) {
      asio::async_read(conn_->socket, asio::buffer(header), handler);
    });
  }
  if (!ec) {
    uint32_t length = decodeLength(header);
    if (length == 0 || length > kMaxFrame) {
      conn_->broken = true;  // where the next reply starts is unknown
      throw InternalError(detail::concat("rendezvous store ", address(), ": ", what,
                                         ": malformed reply of ", length, " bytes"));
    }
    reply.resize(length);
    ec = conn_->run(left(), [&](auto handler) {
      asio::async_read(conn_->socket, asio::buffer(reply), handler);
    });
    bytesReceived_.fetch_add(header.size() + length, std::memory_order_relaxed);
  }
  if (ec) {
    conn_->broken = true;
    throw fail(ec == asio::error::timed_out ? "no reply in time" : ec.message());
  }
  auto status = static_cast<ReplyStatus>(reply[0]);
  reply.erase(reply.begin());
  switch (status) {
    case ReplyStatus::kOk:
      return reply;
    case ReplyStatus::kTimeout:
      throw fail("timed out");
    case ReplyStatus::kRejected:
      conn_->broken = true;
      rejected_ = true;
      throw gloo::IoException(
          detail::concat("rendezvous store rejected the job secret (", address(), ")"));
    case ReplyStatus::kForeignJob:
      conn_->broken = true;
      rejected_ = true;
      throw ForeignJobError(detail::concat(
          "the rendezvous store at ", address(), " belongs to another job (",
          std::string(reply.begin(), reply.end()), "), not to this rank's (",
          jobId_.empty() ? std::string("none known") : jobId_,
          "): two jobs use one rendezvous address and port"));
    default:
      throw fail(std::string(reply.begin(), reply.end()));
  }
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  set(key, data, timeout_);
}

void TcpStore::set(const std::string& key, const std::vector<char>& data,
                   std::chrono::milliseconds limit) {
  Writer w;
  w.put<uint8_t>(static_cast<uint8_t>(Op::kSet));
  w.str(key);
  w.bytes(data.data(), data.size());
  request(w.data, limit, detail::concat("set '", key, "'"));
}

void TcpStore::setOnLoss(const std::string& key, const std::vector<char>& value,
                         std::chrono::milliseconds limit) {
  Writer w;
  w.put<uint8_t>(static_cast<uint8_t>(Op::kOnLoss));
  w.str(key);
  w.bytes(value.data(), value.size());
  request(w.data, limit, detail::concat("leave '", key, "' to set on loss"));
}

std::vector<char> TcpStore::get(const std::string& key) { return get(key, timeout_); }

std::vector<char> TcpStore::get(const std::string& key, std::chrono::milliseconds limit) {
  Writer w;
  w.put<uint8_t>(static_cast<uint8_t>(Op::kGet));
  w.put<int64_t>(limit.count());
  w.strs({key});
  return request(w.data, withGrace(limit),
                 detail::concat("get '", key, "' (waited up to ", limit.count(), " ms)"));
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  Writer w;
  w.put<uint8_t>(static_cast<uint8_t>(Op::kWait));
  const std::chrono::milliseconds limit(clampTimeoutMs(timeout.count()));
  w.put<int64_t>(limit.count());
  w.strs(keys);
  std::string names;
  for (const auto& key : keys) names += (names.empty() ? "'" : ", '") + key + "'";
  request(w.data, withGrace(limit),
          detail::concat("wait for ", names, " (waited up to ", timeout.count(), " ms)"));
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Writer w;
  w.put<uint8_t>(static_cast<uint8_t>(Op::kAdd));
  w.str(key);
  w.put<int64_t>(delta);
  auto reply = request(w.data, timeout_, detail::concat("add to '", key, "'"));
  return reader(reply).get<int64_t>();
}

bool TcpStore::check(const std::vector<std::string>& keys) { return check(keys, timeout_); }

bool TcpStore::check(const std::vector<std::string>& keys, std::chrono::milliseconds limit) {
  Writer w;
  w.put<uint8_t>(static_cast<uint8_t>(Op::kCheck));
  w.strs(keys);
  auto reply = request(w.data, limit, "check");
  return !reply.empty() && reply[0] != 0;
}

}  // namespace cerar
