// Training-state checkpoints in one process (one rank): save after k steps, restore into a
// freshly built Trainer (other RNG state, fresh optimizer), and the following losses equal
// the uninterrupted run's bit for bit; the RNG's next draws and every AdamW moment and step
// count are restored exactly. A resume from the weights alone (no AdamW state) differs,
// which shows the comparison can fail.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>

#include "checkpoint.hpp"
#include "comm.hpp"
#include "rank_threads.hpp"
#include "checkpoint_layout.hpp"
#include "train_state.hpp"
#include "trainer.hpp"

namespace fs = std::filesystem;
using namespace ulysses;

namespace {

RunConfig tiny_config(const std::string& save_to) {
  RunConfig c;
  c.model.vocab_size = 128;
  c.model.hidden_size = 32;
  c.model.intermediate_size = 64;
  c.model.num_hidden_layers = 2;
  c.model.num_attention_heads = 4;
  c.model.num_key_value_heads = 2;
  c.train.seq_length = 32;
  c.train.steps = 6;
  c.train.warmup_steps = 2;
  c.train.lr = 1e-2;
  c.train.min_lr = 1e-3;
  c.train.save_to = save_to;
  c.train.save_every = 3;
  c.profile.enabled = false;
  return c;
}

}  // namespace

TEST(TrainState, RestoreContinuesBitIdenticallyInProcess) {
  at::set_num_threads(1);
  const auto dir = fs::temp_directory_path() / ("ulysses_train_state_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RunConfig cfg = tiny_config(dir.string());
  DistEnv env;
  Comm comm(env, 1, 1, "gloo", std::chrono::seconds(60));

  std::vector<double> ref;
  at::Tensor draws;
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> moments;  // after step 3
  {
    Trainer a(cfg, comm, nullptr);
    for (int64_t s = 0; s < 3; ++s) a.step(s);
    torch::rand({3});  // move the generator away from its seed
    const std::string ck = save_train_state(a, comm, cfg, 3);
    EXPECT_EQ(ck, (dir / "step-00000003").string());
    draws = torch::rand({4});  // what the generator gives next
    auto& st = a.optimizer().state();
    for (auto& [name, p] : a.model().named_parameters()) {
      auto& s = static_cast<torch::optim::AdamWParamState&>(*st.at(compat::optimizer_state_key(st, p)));
      moments[name] = {s.exp_avg().clone(), s.exp_avg_sq().clone()};
      EXPECT_EQ(s.step(), 3);
    }
    for (int64_t s = 3; s < 6; ++s) ref.push_back(a.step(s).loss);
  }
  ASSERT_TRUE(fs::exists(dir / "step-00000003" / "complete"));
  EXPECT_TRUE(checkpoint_due(cfg.train, 6));
  EXPECT_FALSE(checkpoint_due(cfg.train, 4));

  torch::manual_seed(777);  // a different generator state than the saved one
  RunConfig rc = cfg;
  rc.train.resume_from = (dir / "step-00000003").string();
  rc.train.save_every = 0;
  Trainer b(rc, comm, nullptr);
  const ResumePoint rp = restore_train_state(b, comm, rc);
  EXPECT_EQ(rp.next_step, 3);
  EXPECT_TRUE(torch::equal(torch::rand({4}), draws)) << "RNG state not restored";
  auto& st = b.optimizer().state();
  for (auto& [name, p] : b.model().named_parameters()) {
    auto& s = static_cast<torch::optim::AdamWParamState&>(*st.at(compat::optimizer_state_key(st, p)));
    EXPECT_EQ(s.step(), 3) << name;
    EXPECT_TRUE(torch::equal(s.exp_avg(), moments[name].first)) << name;
    EXPECT_TRUE(torch::equal(s.exp_avg_sq(), moments[name].second)) << name;
  }
  for (int64_t s = 3; s < 6; ++s) EXPECT_EQ(b.step(s).loss, ref[s - 3]) << "step " << s;

  // The weights alone (a plain HF checkpoint, fresh AdamW) are not enough: the loss after
  // the first optimizer step differs, so the comparison above can fail.
  Trainer c(cfg, comm, nullptr);
  load_checkpoint(c.model(), (dir / "step-00000003").string());
  EXPECT_EQ(c.step(3).loss, ref[0]);  // before any update: the same weights, the same loss
  EXPECT_NE(c.step(4).loss, ref[1]);
  fs::remove_all(dir);
}

TEST(TrainState, RestoreRefusesAMismatchedOrIncompleteCheckpoint) {
  at::set_num_threads(1);
  const auto dir = fs::temp_directory_path() / ("ulysses_train_state_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RunConfig cfg = tiny_config(dir.string());
  cfg.train.steps = 3;
  DistEnv env;
  Comm comm(env, 1, 1, "gloo", std::chrono::seconds(60));
  {
    Trainer a(cfg, comm, nullptr);
    for (int64_t s = 0; s < 3; ++s) a.step(s);
    save_train_state(a, comm, cfg, 3);
  }
  RunConfig rc = cfg;
  rc.train.steps = 6;
  rc.train.resume_from = dir.string();
  rc.train.weight_decay = 0.5;  // differs from the checkpoint
  Trainer b(rc, comm, nullptr);
  try {
    restore_train_state(b, comm, rc);
    FAIL() << "a checkpoint with another weight_decay was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.weight_decay"), std::string::npos) << e.what();
  }
  rc.train.weight_decay = cfg.train.weight_decay;
  {  // random bytes of the right size as rank 0's RNG state: named, without libtorch's C++ stack
    const fs::path rng = dir / "step-00000003" / "rng-rank0.bin";
    std::string bytes(static_cast<size_t>(fs::file_size(rng)), '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
    std::ofstream(rng, std::ios::binary | std::ios::trunc) << bytes;
    try {  // the manifest's XXH64 names the changed file first (issue 54)
      restore_train_state(b, comm, rc);
      FAIL() << "a changed RNG state was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("rng-rank0.bin is not the file its checkpoint saved"), std::string::npos)
          << e.what();
    }
    {  // the manifest rewritten to agree: libtorch itself refuses the bytes
      const fs::path ck = dir / "step-00000003";
      const json man = json::parse(std::ifstream(ck / "complete"));
      std::ofstream(ck / "complete")
          << ckpt::make_manifest(ck.string(), 3, man["run_id"].get<std::string>(), ckpt::layout_of(cfg)).dump();
    }
    try {
      restore_train_state(b, comm, rc);
      FAIL() << "a random RNG state was accepted";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rng-rank0.bin is not a CPU generator state"), std::string::npos) << what;
      EXPECT_EQ(what.find("frame #"), std::string::npos) << what;
      EXPECT_EQ(what.find("Exception raised from"), std::string::npos) << what;
    }
  }
  fs::remove(dir / "step-00000003" / "optimizer.safetensors");  // the manifest lists it
  EXPECT_THROW(restore_train_state(b, comm, rc), ConfigError);
  fs::remove_all(dir);
}

// Ranks that resolved train.resume_from to different checkpoints (another run saved into it
// between their looks) refuse together, naming both steps, instead of training on out of step
// with each other until the run hangs. Two ranks as threads; each is handed another step.
TEST(TrainState, RanksThatFoundDifferentCheckpointsRefuseTogether) {
  at::set_num_threads(1);
  const auto dir = fs::temp_directory_path() / ("ulysses_train_state_two_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RunConfig cfg = tiny_config(dir.string());
  cfg.parallel.sp_size = 2;
  cfg.train.steps = 4;
  cfg.train.save_every = 2;
  cfg.train.save_keep = 2;
  ulysses::testing::run_ranks(2, [&](const DistEnv& env) {
    Comm comm(env, 2, 1, "gloo", std::chrono::seconds(60));
    Trainer a(cfg, comm, nullptr);
    for (int64_t s = 0; s < 4; ++s) {
      a.step(s);
      if (checkpoint_due(cfg.train, s + 1)) save_train_state(a, comm, cfg, s + 1);
    }
  });
  ASSERT_TRUE(fs::exists(dir / "step-00000002" / "complete"));
  ASSERT_TRUE(fs::exists(dir / "step-00000004" / "complete"));
  std::atomic<int> refused{0}, resumed{0};
  auto resume = [&](const char* rank0_step, const char* rank1_step) {
    ulysses::testing::run_ranks(2, [&](const DistEnv& env) {
      Comm comm(env, 2, 1, "gloo", std::chrono::seconds(60));
      RunConfig rc = cfg;
      rc.train.steps = 6;
      rc.train.resume_from = (dir / (env.rank == 0 ? rank0_step : rank1_step)).string();
      Trainer b(rc, comm, nullptr);
      try {
        restore_train_state(b, comm, rc);
        ++resumed;
      } catch (const ConfigError& e) {
        const std::string what = e.what();
        if (what.find("different latest checkpoints") != std::string::npos &&
            what.find("steps 2 to 4") != std::string::npos)
          ++refused;
        else
          ADD_FAILURE() << what;
      }
    });
  };
  resume("step-00000002", "step-00000004");
  EXPECT_EQ(refused.load(), 2);
  EXPECT_EQ(resumed.load(), 0);
  resume("step-00000004", "step-00000004");  // the same checkpoint: both resume
  EXPECT_EQ(resumed.load(), 2);
  fs::remove_all(dir);
}
