// Pure, socket-free schedules of the ring all-reduces (cerar-protocol.md, "Schedule").
//
// A Plan says, for one rank, round by round, what it sends to the next rank, how the message is
// made (an Action of the codec), where results are stored, and how much it receives from the
// previous rank. The executor runs a plan over any transport; tests simulate all ranks in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace cerar {

// Elements [offset, offset + length) of a rank's buffer (gradient in, result out, in place).
struct Range {
  size_t offset = 0;
  size_t length = 0;
};

// Component layout: c components, chunk-major, longer components first.
class Layout {
 public:
  Layout(int N, int c, size_t d);
  int N() const { return N_; }
  int c() const { return c_; }
  int r() const { return c_ / N_; }
  size_t d() const { return d_; }
  Range component(int k) const;
  // Slice l of chunk tau = component tau*r + l.
  Range slice(int tau, int l) const { return component(tau * r() + l); }

 private:
  int N_;
  int c_;
  size_t d_;
};

// How a rank makes the message of one round; y is what it received in the previous round.
enum class Action : uint8_t {
  kSendGradient,     // msg = g[grad]                               loop 0, position 1
  kAccumulate,       // msg = y + g[grad]                           loop 0, positions 2..N-1
  kFinishFirst,      // out[store] = y + g[store]; msg = out[store] home, finishing slice 0
  kFinishDecode,     // out[store] = (y - out[previous])/eps + g[store]; msg = out[store]
                     //                                             home, finishing slice >= 1
  kStoreAndEncode,   // out[store] = y; msg = y + eps * g[grad] (g zero-padded to msg length)
                     //                                             positions 1..N-1, loops 1..r-1
  kStoreAndForward,  // out[store] = y; msg = out[store]            positions 1..N-2, loop r
};
const char* actionName(Action action);

struct Round {
  Action action = Action::kSendGradient;
  int token = 0;        // the chunk this rank sends in this round
  size_t message = 0;   // elements sent to the next rank (0: nothing is sent)
  Range grad;           // gradient slice read by kSendGradient / kAccumulate / kStoreAndEncode
  Range store;          // result slice written (and read by finishes, which work in place)
  Range previous;       // kFinishDecode: the slice finished one loop earlier, Shat(tau, l-2)
  size_t receive = 0;   // elements received from the previous rank (y of the next round)
};

struct Plan {
  int N = 1;
  int c = 1;
  int rank = 0;
  size_t d = 0;
  std::vector<Round> rounds;  // rounds[t-1] is round t
  Range finalStore;           // the message received in the last round is stored here
  // A reduce-scatter's finish: the last message is added to this rank's own gradient slice at
  // finalStore (out = y + g, as kFinishFirst) instead of overwriting it.
  bool accumulateFinal = false;
  size_t maxMessage = 0;      // longest message sent or received, in elements

  int numRounds() const { return static_cast<int>(rounds.size()); }
  // Payload elements this rank sends over all rounds.
  uint64_t elementsSent() const;
};

// The home-anchored CERAR design with c = r*N components (c must be a multiple of N).
Plan makeCerarPlan(int N, int c, size_t d, int rank);
// The exact ring (reduce-scatter then allgather, one chunk per rank), in the same reduction
// order as CERAR with r = 1: ((g_{tau+1} + g_{tau+2}) + ...) + g_tau for chunk tau.
Plan makeRingPlan(int N, size_t d, int rank);

// The exact ring's first half alone: a reduce-scatter of d = sum(chunks) elements, chunk tau
// (chunks[tau] elements, laid out in rank order) ending reduced on rank tau, in the ring's
// reduction order, so it is bit-identical to that chunk of makeRingPlan's result when the
// chunks coincide. N-1 rounds; the other chunks of the buffer are left as scratch.
Plan makeReduceScatterPlan(int N, const std::vector<size_t>& chunks, int rank);

// Checks (N, c) for CERAR: ok, or kInvalidArgument with the reason.
Status validateCerarParameters(int N, int c);

}  // namespace cerar
