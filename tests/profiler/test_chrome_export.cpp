// Chrome trace export of a recorded run: valid JSON (nlohmann), HTA's distributedInfo,
// one process per rank with thread-name metadata, X events that nest per thread; and on a
// GPU run (fake CUPTI source) what Holistic Trace Analysis reads from Kineto files
// (hta/common/trace_file.py, trace_parser.py, trace.py, trace_filter.py, utils.py): the rank
// regex, kernels with args stream > 0 and correlation >= 0 paired with a cuda_runtime launch
// of the same correlation, "External id", NCCL kernel names, ProfilerStep#N iterations, and
// one file per rank from --per-rank.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "fake_gpu.hpp"
#include "test_util.hpp"
#include "testdata/synthetic_trace.hpp"
#include "ulysses/profiler/chrome_export.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ut;

namespace {
// X events of each pid/tid nest (Chrome, Perfetto and HTA's call stacks need it) and every
// pid/tid has thread_name metadata. Returns the number of X events; *pids their pids.
size_t check_x_events_nest(const nlohmann::json& j, std::set<int>* pids) {
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> per_thread;
  std::set<std::pair<int, int>> named;
  size_t x = 0;
  for (const auto& e : j["traceEvents"]) {
    int pid = e["pid"], tid = e["tid"];
    if (e["ph"] == "M" && e["name"] == "thread_name") named.insert({pid, tid});
    if (e["ph"] != "X") continue;
    ++x;
    pids->insert(pid);
    // ts/dur are microseconds with 3 decimals: back to integer ns.
    auto ns = [](const nlohmann::json& v) { return static_cast<int64_t>(std::llround(v.get<double>() * 1000.0)); };
    per_thread[{pid, tid}].push_back({ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])});
  }
  for (auto& [key, v] : per_thread) {
    EXPECT_TRUE(named.count(key)) << "thread without thread_name metadata";
    std::sort(v.begin(), v.end(),
              [](auto& a, auto& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<int64_t> ends;
    for (const auto& [s, e] : v) {
      while (!ends.empty() && ends.back() <= s) ends.pop_back();
      if (!ends.empty()) {
        EXPECT_LE(e, ends.back()) << "X events overlap without nesting on pid/tid " << key.first << "/" << key.second;
      }
      ends.push_back(e);
    }
  }
  return x;
}
}  // namespace

TEST(ChromeExport, ValidJsonWithDistributedInfoAndNestedXEvents) {
  TempDir tmp;
  record_run(tmp.path);
  auto m = prof::load_trace(tmp.path);
  std::string out = tmp.path + "/trace.json";
  prof::export_chrome_trace(m, out);

  std::ifstream f(out);
  nlohmann::json j = nlohmann::json::parse(f);  // throws on invalid JSON
  EXPECT_EQ(j["distributedInfo"]["world_size"], 2);
  EXPECT_EQ(j["distributedInfo"]["rank"], 0);
  ASSERT_TRUE(j["traceEvents"].is_array());

  std::set<int> pids;
  EXPECT_EQ(check_x_events_nest(j, &pids), m.ranges.size());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  // A single-rank export (HTA reads one file per rank) names that rank.
  prof::ChromeExportOptions o;
  o.rank = 1;
  std::string out1 = tmp.path + "/rank1.json";
  prof::export_chrome_trace(m, out1, o);
  std::ifstream f1(out1);
  auto j1 = nlohmann::json::parse(f1);
  EXPECT_EQ(j1["distributedInfo"]["rank"], 1);
  for (const auto& e : j1["traceEvents"]) EXPECT_EQ(e["pid"], 1);
  // One rank's file alone (rank1.sqlite of a 2-rank run), with and without --rank: the run's
  // world and that rank, its groups holding it (it said rank 0 of a world of 1, beside pid 1).
  ASSERT_TRUE(fs::exists(tmp.path + "/trace/rank1.sqlite"));
  const auto one = prof::load_trace(tmp.path + "/trace/rank1.sqlite");
  for (const int32_t rank : {-1, 1}) {
    prof::ChromeExportOptions oo;
    oo.rank = rank;
    const std::string path = tmp.path + "/one" + std::to_string(rank) + ".json";
    prof::export_chrome_trace(one, path, oo);
    std::ifstream in(path);
    const auto j2 = nlohmann::json::parse(in);
    const auto& di = j2["distributedInfo"];
    EXPECT_EQ(di["rank"], 1) << rank;
    EXPECT_EQ(di["world_size"], m.sp_size * m.dp_size) << rank;
    ASSERT_FALSE(di["pg_config"].empty()) << rank;
    for (const auto& g : di["pg_config"]) {
      const auto r = g["ranks"].get<std::vector<int>>();
      EXPECT_NE(std::find(r.begin(), r.end(), 1), r.end()) << g.dump();
    }
  }
}

namespace {

int run_cli(const std::string& args) {
#ifdef ULYSSES_TRACE_BIN
  int st = std::system((std::string(ULYSSES_TRACE_BIN) + " " + args + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
#else
  (void)args;
  return -2;
#endif
}

// Two GPU ranks (SP group of 2), one step: a traced attention range launching a flash kernel,
// an all-to-all issued under ScopedCorrelation launching an NCCL kernel, its comm range.
void record_gpu_run(const std::string& run) {
  fs::create_directories(fs::path(run) / "trace");
  for (int r = 0; r < 2; ++r) {
    FakeCupti* fake = nullptr;
    auto o = options_for((fs::path(run) / "trace" / ("rank" + std::to_string(r) + ".sqlite")).string(), r, 2);
    o.device = "cuda:" + std::to_string(r);
    o.gpu_source = fake_cupti_factory(&fake);
    auto t = prof::Tracer::open(o);
    if (!fake) throw std::runtime_error("GPU source did not start (NSYS/CUDA injection variables set?)");
    t->begin_step(0);
    {
      prof::ScopedRange st(t.get(), {prof::Phase::Step});
      {
        ULYSSES_RANGE(t.get(), prof::Phase::Attention, prof::Direction::Forward, 0, 4 * r, 4 * r + 4);
        const int64_t now = prof::Tracer::now_ns();  // kernels run after their launch
        fake->launch("flash_fwd_kernel", now + 10000, now + 50000, 7);
        spin_ns(5000);
      }
      const prof::RangeInfo a2a{prof::Phase::A2AHeadToSeq, prof::Direction::Forward, 0, 4 * r, 4 * r + 4, -1, 512, 512};
      const int64_t c0 = prof::Tracer::now_ns();
      {
        prof::ScopedCorrelation c(t.get(), a2a);
        fake->launch("ncclDevKernel_SendRecv", c0 + 40000, c0 + 90000, 13);
      }
      spin_ns(100000);
      t->record_range(a2a, c0, prof::Tracer::now_ns());
    }
    t->end_step(prof::StepRecord{0});
  }
}

}  // namespace

TEST(ChromeExport, PerRankKinetoFilesHaveWhatHolisticTraceAnalysisReads) {
  unsetenv("NSYS_PROFILING_SESSION_ID");
  unsetenv("CUDA_INJECTION64_PATH");
  TempDir tmp;
  record_gpu_run(tmp.path);
  auto m = prof::load_trace(tmp.path);
  const std::string dir = tmp.path + "/hta";
  auto files = prof::export_chrome_trace_per_rank(m, dir);
  ASSERT_EQ(files.size(), 2u);
  const std::regex hta_rank(R"xx("rank":\s+(\d+))xx");                            // hta/common/trace_file.py
  const std::regex hta_comm(R"xx((^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*))xx");  // CommunicateKernelGroupingPattern
  for (int r = 0; r < 2; ++r) {
    const std::string path = dir + "/rank" + std::to_string(r) + ".json";
    ASSERT_TRUE(fs::exists(path)) << path;
    {  // HTA reads the rank from the first line that matches its regex
      std::ifstream f(path);
      std::string line;
      int found = -1;
      while (found < 0 && std::getline(f, line)) {
        std::smatch mt;
        if (std::regex_search(line, mt, hta_rank)) found = std::stoi(mt[1].str());
      }
      EXPECT_EQ(found, r);
    }
    std::ifstream f(path);
    auto j = nlohmann::json::parse(f);
    std::set<int> pids;
    EXPECT_GT(check_x_events_nest(j, &pids), 0u);
    if (getenv("ULYSSES_KEEP_HTA_SAMPLE"))
      fs::copy_file(path, std::string(getenv("ULYSSES_KEEP_HTA_SAMPLE")) + std::to_string(r) + ".json",
                    fs::copy_options::overwrite_existing);
    const auto& di = j["distributedInfo"];
    EXPECT_EQ(di["rank"], r);
    EXPECT_EQ(di["world_size"], 2);
    EXPECT_EQ(di["backend"], "nccl");
    ASSERT_TRUE(di["pg_config"].is_array());
    EXPECT_EQ(di["pg_count"], di["pg_config"].size());
    bool has_world = false;
    for (const auto& pg : di["pg_config"]) {
      EXPECT_TRUE(pg.contains("pg_name") && pg.contains("pg_desc") && pg.contains("backend_config"));
      has_world |= pg["ranks"] == nlohmann::json::array({0, 1}) && pg["pg_size"] == 2;
    }
    EXPECT_TRUE(has_world);

    std::vector<nlohmann::json> kernels, launches, annotations;
    for (const auto& e : j["traceEvents"]) {
      EXPECT_EQ(e["pid"], r);
      if (e["ph"] != "X") continue;
      if (e["cat"] == "kernel")
        kernels.push_back(e);
      else if (e["cat"] == "cuda_runtime")
        launches.push_back(e);
      else if (e["cat"] == "user_annotation") {
        annotations.push_back(e);
        EXPECT_FALSE(e["args"].contains("stream")) << "host events must read as stream -1 in HTA";
      }
    }
    ASSERT_EQ(kernels.size(), 2u);
    ASSERT_EQ(launches.size(), 2u);
    const nlohmann::json* step = nullptr;
    const nlohmann::json* attention = nullptr;
    for (const auto& a : annotations) {
      if (a["name"] == "ProfilerStep#0") step = &a;
      if (a["name"] == "attention") attention = &a;
    }
    ASSERT_NE(step, nullptr) << "HTA finds iterations by ProfilerStep#N";
    ASSERT_NE(attention, nullptr);
    for (const auto& k : kernels) {
      const auto& args = k["args"];
      ASSERT_TRUE(args["stream"].is_number_integer());
      EXPECT_GT(args["stream"].get<int64_t>(), 0);  // HTA: GPU kernels have stream > 0
      ASSERT_TRUE(args["correlation"].is_number_integer());
      EXPECT_GE(args["correlation"].get<int64_t>(), 0);
      ASSERT_TRUE(args.contains("External id"));
      // HTA's index_correlation: the cuda_runtime launch with the same correlation id.
      const nlohmann::json* launch = nullptr;
      for (const auto& l : launches)
        if (l["args"]["correlation"] == args["correlation"]) launch = &l;
      ASSERT_NE(launch, nullptr) << k.dump();
      EXPECT_EQ((*launch)["args"]["External id"], args["External id"]);
      const double ts = (*launch)["ts"].get<double>(), s0 = (*step)["ts"].get<double>();
      EXPECT_TRUE(s0 <= ts && ts < s0 + (*step)["dur"].get<double>()) << "launch inside ProfilerStep#0";
      const std::string name = k["name"];
      const bool comm = std::regex_search(name, hta_comm);
      EXPECT_EQ(comm, name == "ncclDevKernel_SendRecv") << name;
      if (name == "flash_fwd_kernel") {
        EXPECT_EQ(args["External id"], (*attention)["args"]["External id"]) << "kernel -> the range that launched it";
        EXPECT_EQ(args["layer"], 0);
        EXPECT_EQ(args["head_begin"], 4 * r);
      } else {
        EXPECT_EQ(args["phase"], "a2a_head_to_seq");
      }
    }
  }
  // The command line writes the same folder; --per-rank with --rank is a usage error.
#ifdef ULYSSES_TRACE_BIN
  const std::string cli_dir = tmp.path + "/cli";
  EXPECT_EQ(run_cli("export --format chrome --per-rank '" + tmp.path + "' '" + cli_dir + "'"), 0);
  EXPECT_TRUE(fs::exists(cli_dir + "/rank0.json"));
  EXPECT_TRUE(fs::exists(cli_dir + "/rank1.json"));
  EXPECT_EQ(run_cli("export --format chrome --per-rank --rank 1 '" + tmp.path + "' '" + cli_dir + "'"), 2);
#endif
}

// An exported run read back as PyTorch profiler JSON (what HTA reads) gives the same breakdown:
// the "heads a-b" display copies are skipped (attention counted twice), and ranges keep their
// phase, step, layer and bytes from args (every all-to-all was read as compute).
TEST(ChromeExport, ReadBackGivesTheSameBreakdown) {
  TempDir tmp;
  record_run(tmp.path);
  const auto m = prof::load_trace(tmp.path);
  prof::export_chrome_trace_per_rank(m, tmp.path + "/exported", prof::ChromeExportOptions{});
  const auto back = prof::load_trace(tmp.path + "/exported");
  EXPECT_EQ(back.format, "kineto");
  const auto a = prof::analyze(m), b = prof::analyze(back);
  EXPECT_GT(a.overall.comm_ns, 0);
  EXPECT_EQ(b.overall.compute_ns, a.overall.compute_ns);
  EXPECT_EQ(b.overall.comm_ns, a.overall.comm_ns);
  EXPECT_EQ(b.overall.overlap_ns, a.overall.overlap_ns);
  EXPECT_EQ(b.num_ranges, a.num_ranges);
  EXPECT_EQ(b.headline.a2a_bytes_per_step, a.headline.a2a_bytes_per_step);
  ASSERT_EQ(b.layers.size(), a.layers.size());
  // Collective ids travel as args pg / seq: the straggler table pairs the same instances (a
  // synthetic 2-rank trace with collective ids; the recorded run above has none).
  ulysses::testdata::SyntheticOptions so;
  so.ranks = 2;
  so.heads = 8;
  so.layers = 2;
  so.head_chunks = 2;
  so.gpu = false;
  const auto syn = ulysses::testdata::make_synthetic_trace(so);
  prof::export_chrome_trace_per_rank(*syn, tmp.path + "/syn", prof::ChromeExportOptions{});
  const auto syn_back = prof::load_trace(tmp.path + "/syn");
  const auto sa = prof::analyze(*syn), sb = prof::analyze(syn_back);
  // Memory samples travel as "[memory]" events (torch.profiler's), with label, step and peak.
  ASSERT_GT(syn->memory.size(), 0u);
  ASSERT_EQ(syn_back.memory.size(), syn->memory.size());
  for (size_t i = 0; i < syn->memory.size(); ++i) {
    const auto &x = syn->memory[i], &y = syn_back.memory[i];
    EXPECT_EQ(y.rank, x.rank) << i;
    EXPECT_EQ(y.t_ns, x.t_ns) << i;
    EXPECT_EQ(y.allocated, x.allocated) << i;
    EXPECT_EQ(y.reserved, x.reserved) << i;
    EXPECT_EQ(y.peak, x.peak) << i;
    EXPECT_EQ(y.step, x.step) << i;
    EXPECT_EQ(syn_back.strings[static_cast<size_t>(y.label_id)], syn->strings[static_cast<size_t>(x.label_id)]) << i;
  }
  EXPECT_EQ(sb.headline.peak_memory_bytes, sa.headline.peak_memory_bytes);
  EXPECT_GT(sa.waiting.instances.size(), 0u);
  EXPECT_EQ(sb.waiting.instances.size(), sa.waiting.instances.size());
  EXPECT_EQ(sb.waiting.incomplete, sa.waiting.incomplete);
  EXPECT_EQ(sb.overall.comm_ns, sa.overall.comm_ns);
  std::string notes;
  for (const auto& n : back.notes) notes += n + "\n";
  if (std::any_of(m.lanes.begin(), m.lanes.end(),
                  [](const prof::Lane& l) { return l.kind == prof::LaneKind::HeadRange; })) {
    EXPECT_NE(notes.find("display copies of ranges"), std::string::npos) << notes;
  }
}
