#include "rendezvous/data_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace cerar {
namespace {

std::string numeric(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = addr->sa_family == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(addr)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
  inet_ntop(addr->sa_family, raw, text, sizeof text);
  return text;
}

bool isIpv4(const std::string& address) { return address.find(':') == std::string::npos; }

// "eth0 (10.0.0.2), ib0 (192.168.1.2)": each interface once, with its IPv4 address if any.
std::string listOf(const std::vector<InterfaceAddress>& interfaces, bool withLoopback) {
  std::vector<std::pair<std::string, std::string>> named;
  for (const auto& i : interfaces) {
    if (i.loopback && !withLoopback) continue;
    auto it = std::find_if(named.begin(), named.end(),
                           [&](const auto& n) { return n.first == i.name; });
    if (it == named.end()) {
      named.emplace_back(i.name, i.address);
    } else if (isIpv4(i.address) && !isIpv4(it->second)) {
      it->second = i.address;
    }
  }
  std::string out;
  for (const auto& [name, address] : named) {
    out += (out.empty() ? "" : ", ") + name + " (" + address + ")";
  }
  return out.empty() ? "none" : out;
}

std::string ifaceOf(const std::vector<InterfaceAddress>& interfaces, const std::string& address) {
  for (const auto& i : interfaces) {
    if (i.address == address) return i.name;
  }
  return "";
}

}  // namespace

bool isLoopbackAddress(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

std::vector<InterfaceAddress> localInterfaces() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    out.push_back({i->ifa_name, numeric(i->ifa_addr), (i->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  return out;
}

std::optional<std::string> routeSourceAddress(const std::string& host, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), "9", &hints, &found);  // any port: nothing is sent
  if (rc != 0) {
    if (why != nullptr) *why = std::string("cannot resolve '") + host + "': " + gai_strerror(rc);
    return std::nullopt;
  }
  std::string error = "no address";
  std::optional<std::string> source;
  for (addrinfo* a = found; a != nullptr && !source; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    // connect() on a UDP socket only picks the route and the local address.
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      source = numeric(reinterpret_cast<sockaddr*>(&local));
    } else {
      error = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (!source && why != nullptr) *why = "no route to '" + host + "': " + error;
  return source;
}

DataAddress chooseDataAddress(const DataAddressInputs& in) {
  const std::string who = detail::concat("cerar: rank ", in.rank, ": ");
  const bool remoteRendezvous = !isLoopbackAddress(in.rendezvousAddr);
  if (!in.iface.empty()) {
    const InterfaceAddress* found = nullptr;
    for (const auto& i : in.interfaces) {
      if (i.name == in.iface && (found == nullptr || isIpv4(i.address))) {
        found = &i;  // its IPv4 address when it has one, as Gloo prefers
      }
    }
    if (found == nullptr) {
      throw InvalidArgumentError(who + in.ifaceBy + "=" + in.iface + ": this host has no such "
                                 "interface that is up; it has " + listOf(in.interfaces, true));
    }
    if (found->loopback && remoteRendezvous && in.peersRemote) {
      throw InvalidArgumentError(who + in.ifaceBy + "=" + in.iface + " is a loopback "
                                 "interface, but peers run on other hosts; name one of " +
                                 listOf(in.interfaces, false));
    }
    return {in.iface, found->address, true,
            detail::concat("interface ", in.iface, " (", found->address, "), named by ",
                           in.ifaceBy)};
  }
  if (!remoteRendezvous) {
    return {ifaceOf(in.interfaces, "127.0.0.1").empty() ? "lo" : ifaceOf(in.interfaces, "127.0.0.1"),
            "127.0.0.1", false, "loopback (the rendezvous address is loopback)"};
  }
  std::string why;
  const std::optional<std::string> source = in.route(in.rendezvousAddr, &why);
  if (!source) {
    throw Error(who + "cannot choose the address of its data links: " + why +
                " (the rendezvous address); fix it or set CERAR_IFACE");
  }
  if (!isLoopbackAddress(*source) || !in.peersRemote) {
    return {ifaceOf(in.interfaces, *source), *source, false,
            detail::concat(*source, " (", ifaceOf(in.interfaces, *source),
                           "), the local address of the route to the rendezvous host ",
                           in.rendezvousAddr)};
  }
  // The rendezvous name is this host's own and resolves to loopback here (Debian maps the
  // host name to 127.0.1.1): the route says nothing about the network the peers use.
  std::vector<InterfaceAddress> candidates;
  for (const auto& i : in.interfaces) {
    if (!i.loopback && isIpv4(i.address)) candidates.push_back(i);
  }
  if (candidates.size() == 1) {
    return {candidates[0].name, candidates[0].address, false,
            detail::concat(candidates[0].address, " (", candidates[0].name, "), this host's "
                           "only non-loopback interface, since the rendezvous host ",
                           in.rendezvousAddr, " is loopback here (the route to it starts at ",
                           *source, ")")};
  }
  throw InvalidArgumentError(
      who + "the rendezvous host '" + in.rendezvousAddr + "' is loopback on this host (the "
      "route to it starts at " + *source + "; a host's own name is on 127.0.1.1 under Debian's "
      "default /etc/hosts), so this rank would publish a loopback address while its peers run "
      "on other hosts; set CERAR_IFACE to the interface the hosts share (this host has " +
      listOf(in.interfaces, false) + "), or give the rendezvous host as a routable address");
}

std::vector<std::pair<std::string, std::string>> ncclEnvironmentFor(
    const DataAddress& choice,
    const std::function<std::optional<std::string>(const std::string&)>& lookup) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto set = lookup("NCCL_SOCKET_IFNAME");
  if ((!set || set->empty()) && !choice.iface.empty()) {
    out.emplace_back("NCCL_SOCKET_IFNAME", "=" + choice.iface);  // '=': exactly this name
  }
  return out;
}

}  // namespace cerar
