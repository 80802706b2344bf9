// Negotiation: the coordinator rank's table that matches what every rank has submitted (the
// messages' wire form is negotiation_codec.h). Pure (no sockets, no threads), so it is
// unit-tested directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/control/message.h"
#include "core/control/negotiation_codec.h"
#include "core/control/process_sets.h"
#include "core/control/response_cache.h"

namespace cerar {

// An idle job's pace (ResponseMessage::idleShift) after `idleCycles` cycles in a row with
// nothing under way: the cycle time as set for the first kIdleCycles, then doubled every
// kIdleCycles, up to 2^kMaxIdleShift. An idle coordinator at 1 ms cycles costs a core's share
// per rank for nothing (a control round trip per cycle); a rank's own push wakes it at once,
// so a step that all ranks start costs no wait.
constexpr uint64_t kIdleCycles = 16;
constexpr int kMaxIdleShift = 4;
int idlePaceShift(uint64_t idleCycles);

// What the coordinator rank knows of the units that some ranks have submitted.
// Not thread-safe: owned by the coordinator thread of rank 0.
class NegotiationTable {
 public:
  using Clock = std::chrono::steady_clock;

  // `sets`: the process sets, read when a unit is first seen (null: set 0 only). A unit is
  // ready once every member of its set has submitted it (or joined).
  explicit NegotiationTable(int size, const ProcessSetTable* sets = nullptr);

  // Records one cycle's report: every rank's, merged up the control tree. Its parts go in
  // rank order through receive() below; its bits say which cached units are held where.
  // `cache` is the coordinator's own, as it is before this cycle's answer (the state every
  // rank used); it must outlive the table's next calls and changes only after decide().
  void receive(const CycleReport& report, const ResponseCache& cache, Clock::time_point now);
  // Records one rank's part: its requests in full, join and shutdown; its cache bits are the
  // cached units it holds (a roll call's answer), recorded for the stall inspector only.
  void receive(int rank, const RequestMessage& message, const ResponseCache& cache,
               Clock::time_point now);

  // This cycle's answer: every cached unit that all members of its set hold, as its slot (in
  // slot order); then every unit submitted in full by all ranks that have not joined (in the
  // order first seen), as a cache bit when `cache` holds exactly that response, else in full;
  // a unit whose descriptions disagree becomes an error response naming both ranks. Those
  // units leave the table. A cached unit some member has joined instead of holding, or that
  // some rank submitted in full, is answered by the full table's rules.
  ResponseMessage decide(const ResponseCache& cache);

  // Asks every rank, in the next answer, to name the cached units it holds.
  void callRoll() { rollCallWanted_ = true; }
  // Seconds the longest-held cached unit has waited for some member (0: none waits).
  double longestHeldWait(Clock::time_point now) const;

  // A unit waiting for some ranks (for the stall inspector).
  struct Waiting {
    std::string key;
    std::vector<std::string> names;
    std::vector<int> missingRanks;
    Clock::time_point firstSeen;
  };
  std::vector<Waiting> waiting() const;
  // Makes the unit `key` an error response in the next decide() (stall shutdown).
  void fail(const std::string& key, const Status& error);

  bool joined(int rank) const { return joined_[rank]; }
  // Nothing under way: no unit waits for some rank, no cached unit is held anywhere, no rank
  // has joined or asked to shut down.
  bool idle() const;
  // Set `id` is gone: its units still waiting leave the table (their ranks fail them).
  void dropSet(int32_t id);

 private:
  struct Entry {
    uint64_t sequence = 0;  // order first seen
    Clock::time_point firstSeen;
    int firstRank = -1;
    Request first;                      // the first submitter's request
    SetRef set;                         // its members: global ranks, ascending
    std::vector<bool> submitted;        // by global rank
    std::vector<int64_t> firstDims;     // allgather rows per set rank
    std::vector<uint8_t> placement;     // Response::Place per set rank
    std::string error;
    StatusCode errorCode = StatusCode::kMismatch;
    int errorPeer = -1;
    bool failNow = false;               // error due without waiting for every rank
  };
  // A cached unit held by some ranks and lacked by a member: since when, and (after a roll
  // call) which ranks hold it.
  struct HeldWait {
    Clock::time_point since;
    size_t slot = 0;
    std::vector<bool> holders;  // by global rank; empty until a roll call answers
  };
  // Moves cached unit `slot`, held by every member but the joined ones, into the full table.
  void materialize(size_t slot, Clock::time_point now);
  // One rank's unit: `d` as that rank described it.
  void add(int rank, const std::vector<std::string>& names, const Description& d,
           Clock::time_point now);
  bool complete(const Entry& entry) const;
  // The set `id` as known now (no members when unknown).
  SetRef setOf(int32_t id) const;
  Response respond(const Entry& entry) const;

  int size_;
  const ProcessSetTable* sets_;
  SetRef all_;  // set 0 when there is no table
  uint64_t sequence_ = 0;
  std::map<std::string, Entry> entries_;
  const ResponseCache* cache_ = nullptr;  // the cache of the last receive()
  std::vector<uint8_t> held_, missing_;    // this cycle's report
  Clock::time_point now_{};                // when it arrived
  std::vector<uint8_t> invalidated_;       // slots some rank submitted in full this cycle
  std::map<std::string, HeldWait> heldWaits_;  // by unit key
  bool rollCallWanted_ = false;
  bool rollCallDue_ = false;  // this cycle's parts answer a roll call
  std::vector<bool> joined_;
  int lastJoined_ = -1;
  bool shutdown_ = false;
};

}  // namespace cerar
