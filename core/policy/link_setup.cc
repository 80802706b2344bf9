#include "core/policy/link_setup.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "core/policy/link_probe.h"
#include "ops/paced_link.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

// The measured curves for the log: "cerar|ring|fp16 [bytes: us, ...]".
std::string roundsText(const LinkModel& link) {
  std::string text;
  const std::pair<const char*, const std::vector<LinkModel::RoundPoint>*> curves[] = {
      {"cerar", &link.rounds}, {"ring", &link.ringRounds}, {"fp16 ring", &link.wireRounds}};
  for (const auto& [name, points] : curves) {
    if (points->empty()) continue;  // not probed
    text += detail::concat(text.empty() ? "" : "; ", name, " us per round");
    for (const auto& point : *points)
      text += detail::concat(" ", point.bytes / 1024, "K:", point.seconds * 1e6);
  }
  return text;
}

}  // namespace

LinkSetup setUpLink(Transport& transport, const RuntimeConfig& config, const Logger& logger) {
  LinkSetup setup;
  LinkModel& link = setup.link;
  double probeSeconds = 0, ownRounds = 0;
  if (config.measureLink) {
    const auto start = Clock::now();
    // The 16-bit wires are chosen only within an error budget: their curve only then.
    link = probeLink(transport, &ownRounds, config.maxError > 0);
    probeSeconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  if (const auto& figures = config.linkFigures) {  // a test's figures decide alone
    const double window = link.windowBytes;
    const bool cpuBound = link.cpuBound;
    link = LinkModel{(*figures)[0], (*figures)[1], (*figures)[2]};
    link.windowBytes = window;
    link.cpuBound = cpuBound;
    if (const auto& compute = config.computeFigures) {
      link.gammaRing = (*compute)[0];
      link.gammaWire = (*compute)[1];
    }
  }
  // The model charges rounds by the segments the executor will stream.
  setup.pacing = pacingFor(size_t(link.windowBytes), link.cpuBound);
  link.segmentBytes = double(setup.pacing.segmentBytes);
  logger.log(LogLevel::kInfo, detail::concat("link model: alpha ", link.alpha * 1e6,
                                             " us, beta ", link.beta * 1e9, " ns/B, gamma ",
                                             link.gamma * 1e9, " ns/B, 16-bit wire ",
                                             link.gammaWire * 1e9, " ns/B, send window ",
                                             link.windowBytes / 1024, " KiB, ",
                                             link.cpuBound ? "CPU-bound" : "queue-bound"));
  logger.log(LogLevel::kInfo, detail::concat("link probe: ", probeSeconds * 1e3, " ms, of which ",
                                             ownRounds * 1e3, " ms the rings' own rounds; ",
                                             roundsText(link)));
  return setup;
}

void recordLink(RuntimeStats& stats, const LinkModel& link, const RuntimeConfig& config,
                bool hostStep) {
  stats.link = {config.measureLink && !config.linkFigures, link.alpha, link.beta};
  stats.linkCpuBound = link.cpuBound;
  stats.linkWindowBytes = uint64_t(link.windowBytes);
  stats.hostStep = hostStep;
  stats.hostLink = hostStep ? LinkFigures{config.measureLink, link.localAlpha, link.localBeta}
                            : LinkFigures{};
}

}  // namespace cerar
