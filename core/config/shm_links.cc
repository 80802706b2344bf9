// Only with Gloo and the TCP store (as core/config/bootstrap.cc, its one caller).
#ifndef CERAR_NO_GLOO

#include "core/config/shm_links.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

#include "common/error.h"
#include "core/config/bootstrap.h"
#include "core/config/config.h"
#include "ops/transport/shm.h"

namespace cerar {

namespace {
// This process's host as shared memory sees it: the host's name, the kernel's boot, the
// /dev/shm it would map (containers of one kernel may have their own) and its network
// namespace (ranks in namespaces of their own are hosts of their own: emulated hosts' traffic
// must cross their links).
std::string hostIdentity() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat shm {}, net {};
  stat("/dev/shm", &shm);
  stat("/proc/self/ns/net", &net);
  return detail::concat(name, " ", boot, " ", shm.st_dev, ":", shm.st_ino, " ", net.st_ino);
}

std::string freshName() {
  std::random_device random;
  std::ostringstream name;
  name << "/cerar-" << std::hex << random() << random() << "-" << getpid();
  return name.str();
}

std::string text(const std::vector<char>& bytes) { return std::string(bytes.begin(), bytes.end()); }
std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

// Rank 0: "<pid>... | <host table>" from every rank's post.
std::string hostTable(TcpStore& store, const std::string& keys, int size) {
  std::vector<std::string> hosts;
  std::string pids;
  for (int rank = 0; rank < size; ++rank) {
    std::istringstream record(text(store.get(detail::concat(keys, "/", rank))));
    std::string host;
    pid_t pid = 0;
    record >> pid;
    std::getline(record >> std::ws, host);
    hosts.push_back(host);
    pids += detail::concat(pid, " ");
  }
  return pids + "| " + topologyOf(hosts).text();
}
}  // namespace

AgreedHosts agreeOnHosts(TcpStore& store, const RuntimeConfig& agreed, const std::string& prefix) {
  const std::string keys = prefix + "/hosts";
  const int rank = agreed.rank, size = agreed.size;
  store.set(detail::concat(keys, "/", rank), bytes(detail::concat(getpid(), " ", hostIdentity())));
  std::string table;
  if (rank == 0) {
    table = hostTable(store, keys, size);
    store.set(keys + "/table", bytes(table));
  } else {
    table = text(store.get(keys + "/table"));
  }
  const size_t bar = table.find('|');
  CERAR_ENFORCE(bar != std::string::npos, "cerar: a malformed host table: '", table, "'");
  AgreedHosts hosts;
  hosts.topology = parseTopology(table.substr(bar + 1), size);
  std::istringstream pids(table.substr(0, bar));
  hosts.pids.resize(size_t(size));
  for (pid_t& pid : hosts.pids) pids >> pid;
  return hosts;
}

std::shared_ptr<Transport> sharedMemoryLinks(TcpStore& store, const RuntimeConfig& agreed,
                                             const std::string& prefix, const AgreedHosts& hosts,
                                             std::shared_ptr<Transport> channels,
                                             std::string* why) {
  const HostTopology& topology = hosts.topology;
  const int rank = agreed.rank;
  const std::vector<int> members = topology.localMembers(rank);
  const int local = topology.localRank(rank), size = int(members.size());
  if (size < 2) {
    *why = "no other rank on this host";
    return nullptr;
  }
  const std::string keys = detail::concat(prefix, "/shm/", topology.hostOf[size_t(rank)]);
  std::string name;
  std::optional<ShmSegment> made;
  if (local == 0) {  // the host's lowest rank makes the segment
    name = freshName();
    try {
      made.emplace(ShmSegment::create(name, shmSegmentBytes(size, shmRingBytes(size))));
    } catch (const Error& e) {
      *why = e.what();
    }
    store.set(keys + "/plan", bytes(made ? name : "- " + *why));
  } else {
    name = text(store.get(keys + "/plan"));
    if (name.rfind("- ", 0) == 0) {
      *why = name.substr(2);
      return nullptr;
    }
  }
  if (local == 0 && !made) return nullptr;
  // The maker unlinks the name once every rank of the host has reported, whatever happens
  // meanwhile.
  struct Unlink {
    const std::string* name;
    ~Unlink() {
      if (name) ShmSegment::unlink(*name);
    }
  } unlink{local == 0 ? &name : nullptr};
  std::optional<ShmSegment> mapped;
  try {
    mapped.emplace(local == 0 ? std::move(*made) : ShmSegment::open(name));
  } catch (const Error& e) {
    *why = detail::concat("rank ", rank, ": ", e.what());
  }
  // Every report awaited, failed ones too, so that every rank of the host decides alike.
  const auto limit = rendezvousTimeoutOf(agreed);
  const int64_t reports = tallyReports(store, keys + "/mapped", mapped.has_value(), size, limit,
                                       limit, std::chrono::milliseconds(1));
  if (reports % kFailedReport < size) {
    throw TimeoutError(detail::concat("cerar: rank ", rank, ": not every rank of its host "
                                      "mapped the shared memory within the rendezvous timeout"));
  }
  if (reports >= kFailedReport) {  // some rank could not map it: the host keeps TCP
    if (why->empty()) *why = "a rank could not map the segment";
    return nullptr;
  }
  std::vector<pid_t> pids;
  for (int member : members) pids.push_back(hosts.pids[size_t(member)]);
  return std::make_shared<ShmTransport>(std::move(*mapped), local, size, shmRingBytes(size),
                                        timeoutOf(agreed), std::move(pids), std::move(channels));
}

}  // namespace cerar

#endif  // CERAR_NO_GLOO
