// The vocabulary of negotiation: what a rank asks for (Request) and what the coordinator rank
// answers (Response). Pure data, shared by the table on the coordinator rank, the response
// cache, the fusion planner and the executor of responses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/policy/tuning.h"
#include "core/types.h"
#include "ops/codec/wire.h"

namespace cerar {

enum class Algorithm : uint8_t;  // ops/communicator.h

enum class Kind : uint8_t {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kBarrier,
  kReducescatter,
  kAlltoall,
  // A change of the process sets (core/control/process_sets.h), negotiated in set 0: root > 0 removes
  // set `root`, root == 0 adds a set of the ranks in `splits`.
  kProcessSet,
};
const char* kindName(Kind kind);
// Elements of one tensor of this shape (1 for a scalar).
size_t shapeElements(const std::vector<int64_t>& shape);
// A reducescatter's split of `rows` (a tensor's first dimension) over `size` ranks, as
// Horovod's: rows / size each, the first rows % size ranks one more; and where rank's begin.
int64_t scatterRows(int64_t rows, int rank, int size);
int64_t scatterOffset(int64_t rows, int rank, int size);

// Everything that must agree across ranks for one negotiated unit (a tensor, or the tensors
// of a grouped allreduce or reducescatter). For allgather and alltoall the first dimension
// may differ per rank, and an alltoall's splits are each rank's own.
struct Description {
  Kind kind = Kind::kAllreduce;
  DType dtype = DType::kFloat32;
  Op op = Op::kSum;
  // The submitting rank's tensors are CUDA memory (on whichever GPU it uses), else host
  // memory. Ranks may differ (Response::placement); agrees() ignores it.
  bool onDevice = false;
  int32_t root = 0;  // broadcast only
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<std::vector<int64_t>> shapes;  // one per tensor of the unit
  std::vector<int64_t> splits;  // alltoall: rows this rank sends to each rank, in rank order
  // allreduce: the lossy wire (fp16, bf16, int8) asked for (kNone: the job's, CERAR_COMPRESSION); the
  // coordinator rank decides whether it applies (FusedGroup::wire).
  Wire wire = Wire::kNone;
  // The process set the unit runs in (0: every rank). Part of the key: one name may be in
  // flight in several sets at once.
  int32_t processSet = 0;

  bool operator==(const Description& other) const = default;
  // Equal, ignoring the first dimension of an allgather's or alltoall's tensor and an
  // alltoall's splits.
  bool agrees(const Description& other) const;
  size_t elements() const;  // over all tensors of the unit
  size_t bytes() const;
  // One line for error messages: "allreduce f32 sum shape [4, 3] ...".
  std::string toString() const;
};

// The key that ranks match units on: the names, joined, after the process set's id when not 0.
std::string unitKey(const std::vector<std::string>& names, int32_t processSet);

// One rank's readiness of a unit. `names` has one name per tensor (several for a group).
struct Request {
  std::vector<std::string> names;
  Description description;

  // The key that ranks match on: the names, joined, after the process set's id when not 0.
  std::string key() const;
  bool operator==(const Request& other) const = default;
};

// The coordinator's answer for one unit, identical on every rank.
struct Response {
  std::vector<std::string> names;
  Description description;      // the first submitter's (first dimension: see firstDims)
  // allgather: rows of every rank and tensor at [rank * tensors + tensor]; alltoall: the
  // N x N rows that rank i sends to rank j at [i * N + j]
  std::vector<int64_t> firstDims;
  std::string error;            // non-empty: every rank fails the unit with this message
  // Empty when every submitting rank's tensors are where description.onDevice says; else,
  // per rank, kHost / kDevice / kNone (joined).
  std::vector<uint8_t> placement;
  StatusCode errorCode = StatusCode::kMismatch;  // of a non-empty error
  int32_t errorPeer = -1;                         // the rank the error concerns, if one
  // ok, or the error as a Status.
  Status status() const { return error.empty() ? Status() : Status(errorCode, error, errorPeer); }

  enum Place : uint8_t { kHost = 0, kDevice = 1, kNone = 2 };
  // Whether `rank` submitted device tensors.
  bool onDeviceAt(int rank) const;
  // Reduced by the device path (device fusion buffer, NCCL or staged transport): every
  // submitting rank's tensors are on a device. A mixed unit is reduced on the host everywhere,
  // device ranks copying their tensors in and out (a CPU-only peer can join a GPU job).
  // Process sets other than 0 reduce on the host (device tensors staged): the device
  // transport's communicator spans the whole job.
  bool reducedOnDevice() const {
    return placement.empty() && description.onDevice && description.processSet == 0;
  }
  // This rank's description: its placement, and its rows of an allgather.
  Description descriptionAt(int rank) const;
  // descriptionAt(rank) == asked, without a copy where the first submitter's description is
  // this rank's (the common case: every lookup of a cached unit asks it).
  bool describes(const Description& asked, int rank) const;

  std::string key() const;
  bool operator==(const Response& other) const = default;
};

// Sent by every rank to the coordinator rank each cycle.
struct RequestMessage {
  bool shutdown = false;
  bool join = false;                 // this rank joined in this cycle
  std::vector<uint8_t> cacheBits;    // response-cache slots (see RankPart)
  std::vector<Request> requests;     // newly ready units not in the cache
  bool operator==(const RequestMessage& other) const = default;
};

// What one rank adds to a cycle's report beyond its cache bits: anything it has never
// submitted by slot (requests in full, a join, a shutdown), and on a roll call its held slots.
struct RankPart {
  int32_t rank = 0;
  RequestMessage message;  // cacheBits: the slots it holds (a roll call's answer only)
  bool operator==(const RankPart& other) const = default;
};

// A subtree's report of one cycle, merged rank by rank on its way up the control tree
// (ops/control_tree.h). Cached units are not announced once but held: a rank names
// every cached unit it has submitted and not yet seen answered, in every cycle, so merging is
// an OR of bits and the report's size does not grow with the ranks under it.
struct CycleReport {
  // Response-cache slots that some rank of the subtree holds.
  std::vector<uint8_t> held;
  // Slots whose unit some rank of the subtree lacks although it is a member of the unit's
  // process set and has not joined. A slot held and not missing anywhere is ready.
  std::vector<uint8_t> missing;
  std::vector<RankPart> parts;  // by rank, ascending
  bool operator==(const CycleReport& other) const = default;
};
// Adds `child`'s report (a disjoint set of ranks) to `into`.
void mergeReport(CycleReport& into, CycleReport&& child);

// The coordinator rank's decision for one fusion group: which units share one buffer (in
// packing order) and, for an allreduce, how it is reduced. Decided once, on the coordinator
// rank, from its link probe and the job's settings; every rank runs it as sent and derives
// none of it itself, so no two ranks can run different algorithms, c, eps or layouts.
struct FusedGroup {
  std::vector<uint32_t> members;  // indices into the cycle's units (ResponseMessage)
  Algorithm algorithm{};          // allreduce only, as all below
  int32_t components = 0;         // c (N for the ring)
  double eps = 0;                 // 0 for the ring
  bool shareCorrection = false;   // share-corrected decoding of a CERAR host buffer
  bool measureError = false;      // debug error mode: also the exact ring on a copy
  Wire wire = Wire::kNone;        // a lossy wire on the exact ring (sums on the host)
  // Chosen within the error budget (CERAR_MAX_ERROR). A budgeted fp16 wire is guarded: the
  // float32 ring runs instead where its data could overflow or underflow fp16
  // (core/policy/error_budget.h, wireGuardVerdict).
  bool budgeted = false;
  // Reduced host by host (ops/hierarchical.h): the algorithm, c and wire above are the step
  // across hosts, c a multiple of the hosts.
  bool hierarchical = false;
  bool operator==(const FusedGroup& other) const = default;
};

// A cycle's units by reference (into the response cache and the coordinator's answer), in the
// answer's order: the coordinator reads them without copying a description per unit.
using UnitRefs = std::vector<const Response*>;

// Sent by the coordinator rank to every rank each cycle. The cycle's units are the cached
// ones in slot order, then `responses` in order; `groups` covers each unit once and every rank
// runs the groups in this order.
struct ResponseMessage {
  bool shutdown = false;
  int32_t lastJoinedRank = -1;       // >= 0: every rank has joined, and this one was last
  // The fusion threshold, cycle time and c's scale the groups below were decided with, and
  // where autotuning stands; every rank paces its next cycle by this cycle time.
  TuningState tuning;
  std::vector<uint8_t> cacheBits;
  std::vector<Response> responses;
  std::vector<FusedGroup> groups;
  // Slots every rank empties after this cycle (some rank submitted their unit in full with
  // another description): a rank holding one submits its unit in full in the next cycle.
  std::vector<uint8_t> invalidated;
  // Every rank that holds cached units names them in a part of its next report (the stall
  // inspector's view of which ranks lack a unit).
  bool rollCall = false;
  // The job has been idle for a while (idlePaceShift, core/control/negotiation.h): every rank
  // paces its next cycle at the cycle time times 2^idleShift. A push wakes a rank at once.
  uint8_t idleShift = 0;
};

// Bit vectors of cache slots.
void setBit(std::vector<uint8_t>& bits, size_t index);
// bits |= other (the longer length wins).
void orBits(std::vector<uint8_t>& bits, const std::vector<uint8_t>& other);
bool testBit(const std::vector<uint8_t>& bits, size_t index);
std::vector<size_t> setBits(const std::vector<uint8_t>& bits);
bool anyBit(const std::vector<uint8_t>& bits);

}  // namespace cerar
