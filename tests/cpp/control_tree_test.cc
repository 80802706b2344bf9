// The control tree: bounded degree, every rank reached once, depth logarithmic; and the
// tree's halves over real transports (in-process), aborts included.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "common/error.h"
#include "ops/control_tree.h"
#include "ops/collectives.h"
#include "ops/transport/inproc.h"

namespace cerar {
namespace {

TEST(ControlTree, EveryRankHasOneParentAndAtMostFanoutChildren) {
  for (int fanout : {1, 2, 3, 8}) {
    for (int size : {1, 2, 7, 8, 9, 64, 73, 1000}) {
      std::vector<int> parentOf(size, -2);
      for (int rank = 0; rank < size; ++rank) {
        const ControlTree tree{rank, size, fanout};
        const auto children = tree.children();
        EXPECT_LE(int(children.size()), fanout);
        for (int child : children) {
          EXPECT_EQ(parentOf[child], -2) << "child " << child << " reached twice";
          parentOf[child] = rank;
          EXPECT_EQ((ControlTree{child, size, fanout}.parent()), rank);
        }
      }
      EXPECT_EQ(parentOf[0], -2);  // the root has none
      for (int rank = 1; rank < size; ++rank) EXPECT_GE(parentOf[rank], 0) << rank;
    }
  }
  // 1 + 8 + 64 ranks fill depth 2 exactly; one more needs depth 3.
  EXPECT_EQ((ControlTree{0, 73, 8}.depth()), 2);
  EXPECT_EQ((ControlTree{0, 74, 8}.depth()), 3);
  EXPECT_EQ((ControlTree{0, 9, 8}.depth()), 1);
  EXPECT_EQ((ControlTree{0, 1, 8}.depth()), 0);
  EXPECT_EQ((ControlTree{0, 4096, 2}.depth()), 12);
}

// Every rank's message reaches the root through its ancestors (each passes its subtree's
// concatenation up), and the root's answer reaches every rank.
TEST(ControlTree, MessagesGoUpAndTheAnswerComesDown) {
  const int size = 11, fanout = 3;
  InprocHub hub(size, std::chrono::seconds(10));
  std::vector<std::vector<uint8_t>> atRoot(1), answers(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      auto link = hub.connect(rank);
      Transport& t = *link;
      const ControlTree tree{rank, size, fanout};
      std::vector<uint8_t> mine{uint8_t(rank)};
      for (auto& bytes : gatherFromChildren(t, tree.children())) {
        mine.insert(mine.end(), bytes.begin(), bytes.end());
      }
      if (tree.parent() >= 0) {
        sendToParent(t, tree.parent(), mine);
        answers[rank] = relayDown(t, tree.parent(), tree.children());
      } else {
        atRoot[0] = mine;
        std::vector<uint8_t> answer(1000, 7);  // longer than a frame
        answers[rank] = relayDown(t, -1, tree.children(), answer);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(std::set<uint8_t>(atRoot[0].begin(), atRoot[0].end()).size(), size_t(size));
  EXPECT_EQ(atRoot[0].size(), size_t(size));
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(answers[rank], std::vector<uint8_t>(1000, 7));
}

// A rank that cannot report aborts upward; the root's abort comes down to every rank, each
// failing with the reason (as the coordinator does with a corrupt report).
TEST(ControlTree, AnAbortReachesEveryRank) {
  const int size = 7, fanout = 2, failing = 5;
  InprocHub hub(size, std::chrono::seconds(10));
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      auto t = hub.connect(rank);
      const ControlTree tree{rank, size, fanout};
      try {
        try {
          gatherFromChildren(*t, tree.children());
          if (rank == failing) throw Error("rank 5 found garbage");
        } catch (const Error& e) {
          if (tree.parent() < 0) {
            abortDown(*t, tree.children(), e.what());
          } else {
            abortToParent(*t, tree.parent(), e.what());
            relayDown(*t, tree.parent(), tree.children());
          }
          throw;
        }
        if (tree.parent() >= 0) {
          sendToParent(*t, tree.parent(), {1});
          relayDown(*t, tree.parent(), tree.children());
        } else {
          relayDown(*t, -1, tree.children(), {2});
        }
      } catch (const Error& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_NE(errors[rank].find("found garbage"), std::string::npos)
        << "rank " << rank << ": " << errors[rank];
  }
}

}  // namespace
}  // namespace cerar
