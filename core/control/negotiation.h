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

// What the coordinator rank knows of the units that some ranks have submitted.
// Not thread-safe: owned by the coordinator thread of rank 0.
class NegotiationTable {
 public:
  using Clock = std::chrono::steady_clock;

  // `sets`: the process sets, read when a unit is first seen (null: set 0 only). A unit is
  // ready once every member of its set has submitted it (or joined).
  explicit NegotiationTable(int size, const ProcessSetTable* sets = nullptr);

  // Records one rank's message of this cycle. Cache bits are resolved against `cache` as it
  // is before this cycle's answer (the state the sender used). `cache` must outlive the
  // table's next calls (the coordinator's own cache); it changes only after decide().
  void receive(int rank, const RequestMessage& message, const ResponseCache& cache,
               Clock::time_point now);

  // This cycle's answer: every unit submitted by all ranks that have not joined (in the order
  // first seen), as a cache bit when `cache` holds exactly that response, else in full; a
  // unit whose descriptions disagree becomes an error response naming both ranks. Those units
  // leave the table.
  ResponseMessage decide(const ResponseCache& cache);

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
    int64_t slot = -1;                  // the cache slot of its key when it was first seen
  };
  // A cached unit that every submitter so far named by its slot alone, as every rank does in
  // the steady state: counted per slot, without names or copies. When all members of its set
  // have it, the answer is that slot. Anything else (a joined member, a submission in full, a
  // second one, a stall, a cycle whose answer may change slots) moves it to the full table.
  struct SlotEntry {
    bool live = false;
    uint64_t sequence = 0;
    Clock::time_point firstSeen;
    int firstRank = -1;
    SetRef set;
    std::vector<bool> submitted;        // by global rank
    int count = 0;
  };
  // Counts `rank`'s submission of cached unit `slot`; false when it must go to the full table.
  bool addBySlot(int rank, size_t slot, const Response& cached, Clock::time_point now);
  // Moves slot `slot`'s submissions into the full table, replayed as add() would have had them.
  void materialize(size_t slot);
  void materializeAll();
  std::map<std::string, Entry>::iterator erase(std::map<std::string, Entry>::iterator it);
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
  const ResponseCache* cache_ = nullptr;         // the cache of the last receive()
  std::vector<SlotEntry> slots_;                 // by cache slot
  std::vector<size_t> liveSlots_;                // slots_ that may be live
  std::unordered_map<size_t, int> inFullTable_;  // slot -> entries_ first seen at that slot
  std::vector<bool> joined_;
  int lastJoined_ = -1;
  bool shutdown_ = false;
};

}  // namespace cerar
