// A run on this host (run_command.hpp).
#include "run_command.hpp"

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "launch_error.hpp"
#include "run_folders.hpp"
#include "run_launcher.hpp"
#include "run_output.hpp"
#include "run_progress.hpp"
#include "run_record.hpp"

namespace ulysses::launch {

std::string run_folder_for(const RunArgs& a) {
  if (!a.out_dir.empty()) return a.out_dir;
  return (std::filesystem::path("runs") /
          (compact_local_timestamp(std::chrono::system_clock::now()) + "-" + config_name(a.config_path)))
      .string();
}

int train_here(const RunArgs& a, const RunConfig& cfg, const std::string& worker, const std::string& tokens_checked,
               const std::function<void(const std::string&)>& after_finished) {
  const std::string out_dir = run_folder_for(a);
  const AdmissionRequest req = run_request(cfg, out_dir, a.force, a.config_path);
  const std::string run_id = std::filesystem::absolute(out_dir).lexically_normal().string();
  RunFolders folders;  // held until the run ends
  if (auto r = take_run_folders(req, cfg, {run_id, ::getpid(), "ulysses-run"}, folders, say)) {
    say(r->message);
    return r->exit_code;
  }
  LaunchOptions opt;
  opt.run_dir = out_dir;
  opt.worker = worker;
  opt.config = cfg;
  opt.tokens_checked = tokens_checked;
  LaunchResult res;
  try {
    res = launch_run(opt, make_run_callbacks(a.json_mode, cfg, out_dir));
  } catch (const RunDirRefused& e) {  // found in the last moment by launch_run: still bad input
    say(e.what());
    return 2;
  } catch (const LaunchError& e) {
    say(e.what());
    return 1;
  }
  return report_run(res, out_dir, a.json_mode, [&] {
    if (after_finished) after_finished(out_dir);
  });
}

}  // namespace ulysses::launch
