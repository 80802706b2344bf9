#include "core/log.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "common/error.h"

namespace cerar {

LogLevel parseLogLevel(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  for (auto level : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning,
                     LogLevel::kError, LogLevel::kFatal}) {
    if (lower == logLevelName(level)) return level;
  }
  throw InvalidArgumentError("unknown log level '" + name +
              "' (expected trace, debug, info, warning, error or fatal)");
}

const char* logLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kFatal: return "fatal";
  }
  return "?";
}

Logger::Logger(int rank, LogLevel level, Sink sink)
    : rank_(rank), level_(level), sink_(std::move(sink)) {}

void Logger::log(LogLevel level, const std::string& message) const {
  if (!enabled(level)) return;
  std::string upper = logLevelName(level);
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const std::string line =
      "[cerar rank " + std::to_string(rank_) + "] " + upper + ": " + message;
  if (sink_) {
    sink_(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());  // one call: lines of threads do not interleave
  }
}

}  // namespace cerar
