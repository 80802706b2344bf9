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

// Rank 0: the plan ("<name> <ring bytes> <pid>...") when every rank shares its host, else "".
std::string makePlan(TcpStore& store, const std::string& keys, int size, std::string* why) {
  const std::string mine = hostIdentity();
  std::string pids;
  for (int rank = 0; rank < size; ++rank) {
    std::istringstream record(text(store.get(detail::concat(keys, "/host/", rank))));
    std::string host;
    pid_t pid = 0;
    record >> pid;
    std::getline(record >> std::ws, host);
    if (host != mine) {
      *why = detail::concat("rank ", rank, " is on another host");
      return "";
    }
    pids += detail::concat(" ", pid);
  }
  return detail::concat(freshName(), " ", shmRingBytes(size), pids);
}
}  // namespace

std::shared_ptr<Transport> sharedMemoryLinks(TcpStore& store, const RuntimeConfig& agreed,
                                             const std::string& prefix,
                                             std::shared_ptr<Transport> tcp, std::string* why) {
  const std::string keys = prefix + "/shm";
  const int rank = agreed.rank, size = agreed.size;
  store.set(detail::concat(keys, "/host/", rank), bytes(detail::concat(getpid(), " ",
                                                                       hostIdentity())));
  std::string plan;
  std::optional<ShmSegment> made;
  if (rank == 0) {
    plan = makePlan(store, keys, size, why);
    if (!plan.empty()) {
      try {
        made.emplace(ShmSegment::create(plan.substr(0, plan.find(' ')),
                                        shmSegmentBytes(size, shmRingBytes(size))));
      } catch (const Error& e) {
        *why = e.what();
        plan.clear();
      }
    }
    store.set(keys + "/plan", bytes(plan.empty() ? "- " + *why : plan));
  } else {
    plan = text(store.get(keys + "/plan"));
    if (plan.rfind("- ", 0) == 0) {
      *why = plan.substr(2);
      return nullptr;
    }
  }
  if (plan.empty()) return nullptr;
  std::istringstream fields(plan);
  std::string name;
  size_t ring = 0;
  fields >> name >> ring;
  std::vector<pid_t> pids(size);
  for (pid_t& pid : pids) fields >> pid;
  // Rank 0 unlinks the name once every rank has reported, whatever happens meanwhile.
  struct Unlink {
    const std::string* name;
    ~Unlink() {
      if (name) ShmSegment::unlink(*name);
    }
  } unlink{rank == 0 ? &name : nullptr};
  std::optional<ShmSegment> mapped;
  try {
    mapped.emplace(rank == 0 ? std::move(*made) : ShmSegment::open(name));
  } catch (const Error& e) {
    *why = detail::concat("rank ", rank, ": ", e.what());
  }
  // Every rank's report awaited, failed ones too, so that every rank decides on the same count.
  const auto limit = rendezvousTimeoutOf(agreed);
  const int64_t reports = tallyReports(store, keys + "/mapped", mapped.has_value(), size, limit,
                                       limit, std::chrono::milliseconds(1));
  if (reports % kFailedReport < size) {
    throw TimeoutError(detail::concat("cerar: rank ", rank, ": not every rank mapped the "
                                      "shared memory within the rendezvous timeout"));
  }
  if (reports >= kFailedReport) {  // some rank could not map it: every rank keeps TCP
    if (why->empty()) *why = "a rank could not map the segment";
    return nullptr;
  }
  return std::make_shared<ShmTransport>(std::move(*mapped), rank, size, ring,
                                        timeoutOf(agreed), std::move(pids), std::move(tcp));
}

}  // namespace cerar

#endif  // CERAR_NO_GLOO
