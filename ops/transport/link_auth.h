// The start-up proof of the data links: before a link carries job data, each end proves to the
// other that it holds the job's link key and is the rank the other expects.
//
// Why: a link listener accepts the first connection it sees (Gloo's TCP pairs), so a process
// that connects during start-up is taken for a peer. Such a connection cannot answer the
// challenge below, and the link fails its start-up instead of carrying the job's data.
//
// The exchange, per link, both ends at once and with fixed sizes (a Gloo link must see equal
// byte counts on both ends): each sends a fresh random nonce; then each sends its proof,
// HMAC-SHA-256 under the key of (a label, the job instance's scope, its own rank, the peer's
// rank, its nonce, the peer's nonce). The peer's nonce makes a recorded proof useless later
// (replay), the rank order makes a proof useless in the other direction (reflection), and the
// scope (which names the generation) makes it useless in another start of the job.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ops/transport/hmac_sha256.h"

namespace cerar {

class Transport;

using LinkNonce = std::array<uint8_t, 16>;

// 128 bits from the system's random source.
LinkNonce freshLinkNonce();

// What `prover` sends `verifier` (see above).
Sha256Digest linkProof(std::string_view key, std::string_view scope, int prover, int verifier,
                       const LinkNonce& proverNonce, const LinkNonce& verifierNonce);

// Whether `proof` is `prover`'s answer to `verifierNonce`. A prover nonce equal to the
// verifier's is refused: only a reflected or replayed exchange produces one.
bool checkLinkProof(std::string_view key, std::string_view scope, int prover, int verifier,
                    const LinkNonce& proverNonce, const LinkNonce& verifierNonce,
                    const Sha256Digest& proof);

// The message of a link that failed its start-up; names the pair and the likely cause.
std::string strangerMessage(int rank, int peer, const std::string& seen);

// Runs the exchange with every peer in `peers` of `transport`, all of them where `peers` is
// empty (each wait bounded by the transport's timeout).
// Returns ok, or the first link that failed: kPeerLost with the pair and "a connection that is
// not this job's" for a wrong proof, the transport's own failure otherwise. The transport is
// unusable after a failure.
Status authenticateLinks(Transport& transport, std::string_view key, std::string_view scope,
                         const std::vector<int>& peers = {});

}  // namespace cerar
