// Training-state checkpoint folders without torch: step folder names, the `complete`
// manifest (missing, torn file, wrong format), the latest complete checkpoint of a save_to
// folder, and which config keys must match on a resume (named in the message).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "checkpoint_layout.hpp"

namespace fs = std::filesystem;
using namespace ulysses;

namespace {

std::string scratch(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("ulysses_ckpt_layout_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// A checkpoint folder with two files and a manifest listing their sizes.
void make_checkpoint(const std::string& dir, int64_t step, bool marker = true) {
  fs::create_directories(dir);
  std::ofstream(dir + "/model.safetensors") << "0123456789";
  std::ofstream(dir + "/state.json") << "{}";
  if (!marker) return;
  json m = {{"format", ckpt::kFormat},
            {"version", ckpt::kFormatVersion},
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
