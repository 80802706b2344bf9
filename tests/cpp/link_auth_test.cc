// The data links' start-up proof (ops/transport/link_auth.h) and its SHA-256 / HMAC.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "ops/transport/hmac_sha256.h"
#include "ops/transport/inproc.h"
#include "ops/transport/link_auth.h"
#include "ops/transport/transport.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;

std::string hex(const Sha256Digest& d) {
  std::string out;
  char two[3];
  for (uint8_t b : d) {
    std::snprintf(two, sizeof two, "%02x", b);
    out += two;
  }
  return out;
}

TEST(LinkAuth, Sha256MatchesThePublishedVectors) {
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(LinkAuth, HmacMatchesRfc4231) {
  EXPECT_EQ(hex(hmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(hmacSha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(LinkAuth, AProofBindsKeyScopeRanksAndBothNonces) {
  const LinkNonce a = freshLinkNonce(), b = freshLinkNonce();
  ASSERT_NE(a, b);
  const Sha256Digest proof = linkProof("key", "job/1", 0, 1, a, b);
  EXPECT_TRUE(checkLinkProof("key", "job/1", 0, 1, a, b, proof));
  EXPECT_FALSE(checkLinkProof("other key", "job/1", 0, 1, a, b, proof));  // wrong secret
  EXPECT_FALSE(checkLinkProof("key", "job/2", 0, 1, a, b, proof));        // another start
  EXPECT_FALSE(checkLinkProof("key", "job/1", 2, 1, a, b, proof));        // wrong prover rank
  EXPECT_FALSE(checkLinkProof("key", "job/1", 0, 2, a, b, proof));        // meant for another
  EXPECT_FALSE(checkLinkProof("key", "job/1", 1, 0, b, a, proof));        // reflected
  EXPECT_FALSE(checkLinkProof("key", "job/1", 0, 1, a, freshLinkNonce(), proof));  // replayed
  // An echo of the verifier's own nonce is refused even with a matching proof.
  EXPECT_FALSE(checkLinkProof("key", "job/1", 0, 1, b, b, linkProof("key", "job/1", 0, 1, b, b)));
}

// Runs `body` on every rank of an in-process group (threads), returns each rank's outcome.
std::vector<Status> runRanks(int size, const std::function<Status(Transport&)>& body) {
  InprocHub hub(size, 2s);
  std::vector<Status> out(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r, t = std::shared_ptr<Transport>(hub.connect(r))] {
      out[r] = body(*t);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(LinkAuth, RanksWithTheKeyPassEveryLink) {
  for (const Status& s : runRanks(3, [](Transport& t) {
         return authenticateLinks(t, "secret", "cerar/runtime/1");
       })) {
    EXPECT_TRUE(s.ok()) << s.message;
  }
}

TEST(LinkAuth, AWrongSecretFailsItsLinksNamingThePair) {
  const auto out = runRanks(3, [](Transport& t) {
    return authenticateLinks(t, t.rank() == 2 ? "guess" : "secret", "cerar/runtime/1");
  });
  for (int r : {0, 1}) {
    EXPECT_FALSE(out[r].ok());
    EXPECT_EQ(out[r].peer, 2);
    EXPECT_NE(out[r].message.find(detail::concat("between ranks ", r, " and 2")),
              std::string::npos) << out[r].message;
    EXPECT_NE(out[r].message.find("a connection that is not this job's"), std::string::npos);
  }
  EXPECT_FALSE(out[2].ok());
}

// Rank 1's side of the exchange with rank 0, played by hand: sends `nonce`, receives rank 0's,
// then sends what `prove` makes of the two (rank 1's nonce first).
void playRankOne(Transport& t, const LinkNonce& nonce,
                 const std::function<Sha256Digest(const LinkNonce&)>& prove) {
  auto swap = [&](const void* out, void* in, size_t bytes) {
    t.postRecv(0, in, bytes);
    t.postSend(0, out, bytes);
    t.waitSend(0);
    t.waitRecv(0);
  };
  LinkNonce theirs;
  swap(nonce.data(), theirs.data(), nonce.size());
  const Sha256Digest proof = prove(theirs);
  Sha256Digest answer;
  swap(proof.data(), answer.data(), proof.size());
}

// Rank 1 pretends to be rank 2 (it proves with that rank in its place).
TEST(LinkAuth, AProofForAnotherRankFails) {
  const auto out = runRanks(2, [](Transport& t) -> Status {
    if (t.rank() == 0) return authenticateLinks(t, "secret", "s");
    const LinkNonce mine = freshLinkNonce();
    playRankOne(t, mine, [&](const LinkNonce& theirs) {
      return linkProof("secret", "s", 2, 0, mine, theirs);
    });
    return Status();
  });
  EXPECT_FALSE(out[0].ok());
  EXPECT_NE(out[0].message.find("did not prove the job's key"), std::string::npos)
      << out[0].message;
}

// A recording of rank 1's side of one start-up, replayed at the next: the fresh nonce of rank 0
// makes the recorded proof worthless.
TEST(LinkAuth, AReplayedExchangeFails) {
  const LinkNonce recordedNonce = freshLinkNonce();
  Sha256Digest recordedProof;
  auto first = runRanks(2, [&](Transport& t) -> Status {
    if (t.rank() == 0) return authenticateLinks(t, "secret", "s");
    // An honest rank 1 that keeps what it sent (what a listener on the wire would see).
    playRankOne(t, recordedNonce, [&](const LinkNonce& theirs) {
      return recordedProof = linkProof("secret", "s", 1, 0, recordedNonce, theirs);
    });
    return Status();
  });
  ASSERT_TRUE(first[0].ok()) << first[0].message;
  auto replay = runRanks(2, [&](Transport& t) -> Status {
    if (t.rank() == 0) return authenticateLinks(t, "secret", "s");
    playRankOne(t, recordedNonce, [&](const LinkNonce&) { return recordedProof; });
    return Status();
  });
  EXPECT_FALSE(replay[0].ok());
  EXPECT_EQ(replay[0].peer, 1);
  EXPECT_NE(replay[0].message.find("a connection that is not this job's"), std::string::npos);
}

// A peer that never answers fails the link within the transport's timeout, naming the pair.
TEST(LinkAuth, ASilentPeerFailsTheLinkInItsTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto out = runRanks(2, [](Transport& t) -> Status {
    if (t.rank() == 0) return authenticateLinks(t, "secret", "s");
    std::this_thread::sleep_for(2500ms);  // past rank 0's limit: then it leaves
    return Status();
  });
  EXPECT_FALSE(out[0].ok());
  EXPECT_EQ(out[0].peer, 1);
  EXPECT_NE(out[0].message.find("between ranks 0 and 1"), std::string::npos) << out[0].message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

}  // namespace
}  // namespace cerar
