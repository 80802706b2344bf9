#include "core/execution/timeline.h"

#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace cerar {

namespace {

// "process set change" -> "PROCESS_SET_CHANGE".
std::string upperName(const std::string& text) {
  std::string out;
  for (unsigned char ch : text) out += ch == ' ' ? '_' : char(std::toupper(ch));
  return out;
}

// The closing of the array; each spill writes it and steps back over it.
constexpr char kEnd[] = "\n]\n";

}  // namespace

std::string tensorRow(const Description& d, const std::string& name) {
  std::string prefix = upperName(kindName(d.kind));
  for (char& ch : prefix) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  prefix += '.';
  return name.rfind(prefix + "noname.", 0) == 0 ? name : prefix + name;
}

std::string operationActivity(const Description& d) {
  if (d.kind == Kind::kAllreduce && d.op == Op::kAdasum) return "ADASUM";
  return upperName(kindName(d.kind));
}

std::string negotiateActivity(const Description& d) {
  return "NEGOTIATE_" + operationActivity(d);
}

std::string collectiveActivity(const std::string& algorithm, const Description& d) {
  return upperName(algorithm) + "_" + upperName(kindName(d.kind));
}

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

void Timeline::start(const std::string& path, bool markCycles) {
  stop();
  std::lock_guard<std::mutex> lock(mutex_);
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    throw Error(detail::concat("rank ", rank_, ": cannot write the timeline to '", path,
                               "': ", std::strerror(errno)));
  }
  // Events gather in pending_ and reach the file whole, each time with the closing bracket.
  std::setvbuf(file_, nullptr, _IONBF, 0);
  seekable_ = std::fseek(file_, 0, SEEK_CUR) == 0;
  markCycles_ = markCycles;
  pending_ = "[\n";
  first_ = true;
  origin_ = flushed_ = Clock::now();
  rows_.clear();
  // Row 0 holds no events: it says whose file this is and when it began.
  const auto epoch = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  write(detail::concat("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": ",
                       "{\"name\": \"rank ", rank_, "\", \"rank\": ", rank_,
                       ", \"start_time_since_epoch_in_micros\": ", epoch, "}}"));
  write("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": 0, \"args\": "
        "{\"sort_index\": 0}}");
  spill();  // valid JSON from the start
  active_ = true;
}

void Timeline::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = false;
  if (file_ == nullptr) return;
  pending_ += kEnd;
  std::fwrite(pending_.data(), 1, pending_.size(), file_);
  std::fclose(file_);
  file_ = nullptr;
  pending_.clear();
}

void Timeline::write(const std::string& event) {
  if (!first_) pending_ += ",\n";
  pending_ += event;
  first_ = false;
  if (pending_.size() >= kPendingBytes) spill();
}

void Timeline::spill() {
  if (!seekable_) {  // the bracket could not be taken back: it comes at stop()
    std::fwrite(pending_.data(), 1, pending_.size(), file_);
  } else {
    pending_ += kEnd;
    std::fwrite(pending_.data(), 1, pending_.size(), file_);
    std::fseek(file_, -long(sizeof kEnd - 1), SEEK_CUR);  // the next events overwrite it
  }
  pending_.clear();
  flushed_ = Clock::now();
}

long Timeline::micros(Clock::time_point t) const {
  return long(std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count());
}

void Timeline::record(const std::string& tensor, const std::string& activity,
                      Clock::time_point start, Clock::time_point end, const std::string& args) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  if (start < origin_) start = origin_;  // began before this timeline did
  if (end < start) end = start;
  auto [row, added] = rows_.try_emplace(tensor, int(rows_.size()) + 1);
  const std::string name = jsonEscape(tensor);
  if (added) {  // Horovod's layout: each tensor is a process, in order of appearance
    write(detail::concat("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": ", row->second,
                         ", \"args\": {\"name\": \"", name, "\"}}"));
    write(detail::concat("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": ",
                         row->second, ", \"args\": {\"sort_index\": ", row->second, "}}"));
  }
  // Both ends from the origin, so that an event inside another stays inside once rounded.
  const long ts = micros(start);
  write(detail::concat("{\"name\": \"", jsonEscape(activity), "\", \"cat\": \"", name,
                       "\", \"ph\": \"X\", \"ts\": ", ts, ", \"dur\": ", micros(end) - ts,
                       ", \"pid\": ", row->second, ", \"tid\": 0",
                       args.empty() ? "" : ", \"args\": {", args, args.empty() ? "" : "}",
                       "}"));
}

void Timeline::markCycle() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr || !markCycles_) return;
  write(detail::concat("{\"name\": \"", kCycleStartMark, "\", \"ph\": \"i\", \"ts\": ",
                       micros(Clock::now()), ", \"s\": \"g\", \"pid\": 0, \"tid\": 0}"));
}

void Timeline::flush() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr || pending_.empty() || Clock::now() - flushed_ < kFlushInterval) return;
  spill();
}

}  // namespace cerar
