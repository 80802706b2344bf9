#include "core/job_config.h"

#include <cstring>
#include <iomanip>
#include <sstream>
#include <type_traits>

#include "core/log.h"
#include "core/settings.h"
#include "ops/common/error.h"

namespace cerar {
namespace {

constexpr uint8_t kVersion = 4;  // 2: autotune; 3: dynamic process sets; 4: error budget

// Visits every job-wide field of a config with its variable name, in encoding order (the
// settings table's, core/settings.h). One list serves encoding, decoding, comparing and naming,
// so they cannot drift apart.
template <typename Config, typename Visit>
void forEachJobSetting(Config& c, Visit&& visit) {
  for (const Setting& setting : settings()) {
    if (setting.kind != SettingKind::kJob) continue;
    std::visit([&](auto member) { visit(setting.variable, c.*member); }, setting.field);
  }
}

struct Encoder {
  std::vector<uint8_t> bytes;
  template <typename T>
  void operator()(const char*, const T& value) {
    if constexpr (std::is_same_v<T, std::string>) {
      put(uint32_t(value.size()));
      bytes.insert(bytes.end(), value.begin(), value.end());
    } else if constexpr (std::is_same_v<T, bool>) {
      put(uint8_t(value));
    } else if constexpr (std::is_same_v<T, size_t>) {
      put(uint64_t(value));
    } else {
      put(value);
    }
  }
  template <typename T>
  void put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof value);
  }
};

struct Decoder {
  const std::vector<uint8_t>& bytes;
  size_t at = 0;
  template <typename T>
  void operator()(const char* name, T& value) {
    if constexpr (std::is_same_v<T, std::string>) {
      const uint32_t n = get<uint32_t>(name);
      need(n, name);
      value.assign(reinterpret_cast<const char*>(bytes.data()) + at, n);
      at += n;
    } else if constexpr (std::is_same_v<T, bool>) {
      value = get<uint8_t>(name) != 0;
    } else if constexpr (std::is_same_v<T, size_t>) {
      value = size_t(get<uint64_t>(name));
    } else {
      value = get<T>(name);
    }
  }
  template <typename T>
  T get(const char* name) {
    need(sizeof(T), name);
    T value;
    std::memcpy(&value, bytes.data() + at, sizeof value);
    at += sizeof value;
    return value;
  }
  void need(size_t n, const char* name) const {
    CERAR_ENFORCE(n <= bytes.size() - at, "job settings from rank 0: truncated at ", name);
  }
};

template <typename T>
std::string show(const T& value) {
  std::ostringstream out;
  if constexpr (std::is_same_v<T, std::string>) {
    out << "'" << value << "'";
  } else if constexpr (std::is_same_v<T, bool>) {
    out << (value ? 1 : 0);
  } else {
    out << std::setprecision(10) << value;
  }
  return out.str();
}

}  // namespace

std::vector<uint8_t> encodeJobSettings(const RuntimeConfig& config) {
  Encoder encoder;
  encoder.put(kVersion);
  forEachJobSetting(config, encoder);
  return std::move(encoder.bytes);
}

RuntimeConfig adoptJobSettings(const RuntimeConfig& mine, const std::vector<uint8_t>& encoded,
                               std::vector<std::string>& differences) {
  Decoder decoder{encoded};
  const auto version = decoder.get<uint8_t>("the version");
  CERAR_ENFORCE(version == kVersion, "job settings from rank 0: version ", int(version),
                ", this rank speaks ", int(kVersion), " (mixed cerar builds?)");
  RuntimeConfig job = mine;
  forEachJobSetting(job, decoder);
  CERAR_ENFORCE(decoder.at == encoded.size(), "job settings from rank 0: ",
                encoded.size() - decoder.at, " trailing bytes");
  // Compare field by field, by their encodings (exact, unlike printed numbers); the two
  // configs are visited in the same order.
  struct Field {
    std::vector<uint8_t> bytes;
    std::string shown;
  };
  const auto fields = [](const RuntimeConfig& c) {
    std::vector<Field> out;
    forEachJobSetting(c, [&](const char* name, const auto& value) {
      Encoder one;
      one(name, value);
      out.push_back({std::move(one.bytes), show(value)});
    });
    return out;
  };
  const std::vector<Field> ours = fields(mine), theirs = fields(job);
  const std::vector<std::string> names = jobSettingNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (ours[i].bytes == theirs[i].bytes) continue;
    differences.push_back(detail::concat(names[i], ": this rank had ", ours[i].shown,
                                         ", the job uses rank 0's ", theirs[i].shown));
  }
  return job;
}

std::vector<std::string> jobSettingNames() {
  std::vector<std::string> names;
  RuntimeConfig config;
  forEachJobSetting(config, [&](const char* name, const auto&) { names.push_back(name); });
  return names;
}

RuntimeConfig agreeJobConfig(const RuntimeConfig& mine, const SettingsExchange& exchange) {
  const std::vector<uint8_t> job =
      exchange(mine.rank == 0 ? encodeJobSettings(mine) : std::vector<uint8_t>{});
  std::vector<std::string> differences;
  RuntimeConfig agreed = adoptJobSettings(mine, job, differences);
  const Logger logger(mine.rank, parseLogLevel(mine.logLevel), mine.logSink);
  for (const auto& line : differences) {
    logger.log(LogLevel::kWarning, "job-wide setting " + line);
  }
  return agreed;
}

}  // namespace cerar
