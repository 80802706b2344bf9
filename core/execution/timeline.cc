#include "core/execution/timeline.h"

#include <cctype>
#include <cerrno>
#include <cmath>
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

// Horovod's metadata events of row `pid`: its name (`args`) and its place among the rows.
std::string rowName(int pid, const JsonObject& args) {
  return JsonObject().add("name", "process_name").add("ph", "M").add("pid", pid)
      .add("args", args).str();
}
std::string rowOrder(int pid) {
  return JsonObject().add("name", "process_sort_index").add("ph", "M").add("pid", pid)
      .add("args", JsonObject().add("sort_index", pid)).str();
}

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

void JsonObject::quoted(std::string_view text) {
  body_ += '"';
  for (unsigned char ch : text) {
    if (ch == '"' || ch == '\\') {
      body_ += '\\';
      body_ += char(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      body_ += buf;
    } else {
      body_ += char(ch);
    }
  }
  body_ += '"';
}

void JsonObject::member(std::string_view key) {
  if (!body_.empty()) body_ += ", ";
  quoted(key);
  body_ += ": ";
}

JsonObject& JsonObject::add(std::string_view key, std::string_view text) {
  member(key);
  quoted(text);
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, bool flag) {
  member(key);
  body_ += flag ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, double number) {
  if (std::isnan(number)) return add(key, "nan");
  if (std::isinf(number)) return add(key, number > 0 ? "inf" : "-inf");
  member(key);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", number);
  body_ += buf;
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, const JsonObject& object) {
  member(key);
  body_ += '{';
  body_ += object.body_;
  body_ += '}';
  return *this;
}

JsonObject& JsonObject::merge(const JsonObject& more) {
  if (!body_.empty() && !more.body_.empty()) body_ += ", ";
  body_ += more.body_;
  return *this;
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
  write(rowName(0, JsonObject()
                     .add("name", detail::concat("rank ", rank_))
                     .add("rank", rank_)
                     .add("start_time_since_epoch_in_micros", epoch)));
  write(rowOrder(0));
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
                      Clock::time_point start, Clock::time_point end, const JsonObject& args) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  if (start < origin_) start = origin_;  // began before this timeline did
  if (end < start) end = start;
  auto [row, added] = rows_.try_emplace(tensor, int(rows_.size()) + 1);
  const int pid = row->second;
  if (added) {  // Horovod's layout: each tensor is a process, in order of appearance
    write(rowName(pid, JsonObject().add("name", tensor)));
    write(rowOrder(pid));
  }
  // Both ends from the origin, so that an event inside another stays inside once rounded.
  const long ts = micros(start);
  JsonObject event;
  event.add("name", activity).add("cat", tensor).add("ph", "X").add("ts", ts);
  event.add("dur", micros(end) - ts).add("pid", pid).add("tid", 0);
  if (!args.empty()) event.add("args", args);
  write(event.str());
}

void Timeline::markCycle() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr || !markCycles_) return;
  write(JsonObject()
            .add("name", kCycleStartMark)
            .add("ph", "i")
            .add("ts", micros(Clock::now()))
            .add("s", "g")
            .add("pid", 0)
            .add("tid", 0)
            .str());
}

void Timeline::flush() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr || pending_.empty() || Clock::now() - flushed_ < kFlushInterval) return;
  spill();
}

}  // namespace cerar
