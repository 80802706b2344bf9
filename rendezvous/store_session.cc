// One client connection of the rendezvous store's server: its reads, replies and close (its
// requests are in store_requests.cc).
#include "rendezvous/store_server.h"

namespace cerar::store_server {

using namespace store_framing;

Session::Session(TcpStoreServer::Impl& server, Protocol::socket socket)
    : server(server), socket(std::move(socket)), helloTimer(server.io) {
  entry = server.sessions.insert(server.sessions.end(), this);
  ++server.open;
}

Session::~Session() {
  server.sessions.erase(entry);
  if (!closed) --server.open;
}

void Session::start() {
  helloTimer.expires_after(server.limits.helloTimeout);
  helloTimer.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec && !self->authenticated) self->close();
  });
  readHeader();
}

void Session::close(bool peerGone) {
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

void Session::readHeader() {
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

void Session::readBody() {
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

void Session::reply(ReplyStatus status, const std::vector<char>& payload, Then then) {
  out = frame(status, payload);
  asio::async_write(socket, asio::buffer(out),
                    [self = shared_from_this(), then](error_code ec, size_t) {
                      if (ec || then == Then::kClose) return self->close(bool(ec));
                      if (then == Then::kRead) self->readHeader();
                    });
}

}  // namespace cerar::store_server
