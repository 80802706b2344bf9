#include "core/timeline.h"

#include <cerrno>
#include <cstring>

#include "ops/common/error.h"

namespace cerar {

std::string jsonEscape(const std::string& text) {
  std::string out;
  for (unsigned char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += char(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += char(ch);
    }
  }
  return out;
}

Timeline::Timeline(int rank) : rank_(rank) {}

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path) {
  stop();
  std::lock_guard<std::mutex> lock(mutex_);
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    throw Error(detail::concat("rank ", rank_, ": cannot write the timeline to '", path,
                               "': ", std::strerror(errno)));
  }
  std::fputs("[\n", file_);
  first_ = true;
  origin_ = Clock::now();
  rows_.clear();
  write(detail::concat("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": ", rank_,
                       ", \"args\": {\"name\": \"rank ", rank_, "\"}}"));
  active_ = true;
}

void Timeline::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = false;
  if (file_ == nullptr) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

void Timeline::write(const std::string& event) {
  if (!first_) std::fputs(",\n", file_);
  std::fputs(event.c_str(), file_);
  first_ = false;
}

void Timeline::record(const std::string& tensor, const char* phase, Clock::time_point start,
                      Clock::time_point end, const std::string& args) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  if (start < origin_) start = origin_;  // began before this timeline did
  if (end < start) end = start;
  auto [row, added] = rows_.try_emplace(tensor, int(rows_.size()) + 1);
  const std::string name = jsonEscape(tensor);
  if (added) {
    write(detail::concat("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": ", rank_,
                         ", \"tid\": ", row->second, ", \"args\": {\"name\": \"", name, "\"}}"));
  }
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  const auto ts = duration_cast<microseconds>(start - origin_).count();
  const auto dur = duration_cast<microseconds>(end - start).count();
  write(detail::concat("{\"name\": \"", phase, "\", \"cat\": \"", name, "\", \"ph\": \"X\", ",
                       "\"ts\": ", ts, ", \"dur\": ", dur, ", \"pid\": ", rank_, ", \"tid\": ",
                       row->second, ", \"args\": {\"tensor\": \"", name, "\"",
                       args.empty() ? "" : ", ", args, "}}"));
}

}  // namespace cerar
