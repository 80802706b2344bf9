// Adasum (adaptive summation) as a pure, socket-free schedule: vector-halving,
// distance-doubling (VHDD) over N = 2^k ranks, and the combination rule of a pair of vectors.
//
// The rule for two gradients a and b (per tensor):
//   Adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b,
// a coefficient being 1 where its vector is zero. Orthogonal vectors add, equal vectors average.
// Over N ranks the pairs form a binary tree by rank: level D = 1, 2, 4, ... combines the result
// of ranks [g, g + D) (a) with that of [g + D, g + 2D) (b), g a multiple of 2D.
//
// VHDD: at level D a rank exchanges half of the range it holds with partner rank ^ D (the lower
// rank keeps the first half), so after the k levels it holds 1/N of the buffer; the pieces of
// a and b it then holds are only parts of the vectors, so the partial dot products and norms of
// every tensor are summed over the 2D ranks of the group (recursive doubling, in a fixed order
// so all of them get the same bits) before the pair is combined. The levels then run in reverse,
// as an allgather of the pieces. docs/adasum.md has the details.
#pragma once

#include <cstddef>
#include <vector>

#include "ops/algorithms/plan.h"
#include "common/dtype.h"
#include "common/status.h"

namespace cerar {

// One level of the halving phase for one rank.
struct AdasumLevel {
  int distance = 1;  // D: 1, 2, 4, ...
  int partner = 0;   // rank ^ D
  bool lower = false;  // this rank is the lower of the pair: it holds a, the partner b
  Range keep;        // the half this rank keeps, combines and later sends back in the allgather
  Range give;        // the other half: sent to the partner now, received back in the allgather
  // The ranks [groupFirst, groupFirst + 2D) sum their partial dot products; the steps of that
  // sum are with rank ^ s for s = 1, 2, ..., D.
  int groupFirst = 0;
};

struct AdasumPlan {
  int N = 1;
  int rank = 0;
  size_t d = 0;
  std::vector<AdasumLevel> levels;  // halving order; the allgather runs them in reverse
  Range owned;                      // what this rank holds after the halving phase
};

// ok for N a power of two (1 included), else kInvalidArgument saying so.
Status validateAdasumSize(int N);
// The schedule of `rank` for a buffer of d elements (N must pass validateAdasumSize).
AdasumPlan makeAdasumPlan(int N, size_t d, int rank);

// The part of tensor t (tensors packed back to back, sizes[t] elements each) inside a range.
struct TensorPiece {
  size_t tensor = 0;
  Range range;  // in buffer elements
};
std::vector<TensorPiece> tensorPieces(const std::vector<size_t>& sizes, Range range);

// The coefficients of a and b given a.b, |a|^2 and |b|^2 (sums in fp64).
struct AdasumCoefficients {
  double a = 1;
  double b = 1;
};
AdasumCoefficients adasumCoefficients(double dot, double aNormSq, double bNormSq);

// Adds a.b, |a|^2, |b|^2 over n elements of dtype (f16, bf16, f32, f64) to sums[0..2], in fp64.
void addDotAndNorms(DType dtype, const void* a, const void* b, size_t n, double* sums);
// out = ca * a + cb * b over n elements, computed in fp64 and rounded once to dtype. out may
// be a or b.
void adasumCombine(DType dtype, const void* a, const void* b, void* out, size_t n,
                   const AdasumCoefficients& c);
// Whether Adasum supports the dtype (floating types).
bool isAdasumDType(DType dtype);

}  // namespace cerar
