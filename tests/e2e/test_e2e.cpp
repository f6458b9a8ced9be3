// End to end: ulysses-run starting real ulysses-worker processes. A 2-rank Ulysses run
// matches a 1-process run; its trace holds, for every rank, step, layer and direction, the
// qkv, both all-to-alls, attention and output projection, properly nested, with
// all-to-all bytes equal to the formula; bad input through the real worker exits 2.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include <sqlite3.h>

#include <chrono>
#include <thread>

#include "cost_model.hpp"
#include "run_config.hpp"
#include "run_identity.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_overview.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "common/documents_fixture.hpp"
#include "common/e2e_util.hpp"
#include "common/model_compare.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace ulysses::prof;

namespace {

using ulysses::test::json_lines;
using ulysses::test::sh;

std::string tmp(const std::string& name) { return ulysses::test::scratch_path("e2e", name); }

std::string config_file() {  // tiny GQA model at sp 2, 2 steps (tests/common/e2e_util.hpp)
  return ulysses::test::write_json(tmp("config.json"), ulysses::test::tiny_config(2, 2, ULYSSES_SOURCE_DIR));
}

const std::string kRun = ULYSSES_RUN_BIN;
const std::string kWorker = ULYSSES_WORKER_BIN;

}  // namespace

TEST(EndToEnd, TwoRanksMatchOneProcessAndTraceIsComplete) {
  const auto cfg = config_file();
  const auto out2 = tmp("sp2"), out1 = tmp("sp1");
  auto r2 = sh(kRun + " " + cfg + " --json --worker " + kWorker + " --out " + out2);
  ASSERT_EQ(r2.code, 0) << r2.out;
  auto r1 = sh(kRun + " " + cfg + " --json --set parallel.sp_size=1 --worker " + kWorker + " --out " + out1);
  ASSERT_EQ(r1.code, 0) << r1.out;
  auto m2 = json_lines(r2.out), m1 = json_lines(r1.out);
  ASSERT_EQ(m2.size(), 2u);
  ASSERT_EQ(m1.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "max_mem_bytes"})
      ASSERT_TRUE(m2[s].contains(k)) << k;
    EXPECT_NEAR(m2[s]["loss"].get<double>(), m1[s]["loss"].get<double>(), 1e-5 * m1[s]["loss"].get<double>())
        << "step " << s;
  }

  TraceModel t = load_trace(out2);
  ASSERT_EQ(t.ranks.size(), 2u);
  // Every rank file carries the run's id, the one the ranks agreed on (ulysses-run's), not the
  // folder's name: the loader leaves out a rank file of another run by it.
  std::string ids[2];
  for (int r = 0; r < 2; ++r) {
    sqlite3* db = nullptr;
    const std::string file = out2 + "/trace/rank" + std::to_string(r) + ".sqlite";
    ASSERT_EQ(sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT runId FROM ULYSSES_RUN", -1, &st, nullptr), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
      ids[r] = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_TRUE(ulysses::is_run_id(ids[0])) << "runId '" << ids[0] << "'";
  // (rank, step, layer, dir, phase) -> count, and bytes per (rank, step, layer, dir)
  std::map<std::tuple<int, int, int, int, int>, int> seen;
  std::map<std::tuple<int, int, int, int>, int64_t> bytes;
  for (const auto& lane : t.lanes) {
    if (lane.kind == LaneKind::HeadRange) continue;  // display copies
    // proper nesting within a lane: sorted by start, each range inside or after the previous
    std::vector<TraceRange> stack;  // copies: a loaded model's ranges are values
    for (int64_t i = lane.first; i < lane.first + lane.count; ++i) {
      const auto& r = t.ranges[i];
      ASSERT_LE(r.start_ns, r.end_ns);
      while (!stack.empty() && stack.back().end_ns <= r.start_ns) stack.pop_back();
      if (!stack.empty()) {
        ASSERT_LE(r.end_ns, stack.back().end_ns)
            << "range " << t.strings[r.name_id] << " crosses its parent on lane " << lane.name;
      }
      stack.push_back(r);
      if (r.layer >= 0) {
        seen[{r.rank, r.step, r.layer, static_cast<int>(r.dir), static_cast<int>(r.phase)}]++;
        if (r.phase == Phase::A2ASeqToHead || r.phase == Phase::A2AHeadToSeq)
          bytes[{r.rank, r.step, r.layer, static_cast<int>(r.dir)}] += t.extra(r).bytes_sent;
      }
    }
  }
  // Per layer and direction each rank sends q (B*N*H*dh), k and v (B*N*Hkv*dh each) and the
  // output (B*N*H*dh), each (P-1)/P^2 of it to other ranks, fp32:
  // (2*4 + 2*2) * 8 * 64 * (2-1) / 2^2 * 4 bytes = 6144 bytes.
  const int64_t want = (2 * 4 + 2 * 2) * 8 * 64 * 1 / 4 * 4;
  for (int rank = 0; rank < 2; ++rank)
    for (int step = 0; step < 2; ++step)
      for (int layer = 0; layer < 2; ++layer)
        for (Direction d : {Direction::Forward, Direction::Backward}) {
          for (Phase p : {Phase::QkvProj, Phase::A2ASeqToHead, Phase::Attention, Phase::A2AHeadToSeq, Phase::OutProj})
            EXPECT_GE((seen[{rank, step, layer, static_cast<int>(d), static_cast<int>(p)}]), 1)
                << "rank " << rank << " step " << step << " layer " << layer << " " << direction_name(d) << " "
                << phase_name(p);
          EXPECT_EQ((bytes[{rank, step, layer, static_cast<int>(d)}]), want)
              << "rank " << rank << " layer " << layer << " " << direction_name(d);
        }
  ASSERT_EQ(t.steps.size(), 4u);  // 2 ranks x 2 steps
  EXPECT_FALSE(t.memory.empty());
  // The finished run left its summary and the studio's overview beside the trace, valid for
  // the files as they are (the studio and ulysses-trace open it without reading every range).
  const auto ov = ulysses::prof::read_overview_cache(ulysses::prof::probe_overview_cache(out2, {}), out2);
  ASSERT_TRUE(ov);
  EXPECT_EQ(ov->full_ranges, int64_t(t.ranges.size()));
  EXPECT_TRUE(ulysses::prof::read_summary_cache(out2, {}, {}));
  // ... and each rank file's rank-file cache, which a load reads instead of the SQLite rows,
  // giving the same model.
  ulysses::prof::LoadOptions::Stats st;
  ulysses::prof::LoadOptions from_caches;
  from_caches.stats = &st;
  const auto cached = ulysses::prof::load_trace(out2, from_caches);
  EXPECT_EQ(st.from_file_cache, 2);
  ulysses::prof::LoadOptions rows;
  rows.file_caches = false;
  const auto fresh = ulysses::prof::load_trace(out2, rows);
  ulysses::test::expect_same_model(fresh, cached);
  fs::remove_all(fs::path(out2).parent_path());
}

// The cost model's communication per step (what the launcher's estimate and the explainer
// teach) against what a real traced run measures, config by config: an explicit head_dim
// (Qwen3: q is heads x head_dim, not hidden_size), gradient accumulation (each micro-batch
// exchanges), bf16 (the gradient all-reduce stays one fp32 buffer) and activation
// checkpointing (the recomputed forward exchanges again). Each of these read a different
// figure than the run's before.
TEST(EndToEnd, CostModelCommunicationEqualsTheTracedRuns) {
  struct Case {
    const char* what;
    std::vector<std::string> sets;
  };
  const std::vector<Case> cases = {
      {"gqa", {}},
      {"explicit head_dim", {"model.head_dim=16", "model.model_type=qwen3"}},
      {"gradient accumulation 2", {"train.gradient_accumulation_steps=2"}},
      {"bf16", {"train.dtype=bfloat16"}},
      {"checkpointing", {"train.activation_checkpointing=layer"}},
      {"zero 3", {"train.zero_stage=3"}},
      {"zero 3 bf16", {"train.zero_stage=3", "train.dtype=bfloat16"}},
      {"zero 3 bf16, fp32 gathers and unit gradients",
       {"train.zero_stage=3", "train.dtype=bfloat16", "train.gather_dtype=float32", "train.grad_accum_dtype=float32"}},
      {"zero 3 bf16, bf16 wire", {"train.zero_stage=3", "train.dtype=bfloat16", "train.grad_reduce_dtype=bfloat16"}},
      {"zero 2 bf16", {"train.zero_stage=2", "train.dtype=bfloat16"}},
      {"zero 3 tied, 2 micro-batches",
       {"train.zero_stage=3", "model.tie_word_embeddings=true", "train.gradient_accumulation_steps=2"}},
      {"zero 3 checkpointing", {"train.zero_stage=3", "train.activation_checkpointing=layer"}},
  };
  const auto cfg = config_file();
  int i = 0;
  for (const auto& c : cases) {
    const std::string out = tmp("cost" + std::to_string(i++));
    std::string cmd = kRun + " " + cfg + " --worker " + kWorker + " --out " + out;
    for (const auto& s : c.sets) cmd += " --set " + s;
    const auto r = sh(cmd);
    ASSERT_EQ(r.code, 0) << c.what << "\n" << r.out;
    const ulysses::RunConfig rc = ulysses::load_run_config(out + "/config.json");
    ulysses::cost::CostOptions o;
    o.math_attention = 0;
    const auto est = ulysses::cost::estimate(rc, o);
    const auto h = ulysses::prof::analyze(load_trace(out)).headline;
    EXPECT_EQ(est.a2a_bytes_per_step, h.a2a_bytes_per_step) << c.what;
    EXPECT_EQ(est.allreduce_bytes_per_step, h.allreduce_bytes_per_step) << c.what;
  }
}

TEST(EndToEnd, WorkerRefusesAWorldSizeMismatch) {
  const auto cfg = config_file();
  auto r = sh("RANK=0 WORLD_SIZE=3 MASTER_PORT=1 " + kWorker + " --config " + cfg + " --out " + tmp("ws") + " 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("WORLD_SIZE (3)"), std::string::npos) << r.out;
}

// torchrun-style environments a worker cannot run with: refused (exit 2) before any process
// group, naming the variable. RANK=2147483648 would run as rank -2147483648 (wrapped), an
// unresolvable MASTER_ADDR would be retried once a second for timeout_s, and an --out that
// cannot be a folder would be found only after the model was built.
TEST(EndToEnd, WorkerRefusesEnvironmentsItCannotRunWith) {
  const auto cfg = config_file();
  struct Case {
    std::string env, out, needle;
  };
  for (const Case& c : {Case{"RANK=2147483648 WORLD_SIZE=2", tmp("env1"), "RANK='2147483648' is not an integer"},
                        Case{"RANK=0 WORLD_SIZE=4294967298", tmp("env2"), "WORLD_SIZE='4294967298'"},
                        Case{"RANK=1 WORLD_SIZE=2 MASTER_ADDR=nonexistent.invalid MASTER_PORT=29513", tmp("env3"),
                             "MASTER_ADDR 'nonexistent.invalid' is not a host name"},
                        Case{"RANK=0 WORLD_SIZE=1", "/dev/null/run", "--out /dev/null/run cannot be made a run folder"},
                        // No RANK beside WORLD_SIZE 2 (read as rank 0: waited out the timeout), and numbers
                        // strtoll takes but nobody means (" 1", "+1").
                        Case{"WORLD_SIZE=2 MASTER_PORT=29514", tmp("env4"), "RANK is not set"},
                        Case{"RANK=' 1' WORLD_SIZE=2", tmp("env5"), "RANK=' 1' is not an integer"},
                        Case{"RANK=+1 WORLD_SIZE=2", tmp("env6"), "RANK='+1' is not an integer"}}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = sh(c.env + " " + kWorker + " --config " + cfg + " --out " + c.out +
                " --set parallel.sp_size=1 --set parallel.timeout_s=60 2>&1");
    EXPECT_EQ(r.code, 2) << c.env << ": " << r.out;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.env << ": " << r.out;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << c.env << ": not refused at once";
  }
}

// Two workers given the same RANK (started by hand or by a broken launcher script): one of them
// refuses at once naming the RANK (Gloo's rendezvous error named neither, after the timeout).
TEST(EndToEnd, TwoWorkersWithOneRankAreRefusedNamingIt) {
  const auto cfg = config_file();
  const std::string dir = tmp("duprank");
  fs::create_directories(dir);
  // A world of 3 (dp 3) where rank 2 never comes: rank 0's store stays up for the whole timeout,
  // however slowly the two rank 1s start (under load one can come after the others have finished).
  const std::string common = " WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 " + kWorker + " --config " + cfg +
                             " --set parallel.sp_size=1 --set parallel.dp_size=3 --set parallel.timeout_s=15 --out ";
  const auto t0 = std::chrono::steady_clock::now();
  sh("(RANK=0" + common + dir + "/r0 > " + dir + "/r0.log 2>&1) & (RANK=1" + common + dir + "/a > " + dir +
     "/a.log 2>&1; echo $? > " + dir + "/a.rc) & (RANK=1" + common + dir + "/b > " + dir + "/b.log 2>&1; echo $? > " +
     dir + "/b.rc) & wait");
  const std::string said = "RANK 1 is taken by another worker of this run";
  const std::string a = ulysses::test::slurp(dir + "/a.log"), b = ulysses::test::slurp(dir + "/b.log");
  const std::string arc = ulysses::test::slurp(dir + "/a.rc"), brc = ulysses::test::slurp(dir + "/b.rc");
  const bool a_refused = a.find(said) != std::string::npos, b_refused = b.find(said) != std::string::npos;
  EXPECT_NE(a_refused, b_refused) << "a: " << a << "\nb: " << b;
  EXPECT_EQ(a_refused ? arc : brc, "2\n");  // the refused one, at once
  EXPECT_EQ(a_refused ? brc : arc, "1\n");  // the other waited for rank 2 until the timeout
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
}

// A worker started without ulysses-run (torchrun, Slurm) checks its data file itself: a FIFO
// named as data.path would hold it in open() forever, silent (and one SIGTERM would not end
// it); a tokens file of an odd number of bytes would be read with the last byte dropped,
// unsaid; a relative path not found says which folder it was looked for in.
TEST(EndToEnd, WorkerStartedDirectlyRefusesDataFilesItCannotRead) {
  const auto cfg = config_file();
  const std::string dir = tmp("data");
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir + "/fifo.bin").c_str(), 0600), 0);
  {
    std::ofstream odd(dir + "/odd.bin", std::ios::binary);
    for (int i = 0; i < 4001; ++i) odd.put(static_cast<char>(i % 7));
  }
  struct Case {
    std::string set, needle;
  };
  for (const Case& c : {Case{"--set data.kind=tokens --set data.path=" + dir + "/fifo.bin", "is not a regular file"},
                        Case{"--set data.kind=tokens --set data.path=" + dir + "/odd.bin",
                             "holds 4001 bytes, not a whole number of 2-byte tokens"},
                        Case{"--set data.kind=text --set data.path=no/such/corpus.txt",
                             "a relative path: looked for in the current folder"}}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = sh("RANK=0 WORLD_SIZE=1 timeout 60 " + kWorker + " --config " + cfg + " --out " + tmp("wd") + " " + c.set +
                " --set parallel.sp_size=1 2>&1");
    EXPECT_EQ(r.code, 2) << c.set << ": " << r.out;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.set << ": " << r.out;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << c.set;
  }
}

TEST(EndToEnd, BadInputIsRefusedBeforeAnythingStarts) {
  const auto cfg = config_file();
  struct Case {
    std::string set, needle;
  };
  for (const Case& c :
       {Case{"model.num_attention_heads=3", "divisible"}, Case{"train.seq_length=63", "seq_length (63)"},
        Case{"model.num_key_value_heads=3", "num_key_value_heads"}, Case{"data.path=/nonexistent.txt", "not found"},
        Case{"data.path=no/such/corpus.txt", "a relative path: looked for in the current folder"},
        Case{"model.vocab_size=100", "vocab_size (100)"}, Case{"train.stepz=1", "unknown"},
        Case{"train.zero_stage=2 --set train.offload_params=true", "needs train.zero_stage 3"}}) {
    const auto out = tmp("bad");
    auto r = sh(kRun + " " + cfg + " --set " + c.set + " --worker " + kWorker + " --out " + out + " 2>&1");
    EXPECT_EQ(r.code, 2) << c.set << ": " << r.out;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.set << ": " << r.out;
    EXPECT_FALSE(fs::exists(out + "/logs")) << c.set;
  }
}

// data.kind = documents (docs/LONG_SEQUENCES.md#packed-documents): a prepared folder trains,
// packed and masked, at sp 2 (exit 0, a finite loss); the same folder with one token id at or
// above the vocabulary is refused before anything starts, by ulysses-run and by a worker
// started directly, exit 2 naming tokens.bin.
TEST(EndToEnd, DocumentsTrainAndATokenAboveTheVocabularyIsRefused) {
  const auto cfg = config_file();
  std::vector<std::vector<int64_t>> docs;
  for (int64_t d = 0; d < 12; ++d) {
    std::vector<int64_t> doc;
    for (int64_t i = 0; i < 10 + 7 * d; ++i) doc.push_back((d * 31 + i * 7) % 256);
    docs.push_back(doc);
  }
  const std::string good = tmp("documents_good"), bad = tmp("documents_bad");
  ulysses::test::write_documents_folder(good, docs, 256);
  docs[3][5] = 300;
  ulysses::test::write_documents_folder(bad, docs, 256);
  const std::string set = " --set data.kind=documents --set train.steps=1 --set data.path=";
  auto ok = sh(kRun + " " + cfg + set + good + " --worker " + kWorker + " --out " + tmp("docs_run") + " 2>&1");
  EXPECT_EQ(ok.code, 0) << ok.out;
  const std::string needle = bad + "/tokens.bin: token 56 is 300";  // 10 + 17 + 24 + 5
  auto r = sh(kRun + " " + cfg + set + bad + " --worker " + kWorker + " --out " + tmp("docs_bad") + " 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(tmp("docs_bad") + "/logs"));
  r = sh("RANK=0 WORLD_SIZE=1 timeout 60 " + kWorker + " --config " + cfg + " --out " + tmp("docs_wd") + set + bad +
         " --set parallel.sp_size=1 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
}

TEST(EndToEnd, WorkersKilledWithSigkillLeaveReadableTraces) {
  const auto cfg = config_file();
  const auto out = tmp("killed");
  // a long run in the background; kill -9 every worker once two steps are done
  const std::string cmd =
      kRun + " " + cfg + " --set train.steps=1000 --worker " + kWorker + " --out " + out + " >/dev/null 2>&1 & echo $!";
  auto launched = sh(cmd);
  const int launcher = std::stoi(launched.out);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  size_t lines = 0;
  while (lines < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream m(out + "/metrics.jsonl");
    std::string l;
    lines = 0;
    while (std::getline(m, l)) ++lines;
  }
  ASSERT_GE(lines, 2u) << "the run did not reach two steps";
  sh("pkill -9 -f 'ulysses-worker --config " + out + "/config.json'");
  // the launcher notices, reports the failure and exits
  for (int i = 0; i < 200 && ::kill(launcher, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::waitpid(launcher, nullptr, WNOHANG);
  auto run = json::parse(std::ifstream(out + "/run.json"));
  EXPECT_EQ(run["status"], "failed");
  for (int r = 0; r < 2; ++r) {
    const auto path = out + "/trace/rank" + std::to_string(r) + ".sqlite";
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok") << path;
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  TraceModel t = load_trace(out);
  // every step that rank 0 reported finished is in rank 0's trace
  int64_t rank0_steps = 0;
  for (const auto& s : t.steps) rank0_steps += s.rank == 0;
  EXPECT_GE(rank0_steps, static_cast<int64_t>(lines));
}

// ---- reliability (docs/RELIABILITY.md) -----------------------------------------------------

namespace {
using ulysses::test::edit_safetensors_header;
using ulysses::test::slurp;
void spit(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }

}  // namespace

// Memory safety: a model.safetensors whose data_offsets wrap around (a negative entry) is
// refused: accepted, its seek fails and, unchecked, leaves tensors uninitialised in a run that
// exits 0.
// Truncated files, bad shapes and numbers beyond a double in config.json: exit 2 naming the file.
TEST(EndToEndReliability, CorruptCheckpointsAreRefusedNamingTheFile) {
  const auto cfg = config_file();
  const auto base = tmp("rel_ckpt");
  const std::string ckpt = base + "/ckpt";
  auto saved = sh(kRun + " " + cfg + " --set train.steps=1 --set parallel.sp_size=1 --set train.save_to=" + ckpt +
                  " --worker " + kWorker + " --out " + base + "/save 2>&1");
  ASSERT_EQ(saved.code, 0) << saved.out;
  const std::string st = ckpt + "/model.safetensors";
  const std::string good = slurp(st), good_cfg = slurp(ckpt + "/config.json");
  struct Case {
    const char* name;
    std::function<void()> corrupt;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"negative_offsets",
       [&] {
         edit_safetensors_header(st, [](json& h) {
           auto& e = h["model.norm.weight"];
           const int64_t nbytes = e["data_offsets"][1].get<int64_t>() - e["data_offsets"][0].get<int64_t>();
           e["data_offsets"] = {-nbytes, 0};
         });
       },
       "data_offsets"},
      {"offsets_past_the_end",
       [&] {
         edit_safetensors_header(st, [](json& h) {
           h["model.norm.weight"]["data_offsets"] = {uint64_t{1} << 62, (uint64_t{1} << 62) + 128};
         });
       },
       "data_offsets"},
      {"negative_shape", [&] { edit_safetensors_header(st, [](json& h) { h["model.norm.weight"]["shape"] = {-32}; }); },
       "shape"},
      {"truncated", [&] { spit(st, good.substr(0, good.size() / 2)); }, "model.safetensors"},
      {"huge_header_length", [&] { spit(st, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + good.substr(8)); },
       "header length"},
      {"number_beyond_double", [&] { spit(ckpt + "/config.json", R"({"hidden_size": 32, "rms_norm_eps": 1e999})"); },
       "out of range"},
      // Well-formed files that do not fit the model: named before any worker starts.
      {"tensor_missing", [&] { edit_safetensors_header(st, [](json& h) { h.erase("model.norm.weight"); }); },
       "lacks tensors: model.norm.weight"},
      {"shape_differs",
       [&] { edit_safetensors_header(st, [](json& h) {
               h["model.norm.weight"]["shape"] = {2, 16};
             }); },
       "model.norm.weight has shape [2, 16], the model expects [32]"},
      {"integer_weight",  // 4-byte I32 in place of F32: the worker could not read it, after launch
       [&] { edit_safetensors_header(st, [](json& h) { h["model.norm.weight"]["dtype"] = "I32"; }); },
       "model.norm.weight has dtype I32; a model weight must be F32, BF16 or F16"},
  };
  for (const auto& c : cases) {
    spit(st, good);
    spit(ckpt + "/config.json", good_cfg);
    c.corrupt();
    const auto out = base + "/" + c.name;
    auto r = sh(kRun + " " + cfg + " --set train.steps=1 --set train.init_from=" + ckpt + " --worker " + kWorker +
                " --out " + out + " 2>&1");
    EXPECT_EQ(r.code, 2) << c.name << ": " << r.out;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.name << ": " << r.out;
    EXPECT_EQ(r.out.find("terminate called"), std::string::npos) << c.name << ": " << r.out;
    // Refused by the launcher's checks, before the run folder or any worker exists.
    EXPECT_FALSE(fs::exists(out)) << c.name << ": refused only after launch\n" << r.out;
  }
  // The undamaged checkpoint still loads.
  spit(st, good);
  spit(ckpt + "/config.json", good_cfg);
  auto ok = sh(kRun + " " + cfg + " --set train.steps=1 --set train.init_from=" + ckpt + " --worker " + kWorker +
               " --out " + base + "/ok 2>&1");
  EXPECT_EQ(ok.code, 0) << ok.out;

  // Blame in a run folder: a rank's trace missing, or two files claiming one rank, is reported.
  const auto two = base + "/two";
  auto r2 = sh(kRun + " " + cfg + " --set train.steps=1 --worker " + kWorker + " --out " + two + " 2>&1");
  ASSERT_EQ(r2.code, 0) << r2.out;
  ASSERT_EQ(load_trace(two).ranks.size(), 2u);
  fs::copy_file(two + "/trace/rank0.sqlite", two + "/trace/rank7.sqlite");
  try {
    load_trace(two);
    ADD_FAILURE() << "two files claiming rank 0 were read silently";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("two trace files claim rank 0"), std::string::npos) << e.what();
  }
  fs::remove(two + "/trace/rank7.sqlite");
  fs::rename(two + "/trace/rank1.sqlite", base + "/rank1.sqlite");
  try {
    load_trace(two);
    ADD_FAILURE() << "a missing rank file was read silently";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 is missing"), std::string::npos) << e.what();
  }
  fs::remove_all(fs::path(base).parent_path());
}
