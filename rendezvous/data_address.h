// Which local address a rank publishes for its data links (Gloo TCP, and NCCL's sockets).
//
// Default: the address the kernel would use to reach the rendezvous host (a route lookup:
// a connected UDP socket's getsockname, which sends nothing). A host name resolving to a
// loopback address on its own host (Debian's /etc/hosts maps it to 127.0.1.1) therefore no
// longer makes every rank publish loopback. A named interface (CERAR_IFACE, or the aliases
// GLOO_SOCKET_IFNAME and HOROVOD_GLOO_IFACE) overrides the lookup.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cerar {

struct InterfaceAddress {
  std::string name;     // e.g. "eth0"
  std::string address;  // numeric, e.g. "10.0.0.2" or "fe80::1"
  bool loopback = false;
};

// This host's up interfaces with an IPv4 or IPv6 address (getifaddrs).
std::vector<InterfaceAddress> localInterfaces();

// The local address of the route to `host` (a name or a numeric address), as text;
// nullopt with `why` set when the host does not resolve or has no route.
std::optional<std::string> routeSourceAddress(const std::string& host, std::string* why);

// "127.x.x.x", "::1", "localhost".
bool isLoopbackAddress(const std::string& address);

struct DataAddressInputs {
  int rank = 0;
  std::string iface;    // the named interface, "" when none
  std::string ifaceBy;  // the variable that named it (for messages)
  std::string rendezvousAddr;
  // True when the launcher's variables say some ranks run on other hosts (local size < size).
  bool peersRemote = false;
  std::function<std::optional<std::string>(const std::string& host, std::string* why)> route =
      routeSourceAddress;
  std::vector<InterfaceAddress> interfaces;
};

struct DataAddress {
  std::string iface;    // the interface (for Gloo when named, and for NCCL_SOCKET_IFNAME)
  std::string address;  // the address published (empty: Gloo takes the named interface's)
  bool named = false;   // the interface was named by a variable: bind by interface
  std::string reason;   // one line for the info log
};

// The choice, by the rules above. Throws Error with the fix when the rank would publish a
// loopback address while the rendezvous host is not loopback and peers are on other hosts,
// when a named interface does not exist, or when the rendezvous host cannot be routed to.
// When the route lookup gives loopback (the rendezvous name is this host's own, on 127.0.1.1)
// and peers are remote, the host's only non-loopback IPv4 interface is used; with several the
// error lists them.
DataAddress chooseDataAddress(const DataAddressInputs& inputs);

// Variables to set for NCCL so its sockets follow the same choice: NCCL_SOCKET_IFNAME
// ("=<iface>", an exact match) unless `lookup` finds it already set.
std::vector<std::pair<std::string, std::string>> ncclEnvironmentFor(
    const DataAddress& choice,
    const std::function<std::optional<std::string>(const std::string&)>& lookup);

}  // namespace cerar
