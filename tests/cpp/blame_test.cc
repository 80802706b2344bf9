// Agreement on a lost rank (core/control/blame.h), with ranks as threads over an in-memory board.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/control/blame.h"
#include "common/error.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;

class MemoryBoard : public BlameBoard {
 public:
  void post(const std::string& key, const std::string& value, std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
  }
  std::optional<std::string> read(const std::string& key, std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  void postOnLoss(const std::string& key, std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> lock(mutex_);
    onLoss_.insert(key);
  }
  // What the store's server does when a connection that left `key` closes without a goodbye.
  void connectionClosed(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (onLoss_.erase(key)) values_[key] = "";
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> values_;
  std::set<std::string> onLoss_;
};

// A board in a process that is gone (throws at once) or frozen (blocks until the limit).
class BrokenBoard : public BlameBoard {
 public:
  explicit BrokenBoard(bool frozen) : frozen_(frozen) {}
  void post(const std::string&, const std::string&, std::chrono::milliseconds limit) override {
    fail(limit);
  }
  std::optional<std::string> read(const std::string&, std::chrono::milliseconds limit) override {
    fail(limit);
  }

 private:
  [[noreturn]] void fail(std::chrono::milliseconds limit) {
    if (frozen_) std::this_thread::sleep_for(limit);
    throw std::runtime_error("store: connection lost");
  }
  bool frozen_;
};

// A board whose reads take `delay` each, as a loaded machine's store can: one whose limit is
// shorter gives up at the limit with the store client's error.
class SlowBoard : public MemoryBoard {
 public:
  explicit SlowBoard(std::chrono::milliseconds delay) : delay_(delay) {}
  std::optional<std::string> read(const std::string& key,
                                  std::chrono::milliseconds limit) override {
    std::this_thread::sleep_for(std::min(delay_, limit));
    if (limit < delay_) throw std::runtime_error("store: check: no reply in time");
    return MemoryBoard::read(key, limit);
  }

 private:
  std::chrono::milliseconds delay_;
};

BlameOptions optionsFor(int rank, int size, bool rankZeroHosts = false,
                        std::chrono::milliseconds window = 2000ms) {
  BlameOptions o;
  o.rank = rank;
  o.size = size;
  o.scope = "test";
  o.hostedByRankZero = rankZeroHosts;
  o.window = window;
  return o;
}

// Each survivor's observation in turn (the cascade): each starts once the one before it has
// posted its report, so a loaded machine cannot reorder them (a fixed lag could: a survivor
// delayed past the others' agreement would be named as the silent one). Returns the results.
std::map<int, Status> agree(MemoryBoard& board, int size, const std::map<int, Status>& seen,
                            std::chrono::milliseconds window = 2000ms) {
  std::map<int, Status> results;
  std::mutex mutex;
  std::vector<std::thread> threads;
  int previous = -1;
  for (const auto& [rank, observed] : seen) {
    threads.emplace_back([&, rank = rank, observed = observed, previous] {
      if (previous >= 0) {
        const auto until = std::chrono::steady_clock::now() + 10s;
        while (!board.read(detail::concat("test/failed/", previous), 0ms) &&
               std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(1ms);
        }
        std::this_thread::sleep_for(30ms);  // a lag, as between real failures
      }
      Status agreed = agreeOnFailure(observed, &board, optionsFor(rank, size, false, window));
      std::lock_guard<std::mutex> lock(mutex);
      results[rank] = agreed;
    });
    previous = rank;
  }
  for (auto& t : threads) t.join();
  return results;
}

TEST(Blame, SurvivorsNameTheRankThatNeverPosts) {
  MemoryBoard board;
  const auto start = std::chrono::steady_clock::now();
  // Rank 2 died: its neighbours saw its links close, rank 0 only its neighbour's.
  auto results = agree(board, 4, {{3, Status(StatusCode::kPeerLost, "recv from 2", 2)},
                                  {0, Status(StatusCode::kPeerLost, "recv from 3", 3)},
                                  {1, Status(StatusCode::kPeerLost, "recv from 0", 0)}});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);  // ended early, not the window
  for (const auto& [rank, status] : results) {
    EXPECT_EQ(status.code, StatusCode::kPeerLost) << rank << ": " << status.message;
    EXPECT_EQ(status.peer, 2) << rank << ": " << status.message;
    EXPECT_NE(status.message.find("rank 2 was lost"), std::string::npos) << status.message;
  }
}

TEST(Blame, AFrozenRankIsATimeoutEverywhere) {
  MemoryBoard board;
  auto results = agree(board, 4, {{1, Status(StatusCode::kTimeout, "send to 2", 2)},
                                  {0, Status(StatusCode::kPeerLost, "recv from 1", 1)},
                                  {3, Status(StatusCode::kPeerLost, "send to 0", 0)}});
  for (const auto& [rank, status] : results) {
    EXPECT_EQ(status.code, StatusCode::kTimeout) << rank << ": " << status.message;
    EXPECT_EQ(status.peer, 2) << rank << ": " << status.message;
  }
}

// Every rank leaves its loss mark, as the runtime does at start.
void leaveMarks(MemoryBoard& board, int size) {
  for (int rank = 0; rank < size; ++rank) leaveLossMark(&board, optionsFor(rank, size), 1000ms);
}

// Survivors of rank 2 that all timed out: none saw a link close (a loaded machine).
const std::map<int, Status> kAllTimedOut = {{3, Status(StatusCode::kTimeout, "recv from 2", 2)},
                                            {1, Status(StatusCode::kTimeout, "send to 2", 2)},
                                            {0, Status(StatusCode::kTimeout, "recv from 3", 3)}};

TEST(Blame, AClosedStoreConnectionProvesTheDeathThatEverySurvivorTimedOutOn) {
  MemoryBoard board;
  leaveMarks(board, 4);
  board.connectionClosed("test/gone/2");  // killed: the kernel closed its store connection
  auto results = agree(board, 4, kAllTimedOut);
  for (const auto& [rank, status] : results) {
    EXPECT_EQ(status.code, StatusCode::kPeerLost) << rank << ": " << status.message;
    EXPECT_EQ(status.peer, 2) << rank << ": " << status.message;
    EXPECT_NE(status.message.find("rank 2 was lost"), std::string::npos) << status.message;
  }
  // A survivor that named the dead rank says why it knows.
  EXPECT_NE(results[3].message.find("connection to the rendezvous store closed"),
            std::string::npos)
      << results[3].message;
}

// Rank 2 killed while rank 1 was stopped: rank 0 waited on rank 1 and rank 3 on rank 0, so no
// survivor saw rank 2's link close, and rank 1 posts too late. Rank 2's mark is what they saw.
TEST(Blame, ADeathSeenOnlyByItsMarkOutweighsTheSlowRankWaitedOn) {
  MemoryBoard board;
  leaveMarks(board, 4);
  board.connectionClosed("test/gone/2");
  auto results = agree(board, 4, {{0, Status(StatusCode::kTimeout, "recv from 1", 1)},
                                  {3, Status(StatusCode::kTimeout, "recv from 0", 0)}},
                       300ms);
  for (const auto& [rank, status] : results) {
    EXPECT_EQ(status.code, StatusCode::kPeerLost) << rank << ": " << status.message;
    EXPECT_EQ(status.peer, 2) << rank << ": " << status.message;
    EXPECT_NE(status.message.find("rank 2 was lost"), std::string::npos) << status.message;
    EXPECT_NE(status.message.find("ranks 1, 2 did not report"), std::string::npos)
        << status.message;
  }
  // Two deaths (rank 3 killed, then rank 2 ended with it by a launcher): rank 0 proved the one
  // it waited on; the marks do not say which came first, so the others post what they saw and
  // the posts name rank 0's.
  MemoryBoard two;
  leaveMarks(two, 6);
  two.connectionClosed("test/gone/3");
  two.connectionClosed("test/gone/2");
  auto named = agree(two, 6, {{0, Status(StatusCode::kTimeout, "send to 3", 3)},
                              {1, Status(StatusCode::kTimeout, "send to 0", 0)},
                              {4, Status(StatusCode::kTimeout, "send to 0", 0)}},
                     300ms);
  for (const auto& [rank, status] : named) {
    EXPECT_EQ(status.code, StatusCode::kPeerLost) << rank << ": " << status.message;
    EXPECT_EQ(status.peer, 3) << rank << ": " << status.message;
  }
}

TEST(Blame, WithoutTheMarkEveryTimeoutIsSilence) {
  MemoryBoard board;  // frozen (SIGSTOP): its store connection stays open, no mark
  leaveMarks(board, 4);
  for (const auto& [rank, status] : agree(board, 4, kAllTimedOut)) {
    EXPECT_EQ(status.code, StatusCode::kTimeout) << rank << ": " << status.message;
    EXPECT_EQ(status.peer, 2) << rank << ": " << status.message;
    EXPECT_NE(status.message.find("rank 2 stopped answering"), std::string::npos)
        << status.message;
  }
}

TEST(Blame, AMarkProvesOnlyTheDeathOfItsOwnRank) {
  MemoryBoard board;
  leaveMarks(board, 4);
  board.connectionClosed("test/gone/1");  // another rank's mark (a survivor's broken store)
  board.post("other/gone/2", "", 0ms);      // rank 2's mark of another runtime instance
  for (const auto& [rank, status] : agree(board, 4, kAllTimedOut)) {
    EXPECT_EQ(status.code, StatusCode::kTimeout) << rank << ": " << status.message;
    EXPECT_EQ(status.peer, 2) << rank << ": " << status.message;
  }
}

TEST(Blame, ARankThatFailedOnItsOwnIsTheCause) {
  MemoryBoard board;
  auto results = agree(board, 3, {{1, Status(StatusCode::kInternal, "codec broke")},
                                  {0, Status(StatusCode::kTimeout, "recv from 2", 2)},
                                  {2, Status(StatusCode::kTimeout, "recv from 1", 1)}});
  EXPECT_EQ(results[1].code, StatusCode::kInternal);  // its own failure, unchanged
  for (int rank : {0, 2}) {
    EXPECT_EQ(results[rank].code, StatusCode::kPeerLost) << results[rank].message;
    EXPECT_EQ(results[rank].peer, 1) << results[rank].message;
    EXPECT_NE(results[rank].message.find("codec broke"), std::string::npos);
  }
}

TEST(Blame, TwoMissingRanksWaitForTheWindowAndPreferTheOneSeen) {
  MemoryBoard board;
  const auto start = std::chrono::steady_clock::now();
  auto results = agree(board, 4, {{0, Status(StatusCode::kPeerLost, "recv from 3", 3)}});
  EXPECT_GE(std::chrono::steady_clock::now() - start, 2000ms);
  EXPECT_EQ(results[0].peer, 3);
  EXPECT_NE(results[0].message.find("ranks 1, 2, 3 did not report"), std::string::npos)
      << results[0].message;
}

TEST(Blame, ASurvivorTooSlowToPostIsNotNamed) {
  // Rank 2 killed (its neighbour saw the close) or frozen (its neighbour timed out); rank 1
  // was too slow to post in the window: rank 0's own peer (3) posted, and the lowest missing
  // rank is the slow one, yet the posts point at rank 2.
  for (StatusCode code : {StatusCode::kPeerLost, StatusCode::kTimeout}) {
    MemoryBoard board;
    auto results = agree(board, 4, {{3, Status(code, "recv from 2", 2)},
                                    {0, Status(StatusCode::kPeerLost, "recv from 3", 3)}},
                         300ms);
    for (const auto& [rank, status] : results) {
      EXPECT_EQ(status.code, code) << rank << ": " << status.message;
      EXPECT_EQ(status.peer, 2) << rank << ": " << status.message;
      EXPECT_NE(status.message.find("ranks 1, 2 did not report"), std::string::npos)
          << status.message;
    }
  }
}

// Rank 0 hosts the board (its process ends when it returns): rank 2 died, and rank 1 fails
// only after rank 0's window and the one it waits for the others to read (a starved process).
// Rank 0 holds back until rank 1 has read the posts, so rank 1 names rank 2, not rank 0; a
// slow rank whose own process ended (its mark) is not waited for.
TEST(Blame, RankZeroHostingTheBoardWaitsForASlowSurvivor) {
  for (bool slowRankDies : {false, true}) {
    MemoryBoard board;
    leaveMarks(board, 4);
    board.connectionClosed("test/gone/2");
    if (slowRankDies) board.connectionClosed("test/gone/1");
    auto options = [](int rank) {
      BlameOptions o = optionsFor(rank, 4, /*rankZeroHosts=*/true, 200ms);
      o.timeout = 1000ms;
      return o;
    };
    board.post("test/failed/3", detail::concat(int(StatusCode::kPeerLost), " 2 recv from 2"), 0ms);
    const auto start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::duration zeroReturned{}, oneDone{};
    std::thread zero([&] {
      Status agreed = agreeOnFailure(Status(StatusCode::kPeerLost, "recv from 3", 3), &board,
                                     options(0));
      zeroReturned = std::chrono::steady_clock::now() - start;
      EXPECT_EQ(agreed.peer, 2) << agreed.message;
    });
    if (!slowRankDies) {
      std::this_thread::sleep_for(700ms);  // past rank 0's two windows, short of the timeout
      Status agreed = agreeOnFailure(Status(StatusCode::kTimeout, "send to 2", 2), &board,
                                     options(1));
      oneDone = std::chrono::steady_clock::now() - start;
      EXPECT_EQ(agreed.code, StatusCode::kPeerLost) << agreed.message;
      EXPECT_EQ(agreed.peer, 2) << agreed.message;
    }
    zero.join();
    if (slowRankDies) {
      EXPECT_LT(zeroReturned, 600ms);  // two windows and slack, not the timeout
    } else {
      EXPECT_GE(zeroReturned, oneDone);
      EXPECT_LT(zeroReturned, 1600ms);  // the timeout and a window, and slack
    }
  }
}

TEST(Blame, AReplySlowAtTheWindowsEndIsNotABoardFailure) {
  // Reads of 30 ms fit the quarter window that every call is given; reads of 150 ms do not,
  // and the one cut off past the window's end leaves the posts read so far to decide.
  for (auto delay : {30ms, 150ms}) {
    SlowBoard board(delay);
    board.post("test/failed/1", "2 2 send to 2", 0ms);  // rank 1 saw rank 2's link close
    const auto start = std::chrono::steady_clock::now();
    Status agreed = agreeOnFailure(Status(StatusCode::kPeerLost, "recv from 1", 1), &board,
                                   optionsFor(0, 4, false, 400ms));  // rank 3 never posts
    EXPECT_LT(std::chrono::steady_clock::now() - start, 400ms * 2);  // 1.5 windows, and slack
    EXPECT_EQ(agreed.code, StatusCode::kPeerLost) << agreed.message;
    EXPECT_EQ(agreed.peer, 2) << delay.count() << " ms: " << agreed.message;
    EXPECT_EQ(agreed.message.find("not known here"), std::string::npos) << agreed.message;
  }
}

TEST(Blame, ABoardInRankZeroThatFailsMeansRankZeroIsLost) {
  for (bool frozen : {false, true}) {
    BrokenBoard board(frozen);
    const auto start = std::chrono::steady_clock::now();
    Status agreed = agreeOnFailure(Status(StatusCode::kPeerLost, "recv from 1", 1), &board,
                                   optionsFor(2, 4, /*rankZeroHosts=*/true));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2500ms);  // the window bounds it
    EXPECT_EQ(agreed.peer, 0) << agreed.message;
    EXPECT_EQ(agreed.code, frozen ? StatusCode::kTimeout : StatusCode::kPeerLost)
        << agreed.message;
  }
}

TEST(Blame, WithoutABoardARankNamesWhatItSaw) {
  BrokenBoard broken(false);
  for (BlameBoard* board : {static_cast<BlameBoard*>(nullptr), static_cast<BlameBoard*>(&broken)}) {
    Status agreed = agreeOnFailure(Status(StatusCode::kTimeout, "recv from 1", 1), board,
                                   optionsFor(2, 4));
    EXPECT_EQ(agreed.code, StatusCode::kTimeout);
    EXPECT_EQ(agreed.peer, 1);
    EXPECT_NE(agreed.message.find("rank 2 lost contact with rank 1"), std::string::npos)
        << agreed.message;
  }
}

TEST(Blame, ErrorsThrowTheSubclassOfTheirCode) {
  EXPECT_THROW(Status(StatusCode::kTimeout, "t", 1).raise(), TimeoutError);
  EXPECT_THROW(Status(StatusCode::kPeerLost, "p", 1).raise(), PeerLostError);
  EXPECT_THROW(Status(StatusCode::kMismatch, "m").raise(), MismatchError);
  EXPECT_THROW(Status(StatusCode::kShutDown, "s").raise(), ShutDownError);
  EXPECT_THROW(Status(StatusCode::kInvalidArgument, "i").raise(), InvalidArgumentError);
  EXPECT_THROW(Status(StatusCode::kInternal, "x").raise(), InternalError);
  try {
    CERAR_ENFORCE(false, "broken invariant");
  } catch (const InternalError& e) {
    // A short source tag, never the build machine's path.
    EXPECT_NE(std::string(e.what()).find("[blame_test.cc:"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('/'), std::string::npos) << e.what();
  }
}

// A process stopped (SIGSTOP) past the timeout and resumed: its own failure names itself as
// the silent rank, whatever it saw on waking; one stopped briefly names the peer as before, and
// so does one stopped as long whose peers' posts name another rank (that one died meanwhile).
TEST(Blame, AResumedFrozenRankNamesItself) {
  for (const auto& [stop, othersBlame] :
       {std::pair{800ms, -1}, std::pair{50ms, -1}, std::pair{800ms, 2}, std::pair{800ms, 0}}) {
    int pipes[2];
    ASSERT_EQ(pipe(pipes), 0);
    const pid_t child = fork();
    if (child == 0) {
      startStallWatch();
      char go = 0;
      (void)!write(pipes[1], &go, 1);  // the watch runs: the parent may stop this process now
      std::this_thread::sleep_for(stop + 300ms);  // stopped meanwhile, then resumed
      BlameOptions o = optionsFor(2, 3, false, 200ms);
      o.timeout = 500ms;
      MemoryBoard board;  // rank 0's post names `othersBlame` (-1: no board)
      board.post("test/failed/0",
                 detail::concat(int(StatusCode::kTimeout), " ", othersBlame, " recv"), 1s);
      const Status agreed = agreeOnFailure(Status(StatusCode::kPeerLost, "recv from 1: closed", 1),
                                           othersBlame < 0 ? nullptr : &board, o);
      const bool self = agreed.peer == 2 && agreed.code == StatusCode::kTimeout &&
                        agreed.message.find("rank 2 (this process) was the silent one") !=
                            std::string::npos;
      std::_Exit(self ? 10 : agreed.peer != 2 ? 11 : 12);
    }
    char go;
    ASSERT_EQ(read(pipes[0], &go, 1), 1);
    close(pipes[0]);
    close(pipes[1]);
    std::this_thread::sleep_for(50ms);
    kill(child, SIGSTOP);
    std::this_thread::sleep_for(stop);
    kill(child, SIGCONT);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    const bool silent = stop > 500ms && (othersBlame < 0 || othersBlame == 2);
    EXPECT_EQ(WEXITSTATUS(status), silent ? 10 : 11)
        << "stopped " << stop.count() << " ms, the others blame " << othersBlame;
  }
}

}  // namespace
}  // namespace cerar
