#include "ops/transport/gloo_message.h"

#include <arpa/inet.h>

#include <cstdint>
#include <regex>

#include <gloo/config.h>

namespace cerar {

// Gloo 0.5.0 prints an address's port as stored, in network byte order: "[127.0.0.1]:17315"
// for port 41795. The port as the kernel and the user know it, in every "]:<port>".
std::string realPorts(std::string text) {
#if GLOO_VERSION <= 500
  static const std::regex port(R"(\]:(\d+))");
  std::string out;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), port), end; it != end; ++it) {
    const unsigned long raw = std::stoul((*it)[1].str());
    out.append(last, text.cbegin() + it->position());
    out += "]:" + std::to_string(raw <= 0xffff ? ntohs(uint16_t(raw)) : raw);
    last = text.cbegin() + it->position() + it->length();
  }
  out.append(last, text.cend());
  return out;
#else
  return text;
#endif
}

// Gloo prefixes its messages with "[file:line] "; the rank and peer we add say more.
std::string glooMessage(const std::exception& e) {
  std::string text = e.what();
  if (!text.empty() && text[0] == '[') {
    auto end = text.find("] ");
    if (end != std::string::npos) text.erase(0, end + 2);
  }
  return realPorts(text);
}

}  // namespace cerar
