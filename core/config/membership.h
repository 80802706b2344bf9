// One process per rank on a store that rank 0 hosts for one start (docs/rendezvous.md, "One job,
// one store"). A second process that starts as a rank already taken there belongs to another
// job using the same address and port: it is refused, and, when it came before the job's
// membership was sealed, the whole start fails, so that no rank ever sums with a stranger.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace cerar {

class TcpStore;

// What a twin adds to the seal counter; rank 0's seal adds 1.
constexpr int64_t kTwinMark = int64_t(1) << 32;

// Called by a rank whose start number on the store (`starts`, from its add to
// "<scope>starts/<rank>") is above 1: another process holds its rank. Marks the store (the job
// fails at its seal unless sealed already) and returns the message this rank fails with.
std::string refuseTwin(TcpStore& store, const std::string& scope, int rank, int64_t starts);

// Rank 0, once every rank's links are up: waits `grace` (a twin that started moments after the
// job's last rank is still seen), seals, and posts the outcome under `<prefix>/membership` to the
// other ranks. Every rank returns "" when no twin came before the seal, else the message the
// start fails with.
std::string sealMembership(TcpStore& store, const std::string& scope, const std::string& prefix,
                           int rank, std::chrono::milliseconds grace,
                           std::chrono::milliseconds limit);

}  // namespace cerar
