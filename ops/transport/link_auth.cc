#include "ops/transport/link_auth.h"

#include <string>
#include <vector>

#include "common/error.h"
#include "ops/transport/transport.h"

namespace cerar {
namespace {

// Names the purpose and the version, so a proof made for anything else never matches.
constexpr std::string_view kLabel = "cerar link proof v1";

void append(std::string& out, int64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(char(uint64_t(value) >> (56 - 8 * i)));
}

// Each field with its length first: no two different inputs give the same message.
std::string proofMessage(std::string_view scope, int prover, int verifier,
                         const LinkNonce& proverNonce, const LinkNonce& verifierNonce) {
  std::string out;
  append(out, int64_t(kLabel.size()));
  out.append(kLabel);
  append(out, int64_t(scope.size()));
  out.append(scope);
  append(out, prover);
  append(out, verifier);
  out.append(reinterpret_cast<const char*>(proverNonce.data()), proverNonce.size());
  out.append(reinterpret_cast<const char*>(verifierNonce.data()), verifierNonce.size());
  return out;
}

// Posts a fixed-size send to and receive from each of `peers`, then waits for all of them.
// Throws the transport's error (naming the peer) when one fails.
template <typename Message>
void exchange(Transport& transport, const std::vector<int>& peers,
              const std::vector<Message>& out, std::vector<Message>& in) {
  for (int peer : peers) {
    transport.postRecv(peer, in[peer].data(), in[peer].size());
    transport.postSend(peer, out[peer].data(), out[peer].size());
  }
  for (int peer : peers) {
    transport.waitSend(peer);
    transport.waitRecv(peer);
  }
}

// `peers`, or every peer of `rank` where it is empty.
std::vector<int> peersOrAll(const std::vector<int>& peers, int rank, int size) {
  if (!peers.empty()) return peers;
  std::vector<int> all;
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) all.push_back(peer);
  }
  return all;
}

}  // namespace

LinkNonce freshLinkNonce() {
  LinkNonce nonce;
  randomBytes(nonce.data(), nonce.size());
  return nonce;
}

Sha256Digest linkProof(std::string_view key, std::string_view scope, int prover, int verifier,
                       const LinkNonce& proverNonce, const LinkNonce& verifierNonce) {
  return hmacSha256(key, proofMessage(scope, prover, verifier, proverNonce, verifierNonce));
}

bool checkLinkProof(std::string_view key, std::string_view scope, int prover, int verifier,
                    const LinkNonce& proverNonce, const LinkNonce& verifierNonce,
                    const Sha256Digest& proof) {
  if (proverNonce == verifierNonce) return false;
  return sameDigest(proof, linkProof(key, scope, prover, verifier, proverNonce, verifierNonce));
}

std::string strangerMessage(int rank, int peer, const std::string& seen) {
  // The transport's messages start with the rank, which this one names already.
  const std::string own = detail::concat("rank ", rank, ": ");
  const std::string what = seen.rfind(own, 0) == 0 ? seen.substr(own.size()) : seen;
  return detail::concat("the data link between ranks ", std::min(rank, peer), " and ",
                        std::max(rank, peer), " failed its start-up, seen by rank ", rank, ": ",
                        what, "; a connection that is not this job's was taken for a rank's "
                        "link, or that rank ended (docs/rendezvous.md, threat model)");
}

Status authenticateLinks(Transport& transport, std::string_view key, std::string_view scope,
                         const std::vector<int>& only) {
  const int rank = transport.rank();
  const int size = transport.size();
  const std::vector<int> peers = peersOrAll(only, rank, size);
  std::vector<LinkNonce> mine(size), theirs(size);
  std::vector<Sha256Digest> proofs(size), answers(size);
  try {
    for (auto& nonce : mine) nonce = freshLinkNonce();
    exchange(transport, peers, mine, theirs);
    for (int peer : peers) {
      proofs[peer] = linkProof(key, scope, rank, peer, mine[peer], theirs[peer]);
    }
    exchange(transport, peers, proofs, answers);
  } catch (const Error& e) {
    const Status seen = statusOf(e);
    if (seen.peer < 0) return seen;  // not a link's failure (a misuse): no pair to name
    return Status(seen.code, strangerMessage(rank, seen.peer, e.what()), seen.peer);
  }
  for (int peer : peers) {
    if (!checkLinkProof(key, scope, peer, rank, theirs[peer], mine[peer], answers[peer])) {
      return Status(StatusCode::kPeerLost,
                    strangerMessage(rank, peer, detail::concat("the end that should be rank ",
                                                               peer, " did not prove the job's "
                                                               "key")),
                    peer);
    }
  }
  return Status();
}

}  // namespace cerar
