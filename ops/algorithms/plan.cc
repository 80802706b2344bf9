#include "ops/algorithms/plan.h"

#include <algorithm>

#include "common/error.h"

namespace cerar {

Layout::Layout(int N, int c, size_t d) : N_(N), c_(c), d_(d) {
  CERAR_ENFORCE(N >= 1 && c >= 1 && c % N == 0, "invalid layout N=", N, " c=", c);
}

Range Layout::component(int k) const {
  const size_t q = d_ / c_;
  const size_t m = d_ % c_;
  const size_t uk = static_cast<size_t>(k);
  return Range{uk * q + std::min(uk, m), q + (uk < m ? 1 : 0)};
}

const char* actionName(Action action) {
  switch (action) {
    case Action::kSendGradient: return "send-gradient";
    case Action::kAccumulate: return "accumulate";
    case Action::kFinishFirst: return "finish-first";
    case Action::kFinishDecode: return "finish-decode";
    case Action::kStoreAndEncode: return "store-and-encode";
    case Action::kStoreAndForward: return "store-and-forward";
  }
  return "?";
}

uint64_t Plan::elementsSent() const {
  uint64_t total = 0;
  for (const Round& round : rounds) total += round.message;
  return total;
}

Status validateCerarParameters(int N, int c) {
  auto invalid = [](std::string why) { return Status(StatusCode::kInvalidArgument, why); };
  if (N < 1) return invalid(detail::concat("the number of ranks must be >= 1, got N=", N));
  if (c < 1 || c % N != 0)
    return invalid(detail::concat("components c=", c, " must be a positive multiple of N=", N));
  return {};
}

namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Length of the message that the sender of token tau sends in round t ("Message lengths"):
// loop 0 carries slice 0, loop l >= 1 carries slice l-1.
size_t messageLength(const Layout& layout, int tau, int t) {
  const int loop = t / layout.N();
  return layout.slice(tau, loop == 0 ? 0 : loop - 1).length;
}

// What a rank does in round t of CERAR (cerar-protocol.md, "Schedule").
Round cerarRound(const Layout& layout, int rank, int t) {
  const int N = layout.N();
  const int r = layout.r();
  Round round;
  round.token = mod(rank - t, N);
  const int tau = round.token;
  const int position = t % N;
  const int loop = t / N;
  round.message = messageLength(layout, tau, t);
  round.receive = messageLength(layout, mod(rank - 1 - t, N), t);
  if (loop == 0) {
    // Reduce slice 0 as the classic ring's reduce-scatter.
    round.action = position == 1 ? Action::kSendGradient : Action::kAccumulate;
    round.grad = layout.slice(tau, 0);
  } else if (position == 0) {
    // The home finishes slice loop-1 and sends it unchanged.
    round.store = layout.slice(tau, loop - 1);
    if (loop == 1) {
      round.action = Action::kFinishFirst;
    } else {
      round.action = Action::kFinishDecode;
      round.previous = layout.slice(tau, loop - 2);
    }
  } else if (loop < r) {
    // Broadcast slice loop-1 and reduce slice loop in one message.
    round.action = Action::kStoreAndEncode;
    round.store = layout.slice(tau, loop - 1);
    round.grad = layout.slice(tau, loop);
  } else {
    // Final broadcast of slice r-1.
    round.action = Action::kStoreAndForward;
    round.store = layout.slice(tau, r - 1);
  }
  return round;
}

void finishPlan(Plan& plan) {
  for (const Round& round : plan.rounds)
    plan.maxMessage = std::max({plan.maxMessage, round.message, round.receive});
}

}  // namespace

Plan makeCerarPlan(int N, int c, size_t d, int rank) {
  if (Status invalid = validateCerarParameters(N, c); !invalid.ok()) invalid.raise();
  CERAR_ENFORCE(rank >= 0 && rank < N, "rank ", rank, " out of range for N=", N);
  Plan plan;
  plan.N = N;
  plan.c = c;
  plan.rank = rank;
  plan.d = d;
  if (N == 1) return plan;  // zero rounds, output = input
  const Layout layout(N, c, d);
  const int L = c + N - 2;
  plan.rounds.reserve(L);
  for (int t = 1; t <= L; ++t) plan.rounds.push_back(cerarRound(layout, rank, t));
  // Position N-1 receives the last slice in round L, stores it and sends nothing.
  plan.finalStore = layout.slice(mod(rank + 1, N), layout.r() - 1);
  finishPlan(plan);
  return plan;
}

namespace {

// The ring's reduce-scatter steps s = 1..N-1: send chunk rank-s; chunk rank-1-s arrives and is
// summed into the next step's message, so after N-1 steps this rank has received the partial
// sum of its own chunk (all ranks but itself).
template <typename Chunk>
void appendReduceScatterRounds(Plan& plan, int rank, const Chunk& chunk) {
  const int N = plan.N;
  for (int s = 1; s <= N - 1; ++s) {
    Round round;
    round.token = mod(rank - s, N);
    round.action = s == 1 ? Action::kSendGradient : Action::kAccumulate;
    round.grad = chunk(round.token);
    round.message = round.grad.length;
    round.receive = chunk(mod(rank - 1 - s, N)).length;
    plan.rounds.push_back(round);
  }
}

Plan emptyPlan(int N, int c, size_t d, int rank) {
  CERAR_ENFORCE(N >= 1, "the number of ranks must be >= 1, got N=", N);
  CERAR_ENFORCE(rank >= 0 && rank < N, "rank ", rank, " out of range for N=", N);
  Plan plan;
  plan.N = N;
  plan.c = c;
  plan.rank = rank;
  plan.d = d;
  return plan;
}

}  // namespace

Plan makeRingPlan(int N, size_t d, int rank) {
  Plan plan = emptyPlan(N, N, d, rank);
  if (N == 1) return plan;
  const Layout layout(N, N, d);
  auto chunk = [&](int tau) { return layout.component(tau); };
  appendReduceScatterRounds(plan, rank, chunk);
  // Allgather, steps s = 1..N-1: step 1 adds the own gradient last and sends the finished chunk;
  // later steps store what arrived and pass it on.
  for (int s = 1; s <= N - 1; ++s) {
    Round round;
    round.token = mod(rank - s + 1, N);
    round.action = s == 1 ? Action::kFinishFirst : Action::kStoreAndForward;
    round.store = chunk(round.token);
    round.message = round.store.length;
    round.receive = chunk(mod(rank - s, N)).length;
    plan.rounds.push_back(round);
  }
  plan.finalStore = chunk(mod(rank + 1, N));
  finishPlan(plan);
  return plan;
}

Plan makeReduceScatterPlan(int N, const std::vector<size_t>& chunks, int rank) {
  CERAR_ENFORCE(int(chunks.size()) == N, "reduce-scatter: ", chunks.size(),
                " chunk lengths for N=", N);
  std::vector<Range> ranges(chunks.size());
  size_t offset = 0;
  for (size_t tau = 0; tau < chunks.size(); ++tau) {
    ranges[tau] = Range{offset, chunks[tau]};
    offset += chunks[tau];
  }
  Plan plan = emptyPlan(N, N, offset, rank);
  if (N == 1) return plan;
  appendReduceScatterRounds(plan, rank, [&](int tau) { return ranges[tau]; });
  // The last arrival is the partial sum of this rank's chunk: the own gradient is added last,
  // as the ring's first allgather step does.
  plan.finalStore = ranges[rank];
  plan.accumulateFinal = true;
  finishPlan(plan);
  return plan;
}

}  // namespace cerar
