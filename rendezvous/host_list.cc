#include "rendezvous/host_list.h"

#include <cctype>

#include "common/error.h"

namespace cerar {
namespace {

[[noreturn]] void bad(const std::string& list, const std::string& why) {
  throw InvalidArgumentError("bad host list '" + list + "': " + why);
}

bool allDigits(const std::string& text) {
  if (text.empty() || text.size() > 18) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "01-03,07" -> 01 02 03 07.
std::vector<std::string> expandGroup(const std::string& list, const std::string& group,
                                     size_t limit) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= group.size()) {
    const size_t comma = std::min(group.find(',', start), group.size());
    const std::string part = group.substr(start, comma - start);
    const size_t dash = part.find('-');
    const std::string low = part.substr(0, dash);
    const std::string high = dash == std::string::npos ? low : part.substr(dash + 1);
    if (!allDigits(low) || !allDigits(high)) bad(list, "'[" + group + "]' is not numbers and ranges");
    const long long from = std::stoll(low), to = std::stoll(high);
    if (to < from) bad(list, "range " + part + " runs backwards");
    if (size_t(to - from) >= limit - out.size()) bad(list, "more hosts than " + std::to_string(limit));
    for (long long n = from; n <= to; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < low.size()) digits.insert(0, low.size() - digits.size(), '0');
      out.push_back(digits);
    }
    start = comma + 1;
  }
  return out;
}

// One item: its text and groups multiplied out, in order.
void expandItem(const std::string& list, const std::string& item, size_t limit,
                std::vector<std::string>& out) {
  std::vector<std::string> partial{""};
  size_t at = 0;
  while (at < item.size()) {
    const size_t open = item.find('[', at);
    const std::string text = item.substr(at, open == std::string::npos ? std::string::npos : open - at);
    if (text.find(']') != std::string::npos) bad(list, "unbalanced ']'");
    for (auto& p : partial) p += text;
    if (open == std::string::npos) break;
    const size_t close = item.find(']', open);
    if (close == std::string::npos) bad(list, "unbalanced '['");
    const std::vector<std::string> numbers =
        expandGroup(list, item.substr(open + 1, close - open - 1), limit);
    if (partial.size() * numbers.size() > limit) bad(list, "more hosts than " + std::to_string(limit));
    std::vector<std::string> next;
    for (const auto& p : partial) {
      for (const auto& n : numbers) next.push_back(p + n);
    }
    partial = std::move(next);
    at = close + 1;
  }
  if (item.empty()) bad(list, "an empty host name");
  if (out.size() + partial.size() > limit) bad(list, "more hosts than " + std::to_string(limit));
  out.insert(out.end(), partial.begin(), partial.end());
}

}  // namespace

std::vector<std::string> expandHostList(const std::string& list, size_t limit) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[' && ++depth > 1) bad(list, "nested '['");
    if (c == ']' && --depth < 0) bad(list, "unbalanced ']'");
    if (c == ',' && depth == 0) {
      expandItem(list, list.substr(start, i - start), limit, out);
      start = i + 1;
    }
  }
  if (depth != 0) bad(list, "unbalanced '['");
  return out;
}

std::vector<int> expandTasksPerNode(const std::string& counts, size_t limit) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= counts.size()) {
    const size_t comma = std::min(counts.find(',', start), counts.size());
    const std::string part = counts.substr(start, comma - start);
    const size_t paren = part.find('(');
    const std::string count = part.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      if (part.size() < paren + 4 || part.compare(paren, 2, "(x") != 0 || part.back() != ')') {
        throw InvalidArgumentError("bad tasks per node '" + counts + "' (expected e.g. 2(x3),1)");
      }
      repeat = part.substr(paren + 2, part.size() - paren - 3);
    }
    if (!allDigits(count) || !allDigits(repeat) || std::stoll(count) > (1 << 30) ||
        std::stoll(repeat) > (long long)(limit - out.size())) {
      throw InvalidArgumentError("bad tasks per node '" + counts + "' (expected e.g. 2(x3),1)");
    }
    out.insert(out.end(), size_t(std::stoll(repeat)), int(std::stoll(count)));
    start = comma + 1;
  }
  return out;
}

}  // namespace cerar
