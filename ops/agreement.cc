#include "ops/agreement.h"

#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "ops/communicator.h"

namespace cerar {

bool ParameterRecord::operator==(const ParameterRecord& o) const {
  return magic == o.magic && size == o.size && components == o.components &&
         algorithm == o.algorithm && dtype == o.dtype && op == o.op &&
         exactOnNonFinite == o.exactOnNonFinite && wire == o.wire && elements == o.elements &&
         eps == o.eps && postscale == o.postscale;
}

std::string ParameterRecord::describe() const {
  if (magic != ParameterRecord{}.magic) return "(not a cerar all-reduce)";
  return detail::concat("(algorithm=", algorithmName(static_cast<Algorithm>(algorithm)),
                        ", N=", size, ", c=", components, ", d=", elements, ", eps=", eps,
                        ", dtype=", dtypeName(static_cast<DType>(dtype)),
                        ", op=", reduceOpName(static_cast<ReduceOp>(op)),
                        exactOnNonFinite ? "" : ", non-finite check off",
                        wire ? ", wire=" : "", wire ? wireName(static_cast<Wire>(wire)) : "",
                        postscale != 1.0 ? detail::concat(", postscale=", postscale) : "",
                        ")");
}

bool agreeOnParameters(Transport& transport, const ParameterRecord& mine) {
  const int N = transport.size();
  const int rank = transport.rank();
  if (N == 1) return mine.beyondCerarRange != 0;
  std::vector<ParameterRecord> records(N);
  records[rank] = mine;
  // Ring allgather: in step s, pass on the record of rank - s, receive that of rank - s - 1.
  for (int s = 0; s < N - 1; ++s) {
    const int sendIndex = ((rank - s) % N + N) % N;
    const int recvIndex = ((rank - s - 1) % N + N) % N;
    transport.postRecv(transport.prev(), &records[recvIndex], sizeof(ParameterRecord));
    transport.postSend(transport.next(), &records[sendIndex], sizeof(ParameterRecord));
    transport.waitRecv(transport.prev());
    transport.waitSend(transport.next());
  }
  // Every rank holds the same records, so every rank reports the same disagreement.
  for (int other = 1; other < N; ++other) {
    if (!(records[other] == records[0])) {
      throw MismatchError(detail::concat("rank ", rank, ": all-reduce parameters disagree: rank 0 "
                                         "has ", records[0].describe(), ", rank ", other,
                                         " has ", records[other].describe()),
                          other);
    }
  }
  for (const ParameterRecord& record : records)
    if (record.beyondCerarRange != 0) return true;
  return false;
}

uint8_t orAcrossRanks(Transport& transport, uint8_t mine) {
  const int N = transport.size(), rank = transport.rank();
  std::vector<uint8_t> bytes(N, 0);
  bytes[rank] = mine;
  for (int peer = 0; peer < N; ++peer)
    if (peer != rank) transport.postRecv(peer, &bytes[peer], 1);
  for (int peer = 0; peer < N; ++peer)
    if (peer != rank) transport.postSend(peer, &bytes[rank], 1);
  uint8_t all = 0;
  for (int peer = 0; peer < N; ++peer) {
    if (peer != rank) {
      transport.waitRecv(peer);
      transport.waitSend(peer);
    }
    all |= bytes[peer];
  }
  return all;
}

}  // namespace cerar
