// libFuzzer target: the rendezvous store's server (rendezvous/tcp_store.cc,
// store_session.cc, store_requests.cc) fed raw bytes over a Unix-domain socket. The first
// byte's low bit sends the right hello first. After the input the client closes its sending
// side; the server must then close the connection within seconds (no parked request, claimed
// length or stranger may keep it).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rendezvous/tcp_store.h"
#include "rendezvous/framing.h"

namespace {
const std::string& socketPath() {
  static const std::string path = [] {
    char dir[] = "/tmp/cerar-fuzz-XXXXXX";
    return std::string(mkdtemp(dir)) + "/store.sock";
  }();
  return path;
}

bool sendAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;  // libFuzzer's timer signal
    if (n <= 0) return false;               // the server closed: fine
    p += n;
    size -= size_t(n);
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  cerar::StoreLimits limits;
  limits.connectionQuotaBytes = 1 << 20;
  limits.maxValueBytes = 1 << 16;
  limits.maxKeyBytes = 64;
  cerar::TcpStoreServer server("unix:" + socketPath(), 0, "k", limits);
  server.start();
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socketPath().c_str(), sizeof addr.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("connect to the store");
    std::abort();
  }
  bool open = true;
  if (data[0] & 1) {
    cerar::store_framing::Writer hello;
    hello.str("k");
    open = sendAll(fd, cerar::store_framing::frame(1, hello.data).data(), 10);
  }
  if (open) sendAll(fd, data + 1, size - 1);
  shutdown(fd, SHUT_WR);
  char buffer[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, 5000);  // generous: CI machines are loaded
    if (ready < 0 && errno == EINTR) continue;  // libFuzzer's -timeout uses SIGALRM
    if (ready <= 0) {
      std::fprintf(stderr, "the store kept a finished connection open\n");
      std::abort();
    }
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
  }
  close(fd);
  return 0;
}
