#include "core/config/job_config.h"

#include <iomanip>
#include <sstream>
#include <type_traits>

#include "core/log.h"
#include "core/config/settings.h"
#include "common/bytes.h"
#include "common/error.h"

namespace cerar {
namespace {

// 2: autotune; 3: dynamic process sets; 4: error budget; 5: the error budget's bound;
// 6: shared memory; 7: links made on demand, the control tree's fanout
constexpr uint8_t kVersion = 7;

// Visits every job-wide field of a config with its variable name, in encoding order (the
// settings table's, core/config/settings.h). One list serves encoding, decoding, comparing and naming,
// so they cannot drift apart.
template <typename Config, typename Visit>
void forEachJobSetting(Config& c, Visit&& visit) {
  for (const Setting& setting : settings()) {
    if (setting.kind != SettingKind::kJob) continue;
    std::visit([&](auto member) { visit(setting.variable, c.*member); }, setting.field);
  }
}

// One setting as a field of ByteWriter: a string with its length, bool as u8, size_t as u64.
struct Encoder {
  ByteWriter<> out;
  template <typename T>
  void operator()(const char*, const T& value) {
    if constexpr (std::is_same_v<T, std::string>) {
      out.str(value);
    } else if constexpr (std::is_same_v<T, bool>) {
      out.put(uint8_t(value));
    } else if constexpr (std::is_same_v<T, size_t>) {
      out.put(uint64_t(value));
    } else {
      out.put(value);
    }
  }
};

struct Decoder {
  ByteReader in;
  template <typename T>
  void operator()(const char*, T& value) {
    if constexpr (std::is_same_v<T, std::string>) {
      value = in.str();
    } else if constexpr (std::is_same_v<T, bool>) {
      value = in.get<uint8_t>() != 0;
    } else if constexpr (std::is_same_v<T, size_t>) {
      value = size_t(in.get<uint64_t>());
    } else {
      value = in.get<T>();
    }
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
  encoder.out.put(kVersion);
  forEachJobSetting(config, encoder);
  return std::move(encoder.out.data);
}

RuntimeConfig adoptJobSettings(const RuntimeConfig& mine, const std::vector<uint8_t>& encoded,
                               std::vector<std::string>& differences) {
  Decoder decoder{ByteReader(encoded, "job settings from rank 0")};
  const auto version = decoder.in.get<uint8_t>();
  CERAR_ENFORCE(version == kVersion, "job settings from rank 0: version ", int(version),
                ", this rank speaks ", int(kVersion), " (mixed cerar builds?)");
  RuntimeConfig job = mine;
  forEachJobSetting(job, decoder);
  decoder.in.finish();
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
      out.push_back({std::move(one.out.data), show(value)});
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
