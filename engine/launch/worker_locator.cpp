// Worker binary resolution (see worker_locator.hpp).
#include "worker_locator.hpp"

#include <filesystem>
#include <system_error>

#include <unistd.h>

namespace ulysses::launch {

namespace fs = std::filesystem;

namespace {
bool is_executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

std::string absolute_string(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  return (ec ? p : a.lexically_normal()).string();
}

WorkerLocation explicit_choice(const std::string& path, const std::string& what) {
  WorkerLocation w;
  w.tried.push_back(path);
  if (is_executable_file(path)) {
    w.path = absolute_string(path);
    return w;
  }
  std::error_code ec;
  w.exit_code = 2;
  w.error = what + " " + path + (fs::exists(path, ec) ? " is not an executable file" : " does not exist");
  return w;
}
}  // namespace

WorkerLocation locate_worker(const std::string& explicit_path, const char* env_value, const std::string& launcher_exe) {
  if (!explicit_path.empty()) return explicit_choice(explicit_path, "--worker");
  if (env_value && *env_value) return explicit_choice(env_value, "$ULYSSES_WORKER");
  WorkerLocation w;
  if (!launcher_exe.empty()) {
    const fs::path dir = fs::path(launcher_exe).parent_path();
    for (const fs::path& candidate : {dir / "ulysses-worker", dir / ".." / "worker" / "ulysses-worker"}) {
      w.tried.push_back(absolute_string(candidate));
      if (is_executable_file(candidate)) {
        w.path = absolute_string(candidate);
        return w;
      }
    }
  }
  w.exit_code = 1;
  w.error = "cannot find the worker program ulysses-worker";
  if (!w.tried.empty()) {
    w.error += " (looked for";
    for (size_t i = 0; i < w.tried.size(); ++i) w.error += (i ? " and " : " ") + w.tried[i];
    w.error += ")";
  }
  w.error +=
      ". Build it with the libtorch engine (./ulysses build, or cmake --build BUILD --target ulysses-worker with "
      "-DULYSSES_BUILD_ENGINE=ON and libtorch-dev installed), or point --worker or $ULYSSES_WORKER at it";
  return w;
}

std::string self_executable() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

}  // namespace ulysses::launch
