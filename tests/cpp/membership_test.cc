// One process per rank on a store that lives one start (core/config/membership.h): a twin
// before the seal fails the whole start, a twin after it fails alone.
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "core/config/membership.h"
#include "rendezvous/tcp_store.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;

struct Job {
  TcpStoreServer server{"127.0.0.1", 0, "k"};
  Job() { server.start(); }
  std::unique_ptr<TcpStore> client() {
    return std::make_unique<TcpStore>("127.0.0.1", server.port(), "k", 5s);
  }
};

// Every rank's outcome of the seal, rank 0 waiting `grace` first.
std::vector<std::string> sealAll(Job& job, int size, std::chrono::milliseconds grace) {
  std::vector<std::future<std::string>> outcomes;
  for (int rank = 0; rank < size; ++rank) {
    outcomes.push_back(std::async(std::launch::async, [&job, rank, grace] {
      return sealMembership(*job.client(), "s/", "s/1", rank, grace, 5s);
    }));
  }
  std::vector<std::string> result;
  for (auto& outcome : outcomes) result.push_back(outcome.get());
  return result;
}

TEST(Membership, AJobWithoutTwinsSealsWithNoMessageOnEveryRank) {
  Job job;
  for (const std::string& outcome : sealAll(job, 3, 0ms)) EXPECT_EQ(outcome, "");
}

TEST(Membership, ATwinBeforeTheSealFailsEveryRankNamingItsRank) {
  Job job;
  auto twin = job.client();
  const std::string mine = refuseTwin(*twin, "s/", 1, 2);
  EXPECT_NE(mine.find("process number 2 to start as rank 1"), std::string::npos) << mine;
  EXPECT_NE(mine.find("its start fails too"), std::string::npos) << mine;
  for (const std::string& outcome : sealAll(job, 3, 0ms)) {
    EXPECT_NE(outcome.find("a second process started as rank 1"), std::string::npos) << outcome;
    EXPECT_NE(outcome.find("two jobs use one rendezvous address and port"), std::string::npos);
  }
}

TEST(Membership, ATwinWithinTheGraceStillFailsTheStart) {
  Job job;
  auto late = std::async(std::launch::async, [&job] {
    std::this_thread::sleep_for(100ms);
    return refuseTwin(*job.client(), "s/", 2, 2);
  });
  const std::vector<std::string> outcomes = sealAll(job, 3, 600ms);
  EXPECT_NE(late.get().find("its start fails too"), std::string::npos);
  for (const std::string& outcome : outcomes) {
    EXPECT_NE(outcome.find("as rank 2"), std::string::npos) << outcome;
  }
}

TEST(Membership, ATwinAfterTheSealFailsAloneAndTheJobGoesOn) {
  Job job;
  for (const std::string& outcome : sealAll(job, 2, 0ms)) EXPECT_EQ(outcome, "");
  const std::string mine = refuseTwin(*job.client(), "s/", 1, 2);
  EXPECT_NE(mine.find("had all its ranks and goes on"), std::string::npos) << mine;
  // The job's posted outcome is unchanged.
  EXPECT_EQ(sealMembership(*job.client(), "s/", "s/1", 1, 0ms, 5s), "");
}

}  // namespace
}  // namespace cerar
