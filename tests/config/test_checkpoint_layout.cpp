// Training-state checkpoint folders without torch: step folder names, the `complete`
// manifest (missing, torn file, wrong format), the latest complete checkpoint of a save_to
// folder, and which config keys must match on a resume (named in the message); the run's
// identity in a version 2 checkpoint (swapped, foreign and wrong-stage shards named, the
// layout's key named), XXH64 against its reference values, and headers and JSON parsed in
// linear time (100 000 tensors refused in well under a second).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "checkpoint_layout.hpp"
#include "json_checked.hpp"
#include "safetensors_header.hpp"
#include "xxh64.hpp"

namespace fs = std::filesystem;
using namespace ulysses;

namespace {

std::string scratch(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("ulysses_ckpt_layout_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// A version 1 checkpoint folder (sizes only) with two files and a manifest listing their sizes.
void make_checkpoint(const std::string& dir, int64_t step, bool marker = true) {
  fs::create_directories(dir);
  std::ofstream(dir + "/model.safetensors") << "0123456789";
  std::ofstream(dir + "/state.json") << "{}";
  if (!marker) return;
  json m = {{"format", ckpt::kFormat},
            {"version", 1},
            {"step", step},
            {"files", {{"model.safetensors", 10}, {"state.json", 2}}}};
  std::ofstream(dir + "/" + ckpt::kCompleteFile) << m.dump();
}

}  // namespace

TEST(CheckpointLayout, StepFolderNames) {
  EXPECT_EQ(ckpt::step_dir_name(12), "step-00000012");
  EXPECT_EQ(ckpt::tmp_dir_name(3), ".tmp-step-00000003");
  int64_t s = -1;
  EXPECT_TRUE(ckpt::parse_step_dir_name("step-00000012", &s));
  EXPECT_EQ(s, 12);
  EXPECT_TRUE(ckpt::parse_step_dir_name("step-123456789012", &s));
  EXPECT_EQ(s, 123456789012);
  for (const char* bad :
       {"step-", "step-12a", "step12", ".tmp-step-00000001", "step-0000000000000000001", "model.safetensors"})
    EXPECT_FALSE(ckpt::parse_step_dir_name(bad, &s)) << bad;
}

TEST(CheckpointLayout, ManifestDecidesCompleteness) {
  const auto root = scratch("manifest");
  make_checkpoint(root + "/good", 4);
  EXPECT_EQ(ckpt::checkpoint_problem(root + "/good"), "");
  make_checkpoint(root + "/half", 4, /*marker=*/false);
  EXPECT_NE(ckpt::checkpoint_problem(root + "/half").find("no 'complete' marker"), std::string::npos);
  make_checkpoint(root + "/torn", 4);
  fs::resize_file(root + "/torn/model.safetensors", 3);
  EXPECT_NE(ckpt::checkpoint_problem(root + "/torn").find("has 3 bytes, the manifest says 10"), std::string::npos)
      << ckpt::checkpoint_problem(root + "/torn");
  make_checkpoint(root + "/lost", 4);
  fs::remove(root + "/lost/state.json");
  EXPECT_NE(ckpt::checkpoint_problem(root + "/lost").find("state.json"), std::string::npos);
  make_checkpoint(root + "/foreign", 4);
  std::ofstream(root + "/foreign/complete") << R"({"format": "other", "version": 1, "step": 4, "files": {}})";
  EXPECT_NE(ckpt::checkpoint_problem(root + "/foreign").find("not a ulysses-train-state manifest"), std::string::npos);
  make_checkpoint(root + "/future", 4);
  std::ofstream(root + "/future/complete")
      << R"({"format": "ulysses-train-state", "version": 99, "step": 4, "files": {}})";
  EXPECT_NE(ckpt::checkpoint_problem(root + "/future").find("newer"), std::string::npos);
  make_checkpoint(root + "/escape", 4);
  std::ofstream(root + "/escape/complete")
      << R"({"format": "ulysses-train-state", "version": 1, "step": 4, "files": {"../x": 1}})";
  EXPECT_NE(ckpt::checkpoint_problem(root + "/escape").find("invalid file name"), std::string::npos);
}

TEST(CheckpointLayout, LatestCompleteCheckpointSkipsIncompleteOnes) {
  const auto root = scratch("latest");
  make_checkpoint(root + "/step-00000004", 4);
  make_checkpoint(root + "/step-00000012", 12);
  make_checkpoint(root + "/step-00000016", 16, /*marker=*/false);  // half-written
  make_checkpoint(root + "/step-00000020", 20);
  fs::resize_file(root + "/step-00000020/state.json", 0);  // torn
  make_checkpoint(root + "/.tmp-step-00000024", 24);       // being written
  make_checkpoint(root + "/other", 99);                    // not a step folder
  std::vector<std::string> skipped;
  const auto all = ckpt::complete_checkpoints(root, &skipped);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].step, 4);
  EXPECT_EQ(all[1].step, 12);
  EXPECT_EQ(skipped.size(), 2u);
  EXPECT_EQ(ckpt::resolve_resume(root).step, 12);
  EXPECT_EQ(ckpt::resolve_resume(root + "/").step, 12);
  EXPECT_EQ(ckpt::resolve_resume(root + "/step-00000004").step, 4);
  EXPECT_EQ(ckpt::resolve_resume(root + "/step-00000004/").dir, root + "/step-00000004");
  EXPECT_THROW(ckpt::resolve_resume(root + "/step-00000016"), ConfigError);
  EXPECT_THROW(ckpt::resolve_resume(root + "/nothing-here"), ConfigError);
  EXPECT_THROW(ckpt::resolve_resume(scratch("empty")), ConfigError);
  try {
    ckpt::resolve_resume(root + "/step-00000020");
    FAIL() << "a torn checkpoint was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a complete checkpoint"), std::string::npos) << e.what();
  }
}

TEST(CheckpointLayout, ResumeMismatchNamesTheKey) {
  RunConfig a;
  a.train.save_to = "/x";
  const json saved = a.to_json();
  std::string what;
  EXPECT_EQ(ckpt::resume_mismatch(saved, saved, &what), "");
  // keys that may change on a resume
  RunConfig b = a;
  b.train.steps = 1000;
  b.train.save_every = 5;
  b.train.save_keep = 7;
  b.train.resume_from = "/x";
  b.train.threads_per_rank = 3;
  b.profile.enabled = false;
  b.parallel.timeout_s = 5;
  b.name = "again";
  EXPECT_EQ(ckpt::resume_mismatch(saved, b.to_json(), &what), "") << what;
  // keys that must match
  RunConfig c = a;
  c.model.hidden_size = 128;
  EXPECT_EQ(ckpt::resume_mismatch(saved, c.to_json(), &what), "model.hidden_size");
  EXPECT_EQ(what, "model.hidden_size = 128, the checkpoint has 64");
  c = a;
  c.parallel.sp_size = 2;
  EXPECT_EQ(ckpt::resume_mismatch(saved, c.to_json(), &what), "parallel.sp_size");
  c = a;
  c.train.lr = 0.5;
  EXPECT_EQ(ckpt::resume_mismatch(saved, c.to_json(), &what), "train.lr");
  c = a;
  c.data.path = "other.bin";
  EXPECT_EQ(ckpt::resume_mismatch(saved, c.to_json(), &what), "data.path");
  // a key the checkpoint lacks (a newer build's key) counts as a difference
  json extra = a.to_json();
  extra["train"]["grad_accum_steps"] = 4;
  EXPECT_EQ(ckpt::resume_mismatch(saved, extra, &what), "train.grad_accum_steps");
  EXPECT_EQ(what, "train.grad_accum_steps = 4, the checkpoint has (absent)");
}

namespace {

// A one-tensor safetensors file whose __metadata__ is `meta`, its 4 data bytes `payload`.
void write_tensor_file(const std::string& path, const std::map<std::string, std::string>& meta,
                       const std::string& payload) {
  json h = {{"__metadata__", meta}, {"x", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  std::string hs = h.dump();
  std::string le(8, '\0');
  for (int i = 0; i < 8; ++i) le[static_cast<size_t>(i)] = static_cast<char>((hs.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << le << hs << payload.substr(0, 4);
}

// A version 2 checkpoint of run `run` at step 4, ZeRO stage 2 over 2 ranks, as train_state.cpp
// writes one: every safetensors file says its run, step and name; state.json its run and step.
const std::string kRun = "0123456789abcdef0123456789abcd";
ckpt::Layout layout2() {
  ckpt::Layout l;
  l.sp_size = 2, l.world_size = 2, l.zero_stage = 2;
  return l;
}
void make_v2_checkpoint(const std::string& dir) {
  fs::create_directories(dir);
  const auto l = layout2();
  write_tensor_file(dir + "/model.safetensors", ckpt::file_identity(kRun, 4, "model.safetensors", l), "mmmm");
  for (int r = 0; r < 2; ++r) {
    const std::string n = ckpt::zero_optimizer_file_name(r);
    write_tensor_file(dir + "/" + n, ckpt::file_identity(kRun, 4, n, l), r ? "bbbb" : "aaaa");
    std::ofstream(dir + "/" + ckpt::rng_file_name(r)) << (r ? "rng-of-rank-1" : "rng-of-rank-0");
  }
  std::ofstream(dir + "/state.json") << json({{"run_id", kRun}, {"step", 4}, {"next_step", 4}}).dump();
  std::ofstream(dir + "/" + ckpt::kCompleteFile) << ckpt::make_manifest(dir, 4, kRun, l).dump();
}
void swap_files(const std::string& a, const std::string& b) {
  fs::rename(a, a + ".x");
  fs::rename(b, a);
  fs::rename(a + ".x", b);
}
void reseal(const std::string& dir) {  // the manifest rewritten to agree with the files
  std::ofstream(dir + "/" + ckpt::kCompleteFile) << ckpt::make_manifest(dir, 4, kRun, layout2()).dump();
}
void expect_problem(const std::string& dir, const std::string& want) {
  EXPECT_EQ(ckpt::checkpoint_problem(dir), "") << dir;
  const std::string why = ckpt::checkpoint_contents_problem(dir);
  EXPECT_NE(why.find(want), std::string::npos) << dir << ": " << why;
}

}  // namespace

TEST(CheckpointIdentity, Xxh64MatchesTheReferenceValues) {
  // xxHash's published values (seed 0), and the same digest when fed in odd pieces.
  EXPECT_EQ(xxh64_hex(xxh64("", 0)), "ef46db3751d8e999");
  EXPECT_EQ(xxh64_hex(xxh64("a", 1)), "d24ec4f1a98c6e5b");
  EXPECT_EQ(xxh64_hex(xxh64("abc", 3)), "44bc2cf5ad770999");
  const std::string s = "Nobody inspects the spammish repetition";
  EXPECT_EQ(xxh64_hex(xxh64(s.data(), s.size())), "fbcea83c8a378bf1");
  std::string big;
  for (int i = 0; i < 1000; ++i) big.push_back(static_cast<char>(i * 7));
  Xxh64 x;
  for (size_t at = 0, k = 1; at < big.size(); k = k * 3 % 37 + 1) {
    const size_t n = std::min(k, big.size() - at);
    x.update(big.data() + at, n);
    at += n;
  }
  EXPECT_EQ(x.digest(), xxh64(big.data(), big.size()));
}

TEST(CheckpointIdentity, LayoutMismatchNamesTheKey) {
  ckpt::Layout ring2;
  ring2.ring_size = 2, ring2.world_size = 2, ring2.zero_stage = 2;
  ckpt::Layout ring1 = ring2;
  ring1.ring_size = 1, ring1.world_size = 1;
  EXPECT_EQ(ckpt::layout_mismatch(ring2, ring1), "parallel.ring_size 2 in the checkpoint, 1 now");
  ckpt::Layout ring4 = ring2;
  ring4.ring_size = 4, ring4.world_size = 4;
  EXPECT_EQ(ckpt::layout_mismatch(ring2, ring4), "parallel.ring_size 2 in the checkpoint, 4 now");
  ckpt::Layout stage3 = ring2;
  stage3.zero_stage = 3;
  EXPECT_EQ(ckpt::layout_mismatch(ring2, stage3), "train.zero_stage 2 in the checkpoint, 3 now");
  // the same world cut otherwise: RNG files and shards are per world rank, so it fits
  ckpt::Layout sp2 = ring2;
  sp2.ring_size = 1, sp2.sp_size = 2;
  EXPECT_EQ(ckpt::layout_mismatch(ring2, sp2), "");
}

TEST(CheckpointIdentity, FilesThatDoNotBelongAreNamed) {
  const auto root = scratch("identity");
  make_v2_checkpoint(root + "/good");
  EXPECT_EQ(ckpt::checkpoint_problem(root + "/good"), "");
  EXPECT_EQ(ckpt::checkpoint_contents_problem(root + "/good"), "");
  const json m = json::parse(std::ifstream(root + "/good/complete"));
  EXPECT_EQ(m["version"], 2);
  EXPECT_EQ(m["run_id"], kRun);
  EXPECT_EQ(m["layout"]["zero_stage"], 2);
  EXPECT_EQ(m["xxh64"]["rng-rank1.bin"], xxh64_file(root + "/good/rng-rank1.bin"));

  // optimizer shards swapped between ranks: the manifest as it was, and rewritten to agree
  for (const bool resealed : {false, true}) {
    const std::string d = root + (resealed ? "/swapped-resealed" : "/swapped");
    make_v2_checkpoint(d);
    swap_files(d + "/optimizer-rank0.safetensors", d + "/optimizer-rank1.safetensors");
    if (resealed) reseal(d);
    expect_problem(d,
                   "optimizer-rank0.safetensors is \"optimizer-rank1.safetensors\" of its checkpoint, not "
                   "\"optimizer-rank0.safetensors\": a shard in another rank's place");
  }
  // a shard of another run (same size), manifest rewritten
  make_v2_checkpoint(root + "/foreign");
  write_tensor_file(root + "/foreign/optimizer-rank1.safetensors",
                    ckpt::file_identity("ffffffffffffffffffffffffffffff", 4, "optimizer-rank1.safetensors", layout2()),
                    "bbbb");
  reseal(root + "/foreign");
  expect_problem(root + "/foreign",
                 "optimizer-rank1.safetensors is of run \"ffffffffffffffffffffffffffffff\" step "
                 "\"4\", the checkpoint of run \"" +
                     kRun + "\" step 4: a file from another run or step");
  // a stage-3 shard inside this stage-2 checkpoint, manifest rewritten
  make_v2_checkpoint(root + "/stage3");
  ckpt::Layout l3 = layout2();
  l3.zero_stage = 3;
  write_tensor_file(root + "/stage3/optimizer-rank0.safetensors",
                    ckpt::file_identity(kRun, 4, "optimizer-rank0.safetensors", l3), "aaaa");
  reseal(root + "/stage3");
  expect_problem(root + "/stage3",
                 "optimizer-rank0.safetensors is a shard of train.zero_stage 3 over 2 rank(s), the checkpoint is "
                 "of zero_stage 2 over 2");
  // model.safetensors of another step, with the manifest untouched (its size agrees)
  make_v2_checkpoint(root + "/model");
  write_tensor_file(root + "/model/model.safetensors", ckpt::file_identity(kRun, 6, "model.safetensors", layout2()),
                    "mmmm");
  expect_problem(root + "/model", "a file from another run or step");
  // RNG states swapped (no identity inside): the checksum
  make_v2_checkpoint(root + "/rng");
  swap_files(root + "/rng/rng-rank0.bin", root + "/rng/rng-rank1.bin");
  expect_problem(root + "/rng", "rng-rank0.bin is not the file its checkpoint saved (XXH64 ");
  // a file without any identity (an older build's, or hand-made), manifest rewritten
  make_v2_checkpoint(root + "/anonymous");
  write_tensor_file(root + "/anonymous/model.safetensors", {{"format", "pt"}}, "mmmm");
  reseal(root + "/anonymous");
  expect_problem(root + "/anonymous", "model.safetensors carries no run identity");
  // damaged bytes, same size
  make_v2_checkpoint(root + "/damaged");
  std::ofstream(root + "/damaged/rng-rank1.bin") << "rng-of-rank-X";
  expect_problem(root + "/damaged", "rng-rank1.bin is not the file its checkpoint saved");
  // a version 2 manifest without its identity is not complete
  make_v2_checkpoint(root + "/bare");
  json bare = json::parse(std::ifstream(root + "/bare/complete"));
  bare.erase("xxh64");
  std::ofstream(root + "/bare/complete") << bare.dump();
  EXPECT_NE(ckpt::checkpoint_problem(root + "/bare").find("lacks the run's identity"), std::string::npos);
}

// nlohmann's callback parser rescans the enclosing object at the end of each child object:
// 100 000 tensors took 79 s to refuse. Parsed in linear time, and refused past the limit.
TEST(CheckpointIdentity, HugeHeadersAreParsedInLinearTime) {
  auto header = [](size_t n) {
    std::string h = "{";
    for (size_t i = 0; i < n; ++i)
      h += (i ? "," : "") + std::string("\"t") + std::to_string(i) +
           "\":{\"dtype\":\"F32\",\"shape\":[1],"
           "\"data_offsets\":[" +
           std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    return h + "}";
  };
  const std::string big = header(100000);
  auto t0 = std::chrono::steady_clock::now();
  try {
    parse_safetensors_header(big, 8 + big.size() + 400000, "big.safetensors");
    FAIL() << "100 000 tensors accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 65536 tensors"), std::string::npos) << e.what();
  }
  const double refuse_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(refuse_s, 1.0);
  // Just under the limit: every tensor read, in a time linear in the header. A ratio of two
  // sizes, not a time limit (sanitizer builds run ~10x slower): four times the tensors take
  // about 4x as long when linear, 16x when quadratic.
  // CPU time of this process (the parse is single-threaded): other processes' load does not move it.
  auto parse_time = [&](size_t n) {
    const std::string text = header(n);
    const std::clock_t c = std::clock();
    const auto h = parse_safetensors_header(text, 8 + text.size() + 4 * n, "most.safetensors");
    EXPECT_EQ(h.tensors.size(), n);
    return double(std::clock() - c) / CLOCKS_PER_SEC;
  };
  const double quarter_s = parse_time(15000), parse_s = parse_time(60000);
  EXPECT_LT(parse_s, 8.0 * quarter_s) << "15 000 tensors in " << quarter_s << " s, 60 000 in " << parse_s << " s";
  std::printf("[ figures ] 100 000-tensor header refused in %.3f s; 15 000 / 60 000 tensors parsed in %.3f / %.3f s\n",
              refuse_s, quarter_s, parse_s);
  // The checked parser keeps its other rules: entries per object, depth, a key twice.
  EXPECT_THROW(parse_checked_json("[1,2,3]", JsonLimits{2}), JsonShapeError);
  EXPECT_EQ(parse_checked_json("[1,2]", JsonLimits{2}).size(), 2u);
  EXPECT_THROW(parse_checked_json(R"({"a":1,"a":2})"), JsonShapeError);
  EXPECT_THROW(parse_checked_json(std::string(65, '[') + std::string(65, ']') + "x"), nlohmann::json::exception);
  EXPECT_EQ(parse_checked_json(R"({"a":[1,{"b":null}],"c":"d"})"), json::parse(R"({"a":[1,{"b":null}],"c":"d"})"));
}

TEST(CheckpointIdentity, NamesWithControlCharactersAreQuoted) {
  EXPECT_EQ(name_for_message("model-00001-of-00002.safetensors"), "model-00001-of-00002.safetensors");
  EXPECT_EQ(name_for_message("shard\n.safetensors"), "\"shard\\n.safetensors\"");
  EXPECT_EQ(name_for_message("a\x1b[31mred"), "\"a\\u001b[31mred\"");
  EXPECT_EQ(name_for_message(std::string("caf\xe9")), "\"caf\xef\xbf\xbd\"");  // U+FFFD for the bad byte
}
