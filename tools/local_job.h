// Runs a function as the N ranks of one job on this machine (conformance tool, demo,
// benchmarks, tests).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/transport/transport.h"

namespace cerar {

enum class LocalTransport {
  kInproc,  // N threads of this process over an InprocHub
  kGloo,    // N forked processes over Gloo TCP on loopback
};

struct LocalJobOptions {
  int size = 2;
  LocalTransport transport = LocalTransport::kInproc;
  std::chrono::milliseconds timeout{60000};  // limit of one transport wait and of rendezvous
  // kGloo: limit of the whole job; ranks still running then are killed.
  std::chrono::milliseconds deadline{std::chrono::minutes(10)};
  // kGloo: after a rank fails, the time the others get to finish or report their own error
  // before they are killed (e.g. to see a neighbour's timeout). 0 kills them at once.
  std::chrono::milliseconds failureGrace{0};
};

// One rank's work; returns that rank's result (e.g. a JSON fragment). With kGloo it runs in a
// child process: it must not rely on threads or state of the parent created after fork, and
// anything it writes to memory is lost except the returned string.
using RankMain = std::function<std::string(int rank, std::shared_ptr<Transport> transport)>;

// Runs `fn` on every rank and returns the results indexed by rank.
// kInproc: rethrows the first failure (in time), prefixed with its rank, as the same Error
// subclass. kGloo: throws cerar::Error listing every rank that failed, crashed or was killed.
std::vector<std::string> runLocalJob(const LocalJobOptions& options, const RankMain& fn);

}  // namespace cerar
