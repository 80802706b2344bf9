// Gloo's exception messages as cerar repeats them (the Gloo transport's files only).
#pragma once

#include <exception>
#include <string>

namespace cerar {

// `text` with every "]:<port>" that Gloo printed in network byte order put right.
std::string realPorts(std::string text);

// A Gloo exception's message without its "[file:line] " prefix, ports put right.
std::string glooMessage(const std::exception& e);

}  // namespace cerar
