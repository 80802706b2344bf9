// Which ranks share a host, agreed at start (core/config/shm_links.cc: every rank posts its host
// as shared memory sees it, rank 0 numbers the hosts and posts the table): the local group
// (Horovod's local_rank, local_size), the cross group (the ranks of one local rank, one per host:
// cross_rank, cross_size) and the two levels of the hierarchical all-reduce.
#pragma once

#include <string>
#include <vector>

namespace cerar {

struct HostTopology {
  // hostOf[r]: rank r's host, hosts numbered in the order of their lowest rank.
  std::vector<int> hostOf;

  int size() const { return int(hostOf.size()); }
  int hosts() const;
  // The ranks of `rank`'s host, ascending.
  std::vector<int> localMembers(int rank) const;
  // The ranks whose local rank is `rank`'s, ascending (at most one per host).
  std::vector<int> crossMembers(int rank) const;
  int localRank(int rank) const;
  int localSize(int rank) const;
  int crossRank(int rank) const;
  int crossSize(int rank) const;
  // Every host runs as many ranks.
  bool homogeneous() const;
  // Where a hierarchical all-reduce can run: more than one host, as many ranks on each, and
  // more than one (with one a host has no local step; uneven hosts keep the flat ring).
  bool layered() const { return hosts() > 1 && homogeneous() && size() > hosts(); }
  // "h0 h1 ...", as rank 0 posts it.
  std::string text() const;
};

// From every rank's host identity (equal strings: one host).
HostTopology topologyOf(const std::vector<std::string>& hostOfRank);
// From rank 0's text(); throws Error on a malformed one or one of another size.
HostTopology parseTopology(const std::string& text, int size);
// Consecutive blocks of `perHost` ranks (a caller's declaration, Runtime::startWith); one host
// when `perHost` does not divide `size`.
HostTopology blockTopology(int size, int perHost);

}  // namespace cerar
