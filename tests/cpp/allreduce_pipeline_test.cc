// runPipeline over a fake memory that records its calls: the steps' order, the buffer it asks
// for (or the direct output), identities for a joined rank's share, the debug copies, the phases.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/execution/allreduce_pipeline.h"

namespace cerar {
namespace {

class RecordingMemory : public PipelineMemory {
 public:
  std::vector<std::string> calls;
  std::vector<std::byte> fusion;
  std::vector<const std::byte*> seen;  // the buffer each call was given

  std::byte* buffer(size_t bytes) override {
    calls.push_back("buffer " + std::to_string(bytes));
    fusion.resize(bytes);
    return fusion.data();
  }
  void pack(const std::vector<PipelinePart>& parts, std::byte* buffer,
            const PipelineJob&) override {
    calls.push_back("pack " + std::to_string(parts.size()));
    seen.push_back(buffer);
  }
  void fillIdentity(const PipelineJob&, std::byte* at, size_t elements) override {
    calls.push_back("identity " + std::to_string(elements));
    seen.push_back(at);
  }
  void toHost(std::byte*, const std::byte* buffer, size_t bytes) override {
    calls.push_back("toHost " + std::to_string(bytes));
    seen.push_back(buffer);
  }
  RunStats reduce(std::byte* buffer, const PipelineJob& job) override {
    calls.push_back("reduce " + std::to_string(job.total));
    seen.push_back(buffer);
    RunStats run;
    run.rounds = 7;
    return run;
  }
  void unpack(const std::vector<PipelinePart>& parts, std::byte* buffer,
              const PipelineJob&) override {
    calls.push_back("unpack " + std::to_string(parts.size()));
    seen.push_back(buffer);
  }
};

TEST(AllreducePipeline, PacksReducesUnpacksInOrderWithPhases) {
  RecordingMemory memory;
  float a[4] = {}, b[6] = {};
  std::vector<PipelinePart> parts(2);
  parts[0].in = a, parts[0].out = a, parts[0].offset = 0, parts[0].elements = 4;
  parts[1].in = b, parts[1].out = b, parts[1].offset = 4, parts[1].elements = 6;
  PipelineJob job;
  job.total = 10;
  std::vector<std::string> phases;
  const RunStats run = runPipeline(memory, parts, job, [&](const char* p) { phases.push_back(p); });
  EXPECT_EQ(memory.calls,
            (std::vector<std::string>{"buffer 40", "pack 2", "reduce 10", "unpack 2"}));
  EXPECT_EQ(phases, (std::vector<std::string>{"pack", "reduce"}));
  EXPECT_EQ(run.rounds, 7);  // the reduction's own figures come back
  for (const std::byte* at : memory.seen) EXPECT_EQ(at, memory.fusion.data());
}

TEST(AllreducePipeline, AJoinedSharesIdentityAndTheDebugCopies) {
  RecordingMemory memory;
  double x[3] = {};
  std::vector<PipelinePart> parts(2);
  parts[0].in = x, parts[0].out = x, parts[0].offset = 0, parts[0].elements = 3;
  parts[1].in = nullptr, parts[1].offset = 3, parts[1].elements = 5;  // a joined rank's share
  std::vector<std::byte> input(64), result(64);
  PipelineJob job;
  job.dtype = DType::kFloat64;
  job.total = 8;
  job.input = input.data();
  job.result = result.data();
  runPipeline(memory, parts, job);
  EXPECT_EQ(memory.calls, (std::vector<std::string>{"buffer 64", "pack 2", "identity 5",
                                                    "toHost 64", "reduce 8", "toHost 64",
                                                    "unpack 2"}));
  EXPECT_EQ(memory.seen[1], memory.fusion.data() + 3 * sizeof(double));  // the share's place
}

TEST(AllreducePipeline, ADirectJobReducesInItsOutputWithoutAFusionBuffer) {
  RecordingMemory memory;
  float only[5] = {};
  std::vector<PipelinePart> parts(1);
  parts[0].in = only, parts[0].out = only, parts[0].elements = 5;
  PipelineJob job;
  job.total = 5;
  job.direct = only;
  runPipeline(memory, parts, job);
  EXPECT_EQ(memory.calls, (std::vector<std::string>{"pack 1", "reduce 5", "unpack 1"}));
  for (const std::byte* at : memory.seen) EXPECT_EQ(at, reinterpret_cast<std::byte*>(only));
}

}  // namespace
}  // namespace cerar
