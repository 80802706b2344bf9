#include "core/control/blame.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "ops/collectives.h"
#include "common/error.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool isLoss(StatusCode code) {
  return code == StatusCode::kTimeout || code == StatusCode::kPeerLost;
}

std::string encodeReport(const Status& s) {
  return detail::concat(int(s.code), ' ', s.peer, ' ', s.message);
}

std::optional<Status> decodeReport(const std::string& text) {
  std::istringstream in(text);
  int code = 0, peer = -1;
  if (!(in >> code >> peer) || code <= 0 || code > int(StatusCode::kInternal)) return {};
  in.get();
  std::string message;
  std::getline(in, message, '\0');
  return Status(StatusCode(code), message, peer);
}

// Between two polls of the board: 10 ms, or less to meet `deadline`.
void pause(Clock::time_point deadline) {
  std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(10), deadline - Clock::now()));
}

// The key the board posts itself if `rank`'s connection to it ends without a goodbye.
std::string lossMarkKey(const std::string& scope, int rank) {
  return detail::concat(scope, "/gone/", rank);
}

// Whether the others gave up on this rank: a post of theirs names it. Without a board, or
// before any post (or when the board fails), its own stall is all it has to go by.
bool othersGaveUpOn(BlameBoard* board, const BlameOptions& o) {
  if (board == nullptr || o.size < 2) return true;
  bool anyPost = false;
  try {
    for (int r = 0; r < o.size; ++r) {
      if (r == o.rank) continue;
      const auto text = board->read(detail::concat(o.scope, "/failed/", r),
                                    std::max(milliseconds(1), o.window / 4));
      if (!text) continue;
      anyPost = true;
      const auto report = decodeReport(*text);
      if (report && report->peer == o.rank) return true;
    }
  } catch (const std::exception&) {
  }
  return !anyPost;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

namespace {

// The stall watch's state, in steady-clock nanoseconds (0: not started).
std::atomic<int64_t> lastBeat{0}, stallLength{0}, stallEnd{0};

int64_t steadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Clock::now().time_since_epoch()).count();
}

}  // namespace

void startStallWatch() {
  static std::once_flag started;
  std::call_once(started, [] {
    lastBeat = steadyNanos();
    std::thread([] {
      for (;;) {
        std::this_thread::sleep_for(milliseconds(50));
        const int64_t now = steadyNanos();
        const int64_t gap = now - lastBeat.exchange(now);
        if (gap > 250'000'000) {  // far past a beat: the process was not running
          stallLength = gap;
          stallEnd = now;
        }
      }
    }).detach();
  });
}

milliseconds recentStall(milliseconds recent) {
  if (lastBeat == 0) return milliseconds(0);
  const int64_t now = steadyNanos();
  int64_t longest = now - lastBeat;
  if (now - stallEnd <= std::chrono::nanoseconds(recent).count()) {
    longest = std::max<int64_t>(longest, stallLength);
  }
  return std::chrono::duration_cast<milliseconds>(std::chrono::nanoseconds(longest));
}

std::string newBlameScope() {
  std::random_device device;
  return detail::concat("cerar/failures/", std::hex, device(), device());
}

void leaveLossMark(BlameBoard* board, const BlameOptions& o, milliseconds limit) {
  if (board == nullptr || o.size < 2) return;
  try {
    board->postOnLoss(lossMarkKey(o.scope, o.rank), limit);
  } catch (const std::exception&) {
    // The survivors' links are then the only evidence of this rank's death.
  }
}

namespace {

// Of the ranks that did not post, the one the posts point at: one whose link a post saw close,
// else one a post waited on, else this rank's own peer, else the lowest. More than one is
// missing when a survivor was too slow to post in the window (a loaded machine); the posts
// name the rank their waits ended on, which is the lost one, not the slow one.
int likeliestLost(const std::vector<int>& missing, const std::vector<std::optional<Status>>& reports,
                  int ownPeer) {
  auto score = [&](int r) {
    int closed = 0, named = 0;
    for (const auto& report : reports) {
      if (!report || report->peer != r) continue;
      ++named;
      if (report->code == StatusCode::kPeerLost) ++closed;
    }
    return std::make_tuple(closed, named, r == ownPeer);
  };
  int best = missing.front();  // ascending: the lowest wins ties
  for (int r : missing) {
    if (score(r) > score(best)) best = r;
  }
  return best;
}

// The rank every survivor names, from the posts read (`reports`, this rank's included).
Status verdict(const Status& observed, const std::vector<std::optional<Status>>& reports,
               const BlameOptions& o, const std::function<Status(const std::string&)>& ownView) {
  for (int r = 0; r < o.size; ++r) {
    if (r != o.rank && reports[r] && !isLoss(reports[r]->code)) {
      return Status(StatusCode::kPeerLost,
                    detail::concat("rank ", r, " failed (", statusCodeName(reports[r]->code),
                                   "): ", reports[r]->message, "; rank ", o.rank,
                                   " saw: ", observed.message),
                    r);
    }
  }
  std::vector<int> missing;
  for (int r = 0; r < o.size; ++r) {
    if (!reports[r]) missing.push_back(r);
  }
  if (missing.empty()) return ownView("");  // every rank posted: none is known to be lost
  const int lost = likeliestLost(missing, reports, observed.peer);
  // A dead process's links close at once; a frozen one's stay open and time out. A closed
  // link (or the rank's loss mark, posted as one) is proof of death, while a rank that waited
  // on the dead one can still time out first when it was slow to see the close (a loaded
  // machine); so one such post decides. Without one, it was silent.
  bool closed = false;
  for (const auto& report : reports) {
    if (report && report->peer == lost && report->code == StatusCode::kPeerLost) closed = true;
  }
  std::string others;
  if (missing.size() > 1) others = " (ranks " + rankList(missing) + " did not report)";
  const char* what = closed
                         ? " was lost (its process ended: a link or its store connection closed)"
                         : " stopped answering (silent past the timeout)";
  return Status(closed ? StatusCode::kPeerLost : StatusCode::kTimeout,
                detail::concat("rank ", lost, what, others, "; rank ", o.rank,
                               " saw: ", observed.message),
                lost);
}

}  // namespace

Status agreeOnFailure(const Status& observed, BlameBoard* board, const BlameOptions& o) {
  const auto start = Clock::now();
  Status seen = observed;  // with the board's evidence, once read
  // What this rank alone can say, when it cannot learn more.
  std::function<Status(const std::string&)> ownView = [&](const std::string& why) {
    return Status(seen.code,
                  detail::concat("rank ", o.rank, " lost contact with rank ", seen.peer, ": ",
                                 seen.message, why),
                  seen.peer);
  };
  // This process was stopped past the timeout lately and the others gave up on it: what it
  // observed on waking (links they closed, peers gone quiet) is their giving up, not a peer's
  // fault. Lately: its first wait after resuming may itself have run a whole timeout. A rank
  // stopped as long while another died is not named by the others' posts: the usual verdict.
  const milliseconds stalled =
      o.timeout.count() > 0 ? recentStall(3 * o.timeout) : milliseconds(0);
  if (isLoss(observed.code) && o.timeout.count() > 0 && stalled >= o.timeout * 9 / 10 &&
      othersGaveUpOn(board, o)) {
    seen = Status(StatusCode::kTimeout,
                  detail::concat("rank ", o.rank, " (this process) was the silent one: it was "
                                 "stopped for ", stalled.count(), " ms, past the timeout of ",
                                 o.timeout.count(), " ms, and the others gave up on it; rank ",
                                 o.rank, " saw on resuming: ", observed.message),
                  o.rank);
    if (board != nullptr && o.size >= 2) {
      try {
        board->post(detail::concat(o.scope, "/failed/", o.rank), encodeReport(seen), o.window);
      } catch (const std::exception&) {
        // The others have decided without this post; the verdict here stands.
      }
    }
    return seen;
  }
  if (board == nullptr || o.size < 2) return isLoss(observed.code) ? ownView("") : observed;
  auto deadline = Clock::now() + o.window;
  // Every board call may take a quarter window, also one started just before the deadline: a
  // reply slowed at the window's end (a loaded machine) is then not taken for a failed board.
  const milliseconds grace = std::max(milliseconds(1), o.window / 4);
  Clock::time_point callStart;
  milliseconds callLimit{1};
  auto limit = [&] {  // of the next board call; its start is kept to tell silence from failure
    callStart = Clock::now();
    callLimit = std::max(grace, std::chrono::duration_cast<milliseconds>(deadline - callStart));
    return callLimit;
  };
  auto key = [&](const char* kind, int rank) {
    return detail::concat(o.scope, "/", kind, "/", rank);
  };
  std::vector<std::optional<Status>> reports(o.size);
  Status result = observed;
  try {
    // Timed out on a rank whose loss mark is posted: that rank's process is gone (blame.h).
    const int peer = observed.peer;
    if (observed.code == StatusCode::kTimeout && peer >= 0 && peer < o.size && peer != o.rank) {
      if (board->read(lossMarkKey(o.scope, peer), limit())) {
        seen = Status(StatusCode::kPeerLost,
                      detail::concat(observed.message, " (rank ", peer,
                                     "'s connection to the rendezvous store closed: its "
                                     "process ended)"),
                      peer);
      } else {
        // The rank waited on may only be slow (stopped, or starved on a loaded machine) while
        // another rank died where this one did not look: when exactly one rank's process is
        // known to have ended, that death is what this rank saw. Several (a launcher ending a
        // host's other workers after the first death) do not say which came first: the posts
        // decide as before.
        std::vector<int> dead;
        for (int r = 0; r < o.size; ++r) {
          if (r != o.rank && r != peer && board->read(lossMarkKey(o.scope, r), limit())) {
            dead.push_back(r);
          }
        }
        if (dead.size() == 1) {
          seen = Status(StatusCode::kPeerLost,
                        detail::concat(observed.message, "; rank ", dead[0], "'s connection to "
                                       "the rendezvous store closed meanwhile: its process ended"),
                        dead[0]);
        }
      }
    }
    reports[o.rank] = seen;
    board->post(key("failed", o.rank), encodeReport(seen), limit());
    try {
      while (isLoss(observed.code)) {
        int missing = 0;
        bool cause = false;
        for (int r = 0; r < o.size; ++r) {
          if (!reports[r] && Clock::now() < deadline) {
            if (auto text = board->read(key("failed", r), limit())) reports[r] = decodeReport(*text);
          }
          if (!reports[r]) ++missing;
          else if (!isLoss(reports[r]->code)) cause = true;
        }
        if (missing <= 1 || cause || Clock::now() >= deadline) break;
        pause(deadline);
      }
    } catch (const std::exception&) {
      // The board answered this rank's post but not a read past the window's end: the window
      // is over, and the posts read so far decide.
      if (Clock::now() < deadline) throw;
    }
  } catch (const std::exception& e) {
    // A board in rank 0's process fails only with that process: it died (the connection
    // closes) or is frozen (no answer until the limit).
    const bool silent = Clock::now() - callStart >= callLimit * 9 / 10;
    if (o.hostedByRankZero && o.rank != 0) {
      return Status(silent ? StatusCode::kTimeout : StatusCode::kPeerLost,
                    detail::concat("rank 0 ", silent ? "stopped answering" : "was lost",
                                   " (the rendezvous store in its process ",
                                   silent ? "is silent" : "closed", "); rank ", o.rank,
                                   " saw: ", observed.message),
                    0);
    }
    return ownView(detail::concat(" (which rank was lost is not known here: ", e.what(), ")"));
  }
  if (isLoss(observed.code)) result = verdict(seen, reports, o, ownView);

  // The board may end with rank 0's process once rank 0 reports its failure: so rank 0 holds
  // its report back until every other survivor has read the posts and said so (or a window).
  // A survivor that did not post in the window (stopped, or starved on a loaded machine) fails
  // at the latest a timeout after the loss: rank 0 waits that long for it, unless its process
  // ended (its loss mark), lest it find the board closed on waking and name rank 0.
  try {
    const auto posted = Clock::now() + o.window;
    const auto slow = std::max(posted, start + o.timeout + o.window);
    board->post(key("done", o.rank), "", limit());
    if (o.hostedByRankZero && o.rank == 0) {
      for (int r = 1; r < o.size; ++r) {
        if (result.peer == r && isLoss(result.code)) continue;  // the lost rank never will
        const bool tooSlowToPost = isLoss(observed.code) && !reports[r];
        deadline = tooSlowToPost ? slow : posted;
        while (Clock::now() < deadline && !board->read(key("done", r), limit())) {
          if (tooSlowToPost && board->read(lossMarkKey(o.scope, r), limit())) break;
          pause(deadline);
        }
      }
    }
  } catch (const std::exception&) {
    // The verdict stands; only the others' reading of it was in question.
  }
  return result;
}


BlameOptions setUpBlame(Transport& transport, BlameBoard* board, bool hostedByRankZero,
                        std::chrono::milliseconds timeout) {
  BlameOptions options;
  const std::string mine = transport.rank() == 0 ? newBlameScope() : "";
  const auto scope =
      treeBroadcastBytes(transport, {mine.begin(), mine.end()}, kDefaultControlFanout);
  options.scope.assign(scope.begin(), scope.end());
  options.rank = transport.rank();
  options.size = transport.size();
  options.hostedByRankZero = hostedByRankZero;
  // Survivors fail within moments of each other; the window only matters when more than one
  // rank is missing, and must stay short next to the timeout.
  options.window = std::clamp(timeout / 2, milliseconds(200), milliseconds(5000));
  options.timeout = timeout;
  startStallWatch();
  leaveLossMark(board, options, timeout);
  return options;
}

}  // namespace cerar
