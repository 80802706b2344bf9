// The timeline's file (core/execution/timeline.h): Horovod's activity names and layout, events nested by
// time, cycle marks when asked, valid JSON after stop() and after each flush(); and a 2-rank
// runtime's file, written by rank 0 alone for a path without "{rank}".
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "core/config/settings.h"
#include "core/execution/timeline.h"
#include "host_device_ops.h"
#include "ops/transport/inproc.h"
#include "runtime_scenarios.h"
#include "variables.h"

namespace cerar {
namespace {

using Clock = Timeline::Clock;
using testing::Json;
using namespace std::chrono_literals;

Json readJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return testing::JsonParser(text.str()).parse();
}

std::string tempPath(const std::string& name) {
  return ::testing::TempDir() + "cerar_timeline_" + std::to_string(getpid()) + "_" + name;
}

Description describe(Kind kind, Op op = Op::kSum) {
  Description d;
  d.kind = kind;
  d.op = op;
  return d;
}

// The events of one file: the tensor of each row ("pid"), and the complete events by row.
struct Parsed {
  std::map<int, std::string> rowNames;
  std::map<std::string, std::vector<const Json*>> byTensor;
  std::vector<const Json*> marks;
  Json doc;
};

Parsed parse(const std::string& path) {
  Parsed p;
  p.doc = readJson(path);
  EXPECT_EQ(p.doc.type, Json::kArray);
  for (const Json& e : p.doc.items) {
    const std::string ph = e.field("ph")->text;
    if (ph == "M" && e.field("name")->text == "process_name") {
      p.rowNames[int(e.field("pid")->number)] = e.field("args")->field("name")->text;
    } else if (ph == "X") {
      p.byTensor[p.rowNames.at(int(e.field("pid")->number))].push_back(&e);
    } else if (ph == "i") {
      p.marks.push_back(&e);
    }
  }
  return p;
}

const Json* find(const std::vector<const Json*>& events, const std::string& name) {
  for (const Json* e : events) {
    if (e->field("name")->text == name) return e;
  }
  return nullptr;
}

// `inner` lies within `outer` on the trace's microsecond grid.
bool contains(const Json& outer, const Json& inner) {
  const double start = outer.field("ts")->number, end = start + outer.field("dur")->number;
  const double s = inner.field("ts")->number, e = s + inner.field("dur")->number;
  return start <= s && e <= end;
}

TEST(Timeline, ActivitiesHaveHorovodsNames) {
  EXPECT_EQ(operationActivity(describe(Kind::kAllreduce)), "ALLREDUCE");
  EXPECT_EQ(operationActivity(describe(Kind::kAllreduce, Op::kAdasum)), "ADASUM");
  EXPECT_EQ(negotiateActivity(describe(Kind::kAllreduce)), "NEGOTIATE_ALLREDUCE");
  EXPECT_EQ(negotiateActivity(describe(Kind::kAllgather)), "NEGOTIATE_ALLGATHER");
  EXPECT_EQ(negotiateActivity(describe(Kind::kBroadcast)), "NEGOTIATE_BROADCAST");
  EXPECT_EQ(negotiateActivity(describe(Kind::kReducescatter)), "NEGOTIATE_REDUCESCATTER");
  EXPECT_EQ(negotiateActivity(describe(Kind::kAlltoall)), "NEGOTIATE_ALLTOALL");
  EXPECT_EQ(operationActivity(describe(Kind::kBarrier)), "BARRIER");
  EXPECT_EQ(collectiveActivity("ring", describe(Kind::kAllreduce)), "RING_ALLREDUCE");
  EXPECT_EQ(collectiveActivity("cerar", describe(Kind::kAllreduce)), "CERAR_ALLREDUCE");
  EXPECT_EQ(collectiveActivity("chain", describe(Kind::kBroadcast)), "CHAIN_BROADCAST");
  EXPECT_EQ(tensorRow(describe(Kind::kAllreduce), "grad.w"), "allreduce.grad.w");
  EXPECT_EQ(tensorRow(describe(Kind::kAllreduce), "allreduce.noname.3"), "allreduce.noname.3");
  EXPECT_EQ(tensorRow(describe(Kind::kBroadcast), "allreduce.noname.3"),
            "broadcast.allreduce.noname.3");
  EXPECT_STREQ(kMemcpyInActivity, "MEMCPY_IN_FUSION_BUFFER");
  EXPECT_STREQ(kMemcpyOutActivity, "MEMCPY_OUT_FUSION_BUFFER");
}

// Events' args are built member by member: each value typed, strings escaped, so that the
// object is JSON whatever a name holds.
TEST(Timeline, JsonObjectEscapesAndTypesItsMembers) {
  EXPECT_EQ(JsonObject().str(), "{}");
  const std::string awkward = std::string("q\"b\\n\nt\tc\x01\x1f/\x7f") + '\0' + "end";
  JsonObject args;
  args.add("text", awkward)
      .add("literal", "ring")
      .add("flag", true)
      .add("off", false)
      .add("count", size_t(7))
      .add("negative", int32_t(-3))
      .add("eps", 0.001)
      .add("tiny", 1.25e-07)
      .add("nan", std::nan(""))
      .add("inf", -HUGE_VAL)
      .add("nested", JsonObject().add("k\"ey", 1))
      .merge(JsonObject().add("after", "merge"))
      .merge(JsonObject());
  EXPECT_EQ(args.str(),
            "{\"text\": \"q\\\"b\\\\n\\u000at\\u0009c\\u0001\\u001f/\x7f\\u0000end\", "
            "\"literal\": \"ring\", \"flag\": true, \"off\": false, \"count\": 7, "
            "\"negative\": -3, \"eps\": 0.001, \"tiny\": 1.25e-07, \"nan\": \"nan\", "
            "\"inf\": \"-inf\", \"nested\": {\"k\\\"ey\": 1}, \"after\": \"merge\"}");
  const Json parsed = testing::JsonParser(args.str()).parse();
  ASSERT_EQ(parsed.type, Json::kObject);
  EXPECT_EQ(parsed.field("text")->text, awkward);
  EXPECT_TRUE(parsed.field("flag")->boolean);
  EXPECT_EQ(parsed.field("count")->number, 7);
  EXPECT_EQ(parsed.field("tiny")->number, 1.25e-07);
  EXPECT_EQ(parsed.field("nested")->field("k\"ey")->number, 1);
  EXPECT_EQ(parsed.fields.size(), 12u);
}

TEST(Timeline, RowsPerTensorNestedEventsAndCycleMarks) {
  const std::string path = tempPath("layout.json");
  {
    Timeline timeline(3);
    timeline.start(path, /*markCycles=*/true);
    timeline.markCycle();
    const auto t0 = Clock::now();
    const auto t = [&](int us) { return t0 + std::chrono::microseconds(us); };
    timeline.record("grad \"a\"", "NEGOTIATE_ALLREDUCE", t(0), t(10));
    timeline.record("grad \"a\"", kMemcpyInActivity, t(12), t(15));
    timeline.record("grad \"a\"", "RING_ALLREDUCE", t(15), t(40));
    timeline.record("grad \"a\"", kMemcpyOutActivity, t(40), t(41));
    timeline.record("grad \"a\"", "ALLREDUCE", t(10), t(41), JsonObject().add("algorithm", "ring"));
    timeline.record("b", "NEGOTIATE_BROADCAST", t(0), t(5));
    timeline.markCycle();
  }  // the destructor stops it
  const Parsed p = parse(path);
  // Row 0 names the rank; then one row per tensor, in order of appearance.
  EXPECT_EQ(p.rowNames.at(0), "rank 3");
  EXPECT_EQ(p.rowNames.at(1), "grad \"a\"");
  EXPECT_EQ(p.rowNames.at(2), "b");
  const auto& a = p.byTensor.at("grad \"a\"");
  ASSERT_EQ(a.size(), 5u);
  const Json* op = find(a, "ALLREDUCE");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->field("args")->field("algorithm")->text, "ring");
  for (const char* inner : {kMemcpyInActivity, "RING_ALLREDUCE", kMemcpyOutActivity}) {
    EXPECT_TRUE(contains(*op, *find(a, inner))) << inner;
  }
  EXPECT_FALSE(contains(*op, *find(a, "NEGOTIATE_ALLREDUCE")));
  ASSERT_EQ(p.marks.size(), 2u);
  EXPECT_EQ(p.marks[0]->field("name")->text, "CYCLE_START");
  EXPECT_EQ(p.marks[0]->field("s")->text, "g");
}

TEST(Timeline, NoCycleMarksUnlessAsked) {
  const std::string path = tempPath("nomarks.json");
  Timeline timeline(0);
  timeline.start(path);
  timeline.markCycle();
  timeline.record("x", "ALLREDUCE", Clock::now(), Clock::now());
  timeline.stop();
  const Parsed p = parse(path);
  EXPECT_TRUE(p.marks.empty());
  EXPECT_EQ(p.byTensor.at("x").size(), 1u);
}

TEST(Timeline, ValidJsonFromStartAtEachFlushAndAfterStop) {
  const std::string path = tempPath("flush.json");
  Timeline timeline(0);
  timeline.start(path, true);
  EXPECT_TRUE(parse(path).byTensor.empty());  // the header alone, a complete array
  timeline.record("x", "ALLREDUCE", Clock::now(), Clock::now());
  timeline.flush();  // too soon after the last write: held back
  EXPECT_EQ(parse(path).byTensor.count("x"), 0u);
  std::this_thread::sleep_for(Timeline::kFlushInterval + 10ms);
  timeline.flush();
  EXPECT_EQ(parse(path).byTensor.at("x").size(), 1u);  // while it runs
  // More than kPendingBytes between two flushes (each event holds the name): written at once,
  // still a complete array.
  const std::string longName(200, 'n');
  size_t events = 0;
  for (size_t bytes = 0; bytes <= Timeline::kPendingBytes; bytes += longName.size()) {
    timeline.record(longName, "ALLREDUCE", Clock::now(), Clock::now());
    ++events;
  }
  const size_t written = parse(path).byTensor.at(longName).size();
  EXPECT_GT(written, 0u);
  EXPECT_LE(written, events);
  timeline.record("x", "ALLREDUCE", Clock::now(), Clock::now());
  timeline.markCycle();
  timeline.stop();
  const Parsed p = parse(path);
  EXPECT_EQ(p.byTensor.at("x").size(), 2u);
  EXPECT_EQ(p.byTensor.at(longName).size(), events);
  EXPECT_EQ(p.marks.size(), 1u);
  // A stopped timeline writes nothing more.
  timeline.record("y", "ALLREDUCE", Clock::now(), Clock::now());
  timeline.flush();
  EXPECT_EQ(parse(path).byTensor.count("y"), 0u);
}

TEST(Timeline, AnUnwritablePathIsAClearError) {
  Timeline timeline(2);
  try {
    timeline.start("/nonexistent-dir/t.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2: cannot write the timeline"),
              std::string::npos);
  }
  EXPECT_FALSE(timeline.active());
}

TEST(Timeline, MarkCyclesSettingAndItsHorovodAlias) {
  testing::Variables horovod{{"HOROVOD_TIMELINE_MARK_CYCLES", "1"}};
  RuntimeConfig config;
  readSettings(Env(testing::lookupIn(horovod)), config);
  EXPECT_TRUE(config.timelineMarkCycles);
  testing::Variables both{{"HOROVOD_TIMELINE_MARK_CYCLES", "1"},
                          {"CERAR_TIMELINE_MARK_CYCLES", "0"}};
  RuntimeConfig second;
  const auto warnings = readSettings(Env(testing::lookupIn(both)), second);
  EXPECT_FALSE(second.timelineMarkCycles);  // the CERAR_ one wins, with a warning
  EXPECT_EQ(warnings.size(), 1u);
}

// Two ranks in threads (their device faked in host memory, or none) run `work`, recording to
// `path`.
void runTwoRanks(const std::string& path, bool fakeDevice,
                 const std::function<void(Runtime&)>& work) {
  std::filesystem::remove(path);
  InprocHub hub(2, 20s);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2);
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        RuntimeConfig config = scenarios::testConfig();
        if (fakeDevice) {
          config.deviceOps = testing::hostDeviceOps(std::make_shared<testing::FakeDeviceLog>());
        }
        auto rt = Runtime::startWith(config, hub.connect(rank));
        rt->startTimeline(path, /*markCycles=*/true);
        work(*rt);
        rt->shutdown();
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors, std::vector<std::string>(2));
}

// A path without "{rank}": rank 0's file alone, with the ranks' readiness ticks, every activity
// of a named all-reduce nested in its operation, and cycle marks.
TEST(Timeline, RuntimeWritesRankZerosFileInHorovodsLayout) {
  const std::string path = tempPath("runtime.json");
  runTwoRanks(path, false, [](Runtime& rt) {
    std::vector<float> v(64, 1.0f);
    rt.allreduce("grad/w", scenarios::f32(v), scenarios::f32(v), Op::kSum).wait();
  });
  const Parsed p = parse(path);
  EXPECT_EQ(p.rowNames.at(0), "rank 0");
  const auto& w = p.byTensor.at("allreduce.grad/w");
  ASSERT_NE(find(w, "NEGOTIATE_ALLREDUCE"), nullptr);
  const Json* op = find(w, "ALLREDUCE");
  ASSERT_NE(op, nullptr);
  EXPECT_NE(op->field("args")->field("algorithm"), nullptr);
  // Each rank's readiness tick, on the coordinator rank's file.
  ASSERT_NE(find(w, "0"), nullptr);
  ASSERT_NE(find(w, "1"), nullptr);
  EXPECT_EQ(find(w, "1")->field("dur")->number, 0);
  for (const Json* e : w) {
    const std::string name = e->field("name")->text;
    if (name != "ALLREDUCE" && name != "NEGOTIATE_ALLREDUCE" && name != "0" && name != "1") {
      EXPECT_TRUE(contains(*op, *e)) << name;
    }
  }
  EXPECT_NE(find(w, kMemcpyInActivity), nullptr);
  EXPECT_NE(find(w, kMemcpyOutActivity), nullptr);
  EXPECT_FALSE(p.marks.empty());
}

// A device all-reduce: its collective and operation are recorded once the device is done.
TEST(Timeline, DeviceAllreduceIsRecordedAtCompletion) {
  const std::string path = tempPath("device.json");
  runTwoRanks(path, true, [](Runtime& rt) {
    std::vector<float> v(64, 1.0f);
    Tensor t = scenarios::f32(v);
    t.device = 0;
    rt.allreduce("grad/d", t, t, Op::kSum).wait();
  });
  const Parsed p = parse(path);
  const auto& d = p.byTensor.at("allreduce.grad/d");
  const Json* op = find(d, "ALLREDUCE");
  ASSERT_NE(op, nullptr);
  EXPECT_TRUE(op->field("args")->field("device")->boolean);
  const std::string algorithm = op->field("args")->field("algorithm")->text;
  const Json* collective = find(d, collectiveActivity(algorithm, describe(Kind::kAllreduce)));
  ASSERT_NE(collective, nullptr) << algorithm;
  EXPECT_TRUE(contains(*op, *collective));
}

}  // namespace
}  // namespace cerar
