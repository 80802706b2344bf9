#include "core/config/host_topology.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "common/error.h"

namespace cerar {

int HostTopology::hosts() const {
  return hostOf.empty() ? 0 : *std::max_element(hostOf.begin(), hostOf.end()) + 1;
}

std::vector<int> HostTopology::localMembers(int rank) const {
  std::vector<int> members;
  for (int r = 0; r < size(); ++r) {
    if (hostOf[r] == hostOf.at(rank)) members.push_back(r);
  }
  return members;
}

int HostTopology::localRank(int rank) const {
  const std::vector<int> members = localMembers(rank);
  return int(std::find(members.begin(), members.end(), rank) - members.begin());
}

int HostTopology::localSize(int rank) const { return int(localMembers(rank).size()); }

std::vector<int> HostTopology::crossMembers(int rank) const {
  const int local = localRank(rank);
  std::vector<int> members;
  for (int r = 0; r < size(); ++r) {
    if (localRank(r) == local) members.push_back(r);
  }
  return members;
}

int HostTopology::crossRank(int rank) const {
  const std::vector<int> members = crossMembers(rank);
  return int(std::find(members.begin(), members.end(), rank) - members.begin());
}

int HostTopology::crossSize(int rank) const { return int(crossMembers(rank).size()); }

bool HostTopology::homogeneous() const {
  std::vector<int> counts(size_t(hosts()), 0);
  for (int host : hostOf) ++counts[size_t(host)];
  return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<int>()) ==
         counts.end();
}

std::string HostTopology::text() const {
  std::ostringstream out;
  for (size_t r = 0; r < hostOf.size(); ++r) out << (r ? " " : "") << hostOf[r];
  return out.str();
}

HostTopology topologyOf(const std::vector<std::string>& hostOfRank) {
  std::map<std::string, int> numbers;
  HostTopology topology;
  for (const std::string& host : hostOfRank) {
    const int next = int(numbers.size());
    topology.hostOf.push_back(numbers.emplace(host, next).first->second);
  }
  return topology;
}

HostTopology parseTopology(const std::string& text, int size) {
  HostTopology topology;
  std::istringstream in(text);
  int host = 0;
  while (in >> host) {
    // Hosts are numbered by their lowest rank: each is at most one above those before it.
    CERAR_ENFORCE(host >= 0 && host <= topology.hosts(), "cerar: a malformed host table: '",
                  text, "'");
    topology.hostOf.push_back(host);
  }
  CERAR_ENFORCE(in.eof() && topology.size() == size, "cerar: a host table of ",
                topology.size(), " ranks for a job of ", size, ": '", text, "'");
  return topology;
}

HostTopology blockTopology(int size, int perHost) {
  HostTopology topology;
  const bool blocks = perHost > 0 && size % perHost == 0;
  for (int r = 0; r < size; ++r) topology.hostOf.push_back(blocks ? r / perHost : 0);
  return topology;
}

}  // namespace cerar
