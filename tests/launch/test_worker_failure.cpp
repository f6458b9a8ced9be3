// engine/launch/worker_failure: the worker's failures in plain words first, the save folder's
// owner check, and the run identity the ranks compare.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "folder_claim.hpp"
#include "worker_failure.hpp"

using namespace ulysses::launch;
namespace fs = std::filesystem;

TEST(WorkerFailure, PeersThatWentAwayOrNeverCameAreSaidPlainlyFirst) {
  const std::string closed = "[pair.cc:598] Connection closed by peer";
  EXPECT_EQ(explain_worker_failure(closed, {}),
            "a peer rank went away (it exited, failed or was stopped; ulysses-run names which) [" + closed + "]");
  FailureContext groups;
  groups.making_groups = true;
  EXPECT_EQ(
      explain_worker_failure(closed, groups).rfind("the ranks' Gloo connections broke while the process groups", 0),
      0u);
  EXPECT_EQ(explain_worker_failure("Connection refused", {}), "Connection refused") << "refused alone is not a peer";
  const std::string timeout = "wait timeout after 6000ms, keys: x";
  EXPECT_EQ(explain_worker_failure(timeout, {}),
            "a peer rank did not arrive within parallel.timeout_s (stopped, hung, or never started) [" + timeout + "]");
  FailureContext stopped;
  stopped.stopped = true;
  EXPECT_EQ(explain_worker_failure(closed, stopped), "stopped by a signal while in a collective [" + closed + "]");
  EXPECT_EQ(explain_worker_failure("something else", {}), "something else");
}

TEST(WorkerFailure, NothingIsSavedIntoAFolderWhoseRecordNamesAnotherRun) {
  std::string tmpl = (fs::temp_directory_path() / "ulysses_owner_XXXXXX").string();
  const fs::path dir = ::mkdtemp(tmpl.data());
  EXPECT_NE(save_owner_problem(dir.string(), "/r/me").find("now belongs to no run (its owner record is gone)"),
            std::string::npos);
  std::ofstream(dir / kOwnerRecordFile) << R"({"run": "/r/other", "pid": 1, "by": "ulysses-run"})";
  EXPECT_EQ(save_owner_problem(dir.string(), "/r/me"),
            "train.save_to " + dir.string() +
                " now belongs to run /r/other (ulysses-run pid 1), not to this run (/r/me): nothing saved, so that "
                "the folder's checkpoints stay whole");
  EXPECT_EQ(save_owner_problem(dir.string(), "/r/other"), "");
  fs::remove_all(dir);
}

TEST(WorkerFailure, RunIdentityComesFromTheLauncherElseTheLoopbackFolder) {
  ::setenv("ULYSSES_RUN_ID", "abc", 1);
  EXPECT_EQ(worker_run_identity("out"), "ULYSSES_RUN_ID=abc");
  ::unsetenv("ULYSSES_RUN_ID");
  const char* torchrun = std::getenv("TORCHELASTIC_RUN_ID");
  if (torchrun) GTEST_SKIP() << "TORCHELASTIC_RUN_ID is set in this environment";
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  EXPECT_EQ(worker_run_identity("/r/out/../out"), "--out /r/out");
  ::setenv("MASTER_ADDR", "10.0.0.2", 1);
  EXPECT_EQ(worker_run_identity("/r/out"), "");
  ::unsetenv("MASTER_ADDR");
}
