#include "tools/local_job.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "rendezvous/tcp_store.h"
#include "common/error.h"
#include "ops/transport/gloo_tcp.h"
#include "ops/transport/inproc.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

// Messages from the transports usually start with "rank N:" already.
std::string withRank(int rank, const std::string& what) {
  std::string prefix = detail::concat("rank ", rank, ":");
  return what.rfind(prefix, 0) == 0 ? what : prefix + " " + what;
}

std::vector<std::string> runInproc(const LocalJobOptions& options, const RankMain& fn) {
  InprocHub hub(options.size, options.timeout);
  std::vector<std::shared_ptr<Transport>> transports;
  for (int rank = 0; rank < options.size; ++rank) transports.push_back(hub.connect(rank));
  std::vector<std::string> results(options.size);
  std::mutex mutex;
  std::vector<std::pair<int, std::exception_ptr>> failures;  // in the order they happened
  std::vector<std::thread> threads;
  for (int rank = 0; rank < options.size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        results[rank] = fn(rank, transports[rank]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.emplace_back(rank, std::current_exception());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (failures.empty()) return results;

  auto [rank, first] = failures.front();
  std::string others;
  for (size_t i = 1; i < failures.size(); ++i) {
    others += detail::concat(i == 1 ? " (ranks that failed too: " : ", ", failures[i].first);
  }
  if (!others.empty()) others += ")";
  const Status status = statusOf(first);
  Status(status.code, withRank(rank, status.message) + others, status.peer).raise();
}

std::string randomSecret() {
  std::random_device device;
  std::string secret;
  for (int i = 0; i < 4; ++i) secret += detail::concat(std::hex, device());
  return secret;
}

std::vector<char> bytesOf(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

// The body of a forked rank: its own store client (the parent's io thread does not exist
// here), its own Gloo context; the outcome goes to the store. Returns the exit code.
int childMain(int rank, uint16_t port, const std::string& secret,
              const LocalJobOptions& options, const RankMain& fn) {
  int code = 1;
  try {
    TcpStore store("127.0.0.1", port, secret, options.timeout);
    try {
      GlooOptions gloo;
      gloo.iface = "lo";
      gloo.timeout = options.timeout;
      gloo.storeHas = [&store](const std::string& key) { return store.check({key}); };
      std::shared_ptr<Transport> transport = connectGloo(store, rank, options.size, gloo);
      // Gloo's mesh is complete on this rank before its peers have read every handshake: a
      // rank that ran and died at once could still break a peer's connect. Everyone waits
      // until every rank is connected.
      std::vector<std::string> connected;
      for (int r = 0; r < options.size; ++r) connected.push_back(detail::concat("connected/", r));
      store.set(connected[rank], {});
      store.wait(connected, options.timeout);
      store.set(detail::concat("result/", rank), bytesOf(fn(rank, transport)));
      code = 0;
      // Keep the links open until every rank is done: a socket closed early could reset a
      // peer's last transfer. A failure here is someone else's, reported by them.
      std::vector<std::string> done;
      for (int r = 0; r < options.size; ++r) done.push_back(detail::concat("done/", r));
      store.set(done[rank], {});
      store.wait(done, options.timeout);
    } catch (const std::exception& e) {
      if (code != 0) store.set(detail::concat("error/", rank), bytesOf(e.what()));
    } catch (...) {
      if (code != 0) store.set(detail::concat("error/", rank), bytesOf("unknown exception"));
    }
  } catch (...) {
    // No store: the parent reports the exit code.
  }
  std::fflush(nullptr);
  return code;
}

std::vector<std::string> runGloo(const LocalJobOptions& options, const RankMain& fn) {
  const int size = options.size;
  const std::string secret = randomSecret();
  // Bound before fork, served after: the children inherit no thread (see TcpStoreServer).
  TcpStoreServer server("127.0.0.1", 0, secret);
  std::fflush(nullptr);  // or the children would print the parent's buffered output again
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    pid_t pid = fork();
    if (pid == 0) _exit(childMain(rank, server.port(), secret, options, fn));
    if (pid < 0) {
      for (pid_t p : pids) kill(p, SIGKILL), waitpid(p, nullptr, 0);
      throw Error(detail::concat("local job: fork failed: ", std::strerror(errno)));
    }
    pids.push_back(pid);
  }
  server.start();

  auto hasResult = [&](int rank) {
    return server.tryGet(detail::concat("result/", rank)).has_value();
  };
  std::vector<int> status(size, 0);
  std::vector<bool> running(size, true), killed(size, false);
  int firstFailed = -1;
  const auto deadline = Clock::now() + options.deadline;
  auto killAt = Clock::time_point::max();
  for (int left = size; left > 0;) {
    for (int rank = 0; rank < size; ++rank) {
      if (!running[rank] || waitpid(pids[rank], &status[rank], WNOHANG) != pids[rank]) continue;
      running[rank] = false;
      --left;
      bool ok = WIFEXITED(status[rank]) && WEXITSTATUS(status[rank]) == 0 && hasResult(rank);
      if (!ok && firstFailed < 0) {
        firstFailed = rank;
        killAt = Clock::now() + options.failureGrace;
      }
    }
    // Ranks that already reported a result only wait for the others: no need to wait longer.
    bool onlyFinishedLeft = firstFailed >= 0;
    for (int rank = 0; rank < size; ++rank) {
      onlyFinishedLeft = onlyFinishedLeft && (!running[rank] || hasResult(rank));
    }
    if (left > 0 && (onlyFinishedLeft || Clock::now() >= std::min(killAt, deadline))) {
      for (int rank = 0; rank < size; ++rank) {
        if (!running[rank]) continue;
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], &status[rank], 0);
        running[rank] = false;
        killed[rank] = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  std::vector<std::string> results(size);
  std::string failures;
  for (int rank = 0; rank < size; ++rank) {
    if (auto result = server.tryGet(detail::concat("result/", rank))) {
      results[rank].assign(result->begin(), result->end());
      continue;
    }
    std::string why;
    if (auto error = server.tryGet(detail::concat("error/", rank))) {
      why = withRank(rank, std::string(error->begin(), error->end()));
    } else if (killed[rank]) {
      why = firstFailed >= 0
                ? detail::concat("rank ", rank, ": killed after rank ", firstFailed, " failed")
                : detail::concat("rank ", rank, ": killed at the job's deadline of ",
                                 options.deadline.count(), " ms");
    } else if (WIFSIGNALED(status[rank])) {
      why = detail::concat("rank ", rank, ": died of signal ", WTERMSIG(status[rank]), " (",
                           strsignal(WTERMSIG(status[rank])), ")");
    } else {
      why = detail::concat("rank ", rank, ": exited with code ", WEXITSTATUS(status[rank]),
                           " without a result");
    }
    failures += (failures.empty() ? "" : "; ") + why;
  }
  if (!failures.empty()) {
    throw Error(detail::concat("local job of ", size, " ranks over Gloo failed: ", failures));
  }
  return results;
}

}  // namespace

std::vector<std::string> runLocalJob(const LocalJobOptions& options, const RankMain& fn) {
  CERAR_ENFORCE(options.size >= 1, "runLocalJob: size must be at least 1, got ", options.size);
  CERAR_ENFORCE(fn, "runLocalJob: no rank function");
  return options.transport == LocalTransport::kInproc ? runInproc(options, fn)
                                                      : runGloo(options, fn);
}

}  // namespace cerar
