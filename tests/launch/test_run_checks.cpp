// engine/launch/run_checks: thread counts in the environment and data whose windows repeat.
#include <gtest/gtest.h>

#include "run_checks.hpp"

using namespace ulysses::launch;

TEST(RunChecks, ThreadCountsAreWholePositiveNumbersPerLevel) {
  for (const char* ok : {"1", "4", "4,2", "999999"}) EXPECT_EQ(thread_count_problem("OMP_NUM_THREADS", ok), "") << ok;
  for (const char* bad : {"", "0", "-1", "abc", "4,", ",4", "4,0", "1234567", " 4"})
    EXPECT_NE(thread_count_problem("OMP_NUM_THREADS", bad)
                  .find("OMP_NUM_THREADS='" + std::string(bad) + "' is not a thread count"),
              std::string::npos)
        << bad;
}

TEST(RunChecks, DataWithFewerWindowsThanTheRunDrawsIsNoted) {
  ulysses::RunConfig cfg;
  cfg.data.kind = "tokens";
  cfg.data.path = "d.bin";
  cfg.train.seq_length = 8;
  cfg.train.steps = 10;
  cfg.train.micro_batch_size = 1;
  cfg.parallel.dp_size = 1;
  cfg.train.gradient_accumulation_steps = 1;
  const int64_t width = cfg.data.token_bytes();
  ASSERT_GT(width, 0);
  // 8 + 1 + 4 tokens: 13 - 8 = 5 windows for 10 draws.
  const std::string note = repeated_windows_note(cfg, static_cast<uint64_t>(13 * width));
  EXPECT_NE(note.find("holds 5 distinct window(s) of train.seq_length + 1 = 9 tokens for the 10 sequences"),
            std::string::npos)
      << note;
  EXPECT_EQ(repeated_windows_note(cfg, static_cast<uint64_t>(18 * width)), "");  // 10 windows, 10 draws
  EXPECT_EQ(repeated_windows_note(cfg, static_cast<uint64_t>(8 * width)), "");   // too short: validation's job
}
