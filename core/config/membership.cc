#include "core/config/membership.h"

#include <gloo/common/error.h>

#include <thread>
#include <vector>

#include "common/error.h"
#include "rendezvous/tcp_store.h"

namespace cerar {
namespace {

std::string text(const std::vector<char>& bytes) { return std::string(bytes.begin(), bytes.end()); }

}  // namespace

std::string refuseTwin(TcpStore& store, const std::string& scope, int rank, int64_t starts) {
  const std::string who = std::to_string(rank);
  store.set(scope + "twin-rank", std::vector<char>(who.begin(), who.end()));
  const int64_t seal = store.add(scope + "seal", kTwinMark);
  const bool sealed = seal % kTwinMark != 0;
  return detail::concat("process number ", starts, " to start as rank ", rank,
                        " at the rendezvous store ", store.address(),
                        sealed ? " (the job there had all its ranks and goes on)"
                               : " (the job there had not all its ranks: its start fails too)",
                        ": two jobs use one rendezvous address and port");
}

std::string sealMembership(TcpStore& store, const std::string& scope, const std::string& prefix,
                           int rank, std::chrono::milliseconds grace,
                           std::chrono::milliseconds limit) {
  const std::string key = prefix + "/membership";
  try {
    if (rank != 0) return text(store.get(key, limit));
    std::this_thread::sleep_for(grace);
    std::string outcome;
    if (store.add(scope + "seal", 1) >= kTwinMark) {
      // A twin posts its rank before it marks the seal (refuseTwin): the key is there.
      const std::string twin = text(store.get(scope + "twin-rank", limit));
      outcome = detail::concat("a second process started as rank ", twin,
                               " at the rendezvous store ", store.address(),
                               " before this job's ranks were all in, so this job's ranks may "
                               "be another job's: two jobs use one rendezvous address and port");
    }
    store.set(key, std::vector<char>(outcome.begin(), outcome.end()), limit);
    return outcome;
  } catch (const gloo::IoException& e) {  // the store lost or silent
    throw TimeoutError(detail::concat("cerar: rank ", rank, ": the job's membership ('", key,
                                      "' at ", store.address(), ") was not sealed: ", e.what()),
                       0);
  }
}

}  // namespace cerar
