// runLocalJob: results by rank, and how failures come back, for threads and processes.
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"
#include "tools/local_job.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;

std::string passToken(int rank, const std::shared_ptr<Transport>& t) {
  int out = rank * 10, in = -1;
  t->postRecv(t->prev(), &in, sizeof in);
  t->postSend(t->next(), &out, sizeof out);
  t->waitRecv(t->prev());
  t->waitSend(t->next());
  return std::to_string(in);
}

TEST(LocalJob, ResultsComeBackByRank) {
  for (auto kind : {LocalTransport::kInproc, LocalTransport::kGloo}) {
    auto results = runLocalJob({3, kind, 5s}, passToken);
    EXPECT_EQ(results, (std::vector<std::string>{"20", "0", "10"}));
  }
}

TEST(LocalJob, InprocRethrowsTheFailureWithItsRank) {
  try {
    runLocalJob({3, LocalTransport::kInproc, 5s}, [](int rank, std::shared_ptr<Transport>) {
      if (rank == 2) throw std::runtime_error("bad input");
      return std::string("fine");
    });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "rank 2: bad input");
  }
}

TEST(LocalJob, GlooListsEveryFailingRank) {
  LocalJobOptions options{3, LocalTransport::kGloo, 5s};
  options.failureGrace = 3s;  // without it, the second failure may be killed before it reports
  try {
    runLocalJob(options, [](int rank, std::shared_ptr<Transport>) {
      if (rank != 0) throw Error(detail::concat("rank ", rank, ": broke"));
      return std::string("fine");
    });
    FAIL() << "no exception";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 1: broke"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 2: broke"), std::string::npos) << what;
    EXPECT_EQ(what.find("rank 1: rank 1"), std::string::npos) << what;
    EXPECT_EQ(what.find("rank 0: "), std::string::npos) << what;  // it has its result
  }
}

TEST(LocalJob, GlooKillsRanksAtTheDeadline) {
  LocalJobOptions options{2, LocalTransport::kGloo, 5s};
  options.deadline = 500ms;
  try {
    runLocalJob(options, [](int rank, std::shared_ptr<Transport>) {
      if (rank == 1) std::this_thread::sleep_for(30s);
      return std::string("fine");
    });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: killed at the job's deadline of 500 ms"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cerar
