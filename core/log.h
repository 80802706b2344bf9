// Levelled log lines of one rank (CERAR_LOG_LEVEL), to stderr or a caller's sink.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace cerar {

enum class LogLevel : uint8_t { kTrace, kDebug, kInfo, kWarning, kError, kFatal };
// trace | debug | info | warning | error | fatal (case-insensitive); throws Error otherwise.
LogLevel parseLogLevel(const std::string& name);
const char* logLevelName(LogLevel level);

// Thread safety: log() may be called from any thread; a sink must tolerate that.
class Logger {
 public:
  using Sink = std::function<void(const std::string& line)>;
  Logger(int rank, LogLevel level, Sink sink = {});
  bool enabled(LogLevel level) const { return level >= level_; }
  // Writes "[cerar rank R] LEVEL: message".
  void log(LogLevel level, const std::string& message) const;

 private:
  int rank_;
  LogLevel level_;
  Sink sink_;
};

}  // namespace cerar
