// Which rank was lost: after a dead or silent peer, every survivor names the same one.
//
// Why ranks disagree without this: in a ring each rank waits only on its neighbours, so the
// rank next to a dead or frozen peer detects it (a closed link, or a timeout) and closes its
// own links, and the ranks waiting on that detector then see *its* links close, a cascade in
// which most survivors would blame an innocent neighbour.
//
// The protocol: every rank whose runtime fails posts what it saw to a board (the job's
// rendezvous store, under a key per runtime instance) and then reads the others' posts for a
// short window, ending early once every rank but one has posted. The cascade makes every
// survivor fail within moments of the first detection, so the rank that never posts is the
// lost one; a rank that posted a failure of its own (not a lost link) is the cause instead.
// A survivor too slow to post in the window leaves two missing: the posts then point at the
// lost one (a link they saw close, a rank they waited on), never at the slow one.
// The board lives in the launcher, or in rank 0's process (torchrun-style): there, a board
// that stops answering means rank 0 itself is lost, and rank 0 returns only once the others
// have read the posts (its process, and the board, may end right after). A rank without a
// board, or whose board fails otherwise, names only what it saw itself, saying so.
//
// Killed or frozen: a dead process's links close at once and a frozen one's stay open, so a
// survivor that saw the lost rank's link close has proof of death (kPeerLost), and without one
// the rank was silent (kTimeout). But on a loaded machine every survivor's timeout can fire
// before its transport has read the close. So the board holds evidence of its own: each rank
// leaves, at start, a loss mark (`<scope>/gone/<rank>`) that the board posts itself if the
// rank's connection to it ends without a goodbye (the store's server sees the kernel close a
// dead process's socket; a frozen one's stays open; a clean close says goodbye first). A
// survivor that timed out on a rank reads that rank's mark before posting, and posts a closed
// link if it is there. The evidence is taken into the posts, which every survivor reads the
// same, never read again at the verdict: a launcher that kills a frozen rank once the first
// survivor has given up cannot turn the later survivors' verdict into a different one. Some
// survivor times out on the lost rank itself: the chain of waits ends there, and a wait on one
// link is not ended by other links closing.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "ops/transport/transport.h"

namespace cerar {

// Where ranks post their failures. Calls throw on failure and give up after `limit`.
class BlameBoard {
 public:
  virtual ~BlameBoard() = default;
  virtual void post(const std::string& key, const std::string& value,
                    std::chrono::milliseconds limit) = 0;
  // The value at `key`, or nothing if none was posted yet.
  virtual std::optional<std::string> read(const std::string& key,
                                          std::chrono::milliseconds limit) = 0;
  // Leaves `key` for the board to post (as "") should this process's connection to it end
  // without a goodbye. A board that cannot tell does nothing.
  virtual void postOnLoss(const std::string& /*key*/, std::chrono::milliseconds /*limit*/) {}
};

struct BlameOptions {
  int rank = 0;
  int size = 1;
  std::string scope;           // key prefix of this runtime instance, the same on every rank
  bool hostedByRankZero = false;  // the board lives in rank 0's process
  std::chrono::milliseconds window{1000};  // how long to wait for the others' posts
  // The limit of one wait. Set: a rank that was itself stopped about this long just before
  // its failure (SIGSTOP, a suspended machine), and whom the others' posts name (or that has
  // none to read), reports that it was the silent one, rather than blaming a peer whose links
  // it finds closed on waking.
  std::chrono::milliseconds timeout{0};
};

// Starts (once per process) a thread that notes how long the process goes without running:
// it beats every 50 ms, and a gap between beats is time the whole process was stopped.
void startStallWatch();
// The longest stop of this process that ended within `recent`, or the one in progress (the
// watch thread may not have run yet since the process resumed). Zero without the watch.
std::chrono::milliseconds recentStall(std::chrono::milliseconds recent);

// The failure this rank reports, given what it `observed`: for a timeout or a lost peer, the
// rank that every survivor names (with kTimeout if it went silent, kPeerLost if its links
// closed or it failed on its own); any other failure is posted and returned unchanged.
// Returns within 1.5 x options.window (rank 0 hosting the board: 3 x, and when a survivor was
// too slow to post and is still alive, the larger of that and options.timeout + 1.5 x);
// never throws.
Status agreeOnFailure(const Status& observed, BlameBoard* board, const BlameOptions& options);

// Leaves this rank's loss mark with the board (see above), once options.scope is agreed; gives
// up after `limit`. Never throws: without a mark only the survivors' links can tell a death.
void leaveLossMark(BlameBoard* board, const BlameOptions& options,
                   std::chrono::milliseconds limit);

// A fresh scope for one runtime instance (random), to be agreed on by rank 0's choice.
std::string newBlameScope();


// The options of this runtime instance: rank 0 picks the scope and sends it over `transport`,
// the window follows `timeout`; then this rank leaves its loss mark. Every rank calls it at
// start, all with a board.
BlameOptions setUpBlame(Transport& transport, BlameBoard* board, bool hostedByRankZero,
                        std::chrono::milliseconds timeout);

}  // namespace cerar
